import assert from "node:assert/strict";
import { compile } from "../mod.ts";
import { fromF16Bits, toF16Bits } from "../jit/ir/dtype.ts";
import { KilnError } from "../jit/support/errors.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { applyPrecision, checkPrecision } from "../jit/passes/precision.ts";
import { uniform } from "../jit/support/random.ts";
import { assertClose, numbers } from "../jit/testing/testing.ts";
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

Deno.test("precision: unknown values are typed errors", async () => {
  assert.equal(checkPrecision(undefined), "f32");
  assert.throws(() => checkPrecision("bf16"), isKiln("bad-input", /Unknown precision "bf16"/));
  await assert.rejects(
    compile(model(), { precision: "fp16" as "f16" }),
    isKiln("bad-input", /precision/),
  );
});

Deno.test("precision: every backend and placement runs f16 with f16's numbers", async () => {
  const graph = model();
  const x = { data: uniform(32, 5), shape: [4, 8], dtype: "f32" as const };
  for (const precision of ["f16-storage", "f16"] as const) {
    // The reference that claims native f16 is the oracle: the emulations must agree with it.
    const want = await (await compile(graph, { backend: new HalfReference(), precision })).run({
      x,
    });
    const gpu = new WebGpuBackend();
    const backends = [new ReferenceBackend(), new WasmBackend({ threads: 1 }), gpu, undefined];
    for (const backend of backends) {
      const got = await (await compile(graph, { backend, precision, cache: false })).run({ x });
      const where = `${backend?.id ?? "auto"} ${precision}`;
      for (const name of ["y", "z"]) {
        assert.equal(got[name].dtype, "f32", where);
        // Within two f16 ulps: a GPU's exp and its order of summing rows round elsewhere.
        assertClose(numbers(got[name].data), numbers(want[name].data), {
          rtol: 2 ** -9,
          atol: 2 ** -14,
          message: `${where} ${name}`,
        });
      }
    }
    gpu.dispose();
  }
});

Deno.test("precision f16: every float tensor is f16 inside, f32 at the caller's boundary", async () => {
  const graph = model();
  const { graph: half, widened } = applyPrecision(graph, "f16");
  // f32 only where the caller's tensors cross: the input and the outputs, cast by the kernels.
  const edges = new Set([...half.inputs.map((i) => i.value), ...half.outputs.map((o) => o.value)]);
  half.values.forEach((v, i) => assert.equal(v.dtype === "f32", edges.has(i), v.name));
  assert.deepEqual(half.inputs.map((i) => i.dtype), ["f32"]);
  assert.deepEqual(half.outputs.map((o) => o.dtype), ["f32", "f32"]);
  assert.deepEqual([...widened!.inputs], []);
  assert.deepEqual([...widened!.params].sort(), ["bias", "w"]);
  assert.deepEqual([...widened!.outputs], []);
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
