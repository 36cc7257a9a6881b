/**
 * Resize (opsets 10–19) and Upsample (7–9) as separable interpolation: each resized axis is one
 * 1-D step, `y = Σ_t gather(x, idx_t, axis) · w_t`, whose source indices and weights are computed
 * here from the ONNX rules (coordinate transformation, nearest rounding, linear and cubic kernels,
 * antialiasing, `exclude_outside`, tf_crop_and_resize's extrapolation). Steps run from the last
 * axis to the first, the order of ONNX's reference. Nearest needs one gather per axis and no
 * arithmetic, so it keeps integer data exact. Scales and sizes must be known when the model is
 * compiled (`OnnxModel` specialises on them when they are inputs).
 *
 * @module
 */
import { isFloat } from "../../jit/ir/dtype.ts";
import { checkBudget } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import {
  attrs,
  constant,
  type Known,
  NeedsValue,
  type NodeContext,
  opOf,
  typeOf,
  valuesOf,
} from "../import/node_context.ts";

/** The taps of one output position along an axis: source indices and weights. */
interface Taps {
  readonly idx: number[];
  readonly w: number[];
  /** tf_crop_and_resize: the position is outside the input and takes the extrapolation value. */
  readonly outside: boolean;
}

interface AxisPlan {
  readonly mode: string;
  readonly coordinates: string;
  readonly nearest: string;
  readonly cubicA: number;
  readonly antialias: boolean;
  readonly excludeOutside: boolean;
}

/** Numbers of a constant input, or `undefined` when absent or empty. */
function constNumbers(c: NodeContext, i: number, what: string): number[] | undefined {
  const k = c.input(i);
  if (!k) return undefined;
  if (k.kind !== "const") throw new NeedsValue(c, what);
  const xs = valuesOf(k.tensor);
  return xs.length ? xs : undefined;
}

function nearestWeights(ratio: number, mode: string): number[] {
  if (Number.isInteger(ratio)) return [0, 1];
  switch (mode) {
    case "round_prefer_floor":
      return [+(ratio <= 0.5), +(ratio > 0.5)];
    case "round_prefer_ceil":
      return [+(ratio < 0.5), +(ratio >= 0.5)];
    case "floor":
      return [1, 0];
    default:
      return [0, 1];
  }
}

function cubicWeights(ratio: number, scale: number, a: number, antialias: boolean): number[] {
  if (!antialias) {
    const r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
    return [
      ((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
      ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
      ((a + 2) * q - (a + 3)) * q * q + 1,
      ((a * q1 - 5 * a) * q1 + 8 * a) * q1 - 4 * a,
    ];
  }
  const s = Math.min(scale, 1);
  const kernel = (x: number) => {
    x = Math.abs(x);
    if (x <= 1) return (a + 2) * x ** 3 - (a + 3) * x * x + 1;
    if (x < 2) return a * x ** 3 - 5 * a * x * x + 8 * a * x - 4 * a;
    return 0;
  };
  const start = Math.floor(-2 / s) + 1;
  const ws = [];
  for (let i = start; i < 2 - start; i++) ws.push(kernel(s * (i - ratio)));
  const sum = ws.reduce((p, q) => p + q, 0);
  return ws.map((w) => w / sum);
}

function linearWeights(ratio: number, scale: number, antialias: boolean): number[] {
  if (!antialias) return [1 - ratio, ratio];
  const s = Math.min(scale, 1);
  const start = Math.floor(-1 / s) + 1;
  const ws = [];
  for (let i = start; i < start + 2 - 2 * start; i++) {
    ws.push(Math.min(1, Math.max(0, 1 - Math.abs((i - ratio) * s))));
  }
  const sum = ws.reduce((p, q) => p + q, 0);
  return ws.map((w) => w / sum);
}

/** The `n` indices nearest `x` among `[0, limit)`, smaller ones first on ties, ascending. */
function neighbours(x: number, n: number, limit: number): number[] {
  const lo = Math.max(0, Math.floor(x) - n - 1), hi = Math.min(limit, Math.ceil(x) + n + 2);
  const all = [];
  for (let i = lo; i < hi; i++) all.push(i);
  all.sort((p, q) => Math.abs(x - p) - Math.abs(x - q) || p - q);
  return all.slice(0, n).sort((p, q) => p - q);
}

/** Taps of output position `x` of an axis of `length` resized by `scale` to `out` positions. */
function tapsAt(
  x: number,
  length: number,
  scale: number,
  out: number,
  roi: [number, number],
  p: AxisPlan,
): Taps {
  const width = scale * length;
  let o: number;
  switch (p.coordinates) {
    case "align_corners":
      o = width === 1 ? 0 : x * (length - 1) / (width - 1);
      break;
    case "asymmetric":
      o = x / scale;
      break;
    case "tf_crop_and_resize":
      o = width === 1
        ? (roi[1] - roi[0]) * (length - 1) / 2
        : x * (roi[1] - roi[0]) * (length - 1) / (width - 1);
      o += roi[0] * (length - 1);
      if (o < 0 || o > length - 1) return { idx: [], w: [], outside: true };
      break;
    case "tf_half_pixel_for_nn": // opsets 11–12
      o = (x + 0.5) / scale;
      break;
    case "pytorch_half_pixel":
      o = width === 1 ? -0.5 : (x + 0.5) / scale - 0.5;
      break;
    case "half_pixel_symmetric": {
      const center = length / 2;
      o = center * (1 - out / width) + (x + 0.5) / scale - 0.5;
      break;
    }
    default:
      o = (x + 0.5) / scale - 0.5;
  }
  const ratio = Number.isInteger(o) ? 1 : o - Math.floor(o);
  const w = p.mode === "nearest"
    ? nearestWeights(ratio, p.nearest)
    : p.mode === "cubic"
    ? cubicWeights(ratio, scale, p.cubicA, p.antialias)
    : linearWeights(ratio, scale, p.antialias);
  // Neighbours in the edge-padded array, as indices of the unpadded one (may be outside).
  const pad = Math.ceil(w.length / 2);
  const idx = neighbours(o + pad, w.length, length + 2 * pad).map((i) => i - pad);
  if (p.excludeOutside) {
    idx.forEach((i, t) => (i < 0 || i >= length) && (w[t] = 0));
    const sum = w.reduce((a, b) => a + b, 0);
    for (let t = 0; t < w.length; t++) w[t] /= sum;
  }
  // Edge padding: an index outside reads the nearest edge.
  return { idx: idx.map((i) => Math.min(length - 1, Math.max(0, i))), w, outside: false };
}

/** Resamples `x` along `axis` to `out` positions. */
function resizeAxis(
  c: NodeContext,
  x: Known,
  axis: number,
  out: number,
  scale: number,
  roi: [number, number],
  plan: AxisPlan,
  extrapolation: number,
): Known {
  const op = opOf(c);
  const type = typeOf(x);
  const length = type.shape[axis];
  const taps = [...Array(out).keys()].map((i) => tapsAt(i, length, scale, out, roi, plan));
  const n = Math.max(1, ...taps.map((t) => t.w.length));
  const along = (values: { length: number }) =>
    type.shape.map((_, i) => (i === axis ? values.length : 1));
  let y: Known;
  const oneHot = taps.every((t) => t.w.every((w) => w === 0 || w === 1));
  if (oneHot || plan.mode === "nearest") {
    const pick = taps.map((t) => t.outside ? 0 : t.idx[t.w.findIndex((w) => w !== 0)] ?? 0);
    y = op("Gather", [x, constant(pick, [out], "i32")], { axis });
  } else {
    if (!isFloat(type.dtype)) {
      throw new KilnError(`${c.label}: ${plan.mode} Resize of ${type.dtype} data`, {
        code: "unsupported",
        fix: "cast the data to float before resizing (or use nearest mode)",
      });
    }
    let sum: Known | undefined;
    for (let t = 0; t < n; t++) {
      const idx = taps.map((p) => p.idx[t] ?? 0), w = taps.map((p) => p.w[t] ?? 0);
      const term = op("Mul", [
        op("Gather", [x, constant(idx, [out], "i32")], { axis }),
        constant(w, along(w), type.dtype),
      ]);
      sum = sum ? op("Add", [sum, term]) : term;
    }
    y = sum!;
  }
  if (taps.some((t) => t.outside)) {
    const mask = Uint8Array.from(taps, (t) => +t.outside);
    y = op("Where", [constant(mask, along(taps), "bool"), scalar(extrapolation, type.dtype), y]);
  }
  return y;
}

/** Resize of input `x` to the given scales or sizes (per axis of `axes`). */
function resize(
  c: NodeContext,
  x: Known,
  given: { scales?: number[]; sizes?: number[]; roi?: number[] },
  plan: AxisPlan,
): Known[] {
  const a = attrs(c);
  const shape = typeOf(x).shape, rank = shape.length;
  const axes = (a.ints("axes") ?? [...Array(rank).keys()]).map((d) => (d < 0 ? d + rank : d));
  const policy = a.string("keep_aspect_ratio_policy", "stretch")!;
  const extrapolation = a.float("extrapolation_value", 0)!;
  const scales = shape.map(() => 1), sizes = [...shape];
  if (given.sizes) {
    axes.forEach((d, i) => (sizes[d] = given.sizes![i]));
    axes.forEach((d) => (scales[d] = sizes[d] / shape[d]));
    if (policy !== "stretch") {
      const pickScale = policy === "not_larger" ? Math.min : Math.max;
      const s = pickScale(...axes.map((d) => scales[d]));
      axes.forEach((d) => {
        scales[d] = s;
        sizes[d] = Math.floor(s * shape[d] + 0.5);
      });
    }
  } else if (given.scales) {
    axes.forEach((d, i) => (scales[d] = given.scales![i]));
    shape.forEach((d, i) => (sizes[i] = Math.floor(d * scales[i])));
  } else {
    throw new KilnError(`${c.label}: Resize needs scales or sizes`, {
      code: "invalid-graph",
      fix: "give the node its scales or sizes input",
    });
  }
  if (scales.some((s) => !(s > 0)) || sizes.some((s) => !Number.isInteger(s) || s < 0)) {
    throw new KilnError(`${c.label}: Resize to scales [${scales}], sizes [${sizes}]`, {
      code: "bad-attribute",
      fix: "use positive scales and non-negative sizes",
    });
  }
  checkBudget(sizes, typeOf(x).dtype, c.label);
  // roi per axis of `axes` ([starts…, ends…]), full range elsewhere.
  const roi = (d: number): [number, number] => {
    const i = axes.indexOf(d);
    return given.roi && i >= 0 ? [given.roi[i], given.roi[axes.length + i]] : [0, 1];
  };
  let y = x;
  for (let d = rank - 1; d >= 0; d--) {
    const identity = scales[d] === 1 && sizes[d] === shape[d] &&
      plan.coordinates !== "tf_crop_and_resize" && !plan.antialias;
    if (identity) continue;
    y = resizeAxis(c, y, d, sizes[d], scales[d], roi(d), plan, extrapolation);
  }
  return [y === x ? c.emit("Identity", [x])[0] : y];
}

/** Converters by ONNX op type. */
export const RESIZE_CONVERTERS: Record<string, (c: NodeContext) => Known[]> = {
  Resize: (c) => {
    const a = attrs(c);
    const mode = a.string("mode", "nearest")!;
    if (!["nearest", "linear", "cubic"].includes(mode)) {
      throw new KilnError(`${c.label}: Resize mode "${mode}"`, {
        code: "bad-attribute",
        fix: 'use mode "nearest", "linear" or "cubic"',
      });
    }
    const plan: AxisPlan = {
      mode,
      // Opset 10 had no choice: asymmetric coordinates, nearest rounding down.
      coordinates: c.opset < 11
        ? "asymmetric"
        : a.string("coordinate_transformation_mode", "half_pixel")!,
      nearest: c.opset < 11 ? "floor" : a.string("nearest_mode", "round_prefer_floor")!,
      cubicA: a.float("cubic_coeff_a", -0.75)!,
      antialias: a.int("antialias", 0) === 1,
      excludeOutside: a.int("exclude_outside", 0) !== 0, // any non-zero, as ONNX Runtime reads it
    };
    const x = c.required(0);
    if (c.opset < 11) return resize(c, x, { scales: constNumbers(c, 1, "scales") }, plan);
    return resize(c, x, {
      roi: constNumbers(c, 1, "roi"),
      scales: constNumbers(c, 2, "scales"),
      sizes: constNumbers(c, 3, "sizes"),
    }, plan);
  },
  Upsample: (c) => {
    const a = attrs(c);
    const mode = a.string("mode", "nearest")!;
    const scales = c.opset < 9 ? a.floats("scales") : constNumbers(c, 1, "scales");
    return resize(c, c.required(0), { scales }, {
      mode: mode === "bilinear" ? "linear" : mode,
      coordinates: "asymmetric",
      nearest: "floor",
      cubicA: -0.75,
      antialias: false,
      excludeOutside: false,
    });
  },
};
