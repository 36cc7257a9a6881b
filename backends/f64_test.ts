import assert from "node:assert/strict";
import { compile } from "../mod.ts";
import { canRun } from "../jit/schedule/schedule.ts";
import { withFastestRates } from "../jit/testing/testing.ts";
import { KilnError } from "../jit/support/errors.ts";
import type { TensorMap } from "../jit/runtime/executable.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { erf } from "./reference/scalar_math.ts";
import { BackendRegistry } from "./registry.ts";
import { WasmBackend } from "./wasm/wasm_backend.ts";
import { WebGpuBackend } from "./webgpu/webgpu_backend.ts";

/**
 * f64 is computed in f64 where the backend has it (reference, wasm), never silently in f32:
 * values past f32's range and digits past its precision survive every op kind, and wasm gives
 * the reference's bits (its transcendentals are the host's, reductions run in the same order).
 */
function model() {
  const b = new GraphBuilder();
  const x = b.input("x", [3, 8], "f64");
  const w = b.input("w", [8, 5], "f64");
  b.output("big", b.op("Mul", [x, b.constant(1e300, [], "f64")]));
  b.output("fine", b.op("Add", [x, b.constant(1e-12, [], "f64")]));
  b.output("math", b.op("Add", [b.op("Exp", [x]), b.op("Erf", [b.op("Sin", [x])])]));
  b.output("logpow", b.op("Pow", [b.op("Log", [b.op("Abs", [x])]), b.constant(3, [], "f64")]));
  b.output("sum", b.op("ReduceSum", [x], { axes: [1], keepdims: 0 }));
  b.output("mean", b.op("ReduceMean", [x], { axes: [0], keepdims: 1 }));
  b.output("max", b.op("ReduceMax", [x], { axes: [1], keepdims: 0 }));
  b.output("softmax", b.op("Softmax", [x], { axis: -1 }));
  b.output("mm", b.op("MatMul", [x, w]));
  b.output("f32", b.op("Cast", [x], { to: "f32" }));
  b.output("i32", b.op("Cast", [b.op("Mul", [x, b.constant(1000, [], "f64")])], { to: "i32" }));
  b.output("gt", b.op("Greater", [x, b.constant(0.5, [], "f64")]));
  b.output("sqrtdiv", b.op("Div", [b.op("Sqrt", [b.op("Abs", [x])]), b.constant(3, [], "f64")]));
  return b.build();
}

const inputs = {
  x: {
    data: Float64Array.from({ length: 24 }, (_, i) => (i - 11) / 7 + 1e-9 * i),
    shape: [3, 8],
    dtype: "f64",
  },
  w: {
    data: Float64Array.from({ length: 40 }, (_, i) => 1 / (i + 3)),
    shape: [8, 5],
    dtype: "f64",
  },
} satisfies Record<string, HostTensor>;

/** Numbers of a (non-i64) tensor. */
const nums = (t: HostTensor) => Array.from(t.data as Float64Array);

const run = async (backend: string | WebGpuBackend, narrowF64 = false): Promise<TensorMap> => {
  using exe = await compile(model(), { backend, cache: false, narrowF64 });
  return await exe.run(inputs);
};

Deno.test("f64 computes in f64 on reference and wasm, wasm bit for bit", async () => {
  const ref = await run("reference");
  const x = inputs.x.data;
  // Past f32's range, past its precision, and the host's own functions.
  assert.ok(ref.big.data instanceof Float64Array && ref.big.dtype === "f64");
  assert.equal(ref.big.data[0], x[0] * 1e300);
  assert.equal(ref.fine.data[5], x[5] + 1e-12);
  assert.equal(ref.math.data[7], Math.exp(x[7]) + erf(Math.sin(x[7])));
  assert.equal(ref.sum.data[1], x.slice(8, 16).reduce((s, v) => s + v, 0));
  assert.ok(ref.f32.data instanceof Float32Array);
  assert.equal(ref.f32.data[3], Math.fround(x[3]));
  assert.equal(ref.i32.data[2], Math.trunc(x[2] * 1000));
  const wasm = await run("wasm");
  for (const [name, want] of Object.entries(ref)) {
    const got = wasm[name];
    assert.equal(got.dtype, want.dtype, name);
    assert.equal(got.data.constructor, want.data.constructor, name);
    assert.deepEqual(
      Array.from(got.data as Float64Array),
      Array.from(want.data as Float64Array),
      name,
    );
  }
});

Deno.test("f64 on webgpu: refused with a Fix, or narrowed to f32 when allowed", async () => {
  const gpu = new WebGpuBackend();
  await gpu.prepare();
  await assert.rejects(
    run(gpu),
    (e) =>
      e instanceof KilnError && e.code === "unsupported" && /no f64 arithmetic/.test(e.message) &&
      /Fix: .*narrowF64/.test(e.message),
  );
  const narrowed = await run(gpu, true);
  const ref = await run("reference");
  // The caller still passes and gets f64; the values are f32's.
  assert.ok(narrowed.fine.data instanceof Float64Array && narrowed.fine.dtype === "f64");
  assert.equal(
    narrowed.fine.data[5],
    Math.fround(Math.fround(inputs.x.data[5]) + Math.fround(1e-12)),
  );
  assert.equal(narrowed.big.data[0], -Infinity); // 1e300 does not fit f32
  for (const name of ["sum", "softmax", "mm", "sqrtdiv"]) {
    const got = nums(narrowed[name]), want = nums(ref[name]);
    assert.ok(got.every((v, i) => Math.abs(v - want[i]) <= 1e-5 * (1 + Math.abs(want[i]))), name);
  }
  assert.deepEqual(nums(narrowed.gt), nums(ref.gt));
});

Deno.test("auto places f64 kernels on a backend with f64, whatever the GPU's rates", async () => {
  await withFastestRates("webgpu", async () => {
    const registry = new BackendRegistry()
      .register(new WebGpuBackend({ allowSoftware: true }))
      .register(new WasmBackend({ threads: 1 }));
    const b = new GraphBuilder();
    const x = b.input("x", [64], "f64");
    const y = b.input("y", [4096], "f32"); // another shape: a kernel of its own
    b.output("wide", b.op("Exp", [x]));
    b.output("narrow", b.op("Exp", [y]));
    using exe = await compile(b.build(), { registry, cache: false });
    const { kernels, schedule } = exe.plan!;
    assert.equal(kernels.length, 2);
    const gpu = registry.get("webgpu")!;
    kernels.forEach((k, i) => {
      const wide = [...k.inputs, ...k.outputs].some((t) => t.dtype === "f64");
      // The GPU is excluded for the f64 kernel alone (it may still lose the f32 one on cost).
      assert.equal(canRun(gpu, k), !wide, k.name);
      if (wide) assert.notEqual(schedule.placement[i], "webgpu", k.name);
    });
    const out = await exe.run({
      x: { data: new Float64Array(64).fill(2), shape: [64], dtype: "f64" },
      y: { data: new Float32Array(4096).fill(2), shape: [4096], dtype: "f32" },
    });
    assert.equal(out.wide.data[0], Math.exp(2));
    assert.ok(Math.abs((out.narrow.data[0] as number) - Math.exp(2)) < 1e-5); // the GPU's exp
  });
});

Deno.test("f64 kernels split across worker threads keep the reference's bits", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [512, 256], "f64");
  b.output("y", b.op("Mul", [b.op("Erf", [x]), b.op("Log", [b.op("Exp", [b.op("Cos", [x])])])]));
  const graph = b.build();
  const data = Float64Array.from({ length: 512 * 256 }, (_, i) => Math.sin(i) * 3);
  const feed = { x: { data, shape: [512, 256], dtype: "f64" as const } };
  using ref = await compile(graph, { backend: "reference", cache: false });
  using wasm = await compile(graph, { backend: new WasmBackend({ threads: 2 }), cache: false });
  const want = nums((await ref.run(feed)).y), got = nums((await wasm.run(feed)).y);
  // The first difference, not a diff of 131072 numbers (assert's diff of them takes minutes).
  const at = want.findIndex((v, i) => !Object.is(v, got[i]));
  assert.equal(at, -1, `element ${at}: ${got[at]}, the reference's ${want[at]}`);
});
