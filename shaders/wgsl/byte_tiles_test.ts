/**
 * Quantized products over bytes in `dot4I8Packed` tiles (`byte_tiles.ts`), on the software
 * adapter: which kernels take them, and their sums against the reference's, to the bit.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { fusionFor } from "../../jit/compile.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { rng } from "../../jit/support/random.ts";
import { graphEqualsReference, randomBytes } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "../../backends/webgpu/webgpu_backend.ts";
import { generateWgsl, kernelLayout } from "./codegen.ts";

const gpu = new WebGpuBackend();
await gpu.prepare();
const dots = gpu.capabilities().integerDot === "bytes";
const OPTIONS = { maxInvocations: 256, packedDots: true };

/** A product of a u8 `a` by an i8 `w` (`op` IntegerMatMul or IntegerConv), its i32 sum stored. */
function product(op: string, a: number[], w: number[], attrs = {}): Graph {
  const b = new GraphBuilder();
  b.output("y", b.op(op, [b.input("a", a, "u8"), b.input("w", w, "i8")], attrs));
  return b.build();
}

/** The one kernel of `graph` as fusion builds it for this device. */
function kernelOf(graph: Graph) {
  const { kernels } = fuse(graph, fusionFor([gpu.capabilities()]));
  assert.equal(kernels.length, 1);
  return kernels[0];
}

Deno.test({
  name: "a product of u8 by i8 tiles in words of four bytes: ragged M, N and K, sums exact",
  ignore: !dots,
  fn: async () => {
    // 130 × 258 outputs over K = 516 (a multiple of 4, not of a step's 64): partial tiles on
    // every side, the last step's words past K filled with zeros. A's rows are read a vec4 of
    // K at a time; B's 258 columns are not four-aligned, read a byte at a time.
    const graph = product("IntegerMatMul", [130, 516], [516, 258]);
    const kernel = kernelOf(graph);
    const layout = kernelLayout(kernel, OPTIONS);
    assert.equal(layout.tile?.bytes, "a");
    assert.deepEqual([...layout.vectors], [0]);
    // Without packed dots the same kernel sums its i32 products a row at a time.
    assert.equal(kernelLayout(kernel, { maxInvocations: 256 }).kind, "rows");
    const feeds = { a: randomBytes("u8", [130, 516], 7), w: randomBytes("i8", [516, 258], 11) };
    await graphEqualsReference(graph, feeds, gpu);
  },
});

Deno.test({
  name: "a deep product of few byte tiles splits K among slices, sums exact",
  ignore: !dots,
  fn: async () => {
    const graph = product("IntegerMatMul", [128, 2048], [2048, 128]);
    const layout = kernelLayout(kernelOf(graph), { ...OPTIONS, workgroupBytes: 32768 });
    assert.equal(layout.tile?.bytes, "a");
    assert.equal(layout.tile?.slices, 4);
    // A a vec4 along K, B a vec4 along its columns: four of them make four words.
    assert.deepEqual([...layout.vectors], [0, 1]);
    // Software adapters leave split K off: asked for.
    const split = new WebGpuBackend({ splitK: true });
    try {
      const feeds = { a: randomBytes("u8", [128, 2048], 3), w: randomBytes("i8", [2048, 128], 5) };
      await graphEqualsReference(graph, feeds, split);
    } finally {
      split.dispose();
    }
  },
});

Deno.test({
  name: "a convolution over bytes, its patches stored or gathered, its padding adding nothing",
  ignore: !dots,
  fn: async () => {
    // K = 16 channels × 9 taps; a padded tap reads 0, stored as −128 like every byte of x, and
    // 128 times the weights' sums puts it back to nothing. The bounds are the byte pass's (the
    // reference's decomposition sums in exact chunks by them).
    const attrs = { pads: [1, 1, 1, 1], bound: 255 * 128, max_a: 255 };
    const graph = product("IntegerConv", [2, 16, 34, 34], [64, 16, 3, 3], attrs);
    const feeds = {
      a: randomBytes("u8", [2, 16, 34, 34], 13),
      w: randomBytes("i8", [64, 16, 3, 3], 17),
    };
    // The device's profile stores byte patches (im2col): a plain product read in vec4s.
    const kernels = fuse(graph, fusionFor([gpu.capabilities()])).kernels;
    assert.deepEqual(kernels.map((k) => k.pattern), ["elementwise", "conv"]);
    assert.deepEqual([...kernelLayout(kernels[1], OPTIONS).vectors], [0, 1]);
    await graphEqualsReference(graph, feeds, gpu);
    // Gathered as the tiles fill, a byte at a time.
    const gathered = fuse(graph, { integerDot: "bytes" }).kernels;
    assert.equal(gathered.length, 1);
    assert.equal(kernelLayout(gathered[0], OPTIONS).tile?.bytes, "a");
    const gathering = new WebGpuBackend({ storedPatches: Infinity });
    try {
      await graphEqualsReference(graph, feeds, gathering);
    } finally {
      gathering.dispose();
    }
  },
});

Deno.test({
  name: "a 1×1 convolution takes its weights as A: the u8 operand is B, A's rows summed",
  ignore: !dots,
  fn: async () => {
    const attrs = { bound: 255 * 128, max_a: 255 };
    const graph = product("IntegerConv", [1, 256, 14, 14], [512, 256, 1, 1], attrs);
    const layout = kernelLayout(kernelOf(graph), OPTIONS);
    assert.equal(layout.tile?.bytes, "b");
    const feeds = {
      a: randomBytes("u8", [1, 256, 14, 14], 19),
      w: randomBytes("i8", [512, 256, 1, 1], 23),
    };
    await graphEqualsReference(graph, feeds, gpu);
  },
});

Deno.test("a backend with byte dots only builds no i16 product as one kernel", () => {
  const b = new GraphBuilder();
  b.output(
    "y",
    b.op("IntegerMatMul", [b.input("a", [8, 64], "i16"), b.input("w", [64, 8], "i16")]),
  );
  const graph = b.build();
  // One kernel of i16 pair dots, or the decomposition's kernels (operands to f32, their chunks).
  const kernels = (integerDot: boolean | "bytes") => fuse(graph, { integerDot }).kernels.length;
  assert.equal(kernels(true), 1);
  assert.ok(kernels("bytes") > 1);
});

Deno.test({
  name:
    "a product's long epilogue (a requantization) runs from one loop over a thread's sums, exact",
  ignore: !dots,
  fn: async () => {
    // A QDQ residual block's tail: the sums rescaled, a residual added, divided by a runtime
    // scale, rounded and clipped to bytes, twice. Inlined at each of a thread's sums it made
    // NVIDIA's pipeline compile 3× as long. (K in slices calls the same loop; the software
    // adapter takes minutes to compile such a kernel.)
    const [m, k, n] = [130, 516, 258];
    const b = new GraphBuilder();
    const sum = b.op("IntegerMatMul", [b.input("a", [m, k], "u8"), b.input("w", [k, n], "i8")]);
    const f = (v: number) => b.constant(new Float32Array([v]), []);
    let y = b.op("Mul", [b.op("Cast", [sum], { to: "f32" }), f(2 ** -11)]);
    const [r, scale] = [b.input("r", [m, n]), b.input("s", [])];
    y = b.op("Round", [b.op("Div", [b.op("Add", [y, r]), scale])]);
    y = b.op("Min", [b.op("Max", [b.op("Add", [y, f(128)]), f(0)]), f(255)]);
    // Dequantized again, the residual added once more, quantized again.
    y = b.op("Add", [b.op("Mul", [b.op("Sub", [y, f(128)]), scale]), r]);
    y = b.op("Round", [b.op("Div", [y, f(0.61)])]);
    y = b.op("Min", [b.op("Max", [b.op("Add", [y, f(100)]), f(0)]), f(255)]);
    b.output("y", b.op("Cast", [y], { to: "u8" }));
    const graph = b.build();
    const kernel = kernelOf(graph);
    const options = { ...OPTIONS, splitK: false };
    assert.equal(kernelLayout(kernel, options).tile?.bytes, "a");
    const code = generateWgsl(kernel, options);
    assert.match(code, /for \(var k_i = 0; k_i < select\(/);
    const next = rng(m + n);
    const feeds: Record<string, HostTensor> = {
      a: randomBytes("u8", [m, k], 29),
      w: randomBytes("i8", [k, n], 31),
      r: {
        data: Float32Array.from({ length: m * n }, () => next() * 60 - 30),
        shape: [m, n],
        dtype: "f32",
      },
      s: { data: new Float32Array([0.37]), shape: [], dtype: "f32" },
    };
    await graphEqualsReference(graph, feeds, gpu);
  },
});
