import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { assertClose, bool, f32, i32, numbers, runOp } from "../../jit/testing/testing.ts";

const one = async (op: string, inputs: Parameters<typeof runOp>[1], attrs = {}) =>
  (await runOp(op, inputs, attrs))[0];
const x23 = f32([1, 2, 3, 4, 5, 6], [2, 3]);

Deno.test("Reshape with 0 and -1, Flatten, Squeeze, Unsqueeze", async () => {
  const r = await one("Reshape", [x23], { shape: [0, -1, 1] });
  assert.deepEqual(r.shape, [2, 3, 1]);
  assertClose(numbers(r.data), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(
    (await one("Flatten", [f32(new Array(24).fill(0), [2, 3, 4])], { axis: -1 })).shape,
    [6, 4],
  );
  assert.deepEqual((await one("Flatten", [f32([1, 2], [2])], { axis: 0 })).shape, [1, 2]);
  assert.deepEqual((await one("Squeeze", [f32([1, 2], [1, 2, 1])])).shape, [2]);
  assert.deepEqual((await one("Squeeze", [f32([1, 2], [1, 2, 1])], { axes: [-1] })).shape, [1, 2]);
  assert.deepEqual((await one("Unsqueeze", [f32([1, 2], [2])], { axes: [0, -1] })).shape, [
    1,
    2,
    1,
  ]);
});

Deno.test("Transpose, including default reversal and rank 3", async () => {
  const t = await one("Transpose", [x23]);
  assert.deepEqual(t.shape, [3, 2]);
  assertClose(numbers(t.data), [1, 4, 2, 5, 3, 6]);
  const x = f32([...Array(24).keys()], [2, 3, 4]);
  const y = await one("Transpose", [x], { perm: [1, 2, 0] });
  assert.deepEqual(y.shape, [3, 4, 2]);
  assertClose(numbers(y.data).slice(0, 6), [0, 12, 1, 13, 2, 14]);
});

Deno.test("Slice clamps, wraps negatives and steps backwards", async () => {
  const x = f32([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  assertClose(numbers((await one("Slice", [x], { starts: [2], ends: [100] })).data), [
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
  ]);
  assertClose(numbers((await one("Slice", [x], { starts: [-3], ends: [-1] })).data), [7, 8]);
  assertClose(
    numbers((await one("Slice", [x], { starts: [-1], ends: [-100], steps: [-3] })).data),
    [9, 6, 3, 0],
  );
  assertClose(numbers((await one("Slice", [x], { starts: [1], ends: [9], steps: [4] })).data), [
    1,
    5,
  ]);
  assert.equal((await one("Slice", [x], { starts: [5], ends: [2] })).data.length, 0);
  const s = await one("Slice", [x23], { starts: [1], ends: [3], axes: [-1] });
  assert.deepEqual(s.shape, [2, 2]);
  assertClose(numbers(s.data), [2, 3, 5, 6]);
});

Deno.test("Concat and Split are inverses", async () => {
  const c = await one("Concat", [x23, f32([7, 8], [2, 1])], { axis: -1 });
  assert.deepEqual(c.shape, [2, 4]);
  assertClose(numbers(c.data), [1, 2, 3, 7, 4, 5, 6, 8]);
  const parts = await runOp("Split", [c], { axis: 1, split: [3, 1] }, { outputs: 2 });
  assertClose(numbers(parts[0].data), [1, 2, 3, 4, 5, 6]);
  assertClose(numbers(parts[1].data), [7, 8]);
  const even = await runOp("Split", [f32([1, 2, 3, 4, 5])], { num_outputs: 3 }, { outputs: 3 });
  assert.deepEqual(even.map((p) => p.shape[0]), [2, 2, 1]);
});

Deno.test("Expand broadcasts both ways", async () => {
  const e = await one("Expand", [f32([1, 2, 3], [3, 1])], { shape: [2, 1, 2] });
  assert.deepEqual(e.shape, [2, 3, 2]);
  assertClose(numbers(e.data), [1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3]);
});

Deno.test("Pad in constant, edge, reflect and wrap modes; negative pads crop", async () => {
  const x = f32([1, 2, 3]);
  assertClose(numbers((await one("Pad", [x], { pads: [2, 1], value: 9 })).data), [
    9,
    9,
    1,
    2,
    3,
    9,
  ]);
  assertClose(numbers((await one("Pad", [x], { pads: [2, 1], mode: "edge" })).data), [
    1,
    1,
    1,
    2,
    3,
    3,
  ]);
  assertClose(numbers((await one("Pad", [x], { pads: [2, 2], mode: "reflect" })).data), [
    3,
    2,
    1,
    2,
    3,
    2,
    1,
  ]);
  const wrapped = await one("Pad", [x23], { pads: [1, 2, 0, 3], mode: "wrap" });
  assert.deepEqual(wrapped.shape, [3, 8]);
  assertClose(numbers(wrapped.data), [
    ...[5, 6, 4, 5, 6, 4, 5, 6],
    ...[2, 3, 1, 2, 3, 1, 2, 3],
    ...[5, 6, 4, 5, 6, 4, 5, 6],
  ]);
  assertClose(numbers((await one("Pad", [x], { pads: [-1, 0] })).data), [2, 3]);
  const p = await one("Pad", [x23], { pads: [1, 1], axes: [1] });
  assertClose(numbers(p.data), [0, 1, 2, 3, 0, 0, 4, 5, 6, 0]);
  const b = await one("Pad", [bool([1])], { pads: [1, 0], value: 1 });
  assert.deepEqual(numbers(b.data), [1, 1]);
});

Deno.test("Gather and GatherElements with negative indices; out of range is an error", async () => {
  const g = await one("Gather", [x23, i32([2, -3], [2])], { axis: 1 });
  assert.deepEqual(g.shape, [2, 2]);
  assertClose(numbers(g.data), [3, 1, 6, 4]);
  const rows = await one("Gather", [x23, i32([1, 0, 1], [3, 1])], { axis: 0 });
  assert.deepEqual(rows.shape, [3, 1, 3]);
  const s = await one("Gather", [x23, i32([-1], [])], { axis: 0 });
  assert.deepEqual(s.shape, [3]);
  assertClose(numbers(s.data), [4, 5, 6]);
  const ge = await one("GatherElements", [x23, i32([2, 0, 1, -1], [2, 2])], { axis: 1 });
  assertClose(numbers(ge.data), [3, 1, 5, 6]);
  await assert.rejects(
    () => one("Gather", [x23, i32([3])], { axis: 1 }),
    (e: unknown) =>
      e instanceof KilnError && e.code === "out-of-range" && /index 3/.test(e.message),
  );
});

Deno.test("Constant, ConstantOfShape and Range", async () => {
  const c = await one("ConstantOfShape", [], { shape: [2, 2], value: 7, dtype: "i32" });
  assert.equal(c.dtype, "i32");
  assert.deepEqual(numbers(c.data), [7, 7, 7, 7]);
  assertClose(numbers((await one("Range", [], { start: 1, limit: 2, delta: 0.25 })).data), [
    1,
    1.25,
    1.5,
    1.75,
  ]);
  assert.deepEqual(
    numbers((await one("Range", [], { start: 5, limit: 0, delta: -2, dtype: "i32" })).data),
    [5, 3, 1],
  );
  assert.equal((await one("Range", [], { start: 3, limit: 0 })).data.length, 0);
});
