import assert from "node:assert/strict";
import { assertClose, f32, numbers, runOp } from "../../jit/testing/testing.ts";

const one = async (op: string, inputs: Parameters<typeof runOp>[1], attrs = {}) =>
  (await runOp(op, inputs, attrs))[0];
const x23 = f32([1, 2, 3, 4, 5, 6], [2, 3]);

Deno.test("reductions over any axes, negative axes, keepdims", async () => {
  const s = await one("ReduceSum", [x23], { axes: [-1], keepdims: 0 });
  assert.deepEqual(s.shape, [2]);
  assertClose(numbers(s.data), [6, 15]);
  const k = await one("ReduceSum", [x23], { axes: [0], keepdims: 1 });
  assert.deepEqual(k.shape, [1, 3]);
  assertClose(numbers(k.data), [5, 7, 9]);
  const all = await one("ReduceMean", [x23], { keepdims: 0 });
  assert.deepEqual(all.shape, []);
  assertClose(numbers(all.data), [3.5]);
  assertClose(numbers((await one("ReduceMax", [x23], { axes: [1] })).data), [3, 6]);
  assertClose(numbers((await one("ReduceMin", [x23], { axes: [0, 1] })).data), [1]);
  const x3 = f32([...Array(24).keys()], [2, 3, 4]);
  const mid = await one("ReduceSum", [x3], { axes: [0, 2], keepdims: 0 });
  assertClose(numbers(mid.data), [
    0 + 1 + 2 + 3 + 12 + 13 + 14 + 15,
    4 + 5 + 6 + 7 + 16 + 17 + 18 + 19,
    8 + 9 + 10 + 11 + 20 + 21 + 22 + 23,
  ]);
});

Deno.test("reductions of empty axes and NaN", async () => {
  const e = f32([], [2, 0]);
  assertClose(numbers((await one("ReduceSum", [e], { axes: [1] })).data), [0, 0]);
  assertClose(numbers((await one("ReduceMean", [e], { axes: [1] })).data), [NaN, NaN]);
  assertClose(numbers((await one("ReduceMax", [e], { axes: [1] })).data), [-Infinity, -Infinity]);
  assertClose(numbers((await one("ReduceMax", [f32([1, NaN, 3])])).data), [NaN]);
  assertClose(numbers((await one("ReduceMin", [f32([NaN, 1, 3])])).data), [NaN]);
});

Deno.test("reductions accumulate in float64", async () => {
  const n = 1 << 20;
  const x = f32(new Float32Array(n).fill(0.1));
  const s = await one("ReduceSum", [x], { keepdims: 0 });
  assertClose(numbers(s.data), [Math.fround(Math.fround(0.1) * n)], { rtol: 1e-7 });
});

Deno.test("ArgMax picks the first (or last) maximum and returns i32", async () => {
  const x = f32([1, 3, 3, 2, 9, 0], [2, 3]);
  const a = await one("ArgMax", [x], { axis: -1, keepdims: 0 });
  assert.equal(a.dtype, "i32");
  assert.deepEqual(numbers(a.data), [1, 1]);
  assert.deepEqual(
    numbers((await one("ArgMax", [x], { axis: 1, keepdims: 0, select_last_index: 1 })).data),
    [2, 1],
  );
  const k = await one("ArgMax", [x], { axis: 0 });
  assert.deepEqual(k.shape, [1, 3]);
  assert.deepEqual(numbers(k.data), [1, 1, 0]);
});

Deno.test("CumSum with exclusive and reverse", async () => {
  const x = f32([1, 2, 3, 4, 5, 6], [2, 3]);
  assertClose(numbers((await one("CumSum", [x], { axis: 1 })).data), [1, 3, 6, 4, 9, 15]);
  assertClose(numbers((await one("CumSum", [x], { axis: 0 })).data), [1, 2, 3, 5, 7, 9]);
  assertClose(numbers((await one("CumSum", [x], { axis: -1, exclusive: 1 })).data), [
    0,
    1,
    3,
    0,
    4,
    9,
  ]);
  assertClose(numbers((await one("CumSum", [x], { axis: 1, reverse: 1 })).data), [
    6,
    5,
    3,
    15,
    11,
    6,
  ]);
});

Deno.test("Softmax and LogSoftmax are stable for large inputs", async () => {
  const x = f32([1000, 1001, 1002, -1, 0, 1], [2, 3]);
  const e = [Math.exp(-2), Math.exp(-1), 1];
  const s = e.reduce((a, b) => a + b);
  const want = e.map((v) => v / s);
  assertClose(numbers((await one("Softmax", [x], { axis: -1 })).data), [...want, ...want]);
  assertClose(
    numbers((await one("LogSoftmax", [x], { axis: -1 })).data),
    [...want, ...want].map(Math.log),
  );
  const col = await one("Softmax", [f32([0, 0, 1, 1], [2, 2])], { axis: 0 });
  assertClose(numbers(col.data), [
    1 / (1 + Math.E),
    1 / (1 + Math.E),
    Math.E / (1 + Math.E),
    Math.E / (1 + Math.E),
  ]);
});

Deno.test("LayerNormalization and BatchNormalization", async () => {
  const x = f32([1, 2, 3, 4, 0, 0, 4, 4], [2, 4]);
  const y = await one("LayerNormalization", [x, f32([1, 1, 2, 2]), f32([0, 0, 0, 1])], {
    epsilon: 0,
  });
  const sd = Math.sqrt(1.25);
  assertClose(numbers(y.data), [-1.5 / sd, -0.5 / sd, 1 / sd, 3 / sd + 1, -1, -1, 2, 3], {
    atol: 1e-5,
  });
  const constant = await one("LayerNormalization", [f32([2, 2]), f32([1, 1])], { epsilon: 1e-5 });
  assertClose(numbers(constant.data), [0, 0]);
  const bn = await one("BatchNormalization", [
    f32([1, 2, 3, 4], [1, 2, 2, 1]),
    f32([1, 2]),
    f32([0, 1]),
    f32([1, 3]),
    f32([4, 1]),
  ], { epsilon: 0 });
  assertClose(numbers(bn.data), [0, 0.5, 1, 3]);
  const gap = await one("GlobalAveragePool", [f32([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 2, 2])]);
  assert.deepEqual(gap.shape, [1, 2, 1, 1]);
  assertClose(numbers(gap.data), [2.5, 6.5]);
});
