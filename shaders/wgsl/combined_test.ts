/**
 * Combined outputs (`KernelOutput.combine`): a DynamicQuantizeLinear's range taken by the kernel
 * that computes its input, as each of WebGPU's generators stores (points, fours, rows, tiles, a
 * fused attention), exactly the range of the values that kernel stored; and the WGSL of the fold.
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder, type Sym } from "../../jit/frontend/graph_builder.ts";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { f32, hashed, runOp } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "../../backends/webgpu/webgpu_backend.ts";
import { generateWgsl } from "./codegen.ts";

// CI has no GPU: these run on the software adapter (llvmpipe), slow but exact.
const gpu = new WebGpuBackend();
await gpu.prepare();

/**
 * Compiles `y` (built on `b`) quantized dynamically on WebGPU, checks that no kernel reduces for
 * its range and one combines it, and that the quantized values, scale and zero point are those
 * of the `y` the same run returns (the reference's DynamicQuantizeLinear of it, to the bit).
 */
async function rangeCombined(
  b: GraphBuilder,
  y: Sym,
  feeds: Record<string, HostTensor>,
): Promise<KernelIR[]> {
  const [q, scale, zero] = b.opN("DynamicQuantizeLinear", [y], {}, 3);
  b.output("y", y).output("q", q).output("scale", scale).output("zero", zero);
  using exe = await compile(b.build(), { backend: gpu, cache: false });
  const kernels = exe.plan!.kernels;
  const combining = kernels.filter((k) => k.outputs.some((o) => o.combine));
  assert.equal(combining.length, 1, kernels.map((k) => k.name).join());
  const got = await exe.run(feeds);
  const want = await runOp("DynamicQuantizeLinear", [got.y], {}, { outputs: 3 });
  // As numbers: a GPU's NaN has bits of its own (the H200's all ones), the value is the same.
  const values = (ts: HostTensor[]) => ts.map((t) => Array.from(t.data as ArrayLike<number>));
  assert.deepEqual(values([got.q, got.scale, got.zero]), values(want));
  return combining;
}

Deno.test("an elementwise kernel combines its range, in fours and one point at a time", async () => {
  for (const shape of [[64, 48], [7, 13]]) {
    const b = new GraphBuilder();
    const x = b.input("x", shape);
    const [k] = await rangeCombined(b, b.op("Tanh", [b.op("Mul", [x, x])]), {
      x: f32(hashed(shape[0] * shape[1], 17), shape),
    });
    assert.equal(k.pattern, "elementwise");
  }
});

Deno.test("a layer norm combines the range of its output as it stores each row", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [32, 256]);
  const norm = b.op("LayerNormalization", [x, b.input("g", [256]), b.input("c", [256])], {
    axis: -1,
  });
  const [k] = await rangeCombined(b, norm, {
    x: f32(hashed(32 * 256, 3), [32, 256]),
    g: f32(hashed(256, 5), [256]),
    c: f32(hashed(256, 7), [256]),
  });
  assert.equal(k.reductions.length, 2);
});

Deno.test("a tiled product combines the range of its epilogue's values", async () => {
  const b = new GraphBuilder();
  const product = b.op("MatMul", [b.input("a", [128, 256]), b.input("w", [256, 512])]);
  const [k] = await rangeCombined(b, b.op("Erf", [product]), {
    a: f32(hashed(128 * 256, 11), [128, 256]),
    w: f32(hashed(256 * 512, 13), [256, 512]),
  });
  assert.equal(k.pattern, "matmul");
});

Deno.test("an attention's values product combines the range of the heads' context", async () => {
  const b = new GraphBuilder();
  const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, [1, 2, 16, 8]));
  const scores = b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 1, 3, 2] })]);
  const context = b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]);
  const flat = b.op("Reshape", [b.op("Transpose", [context], { perm: [0, 2, 1, 3] })], {
    shape: [1, 16, 16],
  });
  const feeds = Object.fromEntries(
    ["q", "k", "v"].map((n, i) => [n, f32(hashed(256, 19 + i), [1, 2, 16, 8])]),
  );
  const [kernel] = await rangeCombined(b, flat, feeds);
  assert.ok(kernel.group, "the values product of an attention group");
});

Deno.test("the fold takes a subgroup's largest where the device has subgroups", () => {
  const b = new GraphBuilder();
  const x = b.input("x", [64, 48]);
  const [q] = b.opN("DynamicQuantizeLinear", [b.op("Mul", [x, x])], {}, 3);
  b.output("q", q);
  return (async () => {
    using exe = await compile(b.build(), { backend: gpu, cache: false });
    const kernel = exe.plan!.kernels.find((k) => k.outputs.some((o) => o.combine))!;
    const plain = generateWgsl(kernel, { maxInvocations: 256 });
    const grouped = generateWgsl(kernel, { maxInvocations: 256, subgroupSize: 32 });
    assert.match(plain, /array<atomic<u32>>/);
    assert.doesNotMatch(plain, /subgroupMax/);
    assert.match(grouped, /enable subgroups;\ndiagnostic\(off, subgroup_uniformity\);/);
    assert.match(grouped, /subgroupMax\(/);
    assert.match(grouped, /subgroupElect\(\) && /);
  })();
});

Deno.test("a NaN in the values makes the combined range NaN, as the reference's is", async () => {
  // WGSL's max may drop a NaN operand; the fold keeps it, in fours and one point at a time.
  for (const shape of [[4, 8], [3, 5]]) {
    const b = new GraphBuilder();
    const n = shape[0] * shape[1];
    const data = Float32Array.from(hashed(n, 23), (v, i) => (i === n - 2 ? NaN : v));
    const x = b.input("x", shape);
    await rangeCombined(b, b.op("Mul", [x, x]), { x: f32(data, shape) });
  }
});
