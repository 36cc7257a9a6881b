import assert from "node:assert/strict";
import { applyStep, type IndexStep, type Load } from "./kernel_ir.ts";
import {
  convMap,
  gatherStep,
  keptPermutations,
  matmulMap,
  movementSteps,
  poolMap,
  relation,
  sameMap,
} from "./index_maps.ts";
import { InferContext } from "../ops/mod.ts";
import { resolveWindow } from "../ops/nn.ts";
import type { Shape } from "./shape.ts";

const at = (steps: readonly IndexStep[], coords: number[]) =>
  steps.reduce<number[] | undefined>((c, s) => c && applyStep(s, c), coords);
const ctx = (op: string, shape: Shape, attrs: Record<string, unknown>) =>
  new InferContext({
    op,
    where: op,
    inputs: [{ shape, dtype: "f32" }],
    attrs: attrs as never,
  });

Deno.test("movement steps map output coordinates to input coordinates", () => {
  // Transpose [2,3,4] by [2,0,1] → [4,2,3]: out (k,i,j) reads in (i,j,k).
  const t = movementSteps(ctx("Transpose", [2, 3, 4], { perm: [2, 0, 1] }), [2, 3, 4], [4, 2, 3]);
  assert.deepEqual(at(t, [3, 1, 2]), [1, 2, 3]);
  // Slice [10] from 2 by 3 → [3]: out i reads 2 + 3i.
  const s = movementSteps(
    ctx("Slice", [10], { starts: [2], ends: [10], axes: [0], steps: [3] }),
    [10],
    [3],
  );
  assert.deepEqual([0, 1, 2].map((i) => at(s, [i])![0]), [2, 5, 8]);
  // Pad [3] by 2 before → [6]: out 0, 1 are outside (fill), out 2 reads 0.
  const p = movementSteps(ctx("Pad", [3], { pads: [2, 1] }), [3], [6]);
  assert.equal(at(p, [1]), undefined);
  assert.deepEqual(at(p, [2]), [0]);
  // Reshape [2,6] → [3,4]: flat order is kept.
  const r = movementSteps(ctx("Reshape", [2, 6], { shape: [3, 4] }), [2, 6], [3, 4]);
  assert.deepEqual(at(r, [1, 3]), [1, 1]);
});

Deno.test("a constant gather is an affine step; a data gather reads its index", () => {
  const index: Load = { kind: "load", input: 9, steps: [], dtype: "i32" };
  const base = { from: [5, 3], to: [3], axis: 0, elements: false, indexShape: [], index };
  assert.deepEqual(at([gatherStep({ ...base, constant: -1 })], [2]), [4, 2]);
  assert.equal(at([gatherStep({ ...base, constant: 7 })], [2]), undefined);
  const data = gatherStep({ ...base, to: [2, 3], indexShape: [2] });
  assert.equal(data.kind, "gather");
  assert.deepEqual(at(data.kind === "gather" ? [data.index.steps[0]] : [], [1, 2]), [1]);
});

Deno.test("matmul and pool maps place each operand in the contraction space", () => {
  const mm = matmulMap([4, 2, 3], [3, 5]);
  assert.deepEqual(mm.space, [4, 2, 5, 3]);
  assert.deepEqual(mm.reduced, [3]);
  // (b, m, n, k) reads A(b, m, k) and B(k, n).
  assert.deepEqual(at(mm.operands[0], [3, 1, 4, 2]), [3, 1, 2]);
  assert.deepEqual(at(mm.operands[1], [3, 1, 4, 2]), [2, 4]);
  const c = new InferContext({
    op: "MaxPool",
    where: "pool",
    inputs: [{ shape: [1, 1, 4, 4], dtype: "f32" }],
    attrs: { kernel_shape: [2, 2], strides: [2, 2] },
  });
  const pool = poolMap([1, 1, 4, 4], resolveWindow(c, [4, 4], [2, 2]), -Infinity);
  assert.deepEqual(pool.space, [1, 1, 2, 2, 2, 2]);
  assert.deepEqual(at(pool.operands[0], [0, 0, 1, 0, 1, 1]), [0, 0, 3, 1]);
});

Deno.test("relation and sameMap: a row value iterates with its reduction's space", () => {
  // Space [2, 3] reducing axis 1: a [2, 1] value is the kept axis, reshaped.
  const steps = relation([2, 3], [1], [2, 1])!;
  assert.deepEqual(at(steps, [1, 2]), [1, 0]);
  assert.equal(relation([2, 3], [1], [3]), undefined);
  assert.deepEqual(relation([2, 3], [], [2, 3]), []);
  const t = movementSteps(ctx("Transpose", [3, 3], { perm: [1, 0] }), [3, 3], [3, 3]);
  assert.ok(sameMap([3, 3], [...t, ...t], [], [3, 3]));
  assert.ok(!sameMap([3, 3], t, [], [3, 3]));
});

Deno.test("sameMap decides affine chains exactly, and agrees with every point where it probes", () => {
  // Chains over a space [4, 6] into a buffer [4, 6]: transposes, reshapes that split and merge,
  // reversals, and a pad and crop (not affine: probed).
  const m = (op: string, from: Shape, to: Shape, attrs: Record<string, unknown> = {}) =>
    movementSteps(ctx(op, from, attrs), from, to);
  const space = [4, 6];
  const swap = m("Transpose", [6, 4], [4, 6], { perm: [1, 0] });
  const chains: IndexStep[][] = [
    [],
    [...swap, ...m("Transpose", [4, 6], [6, 4], { perm: [1, 0] })],
    [...m("Reshape", [24], [4, 6]), ...m("Reshape", [4, 6], [24])],
    [...m("Reshape", [2, 12], [4, 6]), ...m("Reshape", [4, 6], [2, 12])],
    [...m("Reshape", [8, 3], [4, 6]), ...m("Reshape", [4, 6], [8, 3])],
    m("Slice", [4, 6], [4, 6], { starts: [-1], ends: [-7], axes: [1], steps: [-1] }),
    [
      ...m("Slice", [4, 6], [4, 6], { starts: [-1], ends: [-5], axes: [0], steps: [-1] }),
      ...m("Slice", [4, 6], [4, 6], { starts: [-1], ends: [-7], axes: [1], steps: [-1] }),
    ],
    m("Slice", [4, 6], [4, 6], { starts: [0], ends: [6], axes: [1], steps: [1] }),
    [
      ...m("Pad", [4, 4], [4, 6], { pads: [0, 1, 0, 1] }),
      ...m("Pad", [4, 6], [4, 4], {
        pads: [0, -1, 0, -1],
      }),
    ],
  ];
  const points = [...Array(24).keys()].map((i) => [Math.floor(i / 6), i % 6]);
  for (const a of chains) {
    for (const b of chains) {
      const agree = points.every((p) => JSON.stringify(at(a, p)) === JSON.stringify(at(b, p)));
      assert.equal(
        sameMap(space, a, b, space),
        agree,
        `${JSON.stringify(a)} / ${JSON.stringify(b)}`,
      );
    }
  }
});

Deno.test("a 1×1 conv of stride 1 is laid out as filters × pixels; others as pixels × filters", () => {
  const map = (
    x: Shape,
    w: Shape,
    attrs: Record<string, number[]> = {},
    group = 1,
    inPlace = true,
  ) => {
    const ctx = new InferContext({ op: "Conv", where: "test", inputs: [], attrs });
    return convMap(x, w, group, resolveWindow(ctx, x.slice(2), w.slice(2)), true, inPlace);
  };
  const at = (steps: readonly IndexStep[], c: number[]) =>
    steps.reduce((p, s) => applyStep(s, p)!, c);
  // [N, G, Mg, pixels, Cg]: the product's first factor is the filter, its second the pixel.
  const pointwise = map([2, 6, 4, 5], [8, 3, 1, 1], {}, 2);
  assert.deepEqual(pointwise.space, [2, 2, 4, 20, 3]);
  assert.equal(pointwise.keptOrder, undefined);
  assert.equal(pointwise.swapped, true);
  // Image 1, group 1, filter 2 of it (channel 6), pixel 13 (row 2, column 3), input channel 1.
  assert.deepEqual(at(pointwise.operands[0], [1, 1, 2, 13, 1]), [1, 4, 2, 3]);
  assert.deepEqual(at(pointwise.operands[1], [1, 1, 2, 13, 1]), [6, 1, 0, 0]);
  // Strided, padded, larger kernels, or fewer than 8 pixels: rows of pixels.
  for (
    const [x, w, attrs] of [
      [[2, 6, 4, 5], [8, 6, 1, 1], { strides: [2, 2] }],
      [[2, 6, 4, 5], [8, 6, 1, 1], { pads: [1, 1, 1, 1] }],
      [[2, 6, 4, 5], [8, 6, 3, 3], { pads: [1, 1, 1, 1] }],
      [[2, 6, 1, 7], [8, 6, 1, 1], {}],
    ] as [Shape, Shape, Record<string, number[]>][]
  ) {
    const m = map(x, w, attrs);
    assert.equal(m.swapped, undefined, JSON.stringify(attrs));
    assert.deepEqual(m.keptOrder, [0, 1, 3, 2]);
  }
  // An input read through a view (a strided Slice fused before the conv): rows of pixels too.
  assert.equal(map([2, 6, 4, 5], [8, 6, 1, 1], {}, 1, false).swapped, undefined);
});

Deno.test("keptPermutations: orders of the kept axes with the fastest still last", () => {
  // Attention's context [B, H, T, D] by its keys: H and T trade places, D stays last.
  assert.deepEqual(keptPermutations([1, 12, 128, 64, 128], [4]), [[0, 2, 1, 3]]);
  // Three axes before the last: the five orders other than the space's own.
  assert.equal(keptPermutations([2, 3, 4, 5, 6], [4]).length, 5);
  assert.ok(keptPermutations([2, 3, 4, 5, 6], [4]).every((o) => o[3] === 3));
  // No reduction (an elementwise kernel), or a single axis to move: none.
  assert.deepEqual(keptPermutations([2, 3, 4], []), []);
  assert.deepEqual(keptPermutations([1, 3, 4, 5], [3]), []);
});
