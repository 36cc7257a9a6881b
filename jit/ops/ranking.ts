/**
 * `TopK` and `Det` as kiln ops. TopK gives the `k` largest (or smallest) elements along `axis`
 * and their indices (i32), sorted, ties to the lower index; NaN ranks above every number (first
 * when largest, last when smallest), as PyTorch's topk and NumPy's sort order it. Det is the
 * determinant of the last two axes' square float matrices, up to 5×5.
 *
 * TopK decomposes without sorting: element i's rank is how many elements beat it, and output r
 * gathers the element of rank r (O(n²) a row, comparisons and sums every backend fuses). Det
 * decomposes by the Leibniz formula, Σ over permutations of sign · Π A[i, σ(i)] (120 terms at
 * 5×5), exact arithmetic with no data-dependent pivoting.
 *
 * @module
 */
import { isFloat } from "../ir/dtype.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** TopK's outputs: values and i32 indices with `k` along the axis. */
function topKTypes(ctx: InferContext): ValueType[] {
  const { shape, dtype } = ctx.input(0), axis = ctx.int("axis"), k = ctx.int("k");
  ctx.int("largest", 1);
  if (!(axis >= 0 && axis < shape.length) || !(k >= 0 && k <= shape[axis])) {
    ctx.fail(
      `TopK of ${k} along axis ${axis} of [${shape}]`,
      `pass K between 0 and ${shape[axis] ?? "the axis extent"} and an axis of the input`,
      "out-of-range",
    );
  }
  const out = shape.map((d, i) => (i === axis ? k : d));
  return [{ shape: out, dtype }, { shape: out, dtype: "i32" }];
}

/**
 * Whether `xj` ranks before `xi`: larger (or smaller) first, ties to the lower index
 * (`earlier`), NaN ranked as the module says so that every element's rank is distinct.
 */
function beats(e: Emitter, xj: EmitRef, xi: EmitRef, largest: boolean, earlier: EmitRef) {
  const ordered = e.op(largest ? "Greater" : "Less", [xj, xi]);
  const equal = e.op("Equal", [xj, xi]);
  if (!isFloat(e.typeOf(xj).dtype)) return e.op("Or", [ordered, e.op("And", [equal, earlier])]);
  const nan = (x: EmitRef) => e.op("Not", [e.op("Equal", [x, x])]);
  const [nanJ, nanI] = [nan(xj), nan(xi)];
  const byNan = largest
    ? e.op("And", [nanJ, e.op("Not", [nanI])])
    : e.op("And", [e.op("Not", [nanJ]), nanI]);
  const tie = e.op("Or", [equal, e.op("And", [nanJ, nanI])]);
  return e.op("Or", [e.op("Or", [ordered, byNan]), e.op("And", [tie, earlier])]);
}

/** A constant 0 … `n` − 1 along axis `at` of a rank-`rank` shape (1 elsewhere). */
function iota(e: Emitter, n: number, rank: number, at: number): EmitRef {
  const shape = Array.from({ length: rank }, (_, i) => (i === at ? n : 1));
  const data = Int32Array.from({ length: n }, (_, i) => i);
  return e.op("Constant", [], { value: { data, shape, dtype: "i32" } });
}

/** TopK's decomposition: each element's rank, then the element of each rank picked. */
function topK(e: Emitter, x: EmitRef, a: Attrs): EmitRef[] {
  const { shape, dtype } = e.typeOf(x), axis = a.axis as number, k = a.k as number;
  const n = shape[axis], rank = shape.length + 1;
  // [..., n_i, 1, ...] and [..., 1, n_j, ...]: i against every j.
  const xi = e.op("Unsqueeze", [x], { axes: [axis + 1] });
  const xj = e.op("Unsqueeze", [x], { axes: [axis] });
  const earlier = e.op("Less", [iota(e, n, rank, axis + 1), iota(e, n, rank, axis)]);
  const wins = beats(e, xj, xi, (a.largest ?? 1) === 1, earlier);
  const ranks = e.op("ReduceSum", [e.op("Cast", [wins], { to: "i32" })], {
    axes: [axis + 1],
    keepdims: 0,
  });
  // [..., k, n, ...]: which element has each rank.
  const hit = e.op("Equal", [e.op("Unsqueeze", [ranks], { axes: [axis] }), iota(e, k, rank, axis)]);
  const pick = (v: EmitRef, zero: EmitRef) =>
    e.op("ReduceSum", [e.op("Where", [hit, v, zero])], { axes: [axis + 1], keepdims: 0 });
  return [pick(xj, e.scalar(0, dtype)), pick(iota(e, n, rank, axis + 1), e.scalar(0, "i32"))];
}

/** Det's output: the batch of determinants. */
function detType(ctx: InferContext): ValueType {
  const { shape, dtype } = ctx.input(0), n = shape.at(-1)!;
  if (shape.length < 2 || shape.at(-2) !== n || n > 5 || !isFloat(dtype)) {
    ctx.fail(
      `Det of ${dtype}[${shape}]`,
      "kiln takes the determinant of square float matrices up to 5×5",
      "unsupported",
    );
  }
  return { shape: shape.slice(0, -2), dtype };
}

/** The permutations of 0 … k − 1, each with its sign. */
function permutations(k: number): [number[], number][] {
  const all = (m: number): number[][] =>
    m === 0
      ? [[]]
      : all(m - 1).flatMap((p) =>
        [...Array(m).keys()].map((i) => [...p.slice(0, i), m - 1, ...p.slice(i)])
      );
  const sign = (p: number[]) =>
    p.reduce((s, v, i) => s * p.slice(i + 1).reduce((t, w) => (w < v ? -t : t), 1), 1);
  return all(k).map((p) => [p, sign(p)]);
}

/** Det's decomposition: Leibniz's sum of signed products. */
function det(e: Emitter, x: EmitRef): EmitRef {
  const { shape, dtype } = e.typeOf(x), n = shape.at(-1)!;
  if (n === 0) {
    return e.op("Add", [
      e.op("ReduceSum", [x], { axes: [-1, -2], keepdims: 0 }),
      e.scalar(1, dtype),
    ]);
  }
  const flat = e.op("Reshape", [x], { shape: [...shape.slice(0, -2), n * n] });
  const at = (i: number, j: number) =>
    e.op("Squeeze", [
      e.op("Slice", [flat], { starts: [i * n + j], ends: [i * n + j + 1], axes: [-1] }),
    ], {
      axes: [-1],
    });
  let sum: EmitRef | undefined;
  for (const [p, sign] of permutations(n)) {
    let term = at(0, p[0]);
    for (let i = 1; i < n; i++) term = e.op("Mul", [term, at(i, p[i])]);
    sum = sum ? e.op(sign > 0 ? "Add" : "Sub", [sum, term]) : sign > 0 ? term : e.op("Neg", [term]);
  }
  return sum!;
}

const rankingOps: OpDef[] = [{
  name: "TopK",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: topKTypes,
  decompose: (e, [x], a) => topK(e, x, a),
}, {
  name: "Det",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => [detType(ctx)],
  decompose: (e, [x]) => [det(e, x)],
}];

defineOps(rankingOps);
