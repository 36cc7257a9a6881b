/**
 * Ops that rearrange, select or build tensors, as kiln movement ops and gathers: Tile,
 * DepthToSpace, SpaceToDepth, EyeLike, OneHot, Compress, GatherND, the scatters
 * (ScatterElements, ScatterND, the old Scatter) and the window functions (Hann, Hamming,
 * Blackman), CenterCropPad (Slice, then Pad) and Pad's `wrap` mode (each padded axis as slices
 * of the far side, concatenated). Whatever decides a shape (repeats, the condition, window sizes) must be known when
 * the model is compiled: `OnnxModel` specialises on it when it is an input. Scatter indices known
 * then make a gather of the updates by a precomputed source map, which fuses like any gather;
 * ScatterElements' indices computed at run time match every update against the axis instead
 * (`scatterByMatch`), and ScatterND's land their slices by a matmul of the matches
 * (`scatterSlices`); a "mul" reduction, and integer ScatterND updates, still need them known.
 *
 * @module
 */
import { checkBudget } from "../../jit/runtime/budget.ts";
import { isFloat } from "../../jit/ir/dtype.ts";
import type { DType } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import {
  attrs,
  constant,
  constInput,
  constInts,
  type Converter,
  dtypeAttr,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  typeOf,
  valuesOf,
} from "../import/node_context.ts";
import { dtypeOfCode } from "../wire/proto.ts";

/** Input `i` as constant numbers (a typed error, or a specialisation, when it is not constant). */
function known(c: NodeContext, i: number, what: string): number[] {
  return valuesOf(constInput(c, i, what).tensor);
}

const strides = (shape: readonly number[]) => {
  const s = shape.map(() => 1);
  for (let i = shape.length - 2; i >= 0; i--) s[i] = s[i + 1] * shape[i + 1];
  return s;
};
const size = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

/** What a scatter writes where `value` lands on `out`, by ONNX's `reduction`. */
function combined(op: OpFn, reduction: string, out: Known, value: Known): Known {
  const kind = { add: "Add", mul: "Mul", max: "Max", min: "Min" }[reduction];
  return kind ? op(kind, [out, value]) : value;
}

/**
 * Replaces elements of `data` by elements of `updates`: `sources[p]` lists, for output element
 * `p`, the flat indices of the updates written there, in order. Each layer of sources is one
 * gather of the flattened updates, combined by `reduction`.
 */
function scatter(
  c: NodeContext,
  data: Known,
  updates: Known,
  sources: number[][],
  reduction: string,
): Known[] {
  const op = opOf(c);
  const shape = typeOf(data).shape;
  const flat = op("Reshape", [updates], { shape: [-1] });
  const layers = reduction === "none" ? 1 : Math.max(0, ...sources.map((s) => s.length));
  let out = data;
  for (let layer = 0; layer < layers; layer++) {
    // "none": the last write wins (ONNX leaves duplicates undefined).
    const at = (s: number[]) => (reduction === "none" ? s.at(-1) : s[layer]);
    const has = constant(sources.map((s) => +(at(s) !== undefined)), [...shape], "bool");
    const from = constant(sources.map((s) => at(s) ?? 0), [...shape], "i32");
    const value = op("Gather", [flat, from], { axis: 0 });
    out = op("Where", [has, combined(op, reduction, out, value), out]);
  }
  return [layers === 0 ? op("Identity", [data]) : out];
}

function reductionOf(c: NodeContext): string {
  const r = attrs(c).string("reduction", "none")!;
  if (!["none", "add", "mul", "max", "min"].includes(r)) {
    throw new KilnError(`${c.label}: reduction "${r}"`, {
      code: "bad-attribute",
      fix: 'use reduction "none", "add", "mul", "max" or "min"',
    });
  }
  return r;
}

/** Index `i` of an axis of `dim`, negative counting from the end; a typed error outside. */
function inRange(c: NodeContext, i: number, dim: number): number {
  const j = i < 0 ? i + dim : i;
  if (!(j >= 0 && j < dim)) {
    throw new KilnError(`${c.label}: index ${i} is out of range for an axis of ${dim}`, {
      code: "out-of-range",
      fix: `use indices in [${-dim}, ${dim - 1}]`,
    });
  }
  return j;
}

/** A typed error for inputs whose shapes do not fit together. */
function misfit(c: NodeContext, what: string): never {
  throw new KilnError(`${c.label}: ${what}`, {
    code: "shape-mismatch",
    fix: "give the op inputs of the shapes the ONNX spec requires",
  });
}

function scatterElements(c: NodeContext): Known[] {
  const data = c.required(0), updates = c.required(2);
  const shape = typeOf(data).shape, ushape = typeOf(updates).shape;
  const ishape = typeOf(c.required(1)).shape;
  const rank = shape.length;
  if (ishape.join() !== ushape.join() || ushape.length !== rank) {
    misfit(
      c,
      `indices [${ishape}] and updates [${ushape}] must have one shape, of data's rank ${rank}`,
    );
  }
  const axisAttr = attrs(c).int("axis", 0)!;
  const axis = axisAttr < 0 ? axisAttr + rank : axisAttr;
  if (ushape.some((u, d) => d !== axis && u > shape[d])) {
    misfit(c, `updates [${ushape}] exceed data [${shape}]`);
  }
  const reduction = reductionOf(c);
  const runtime = c.required(1).kind === "value" &&
    (reduction === "none" || reduction === "add" ||
      ((reduction === "max" || reduction === "min") && isFloat(typeOf(updates).dtype)));
  if (runtime) return [scatterByMatch(c, data, c.required(1), updates, axis, reduction)];
  const indices = known(c, 1, "indices");
  const sources: number[][] = Array.from({ length: size(shape) }, () => []);
  const us = strides(ushape), ds = strides(shape);
  for (let j = 0; j < indices.length; j++) {
    let p = 0;
    for (let d = 0; d < rank; d++) {
      const coord = Math.floor(j / us[d]) % ushape[d];
      if (d !== axis && coord >= shape[d]) misfit(c, `updates [${ushape}] exceed data [${shape}]`);
      p += (d === axis ? inRange(c, indices[j], shape[d]) : coord) * ds[d];
    }
    sources[p].push(j);
  }
  return scatter(c, data, updates, sources, reductionOf(c));
}

function scatterND(c: NodeContext): Known[] {
  const data = c.required(0), updates = c.required(2);
  const shape = typeOf(data).shape;
  const ishape = typeOf(c.required(1)).shape;
  const k = ishape.at(-1)!, slice = size(shape.slice(k)), ds = strides(shape);
  const want = [...ishape.slice(0, -1), ...shape.slice(k)];
  if (!(k >= 1 && k <= shape.length) || typeOf(updates).shape.join() !== want.join()) {
    misfit(c, `indices [${ishape}] and updates [${typeOf(updates).shape}] for data [${shape}]`);
  }
  const reduction = reductionOf(c);
  if (
    c.required(1).kind === "value" && (reduction === "none" || reduction === "add") &&
    isFloat(typeOf(updates).dtype)
  ) {
    return [scatterSlices(c, data, c.required(1), updates, k, reduction)];
  }
  const indices = known(c, 1, "indices");
  const sources: number[][] = Array.from({ length: size(shape) }, () => []);
  for (let t = 0; t < indices.length / k; t++) {
    let base = 0;
    for (let d = 0; d < k; d++) base += inRange(c, indices[t * k + d], shape[d]) * ds[d];
    for (let e = 0; e < slice; e++) sources[base + e].push(t * slice + e);
  }
  return scatter(c, data, updates, sources, reductionOf(c));
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
  c: NodeContext,
  data: Known,
  indices: Known,
  updates: Known,
  axis: number,
  reduction: string,
): Known {
  const op = opOf(c);
  const shape = typeOf(data).shape, ushape = typeOf(updates).shape, rank = shape.length;
  const n = shape[axis], t = typeOf(updates).dtype;
  checkBudget([...ushape, n], t, c.label);
  const iota = (k: number) => constant(Array.from({ length: k }, (_, i) => i), [k], "i32");
  const at = op("Gather", [iota(n), op("Cast", [indices], { to: "i32" })], { axis: 0 });
  const hits = op("Equal", [op("Unsqueeze", [at], { axes: [rank] }), iota(n)]);
  const values = op("Unsqueeze", [updates], { axes: [rank] });
  const over = { axes: [axis], keepdims: 1 };
  const fill = (v: number) => scalar(v, t);
  let picked = hits;
  if (reduction === "none") {
    // Along the updates' axis, the last position that hits.
    const pos = op("Reshape", [iota(ushape[axis])], {
      shape: ushape.map((u, d) => (d === axis ? u : 1)).concat(1),
    });
    const last = op("ReduceMax", [op("Where", [hits, pos, scalar(-1, "i32")])], over);
    picked = op("And", [hits, op("Equal", [pos, last])]);
  }
  const reduced = reduction === "max"
    ? op("ReduceMax", [op("Where", [hits, values, fill(-Infinity)])], over)
    : reduction === "min"
    ? op("ReduceMin", [op("Where", [hits, values, fill(Infinity)])], over)
    : op("ReduceSum", [op("Where", [picked, values, fill(0)])], over);
  const any = op("ReduceMax", [op("Cast", [hits], { to: "i32" })], over);
  // [U with 1 at axis, n] → the data's layout: n at axis, then padded to the data's shape.
  const perm = [...Array(rank + 1).keys()];
  [perm[axis], perm[rank]] = [rank, axis];
  const place = (k: Known) => {
    const moved = op("Reshape", [op("Transpose", [k], { perm })], {
      shape: ushape.map((u, d) => (d === axis ? n : u)),
    });
    const pads = shape.map(() => 0).concat(shape.map((s, d) => s - (d === axis ? n : ushape[d])));
    return pads.some((p) => p) ? op("Pad", [moved], { pads, mode: "constant", value: 0 }) : moved;
  };
  const value = place(reduced);
  const hit = op("Greater", [place(any), scalar(0, "i32")]);
  return op("Where", [hit, combined(op, reduction, data, value), data]);
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
  c: NodeContext,
  data: Known,
  indices: Known,
  updates: Known,
  k: number,
  reduction: string,
): Known {
  const op = opOf(c);
  const shape = typeOf(data).shape, ishape = typeOf(indices).shape, t = typeOf(updates).dtype;
  const tuples = size(ishape.slice(0, -1)), places = size(shape.slice(0, k));
  const rest = size(shape.slice(k));
  checkBudget([tuples, places], t, c.label);
  const iota = (n: number, dims = [n]) =>
    constant(Array.from({ length: n }, (_, i) => i), dims, "i32");
  const flat = op("Reshape", [op("Cast", [indices], { to: "i32" })], { shape: [tuples, k] });
  const within = strides(shape.slice(0, k));
  let at: Known | undefined;
  for (let d = 0; d < k; d++) {
    const column = op("Slice", [flat], { starts: [d], ends: [d + 1], axes: [1] });
    const coord = op("Gather", [iota(shape[d]), column], { axis: 0 });
    const term = op("Mul", [coord, scalar(within[d], "i32")]);
    at = at ? op("Add", [at, term]) : term;
  }
  const hits = op("Equal", [at!, iota(places, [1, places])]); // [T, P]
  const rows = op("Reshape", [updates], { shape: [tuples, rest] });
  const placed = (value: Known) => op("Reshape", [value], { shape: [...shape] });
  if (reduction === "add") return op("Add", [data, placed(summed(c, hits, rows, t))]);
  // Each place takes the last tuple that lands on it, gathered (a product of the 0/1 matches
  // with the updates gave 0 · ∞ = NaN at every place for an infinite update anywhere).
  const order = iota(tuples, [tuples, 1]);
  const last = op("ReduceMax", [op("Where", [hits, order, scalar(-1, "i32")])], {
    axes: [0],
    keepdims: 0,
  }); // [P]
  const value = op("Gather", [rows, op("Max", [last, scalar(0, "i32")])], { axis: 0 });
  const hit = op("Reshape", [op("Greater", [last, scalar(-1, "i32")])], {
    shape: [...shape.slice(0, k), ...shape.slice(k).map(() => 1)],
  });
  return op("Where", [hit, placed(value), data]);
}

/**
 * Per place, the sum of the update rows that land on it ([P, rest] of `hits` [T, P] and `rows`
 * [T, rest]): the rows masked and summed where that fits the budget, so an infinite update adds
 * only where it lands; else the product of the 0/1 matches with the rows (whose 0 · ∞ is NaN).
 */
function summed(c: NodeContext, hits: Known, rows: Known, t: DType): Known {
  const op = opOf(c);
  const [tuples, places] = typeOf(hits).shape, rest = typeOf(rows).shape[1];
  if (tuples * places * rest <= MASKED_SUM) {
    const mask = op("Unsqueeze", [hits], { axes: [2] }); // [T, P, 1]
    const each = op("Unsqueeze", [rows], { axes: [1] }); // [T, 1, rest]
    return op("ReduceSum", [op("Where", [mask, each, scalar(0, t)])], {
      axes: [0],
      keepdims: 0,
    });
  }
  const weights = op("Transpose", [op("Cast", [hits], { to: t })], { perm: [1, 0] }); // [P, T]
  return op("MatMul", [weights, rows]);
}

/** Most elements of a scatter-add's masked sum (tuples × places × row). */
const MASKED_SUM = 1 << 24;

/** A window function's values. */
function windowOf(kind: "hann" | "hamming" | "blackman"): Converter<Known> {
  return (c) => {
    const [n] = known(c, 0, "size");
    if (!(Number.isInteger(n) && n >= 0)) {
      throw new KilnError(`${c.label}: window size ${n}`, {
        code: "bad-attribute",
        fix: "give the window a non-negative integer size",
      });
    }
    checkBudget([n], "f32", c.label);
    const periodic = attrs(c).flag("periodic", true);
    const code = attrs(c).int("output_datatype", 1)!;
    const dtype = dtypeOfCode(code, c.label);
    const span = periodic ? n : n - 1;
    const values = Array.from({ length: n }, (_, i) => {
      const x = span > 0 ? (2 * Math.PI * i) / span : 0;
      return kind === "hann"
        ? 0.5 - 0.5 * Math.cos(x)
        : kind === "hamming"
        ? 25 / 46 - (21 / 46) * Math.cos(x)
        : 0.42 - 0.5 * Math.cos(x) + 0.08 * Math.cos(2 * x);
    });
    const internal = dtype === "i64" ? "i32" : dtype;
    return [{ ...constant(values, [n], internal), i64: dtype === "i64" }];
  };
}

/**
 * MelWeightMatrix: triangular filters on the mel scale, [dft_length / 2 + 1, num_mel_bins],
 * computed at import from its constant inputs as ONNX's reference computes it (band edges
 * evenly spaced in mels, then floored to spectrogram bins).
 */
function melWeightMatrix(c: NodeContext): Known[] {
  const [bins] = known(c, 0, "num_mel_bins"), [dftLength] = known(c, 1, "dft_length");
  const [rate] = known(c, 2, "sample_rate");
  const [lower] = known(c, 3, "lower_edge_hertz"), [upper] = known(c, 4, "upper_edge_hertz");
  if (!(bins >= 1 && dftLength >= 1 && rate > 0 && lower >= 0 && upper > lower)) {
    throw new KilnError(
      `${c.label}: ${bins} mel bins over a ${dftLength}-point DFT at ${rate} Hz, [${lower}, ${upper}] Hz`,
      { code: "bad-attribute", fix: "pass positive sizes and a frequency range below upper" },
    );
  }
  const spectrum = Math.floor(dftLength / 2) + 1;
  checkBudget([spectrum, bins], "f32", c.label);
  const mel = (hz: number) => 2595 * Math.log10(1 + hz / 700);
  const low = mel(lower), step = (mel(upper) - low) / (bins + 2);
  const edges = Array.from({ length: bins + 2 }, (_, i) => {
    const hz = 700 * (10 ** ((i * step + low) / 2595) - 1);
    return Math.floor(((dftLength + 1) * hz) / rate);
  });
  const out = new Array<number>(spectrum * bins).fill(0);
  const set = (j: number, i: number, v: number) => {
    if (j >= 0 && j < spectrum) out[j * bins + i] = v;
  };
  for (let i = 0; i < bins; i++) {
    const [left, center, right] = [edges[i], edges[i + 1], edges[i + 2]];
    if (center === left) set(center, i, 1);
    else for (let j = left; j <= center; j++) set(j, i, (j - left) / (center - left));
    for (let j = center; j < right; j++) set(j, i, (right - j) / (right - center));
  }
  const dtype = dtypeOfCode(attrs(c).int("output_datatype", 1)!, c.label);
  const internal = dtype === "i64" ? "i32" : dtype;
  return [{ ...constant(out, [spectrum, bins], internal), i64: dtype === "i64" }];
}

/** CenterCropPad: each axis cropped or zero-padded to its target, centred. */
function centerCropPad(c: NodeContext): Known[] {
  const op = opOf(c), x = c.required(0), shape = typeOf(x).shape;
  c.required(1); // a typed error when left out
  const target = constInts(c, 1, "shape")!;
  const axes = (attrs(c).ints("axes") ?? shape.map((_, i) => i)).map((a) =>
    a < 0 ? a + shape.length : a
  );
  if (axes.length !== target.length || axes.some((a) => a < 0 || a >= shape.length)) {
    throw new KilnError(`${c.label}: shape [${target}] for axes [${axes}] of [${shape}]`, {
      code: "bad-input",
      fix: "give one target size per axis",
    });
  }
  let y = x;
  axes.forEach((axis, i) => {
    const d = shape[axis], want = target[i];
    if (want < d) {
      const start = Math.floor((d - want) / 2);
      y = op("Slice", [y], { starts: [start], ends: [start + want], axes: [axis] });
    } else if (want > d) {
      const pads = shape.map(() => 0).concat(shape.map(() => 0));
      pads[axis] = Math.floor((want - d) / 2);
      pads[axis + shape.length] = want - d - pads[axis];
      y = op("Pad", [y], { pads, mode: "constant", value: 0 });
    }
  });
  return [y];
}

/** Pad's `wrap` mode: axis by axis, the far side's slices concatenated around the data. */
export function wrapPad(op: OpFn, x: Known, pads: readonly number[], label: string): Known {
  const shape = typeOf(x).shape, rank = shape.length;
  let y = x;
  for (let axis = 0; axis < rank; axis++) {
    const [before, after] = [pads[axis], pads[axis + rank]], d = shape[axis];
    if (before < 0 || after < 0 || before > d || after > d) {
      throw new KilnError(`${label}: wrap pads ${before} and ${after} on an axis of ${d}`, {
        code: "unsupported",
        fix: "kiln wraps by at most the axis's length, and does not crop with wrap",
      });
    }
    if (!before && !after) continue;
    const slice = (s: number, e: number) =>
      op("Slice", [y], { starts: [s], ends: [e], axes: [axis] });
    const parts = [
      ...(before ? [slice(d - before, d)] : []),
      y,
      ...(after ? [slice(0, after)] : []),
    ];
    y = op("Concat", parts, { axis });
  }
  return y;
}

/** Converters by ONNX op type. */
export const TENSOR_CONVERTERS: Record<string, Converter<Known>> = {
  CenterCropPad: centerCropPad,
  MelWeightMatrix: melWeightMatrix,
  Tile: (c) => {
    const op = opOf(c);
    const x = c.required(0);
    const shape = typeOf(x).shape;
    c.required(1); // a typed error when left out
    const repeats = constInts(c, 1, "repeats")!;
    if (repeats.length !== shape.length || repeats.some((r) => r < 0)) {
      throw new KilnError(`${c.label}: repeats [${repeats}] for a tensor of rank ${shape.length}`, {
        code: "bad-attribute",
        fix: "give one non-negative repeat per axis",
      });
    }
    // [d0, d1, …] → [1, d0, 1, d1, …] → expanded to [r0, d0, r1, d1, …] → [r0·d0, r1·d1, …].
    const interleaved = shape.flatMap((d) => [1, d]);
    const spread = shape.flatMap((d, i) => [repeats[i], d]);
    const wide = op("Expand", [op("Reshape", [x], { shape: interleaved })], { shape: spread });
    return [op("Reshape", [wide], { shape: shape.map((d, i) => d * repeats[i]) })];
  },
  DepthToSpace: (c) => {
    const a = attrs(c);
    const mode = a.string("mode", "DCR")!;
    return c.emit("DepthToSpace", [c.required(0)], { blocksize: a.int("blocksize")!, mode }, 1);
  },
  SpaceToDepth: (c) =>
    c.emit("SpaceToDepth", [c.required(0)], { blocksize: attrs(c).int("blocksize")! }, 1),
  EyeLike: (c) => {
    const x = c.required(0);
    const [rows, cols] = typeOf(x).shape;
    const { dtype, i64 } = dtypeAttr(c, "dtype", { dtype: typeOf(x).dtype, i64: x.i64 });
    const k = attrs(c).int("k", 0)!;
    checkBudget([rows, cols], "f32", c.label); // before the values are built
    const values = Array.from(
      { length: rows * cols },
      (_, i) => +((i % cols) - Math.floor(i / cols) === k),
    );
    return [{ ...constant(values, [rows, cols], dtype), i64 }];
  },
  OneHot: (c) => {
    const indices = c.required(0), values = c.required(2);
    const [depth] = known(c, 1, "depth");
    if (!(Number.isInteger(depth) && depth > 0)) {
      throw new KilnError(`${c.label}: depth ${depth}`, {
        code: "bad-attribute",
        fix: "give OneHot a positive integer depth",
      });
    }
    const ishape = typeOf(indices).shape, rank = ishape.length + 1;
    checkBudget([...ishape, depth], typeOf(values).dtype, c.label);
    const a = attrs(c).int("axis", -1)!;
    const [y] = c.emit("OneHot", [indices, values], { depth, axis: a < 0 ? a + rank : a }, 1);
    return [{ ...y, i64: values.i64 }];
  },
  Compress: (c) => {
    const op = opOf(c);
    const x = c.required(0);
    const condition = known(c, 1, "condition");
    const axisAttr = attrs(c).int("axis");
    const shape = typeOf(x).shape;
    const source = axisAttr === undefined ? op("Reshape", [x], { shape: [-1] }) : x;
    const axis = axisAttr === undefined ? 0 : axisAttr < 0 ? axisAttr + shape.length : axisAttr;
    const extent = typeOf(source).shape[axis];
    const keep = condition.slice(0, extent).flatMap((v, i) => (v ? [i] : []));
    return [op("Gather", [source, constant(keep, [keep.length], "i32")], { axis })];
  },
  GatherND: (c) => {
    const op = opOf(c);
    const data = c.required(0);
    const shape = typeOf(data).shape;
    const ishape = typeOf(c.required(1)).shape;
    const indices = known(c, 1, "indices");
    const batch = attrs(c).int("batch_dims", 0)!;
    const k = ishape.at(-1)!;
    // Flat rows of data[batch…, k index axes…] and, per index tuple, the row it selects.
    const batches = size(shape.slice(0, batch)), rows = size(shape.slice(batch, batch + k));
    const rest = shape.slice(batch + k);
    const tuples = indices.length / k, perBatch = tuples / batches;
    const rs = strides(shape.slice(batch, batch + k));
    const picks = Array.from({ length: tuples }, (_, t) => {
      let r = Math.floor(t / perBatch) * rows;
      for (let d = 0; d < k; d++) r += inRange(c, indices[t * k + d], shape[batch + d]) * rs[d];
      return r;
    });
    const flat = op("Reshape", [data], { shape: [batches * rows, ...rest] });
    const picked = op("Gather", [flat, constant(picks, [tuples], "i32")], { axis: 0 });
    return [op("Reshape", [picked], { shape: [...ishape.slice(0, -1), ...rest] })];
  },
  NonZero: (c) => {
    // The output's length depends on the data: known only for constant (or specialised) data.
    const x = c.required(0);
    const shape = typeOf(x).shape, values = known(c, 0, "data"), s = strides(shape);
    const hits = values.flatMap((v, i) => (v ? [i] : []));
    const coords = shape.flatMap((d, axis) => hits.map((i) => Math.floor(i / s[axis]) % d));
    return [{ ...constant(coords, [shape.length, hits.length], "i32"), i64: true }];
  },
  ReverseSequence: (c) => {
    const op = opOf(c);
    const x = c.required(0);
    const shape = typeOf(x).shape;
    const lens = known(c, 1, "sequence_lens");
    const timeAxis = attrs(c).int("time_axis", 0)!, batchAxis = attrs(c).int("batch_axis", 1)!;
    // As ONNX defines it: axes 0 and 1 of a tensor of rank 2 or more, one each, and lengths
    // within the time axis (other axes read no stride and gathered garbage).
    const ok = shape.length >= 2 && [timeAxis, batchAxis].sort().join() === "0,1" &&
      lens.length === shape[batchAxis] && lens.every((l) => l >= 0 && l <= shape[timeAxis]);
    if (!ok) {
      throw new KilnError(
        `${c.label}: ReverseSequence of [${shape}] with time_axis ${timeAxis}, batch_axis ${batchAxis} and lengths [${
          lens.slice(0, 8)
        }]`,
        {
          code: "bad-attribute",
          fix: "give time_axis and batch_axis as 0 and 1 (either way round) and one length per " +
            "batch, each at most the time axis",
        },
      );
    }
    // Per element, the time index it reads: reversed within each batch's length.
    const s = strides(shape);
    const from = Array.from({ length: size(shape) }, (_, i) => {
      const t = Math.floor(i / s[timeAxis]) % shape[timeAxis];
      const b = Math.floor(i / s[batchAxis]) % shape[batchAxis];
      return t < lens[b] ? lens[b] - 1 - t : t;
    });
    return [op("GatherElements", [x, constant(from, [...shape], "i32")], { axis: timeAxis })];
  },
  ScatterElements: scatterElements,
  Scatter: scatterElements,
  ScatterND: scatterND,
  HannWindow: windowOf("hann"),
  HammingWindow: windowOf("hamming"),
  BlackmanWindow: windowOf("blackman"),
};
