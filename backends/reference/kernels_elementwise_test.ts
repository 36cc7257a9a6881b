import assert from "node:assert/strict";
import { assertClose, bool, f32, i32, numbers, runOp } from "../../jit/testing/testing.ts";
import { toF16Bits } from "../../jit/ir/dtype.ts";
import { erf } from "./scalar_math.ts";
import { evaluateNode } from "./reference_backend.ts";

const one = async (op: string, inputs: Parameters<typeof runOp>[1], attrs = {}) =>
  (await runOp(op, inputs, attrs))[0];

Deno.test("binary ops broadcast NumPy-style, including rank extension", async () => {
  const y = await one("Add", [f32([1, 2, 3, 4, 5, 6], [2, 3]), f32([10, 20, 30], [3])]);
  assert.deepEqual(y.shape, [2, 3]);
  assertClose(y.data as Float32Array, [11, 22, 33, 14, 25, 36]);
  const z = await one("Mul", [f32([1, 2], [2, 1]), f32([1, 10, 100], [1, 3])]);
  assert.deepEqual(z.shape, [2, 3]);
  assertClose(z.data as Float32Array, [1, 10, 100, 2, 20, 200]);
  const s = await one("Sub", [f32([5], []), f32([1, 2, 3], [3, 1])]);
  assert.deepEqual(s.shape, [3, 1]);
  assertClose(s.data as Float32Array, [4, 3, 2]);
  // As many elements and axes, different shapes: [2, 1, 3] and [2, 3, 1] broadcast to [2, 3, 3],
  // through the per-node kernels (import-time folding) as through fused kernels.
  const x = [0, 1, 2, 3, 4, 5];
  const want = [0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0];
  const g = await one("Greater", [f32(x, [2, 1, 3]), f32(x, [2, 3, 1])]);
  assert.deepEqual(g.shape, [2, 3, 3]);
  assert.deepEqual(numbers(g.data), want);
  const inputs = [f32(x, [2, 1, 3]), f32(x, [2, 3, 1])].map((t) => ({
    ...t,
    dtype: "f32" as const,
  }));
  const folded = evaluateNode({
    op: "Greater",
    attrs: {},
    inputs,
    outputs: [{ shape: [2, 3, 3], dtype: "bool" }],
    label: "Greater",
  }, inputs);
  assert.deepEqual(numbers(folded[0]), want);
});

Deno.test("empty and one-element tensors", async () => {
  const e = await one("Add", [f32([], [0, 3]), f32([1, 2, 3], [3])]);
  assert.deepEqual(e.shape, [0, 3]);
  assert.equal(e.data.length, 0);
  const s = await one("Exp", [f32([0], [])]);
  assert.deepEqual(s.shape, []);
  assertClose(s.data as Float32Array, [1]);
  const b = await one("Mul", [f32([], [2, 0]), f32([3], [1])]);
  assert.deepEqual(b.shape, [2, 0]);
});

Deno.test("NaN and infinities follow IEEE and ONNX semantics", async () => {
  const x = f32([NaN, Infinity, -Infinity, -0, 0, 1]);
  assertClose((await one("Exp", [x])).data as Float32Array, [NaN, Infinity, 0, 1, 1, Math.E]);
  assertClose((await one("Relu", [x])).data as Float32Array, [NaN, Infinity, 0, -0, 0, 1]);
  assertClose((await one("Sigmoid", [x])).data as Float32Array, [
    NaN,
    1,
    0,
    0.5,
    0.5,
    1 / (1 + Math.exp(-1)),
  ]);
  assertClose((await one("Tanh", [x])).data as Float32Array, [NaN, 1, -1, 0, 0, Math.tanh(1)]);
  assert.deepEqual(numbers((await one("IsNaN", [x])).data), [1, 0, 0, 0, 0, 0]);
  assertClose((await one("Log", [f32([0, -1, 1])])).data as Float32Array, [-Infinity, NaN, 0]);
  assertClose((await one("Div", [f32([1, -1, 0]), f32([0, 0, 0])])).data as Float32Array, [
    Infinity,
    -Infinity,
    NaN,
  ]);
  const mx = await runOp("Max", [f32([NaN, 1, 2]), f32([1, NaN, 3])]);
  assertClose(mx[0].data as Float32Array, [NaN, NaN, 3]);
});

Deno.test("comparisons and logic produce bool", async () => {
  const a = f32([1, 2, 3, NaN]), b = f32([2, 2, 2, NaN]);
  const eq = await one("Equal", [a, b]);
  assert.equal(eq.dtype, "bool");
  assert.deepEqual(numbers(eq.data), [0, 1, 0, 0]);
  assert.deepEqual(numbers((await one("Greater", [a, b])).data), [0, 0, 1, 0]);
  assert.deepEqual(numbers((await one("Less", [a, b])).data), [1, 0, 0, 0]);
  assert.deepEqual(numbers((await one("GreaterOrEqual", [a, b])).data), [0, 1, 1, 0]);
  assert.deepEqual(numbers((await one("LessOrEqual", [a, b])).data), [1, 1, 0, 0]);
  const p = bool([1, 1, 0, 0]), q = bool([1, 0, 1, 0]);
  assert.deepEqual(numbers((await one("And", [p, q])).data), [1, 0, 0, 0]);
  assert.deepEqual(numbers((await one("Or", [p, q])).data), [1, 1, 1, 0]);
  assert.deepEqual(numbers((await one("Not", [p])).data), [0, 0, 1, 1]);
  const w = await one("Where", [bool([1, 0], [2, 1]), f32([1, 2, 3]), f32([-1], [1])]);
  assert.deepEqual(w.shape, [2, 3]);
  assertClose(w.data as Float32Array, [1, 2, 3, -1, -1, -1]);
});

Deno.test("integer arithmetic wraps, divides toward zero, and Mod follows the divisor's sign", async () => {
  const big = i32([2147483647, -7, 7, 46341]);
  assert.deepEqual(numbers((await one("Add", [big, i32([1, 0, 0, 0])])).data), [
    -2147483648,
    -7,
    7,
    46341,
  ]);
  assert.deepEqual(numbers((await one("Mul", [i32([46341, 3]), i32([46341, -4])])).data), [
    -2147479015,
    -12,
  ]);
  assert.deepEqual(numbers((await one("Div", [i32([-7, 7, 7]), i32([2, -2, 0])])).data), [
    -3,
    -3,
    0,
  ]);
  assert.deepEqual(numbers((await one("Mod", [i32([-7, 7, 7, -7]), i32([3, -3, 3, -3])])).data), [
    2,
    -2,
    1,
    -1,
  ]);
  assertClose((await one("Mod", [f32([-7, 7]), f32([3, 3])], { fmod: 1 })).data as Float32Array, [
    -1,
    1,
  ]);
});

Deno.test("unary math matches known values", async () => {
  assertClose((await one("Round", [f32([0.5, 1.5, 2.5, -0.5, -1.5, 2.4])])).data as Float32Array, [
    0,
    2,
    2,
    -0,
    -2,
    2,
  ]);
  assertClose((await one("Floor", [f32([-1.5, 1.5])])).data as Float32Array, [-2, 1]);
  assertClose((await one("Ceil", [f32([-1.5, 1.5])])).data as Float32Array, [-1, 2]);
  assertClose((await one("Sqrt", [f32([4, 2])])).data as Float32Array, [2, Math.SQRT2]);
  assertClose((await one("Abs", [i32([-3, 3])])).data as Int32Array, [3, 3]);
  assertClose((await one("Neg", [i32([-3, 3])])).data as Int32Array, [3, -3]);
  assertClose((await one("Pow", [f32([2, 4]), f32([3, 0.5])])).data as Float32Array, [8, 2]);
  assertClose((await one("Reciprocal", [f32([4])])).data as Float32Array, [0.25]);
  assertClose((await one("Sin", [f32([Math.PI / 2])])).data as Float32Array, [1]);
  assertClose((await one("Cos", [f32([0])])).data as Float32Array, [1]);
  assertClose(
    (await one("Clip", [f32([-2, 0.5, 2, NaN])], { min: -1, max: 1 })).data as Float32Array,
    [-1, 0.5, 1, NaN],
  );
  assertClose((await one("LeakyRelu", [f32([-2, 3])], { alpha: 0.1 })).data as Float32Array, [
    -0.2,
    3,
  ]);
  assertClose((await one("HardSigmoid", [f32([-10, 0, 10])])).data as Float32Array, [0, 0.5, 1]);
  assertClose((await one("HardSwish", [f32([-4, 0, 1, 4])])).data as Float32Array, [
    0,
    0,
    1 * (1 / 6 + 0.5),
    4,
  ]);
  assertClose((await one("Gelu", [f32([1])])).data as Float32Array, [0.8413447460685429]);
  assertClose((await one("Gelu", [f32([1])], { approximate: "tanh" })).data as Float32Array, [
    0.8411919906082768,
  ]);
});

Deno.test("erf is accurate across its range", () => {
  // Values from a 30-digit reference (mpmath).
  const cases: [number, number][] = [
    [0, 0],
    [1e-8, 1.1283791670955126e-8],
    [0.5, 0.5204998778130465],
    [1, 0.8427007929497149],
    [2, 0.9953222650189527],
    [2.5, 0.9995930479825550],
    [3, 0.9999779095030014],
    [-1.5, -0.9661051464753108],
    [5, 0.9999999999984626],
  ];
  for (const [x, want] of cases) {
    assert.ok(Math.abs(erf(x) - want) < 2e-15, `erf(${x}) = ${erf(x)}, want ${want}`);
  }
  assert.ok(Number.isNaN(erf(NaN)));
  assert.equal(erf(Infinity), 1);
  assert.equal(erf(-Infinity), -1);
});

Deno.test("Cast truncates, saturates and maps NaN to 0 for integers", async () => {
  const x = f32([1.9, -1.9, 300, -300, NaN, 0.5]);
  assert.deepEqual(numbers((await one("Cast", [x], { to: "u8" })).data), [1, 0, 255, 0, 0, 0]);
  assert.deepEqual(numbers((await one("Cast", [x], { to: "i8" })).data), [1, -1, 127, -128, 0, 0]);
  assert.deepEqual(numbers((await one("Cast", [x], { to: "i32" })).data), [1, -1, 300, -300, 0, 0]);
  assert.deepEqual(numbers((await one("Cast", [x], { to: "bool" })).data), [1, 1, 1, 1, 1, 1]);
  const h = await one("Cast", [f32([1, 65504, 1e6, 1e-8])], { to: "f16" });
  assert.equal(h.dtype, "f16");
  assert.deepEqual(numbers(h.data, true), [1, 65504, Infinity, 0]);
});

Deno.test("f16 storage computes in wider floats and rounds once", async () => {
  const x = {
    data: Uint16Array.from([1, 2, 3], (v) => toF16Bits(v)),
    shape: [3],
    dtype: "f16" as const,
  };
  const y = await one("Mul", [x, x]);
  assert.equal(y.dtype, "f16");
  assert.deepEqual(numbers(y.data, true), [1, 4, 9]);
  const e = await one("Exp", [x]);
  assertClose(numbers(e.data, true), [Math.E, Math.E ** 2, Math.E ** 3], { rtol: 1e-3 });
});
