import assert from "node:assert/strict";
import {
  affineOffset,
  batchAffineOffset,
  guardedOffset,
  linearSuffix,
  reshapeCoord,
  reshapeGroups,
  segmentOffset,
  strideOver,
} from "./access.ts";
import { fuse } from "../passes/fuse.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { applyStep, type IndexStep, linearIndex, walk } from "./kernel_ir.ts";
import { randomGraph } from "../testing/random_graph.ts";
import { type Shape, stridesOf } from "./shape.ts";

// A 3-wide window over a row of 8: out[i, k] = x[i + k], i < 6, k < 3.
const window = (offset: number): IndexStep => ({
  kind: "affine",
  coeff: [[1, 1]],
  offset: [offset],
  bounds: [8],
  fill: 0,
});

Deno.test("affineOffset composes steps; bounds count only where some point can leave them", () => {
  assert.deepEqual(affineOffset([window(0)], [6, 3], [8]), { weights: [1, 1], base: 0 });
  // With padding 1 the first and last windows read the fill: not affine.
  assert.equal(affineOffset([window(-1)], [6, 3], [8]), undefined);
  assert.equal(affineOffset([window(0)], [7, 3], [8]), undefined);
  // A transpose then a final reshape: the offset is the linear index into the transposed shape.
  const transpose: IndexStep = { kind: "affine", coeff: [[0, 1], [1, 0]], offset: [0, 0] };
  assert.deepEqual(
    affineOffset([transpose, { kind: "reshape", from: [3, 2], to: [6] }], [2, 3], [6]),
    { weights: [1, 2], base: 0 },
  );
  // A reshape followed by more steps is not affine in general.
  assert.equal(
    affineOffset([{ kind: "reshape", from: [2, 3], to: [3, 2] }, transpose], [2, 3], [2, 3]),
    undefined,
  );
});

Deno.test("strideOver and linearSuffix find the axes a pointer can walk", () => {
  const rowMajor = { weights: [4, 1], base: 0 }, bias = { weights: [0, 1], base: 0 };
  assert.equal(strideOver(rowMajor, [0, 1], [3, 4]), 1);
  assert.equal(strideOver(bias, [0, 1], [3, 4]), undefined);
  assert.equal(strideOver(bias, [1], [3, 4]), 1);
  assert.deepEqual(linearSuffix([rowMajor, bias], [3, 4]), [1]);
  assert.deepEqual(linearSuffix([rowMajor], [3, 4]), [0, 1]);
});

Deno.test("reshapes inside a chain: merges are affine, splits while used as their index", () => {
  // Attention's head split: out[b, h, s, d] = qkv[b, s, 128 + 32h + d] of a [2, 16, 384] buffer.
  const perm: IndexStep = {
    kind: "affine",
    coeff: [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]],
    offset: [0, 0, 0, 0],
  };
  const heads: IndexStep = { kind: "reshape", from: [2, 16, 4, 32], to: [2, 16, 128] };
  const slice: IndexStep = {
    kind: "affine",
    coeff: [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
    offset: [0, 0, 128],
  };
  assert.deepEqual(affineOffset([perm, heads, slice], [2, 4, 16, 32], [2, 16, 384]), {
    weights: [16 * 384, 32, 384, 1],
    base: 128,
  });
  // A split index: p → (p / 3, p % 3). A load that ignores both parts is affine (weight 0)…
  const split: IndexStep = { kind: "reshape", from: [6], to: [2, 3] };
  const none: IndexStep = { kind: "affine", coeff: [[0, 0]], offset: [5] };
  assert.deepEqual(affineOffset([split, none], [6], [8]), { weights: [0], base: 5 });
  // …one that uses both in proportion is the index again; one part alone is not affine.
  const both: IndexStep = { kind: "affine", coeff: [[6, 2]], offset: [0] };
  assert.deepEqual(affineOffset([split, both], [6], [12]), { weights: [2], base: 0 });
  const first: IndexStep = { kind: "affine", coeff: [[1, 0]], offset: [0] };
  assert.equal(affineOffset([split, first], [6], [2]), undefined);
  // Split then merged back by a second reshape.
  assert.deepEqual(
    affineOffset([split, { kind: "reshape", from: [2, 3], to: [6] }], [6], [6]),
    { weights: [1], base: 0 },
  );
  // A 1×1 convolution's patches as implicit GEMM over space (b, g, m, n, k): the spatial index m
  // splits into (h, w) and each passes a bound it cannot leave, beside kernel offsets of
  // extent 1; x[b, c, h, w] of [2, 24, 56, 56] is read at b·75264 + k·3136 + m (g is always 0).
  const conv1x1: IndexStep[] = [
    {
      kind: "affine",
      coeff: [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 1, 0], [0, 0, 1, 0, 0], [0, 0, 0, 0, 1]],
      offset: [0, 0, 0, 0, 0],
    },
    { kind: "reshape", from: [2, 1, 24, 3136, 24], to: [2, 1, 24, 56, 56, 24, 1, 1] },
    {
      kind: "affine",
      coeff: [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [0, 24, 0, 0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0, 0, 1, 0],
        [0, 0, 0, 0, 1, 0, 0, 1],
      ],
      offset: [0, 0, 0, 0],
      bounds: [2, 24, 56, 56],
      fill: 0,
    },
  ];
  const space = [2, 1, 3136, 24, 24], shape = [2, 24, 56, 56];
  assert.deepEqual(affineOffset(conv1x1, space, shape), {
    weights: [75264, 0, 1, 0, 3136],
    base: 0,
  });
  // A reshape whose index is not affine (k·4 + b, b one part of a split p) makes its axes
  // opaque: an access that ignores them stays affine (a conv's weights read through its
  // patches' split axes), one that uses them does not.
  const parts: IndexStep[] = [
    { kind: "reshape", from: [8, 4, 5], to: [2, 4, 4, 5] },
    {
      kind: "affine",
      coeff: [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]],
      offset: [0, 0, 0, 0],
    },
    { kind: "reshape", from: [2, 4, 4, 5], to: [2, 16, 5] },
  ];
  const read = (coeff: number[][]) => ({ kind: "affine" as const, coeff, offset: [0] });
  assert.deepEqual(affineOffset([...parts, read([[0, 0, 1]])], [8, 4, 5], [5]), {
    weights: [0, 0, 1],
    base: 0,
  });
  assert.equal(affineOffset([...parts, read([[0, 1, 0]])], [8, 4, 5], [16]), undefined);
  // …and a bound on an opaque axis cannot be proved.
  const bounded: IndexStep = { ...read([[0, 1, 0]]), bounds: [16], fill: 0 };
  assert.equal(affineOffset([...parts, bounded], [8, 4, 5], [16]), undefined);
  // With a 3×3 kernel the offsets move h and w out of bounds: not affine.
  const conv3x3 = conv1x1.map((s) =>
    s.kind === "reshape" ? { ...s, from: [2, 1, 24, 3136, 27], to: [2, 1, 24, 56, 56, 3, 3, 3] } : s
  );
  assert.equal(affineOffset(conv3x3, [2, 1, 3136, 24, 27], [2, 3, 56, 56]), undefined);
});

Deno.test("reshapeGroups pairs the axes a reshape merges and splits", () => {
  assert.deepEqual(reshapeGroups([2, 3, 4], [6, 4]), [
    { from: [0, 1], to: [0] },
    { from: [2], to: [1] },
  ]);
  assert.deepEqual(reshapeGroups([1, 6], [2, 3, 1]), [
    { from: [0], to: [] },
    { from: [1], to: [0, 1, 2] },
  ]);
  assert.deepEqual(reshapeGroups([4, 6], [6, 4]), [{ from: [0, 1], to: [0, 1] }]);
  assert.deepEqual(reshapeGroups([], [1]), [{ from: [], to: [0] }]);
});

Deno.test("affineOffset agrees with the index maps at every point of 400 random graphs' kernels", () => {
  let affine = 0;
  const check = (steps: readonly IndexStep[], space: Shape, shape: Shape, where: string) => {
    const a = affineOffset(steps, space, shape);
    if (!a) return;
    affine++;
    const count = space.reduce((x, y) => x * y, 1);
    for (let p = 0; p < count; p++) {
      const c: number[] = [];
      for (let i = space.length - 1, rest = p; i >= 0; i--) {
        c[i] = rest % space[i];
        rest = Math.floor(rest / space[i]);
      }
      let x: number[] | undefined = c;
      for (const s of steps) if (x) x = applyStep(s, x);
      const got: number = a.base + c.reduce((sum: number, v, i) => sum + v * a.weights[i], 0);
      assert.equal(got, linearIndex(x!, shape), `${where} at ${c}: ${JSON.stringify(steps)}`);
    }
  };
  for (let seed = 0; seed < 400; seed++) {
    for (const k of fuse(randomGraph(seed).graph).kernels) {
      const where = `seed ${seed} ${k.name}`;
      for (const o of k.outputs) check(o.steps, k.space, o.shape, where);
      for (const e of [...k.outputs.map((o) => o.expr), ...k.reductions.map((r) => r.expr)]) {
        walk(
          e,
          (x) => x.kind === "load" && check(x.steps, k.space, k.inputs[x.input].shape, where),
        );
      }
    }
  }
  assert.ok(affine > 1000, `${affine} affine accesses checked`);
});

/** Every access of `graphs` random graphs' kernels (no gathers: their steps need data). */
function eachAccess(
  graphs: number,
  check: (steps: readonly IndexStep[], space: Shape, shape: Shape, where: string) => void,
): void {
  for (let seed = 0; seed < graphs; seed++) {
    for (const k of fuse(randomGraph(seed).graph).kernels) {
      const where = `seed ${seed} ${k.name}`;
      for (const o of k.outputs) check(o.steps, k.space, o.shape, where);
      for (const e of [...k.outputs.map((o) => o.expr), ...k.reductions.map((r) => r.expr)]) {
        walk(e, (x) => {
          if (x.kind !== "load" || x.steps.some((s) => s.kind === "gather")) return;
          check(x.steps, k.space, k.inputs[x.input].shape, where);
        });
      }
    }
  }
}

/** The points of `space`, row-major. */
function points(space: Shape): number[][] {
  const count = space.reduce((x, y) => x * y, 1);
  return Array.from({ length: count }, (_, p) => {
    const c: number[] = [];
    for (let i = space.length - 1, rest = p; i >= 0; i--) {
      c[i] = rest % space[i];
      rest = Math.floor(rest / space[i]);
    }
    return c;
  });
}

const apply = (steps: readonly IndexStep[], c: number[]) => {
  let x: number[] | undefined = c;
  for (const s of steps) if (x) x = applyStep(s, x);
  return x;
};

Deno.test("guardedOffset: a padded window reads where its guards hold, at the affine offset", () => {
  // The padded window of 8 from above: guarded on its one coordinate.
  const g = guardedOffset([window(-1)], [6, 3], [8])!;
  assert.deepEqual(g.offset, { weights: [1, 1], base: -1 });
  assert.deepEqual(g.guards, [{ at: { weights: [1, 1], base: -1 }, bound: 8 }]);
  let guarded = 0;
  eachAccess(400, (steps, space, shape, where) => {
    if (affineOffset(steps, space, shape)) return;
    const g = guardedOffset(steps, space, shape);
    if (!g) return;
    guarded++;
    for (const c of points(space)) {
      const x = apply(steps, c);
      const value = (a: { weights: readonly number[]; base: number }): number =>
        a.base + c.reduce((sum, v, i) => sum + v * a.weights[i], 0);
      const inside: boolean = g.guards.every((q) => value(q.at) >= 0 && value(q.at) < q.bound);
      assert.equal(inside, x !== undefined, `${where} at ${c}`);
      if (x) assert.equal(value(g.offset), linearIndex(x, shape), `${where} at ${c}`);
    }
  });
  assert.ok(guarded > 50, `${guarded} guarded accesses checked`);
});

Deno.test("segmentOffset: along the suffix, offsets step by the weights and guards do not change", () => {
  let checked = 0;
  eachAccess(150, (steps, space, shape, where) => {
    for (let k = 1; k <= space.length; k++) {
      const suffix = space.map((_, a) => a).slice(space.length - k);
      const seg = segmentOffset(steps, space, shape, suffix);
      if (!seg) continue;
      checked++;
      for (const c of points(space)) {
        const x = apply(steps, c);
        for (const a of suffix) {
          if (c[a] + 1 >= space[a]) continue;
          const next = c.with(a, c[a] + 1), y = apply(steps, next);
          assert.equal(y !== undefined, x !== undefined, `${where} ${suffix} at ${c} +${a}`);
          if (x && y) {
            assert.equal(
              linearIndex(y, shape) - linearIndex(x, shape),
              seg.weights[a],
              `${where} ${suffix} at ${c} +${a}: ${JSON.stringify(steps)}`,
            );
          }
        }
      }
    }
  });
  assert.ok(checked > 1000, `${checked} accesses checked`);
});

Deno.test("reshapeCoord: the simplified division equals (flat / stride) % extent at every point", () => {
  // Reshapes as im2col, head splits, flattens and shuffles make them, with size-1 axes.
  const cases: [Shape, Shape][] = [
    [[2, 4, 6, 9], [2, 24, 9]],
    [[2, 4, 6, 9], [2, 4, 2, 3, 3, 3]],
    [[6, 4], [2, 3, 2, 2]],
    [[3, 1, 8], [2, 12]],
    [[5, 7], [35]],
    [[35], [5, 7]],
    [[4, 6, 10], [12, 5, 2, 2]],
    [[1, 12, 1], [3, 1, 4]],
    [[2, 3, 4, 5], [5, 4, 3, 2]],
  ];
  let simplified = 0;
  for (const [from, to] of cases) {
    const fromStrides = stridesOf(from), toStrides = stridesOf(to);
    const n = from.reduce((a, b) => a * b, 1);
    for (let j = 0; j < to.length; j++) {
      const r = reshapeCoord(from, toStrides[j], to[j]);
      if (!r.whole) simplified++;
      for (let flat = 0; flat < n; flat++) {
        const coord = from.map((d, i) => Math.floor(flat / fromStrides[i]) % d);
        const sum = r.whole
          ? flat
          : r.terms.reduce((acc, { axis, mul }) => acc + coord[axis] * mul, 0);
        const q = Math.floor(sum / r.div);
        const got = r.mod ? q % r.mod : q;
        assert.equal(got, Math.floor(flat / toStrides[j]) % to[j], `${from} -> ${to} axis ${j}`);
        if (!r.mod) assert.ok(got < to[j]);
      }
    }
  }
  assert.ok(simplified > 20, `${simplified} coordinates simplified`);
  // An im2col's tap coordinate: seven divisions of one flat index become two of small ones.
  const tap = reshapeCoord([2, 28 * 28, 128 * 9], 3, 3);
  assert.deepEqual(tap, { terms: [{ axis: 2, mul: 1 }], whole: false, div: 3, mod: 3 });
  const row = reshapeCoord([2, 28 * 28, 128 * 9], 128 * 9 * 28, 28);
  assert.deepEqual(row, { terms: [{ axis: 1, mul: 1 }], whole: false, div: 28, mod: 0 });
});

Deno.test("segmentOffset: a gather whose index is read at a fixed position walks the other axes", () => {
  // Rows gathered along axis 2 by an index of the row coordinate: along the last axis the
  // gathered row is fixed and its elements are walked; gathered along the last axis, the index
  // moves with the segment and nothing is walked.
  const index = (axis: number): IndexStep => ({
    kind: "gather",
    axis,
    drop: 1,
    dim: 5,
    index: {
      kind: "load",
      input: 1,
      steps: [{
        kind: "affine",
        coeff: [[0, 0, axis === 2 ? 1 : 0, axis === 3 ? 1 : 0]],
        offset: [0],
      }],
      dtype: "i32",
    },
  });
  assert.deepEqual(segmentOffset([index(2)], [2, 3, 4, 6], [2, 3, 5, 6], [3]), {
    weights: [0, 0, 0, 1],
    guarded: true,
  });
  assert.equal(segmentOffset([index(2)], [2, 3, 4, 6], [2, 3, 5, 6], [2, 3]), undefined);
  assert.equal(segmentOffset([index(3)], [2, 3, 6, 4], [2, 3, 6, 5], [3]), undefined);
});

/** The keys of grouped-query attention as a scores matmul reads them: 2 heads shared by 7 each. */
function sharedKeys(tokens: number) {
  const b = new GraphBuilder();
  const q = b.input("q", [1, 14, tokens, 64]);
  const k = b.input("k", [1, 2, 1, tokens, 64]);
  const heads = b.op("Reshape", [
    b.op("Expand", [k], { shape: [1, 2, 7, tokens, 64] }),
  ], { shape: [1, 14, tokens, 64] });
  b.output("s", b.op("MatMul", [q, b.op("Transpose", [heads], { perm: [0, 1, 3, 2] })]));
  return fuse(b.build()).kernels.find((x) => x.pattern === "matmul")!;
}

Deno.test("batchAffineOffset: keys shared by heads are affine within each head, proved head by head", () => {
  const kernel = sharedKeys(24);
  const keys = kernel.inputs.findIndex((b) => b.shape.length === 5);
  let load: readonly IndexStep[] | undefined;
  walk(kernel.reductions[0].expr, (e) => e.kind === "load" && e.input === keys && (load = e.steps));
  const space = kernel.space, shape = kernel.inputs[keys].shape;
  assert.equal(affineOffset(load!, space, shape), undefined, "head h reads key head h / 7");
  const within = batchAffineOffset(load!, space, shape, 2)!;
  // [1, 14, rows, keys, d]: batch axes by no one stride; rows still; keys 64 apart; d contiguous.
  assert.ok(within.weights.slice(0, 2).every(Number.isNaN));
  assert.deepEqual(within.weights.slice(2), [0, 64, 1]);
  // Every point: its batch's base plus the weights.
  for (let h = 0; h < 14; h++) {
    const at = (key: number, d: number) => {
      let c: number[] | undefined = [0, h, 5, key, d];
      for (const s of load!) c = applyStep(s, c!);
      return linearIndex(c!, shape);
    };
    for (const [key, d] of [[0, 0], [23, 63], [7, 9]]) {
      assert.equal(at(key, d), at(0, 0) + 64 * key + d);
    }
  }
  assert.equal(batchAffineOffset(load!, space, shape, 0), undefined, "no batch axes");
  // Rows of 6 read from a [3, 4] split stored transposed: no batch is affine along its row.
  const split: IndexStep[] = [
    { kind: "reshape", from: [2, 6], to: [3, 4] },
    { kind: "affine", coeff: [[0, 1], [1, 0]], offset: [0, 0] },
  ];
  assert.equal(batchAffineOffset(split, [2, 6], [4, 3], 1), undefined);
  // The same split stored as it is: one stride along the row.
  const plain = batchAffineOffset(split.slice(0, 1), [2, 6], [3, 4], 1)!;
  assert.deepEqual(plain.weights.slice(1), [1]);
});
