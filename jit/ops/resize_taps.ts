/**
 * Resize's rules, as ONNX writes them (opsets 10–19): where each output position of an axis
 * reads the input (coordinate transformation, nearest rounding, linear and cubic kernels,
 * antialiasing, `exclude_outside`, tf_crop_and_resize's extrapolation), as source indices and
 * weights. The decomposition (`resize.ts`) and the reference kernel both resample by them.
 *
 * @module
 */

/** The taps of one output position along an axis: source indices and weights. */
export interface Taps {
  readonly idx: number[];
  readonly w: number[];
  /** tf_crop_and_resize: the position is outside the input and takes the extrapolation value. */
  readonly outside: boolean;
}

/** How an axis resamples: Resize's attributes. */
export interface AxisPlan {
  readonly mode: string;
  readonly coordinates: string;
  readonly nearest: string;
  readonly cubicA: number;
  readonly antialias: boolean;
  readonly excludeOutside: boolean;
}

/** Nearest's weights of the two neighbours at `ratio`. */
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

/** Cubic's weights at `ratio` (antialiased: the kernel stretched by 1 / scale). */
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

/** Linear's weights at `ratio` (antialiased: the triangle stretched by 1 / scale). */
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
export function tapsAt(
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
