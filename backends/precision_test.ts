import assert from "node:assert/strict";
import { compile } from "../mod.ts";
import { fromF16Bits, toF16Bits } from "../jit/ir/dtype.ts";
import { KilnError } from "../jit/support/errors.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { applyPrecision, checkPrecision } from "../jit/passes/precision.ts";
import { uniform } from "../jit/support/random.ts";
import { ReferenceBackend } from "./reference/reference_backend.ts";
import { WasmBackend } from "./wasm/wasm_backend.ts";
import { WebGpuBackend } from "./webgpu/webgpu_backend.ts";

/**
 * The reference interpreter reporting native f16: the f16 precisions' planning, rewrite and
 * boundary conversions run in CI, where no device has `shader-f16` (their WGSL kernels are checked
 * on the GPU machine by `bench/gpu_kernels.ts`, see bench/REPORT-gpu.md).
 */
class HalfReference extends ReferenceBackend {
  override capabilities() {
    return { ...super.capabilities(), f16: true };
  }
}

const f16 = (x: number) => fromF16Bits(toF16Bits(x));

/** y = softmax(relu(x·W + b)) and z = x·2 - 1: a matmul, a row reduction and elementwise ops. */
function model() {
  const b = new GraphBuilder();
  const x = b.input("x", [4, 8]);
  const w = b.param("w", [8, 6], "f32", uniform(48, 3));
  const bias = b.param("bias", [6], "f32", uniform(6, 4));
  const h = b.op("Relu", [b.op("Add", [b.op("MatMul", [x, w]), bias])]);
  b.output("y", b.op("Softmax", [h], { axis: -1 }));
  b.output("z", b.op("Sub", [b.op("Mul", [x, b.constant(2)]), b.constant(1)]));
  return b.build();
}

const isKiln = (code: string, pattern: RegExp) => (e: unknown) =>
  e instanceof KilnError && e.code === code && /Fix: /.test(e.message) && pattern.test(e.message);

Deno.test("precision: unknown values and backends without native f16 are typed errors", async () => {
  assert.equal(checkPrecision(undefined), "f32");
  assert.throws(() => checkPrecision("bf16"), isKiln("bad-input", /Unknown precision "bf16"/));
  const graph = model();
  await assert.rejects(
    compile(graph, { precision: "fp16" as "f16" }),
    isKiln("bad-input", /precision/),
  );
  await assert.rejects(compile(graph, { precision: "f16" }), isKiln("unsupported", /named/));
  for (const backend of [new ReferenceBackend(), new WasmBackend({ threads: 1 })]) {
    await assert.rejects(
      compile(graph, { backend, precision: "f16-storage" }),
      isKiln("unsupported", /cannot store f16 natively/),
    );
  }
  // The CI's WebGPU adapter (llvmpipe) lacks shader-f16; a device with it compiles (GPU machine).
  const gpu = new WebGpuBackend();
  await gpu.prepare();
  if (!gpu.capabilities().f16) {
    await assert.rejects(
      compile(graph, { backend: gpu, precision: "f16" }),
      isKiln("unsupported", /shader-f16/),
    );
  }
});

Deno.test("precision f16: every float tensor is f16 inside, f32 at the caller's boundary", async () => {
  const graph = model();
  const { graph: half, widened } = applyPrecision(graph, "f16");
  assert.ok(half.values.every((v) => v.dtype !== "f32"), half.toString());
  assert.deepEqual([...widened!.inputs], ["x"]);
  assert.deepEqual([...widened!.params].sort(), ["bias", "w"]);
  assert.deepEqual([...widened!.outputs], ["y", "z"]);
  const x = uniform(32, 5);
  const exe = await compile(graph, { backend: new HalfReference(), precision: "f16" });
  const out = await exe.run({ x: { data: x, shape: [4, 8], dtype: "f32" } });
  assert.equal(out.y.dtype, "f32");
  assert.ok(out.y.data instanceof Float32Array);
  const ref = await (await compile(graph, { backend: "reference" })).run({
    x: { data: x, shape: [4, 8], dtype: "f32" },
  });
  // f16 rounds x, the weights and every result: within f16's tolerance of the f32 answer, and
  // on a grid of f16 values.
  for (const name of ["y", "z"] as const) {
    const got = out[name].data as Float32Array, want = ref[name].data as Float32Array;
    got.forEach((v, i) => {
      assert.ok(Math.abs(v - want[i]) <= 1e-2 * Math.max(1, Math.abs(want[i])), `${name}[${i}]`);
      assert.equal(v, f16(v), `${name}[${i}] = ${v} is an f16 value`);
    });
  }
  // z = x·2 − 1 in f16 arithmetic is exactly f16(f16(2·f16(x)) − 1).
  (out.z.data as Float32Array).forEach((v, i) => assert.equal(v, f16(f16(2 * f16(x[i])) - 1)));
  // setParam takes f32 data too, narrowed like the inputs.
  exe.setParam("bias", new Float32Array(6).fill(0.5));
  const again = await exe.run({ x: { data: x, shape: [4, 8], dtype: "f32" } });
  assert.notDeepEqual(again.y.data, out.y.data);
});

Deno.test("precision f16-storage: inputs and outputs travel in f16, arithmetic stays f32", async () => {
  const graph = model();
  const { graph: stored, widened } = applyPrecision(graph, "f16-storage");
  assert.equal(stored.values[stored.inputs[0].value].dtype, "f16");
  assert.ok(stored.params.every((p) => stored.values[p.value].dtype === "f32"));
  assert.ok(stored.outputs.every((o) => stored.values[o.value].dtype === "f16"));
  assert.equal(widened!.params.size, 0);
  const x = uniform(32, 6);
  const exe = await compile(graph, { backend: new HalfReference(), precision: "f16-storage" });
  const out = await exe.run({ x: { data: x, shape: [4, 8], dtype: "f32" } });
  // z = f16(f16(x)·2 − 1): one rounding in, one out, f32 between.
  (out.z.data as Float32Array).forEach((v, i) =>
    assert.equal(v, f16(Math.fround(f16(x[i]) * 2 - 1)))
  );
  assert.equal(out.y.dtype, "f32");
});
