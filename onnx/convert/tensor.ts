/**
 * Ops that rearrange, select or build tensors, as kiln movement ops and gathers: Tile,
 * DepthToSpace, SpaceToDepth, EyeLike, OneHot, Compress, GatherND, the scatters
 * (ScatterElements, ScatterND, the old Scatter: kiln ops, `jit/ops/scatter.ts`) and the window
 * functions (Hann, Hamming, Blackman), CenterCropPad (Slice, then Pad). Whatever decides a shape (repeats, the
 * condition, window sizes) must be known when the model is compiled: `OnnxModel` specialises on
 * it when it is an input.
 *
 * @module
 */
import { checkBudget } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { needsKnownIndices } from "../../jit/ops/scatter.ts";
import {
  asConstant,
  attrs,
  constant,
  constInput,
  constInts,
  type Converter,
  dtypeAttr,
  type Known,
  NeedsValue,
  type NodeContext,
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

/**
 * ScatterElements (and the old Scatter) and ScatterND, kiln ops (`jit/ops/scatter.ts`). Indices
 * the run-time forms cannot take (a "mul" reduction, integer ScatterND updates, …) must be known:
 * `OnnxModel` specialises on them when they are a small input.
 */
function scatterOf(op: "ScatterElements" | "ScatterND"): Converter<Known> {
  return (c) => {
    const reduction = attrs(c).string("reduction", "none")!;
    const [data, indices, updates] = [c.required(0), c.required(1), c.required(2)];
    if (indices.kind === "value" && needsKnownIndices(op, reduction, typeOf(updates).dtype)) {
      throw new NeedsValue(c, "indices");
    }
    const axis = op === "ScatterElements" ? { axis: attrs(c).int("axis", 0)! } : {};
    return c.emit(op, [data, asConstant(indices), updates], { ...axis, reduction });
  };
}

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

/** CenterCropPad (kiln's op): the target shape as an attribute. */
function centerCropPad(c: NodeContext): Known[] {
  c.required(1); // a typed error when left out
  const shape = constInts(c, 1, "shape")!, axes = attrs(c).ints("axes");
  return c.emit("CenterCropPad", [c.required(0)], { shape, axes });
}

/** Converters by ONNX op type. */
export const TENSOR_CONVERTERS: Record<string, Converter<Known>> = {
  CenterCropPad: centerCropPad,
  MelWeightMatrix: melWeightMatrix,
  Tile: (c) => {
    c.required(1); // a typed error when left out
    return c.emit("Tile", [c.required(0)], { repeats: constInts(c, 1, "repeats")! });
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
  GatherND: (c) =>
    c.emit("GatherND", [c.required(0), asConstant(c.required(1))], {
      batch_dims: attrs(c).int("batch_dims", 0),
    }),
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
  ScatterElements: scatterOf("ScatterElements"),
  Scatter: scatterOf("ScatterElements"),
  ScatterND: scatterOf("ScatterND"),
  HannWindow: windowOf("hann"),
  HammingWindow: windowOf("hamming"),
  BlackmanWindow: windowOf("blackman"),
};
