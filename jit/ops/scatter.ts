/**
 * The scatters: `ScatterElements` (ONNX's old `Scatter` too) and `ScatterND`, with ONNX's
 * reductions. Indices known when the graph is decomposed (a constant) make a gather of the
 * updates by a precomputed source map, which fuses like any gather; indices computed at run time
 * match every update against the axis (ScatterElements) or every index tuple against the slice
 * positions (ScatterND) instead. The run-time forms cover what the matches can express: a "mul"
 * reduction (and for ScatterElements "max"/"min" of integers, for ScatterND every reduction but
 * "none" and "add" and integer updates) needs its indices constant.
 *
 * @module
 */
import { type DType, isFloat } from "../ir/dtype.ts";
import { INTEGERS } from "./elementwise.ts";
import { formatShape, type Shape, sizeOf, stridesOf } from "../ir/shape.ts";
import { checkBudget } from "../runtime/budget.ts";
import { KilnError } from "../support/errors.ts";
import {
  constantTensor,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** ONNX's scatter reductions. */
export const SCATTER_REDUCTIONS = ["none", "add", "mul", "max", "min"] as const;

/** A scatter reduction. */
export type ScatterReduction = typeof SCATTER_REDUCTIONS[number];

/**
 * Whether a scatter of `updates` with `reduction` needs its indices constant: the run-time forms
 * cover ScatterElements' "none", "add" and float "max"/"min", and ScatterND's float "none"/"add".
 */
export function needsKnownIndices(op: string, reduction: string, updates: DType): boolean {
  if (reduction === "none" || reduction === "add") return op === "ScatterND" && !isFloat(updates);
  return op === "ScatterND" || reduction === "mul" || !isFloat(updates);
}

const iota = (e: Emitter, n: number, shape: Shape = [n]) =>
  constantTensor(e, Array.from({ length: n }, (_, i) => i), shape, "i32");

/** What a scatter writes where `value` lands on `out`, by ONNX's `reduction`. */
function combined(e: Emitter, reduction: string, out: EmitRef, value: EmitRef): EmitRef {
  const kind = { add: "Add", mul: "Mul", max: "Max", min: "Min" }[reduction];
  return kind ? e.op(kind, [out, value]) : value;
}

/** Index `i` of an axis of `dim`, negative counting from the end; a typed error outside. */
function inRange(op: string, i: number, dim: number): number {
  const j = i < 0 ? i + dim : i;
  if (!(j >= 0 && j < dim)) {
    throw new KilnError(`${op}: index ${i} is out of range for an axis of ${dim}`, {
      code: "out-of-range",
      fix: `use indices in [${-dim}, ${dim - 1}]`,
    });
  }
  return j;
}

/**
 * Replaces elements of `data` by elements of `updates`: `sources[p]` lists, for output element
 * `p`, the flat indices of the updates written there, in order. Each layer of sources is one
 * gather of the flattened updates, combined by `reduction`.
 */
function scatterBySources(
  e: Emitter,
  [data, updates]: [EmitRef, EmitRef],
  sources: number[][],
  reduction: string,
): EmitRef {
  const shape = e.typeOf(data).shape;
  const flat = e.op("Reshape", [updates], { shape: [-1] });
  const layers = reduction === "none" ? 1 : Math.max(0, ...sources.map((s) => s.length));
  let out = data;
  for (let layer = 0; layer < layers; layer++) {
    // "none": the last write wins (ONNX leaves duplicates undefined).
    const at = (s: number[]) => (reduction === "none" ? s.at(-1) : s[layer]);
    const has = constantTensor(e, sources.map((s) => +(at(s) !== undefined)), shape, "bool");
    const from = constantTensor(e, sources.map((s) => at(s) ?? 0), shape, "i32");
    const value = e.op("Gather", [flat, from], { axis: 0 });
    out = e.op("Where", [has, combined(e, reduction, out, value), out]);
  }
  return layers === 0 ? e.op("Identity", [data]) : out;
}

/** ScatterElements' source map: for each element of data, the updates that land there. */
function elementSources(indices: ArrayLike<number>, ushape: Shape, shape: Shape, axis: number) {
  const sources: number[][] = Array.from({ length: sizeOf(shape) }, () => []);
  const us = stridesOf(ushape), ds = stridesOf(shape);
  for (let j = 0; j < indices.length; j++) {
    let p = 0;
    for (let d = 0; d < shape.length; d++) {
      const coord = Math.floor(j / us[d]) % ushape[d];
      p += (d === axis ? inRange("ScatterElements", indices[j], shape[d]) : coord) * ds[d];
    }
    sources[p].push(j);
  }
  return sources;
}

/** ScatterND's source map: each index tuple's slice of `slice` elements, in order. */
function sliceSources(indices: ArrayLike<number>, k: number, shape: Shape): number[][] {
  const sources: number[][] = Array.from({ length: sizeOf(shape) }, () => []);
  const slice = sizeOf(shape.slice(k)), ds = stridesOf(shape);
  for (let t = 0; t < indices.length / k; t++) {
    let base = 0;
    for (let d = 0; d < k; d++) base += inRange("ScatterND", indices[t * k + d], shape[d]) * ds[d];
    for (let i = 0; i < slice; i++) sources[base + i].push(t * slice + i);
  }
  return sources;
}

/**
 * ScatterElements with indices computed at run time: each update is matched against every
 * position of the scatter axis (a one-hot of `U × n` for updates of shape U and an axis of n), and
 * the matches reduce over the updates' axis: a sum for "add", a max or min, and for "none" the
 * last update in ONNX's order (the largest position along the axis), as the constant path does.
 * The indices pass through a Gather of 0..n−1, which resolves negative ones and raises an
 * out-of-range one as every Gather does.
 */
function scatterByMatch(
  e: Emitter,
  [data, indices, updates]: readonly EmitRef[],
  axis: number,
  reduction: string,
): EmitRef {
  const shape = e.typeOf(data).shape, ushape = e.typeOf(updates).shape, rank = shape.length;
  const n = shape[axis], t = e.typeOf(updates).dtype;
  checkBudget([...ushape, n], t, "ScatterElements' matches of its run-time indices");
  const at = e.op("Gather", [iota(e, n), e.op("Cast", [indices], { to: "i32" })], { axis: 0 });
  const hits = e.op("Equal", [e.op("Unsqueeze", [at], { axes: [rank] }), iota(e, n)]);
  const values = e.op("Unsqueeze", [updates], { axes: [rank] });
  const over = { axes: [axis], keepdims: 1 };
  const fill = (v: number) => e.scalar(v, t);
  let picked = hits;
  if (reduction === "none") {
    // Along the updates' axis, the last position that hits.
    const pos = e.op("Reshape", [iota(e, ushape[axis])], {
      shape: ushape.map((u, d) => (d === axis ? u : 1)).concat(1),
    });
    const last = e.op("ReduceMax", [e.op("Where", [hits, pos, e.scalar(-1, "i32")])], over);
    picked = e.op("And", [hits, e.op("Equal", [pos, last])]);
  }
  const reduced = reduction === "max"
    ? e.op("ReduceMax", [e.op("Where", [hits, values, fill(-Infinity)])], over)
    : reduction === "min"
    ? e.op("ReduceMin", [e.op("Where", [hits, values, fill(Infinity)])], over)
    : e.op("ReduceSum", [e.op("Where", [picked, values, fill(0)])], over);
  const any = e.op("ReduceMax", [e.op("Cast", [hits], { to: "i32" })], over);
  // [U with 1 at axis, n] → the data's layout: n at axis, then padded to the data's shape.
  const perm = [...Array(rank + 1).keys()];
  [perm[axis], perm[rank]] = [rank, axis];
  const place = (k: EmitRef) => {
    const moved = e.op("Reshape", [e.op("Transpose", [k], { perm })], {
      shape: ushape.map((u, d) => (d === axis ? n : u)),
    });
    const pads = shape.map(() => 0).concat(shape.map((s, d) => s - (d === axis ? n : ushape[d])));
    return pads.some((p) => p) ? e.op("Pad", [moved], { pads, mode: "constant", value: 0 }) : moved;
  };
  const value = place(reduced);
  const hit = e.op("Greater", [place(any), e.scalar(0, "i32")]);
  return e.op("Where", [hit, combined(e, reduction, data, value), data]);
}

/**
 * The flat offset in `dims` of each index tuple of `indices` ([…, k] of k = `dims.length`), as a
 * [tuples, 1] i32 value. Each coordinate passes through a Gather of 0..n−1, which resolves a
 * negative one and raises one out of range as every Gather does.
 */
export function tupleOffsets(e: Emitter, indices: EmitRef, dims: Shape): EmitRef {
  const ishape = e.typeOf(indices).shape, k = dims.length, tuples = sizeOf(ishape.slice(0, -1));
  const flat = e.op("Reshape", [e.op("Cast", [indices], { to: "i32" })], { shape: [tuples, k] });
  const strides = stridesOf(dims);
  let at: EmitRef | undefined;
  for (let d = 0; d < k; d++) {
    const column = e.op("Slice", [flat], { starts: [d], ends: [d + 1], axes: [1] });
    const coord = e.op("Gather", [iota(e, dims[d]), column], { axis: 0 });
    const term = e.op("Mul", [coord, e.scalar(strides[d], "i32")]);
    at = at ? e.op("Add", [at, term]) : term;
  }
  return at!;
}

/**
 * ScatterND with indices computed at run time (a KV cache's write position, say): each index
 * tuple becomes the flat position of its slice in the first `k` axes, matched against every such
 * position (T × P for T tuples and P positions), and the slices land by a matmul of the matches
 * with the updates as rows: summed for "add"; for "none" only the last tuple to hit a position
 * counts, as in ONNX's order. The indices pass through Gathers, which resolve negative ones and
 * raise out-of-range ones as every Gather does.
 */
function scatterSlices(
  e: Emitter,
  [data, indices, updates]: readonly EmitRef[],
  reduction: string,
): EmitRef {
  const shape = e.typeOf(data).shape, ishape = e.typeOf(indices).shape;
  const k = ishape.at(-1)!, t = e.typeOf(updates).dtype;
  const tuples = sizeOf(ishape.slice(0, -1)), places = sizeOf(shape.slice(0, k));
  const rest = sizeOf(shape.slice(k));
  checkBudget([tuples, places], t, "ScatterND's matches of its run-time indices");
  const at = tupleOffsets(e, indices, shape.slice(0, k));
  const hits = e.op("Equal", [at, iota(e, places, [1, places])]); // [T, P]
  const rows = e.op("Reshape", [updates], { shape: [tuples, rest] });
  const placed = (value: EmitRef) => e.op("Reshape", [value], { shape: [...shape] });
  if (reduction === "add") return e.op("Add", [data, placed(summed(e, hits, rows, t))]);
  // Each place takes the last tuple that lands on it, gathered (a product of the 0/1 matches
  // with the updates gave 0 · ∞ = NaN at every place for an infinite update anywhere).
  const order = iota(e, tuples, [tuples, 1]);
  const last = e.op("ReduceMax", [e.op("Where", [hits, order, e.scalar(-1, "i32")])], {
    axes: [0],
    keepdims: 0,
  }); // [P]
  const value = e.op("Gather", [rows, e.op("Max", [last, e.scalar(0, "i32")])], { axis: 0 });
  const hit = e.op("Reshape", [e.op("Greater", [last, e.scalar(-1, "i32")])], {
    shape: [...shape.slice(0, k), ...shape.slice(k).map(() => 1)],
  });
  return e.op("Where", [hit, placed(value), data]);
}

/**
 * Per place, the sum of the update rows that land on it ([P, rest] of `hits` [T, P] and `rows`
 * [T, rest]): the rows masked and summed where that fits the budget, so an infinite update adds
 * only where it lands; else the product of the 0/1 matches with the rows (whose 0 · ∞ is NaN).
 */
function summed(e: Emitter, hits: EmitRef, rows: EmitRef, t: DType): EmitRef {
  const [tuples, places] = e.typeOf(hits).shape, rest = e.typeOf(rows).shape[1];
  if (tuples * places * rest <= MASKED_SUM) {
    const mask = e.op("Unsqueeze", [hits], { axes: [2] }); // [T, P, 1]
    const each = e.op("Unsqueeze", [rows], { axes: [1] }); // [T, 1, rest]
    return e.op("ReduceSum", [e.op("Where", [mask, each, e.scalar(0, t)])], {
      axes: [0],
      keepdims: 0,
    });
  }
  const weights = e.op("Transpose", [e.op("Cast", [hits], { to: t })], { perm: [1, 0] }); // [P, T]
  return e.op("MatMul", [weights, rows]);
}

/** Most elements of a scatter-add's masked sum (tuples × places × row). */
const MASKED_SUM = 1 << 24;

/** The indices' and updates' checks every scatter shares; returns the reduction. */
function scatterCommon(ctx: InferContext): ScatterReduction {
  const data = ctx.input(0);
  ctx.requireDType(1, INTEGERS);
  if (ctx.input(2).dtype !== data.dtype) {
    ctx.fail(
      `updates are ${ctx.input(2).dtype}, data ${data.dtype}`,
      "give updates data's dtype",
      "dtype-mismatch",
    );
  }
  return ctx.choice("reduction", SCATTER_REDUCTIONS);
}

function misfit(ctx: InferContext, what: string): never {
  return ctx.fail(
    what,
    "give the op inputs of the shapes the ONNX spec requires",
    "shape-mismatch",
  );
}

const scatterElements: OpDef = {
  name: "ScatterElements",
  category: "composite",
  arity: [3, 3],
  primitive: false,
  infer: (ctx): ValueType[] => {
    scatterCommon(ctx);
    const { shape, dtype } = ctx.input(0), ushape = ctx.input(2).shape;
    const ishape = ctx.input(1).shape, rank = shape.length;
    if (ishape.join() !== ushape.join() || ushape.length !== rank) {
      misfit(
        ctx,
        `indices ${formatShape(ishape)} and updates ${
          formatShape(ushape)
        } must have one shape, of data's rank ${rank}`,
      );
    }
    const axis = ctx.axis(ctx.int("axis", 0), rank);
    if (ushape.some((u, d) => d !== axis && u > shape[d])) {
      misfit(ctx, `updates ${formatShape(ushape)} exceed data ${formatShape(shape)}`);
    }
    return [{ shape, dtype }];
  },
  decompose: (e, [data, indices, updates], a) => {
    const { shape } = e.typeOf(data), rank = shape.length;
    const given = (a.axis as number | undefined) ?? 0, axis = given < 0 ? given + rank : given;
    const reduction = (a.reduction as string | undefined) ?? "none";
    const known = e.constantOf(indices);
    if (known) {
      const sources = elementSources(known, e.typeOf(updates).shape, shape, axis);
      return [scatterBySources(e, [data, updates], sources, reduction)];
    }
    if (needsKnownIndices("ScatterElements", reduction, e.typeOf(updates).dtype)) {
      throw unknownIndices("ScatterElements", reduction);
    }
    return [scatterByMatch(e, [data, indices, updates], axis, reduction)];
  },
};

const scatterND: OpDef = {
  name: "ScatterND",
  category: "composite",
  arity: [3, 3],
  primitive: false,
  infer: (ctx): ValueType[] => {
    scatterCommon(ctx);
    const { shape, dtype } = ctx.input(0), ishape = ctx.input(1).shape;
    const k = ishape.at(-1) ?? 0;
    const want = [...ishape.slice(0, -1), ...shape.slice(k)];
    if (!(k >= 1 && k <= shape.length) || ctx.input(2).shape.join() !== want.join()) {
      misfit(
        ctx,
        `indices ${formatShape(ishape)} and updates ${formatShape(ctx.input(2).shape)} for data ${
          formatShape(shape)
        }`,
      );
    }
    return [{ shape, dtype }];
  },
  decompose: (e, [data, indices, updates], a) => {
    const reduction = (a.reduction as string | undefined) ?? "none";
    const known = e.constantOf(indices);
    if (known) {
      const k = e.typeOf(indices).shape.at(-1)!;
      const sources = sliceSources(known, k, e.typeOf(data).shape);
      return [scatterBySources(e, [data, updates], sources, reduction)];
    }
    if (needsKnownIndices("ScatterND", reduction, e.typeOf(updates).dtype)) {
      throw unknownIndices("ScatterND", reduction);
    }
    return [scatterSlices(e, [data, indices, updates], reduction)];
  },
};

function unknownIndices(op: string, reduction: string): KilnError {
  return new KilnError(
    `${op} with reduction "${reduction}" of these updates needs its indices constant`,
    {
      code: "unsupported",
      fix: "give the indices as a constant (or a small model input OnnxModel specialises on)",
    },
  );
}

defineOps([scatterElements, scatterND]);
