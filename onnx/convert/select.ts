/**
 * Ops whose output length depends on their data, computed while importing: NonMaxSuppression
 * and Unique. Like NonZero, they need that data constant; `OnnxModel` specialises a model on the
 * values of its small inputs when they feed such an op, and elsewhere (scores a network computes)
 * the importer raises a typed error saying so.
 *
 * @module
 */
import type { TensorData } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import {
  attrs,
  constant,
  constInput,
  constNumbers,
  type Converter,
  type Known,
  type NodeContext,
  typeOf,
  valuesOf,
} from "../import/node_context.ts";

/** An optional scalar input's value, or `fallback` when it is absent or empty. */
function optionalScalar(c: NodeContext, i: number, what: string, fallback: number): number {
  const v = constNumbers(c, i, what);
  return v && v.length ? v[0] : fallback;
}

/** A box as its x and y extents, whatever corner order or format it was given in. */
function extents(b: ArrayLike<number>, center: boolean): [number, number, number, number] {
  if (center) return [b[0] - b[2] / 2, b[0] + b[2] / 2, b[1] - b[3] / 2, b[1] + b[3] / 2];
  return [Math.min(b[1], b[3]), Math.max(b[1], b[3]), Math.min(b[0], b[2]), Math.max(b[0], b[2])];
}

/** Whether boxes `a` and `b` overlap by more than `threshold` (intersection over union). */
function suppresses(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  center: boolean,
  threshold: number,
) {
  const [ax0, ax1, ay0, ay1] = extents(a, center), [bx0, bx1, by0, by1] = extents(b, center);
  const w = Math.min(ax1, bx1) - Math.max(ax0, bx0), h = Math.min(ay1, by1) - Math.max(ay0, by0);
  if (w <= 0 || h <= 0) return false;
  const inter = w * h, areaA = (ax1 - ax0) * (ay1 - ay0), areaB = (bx1 - bx0) * (by1 - by0);
  const union = areaA + areaB - inter;
  if (areaA <= 0 || areaB <= 0 || union <= 0) return false;
  return inter / union > threshold;
}

/**
 * NonMaxSuppression: per batch and class, boxes by descending score (ties: lower index first)
 * above the score threshold, each kept unless it overlaps a kept one by more than the IoU
 * threshold, at most `max_output_boxes_per_class` of them; rows `[batch, class, box]`.
 */
function nonMaxSuppression(c: NodeContext): Known[] {
  const boxes = constInput(c, 0, "boxes"), scores = constInput(c, 1, "scores");
  const [batches, count] = typeOf(boxes).shape, classes = typeOf(scores).shape[1];
  const most = Math.max(0, optionalScalar(c, 2, "max_output_boxes_per_class", 0));
  const iou = optionalScalar(c, 3, "iou_threshold", 0);
  const floor = c.input(4) ? optionalScalar(c, 4, "score_threshold", -Infinity) : -Infinity;
  const center = attrs(c).int("center_point_box", 0) === 1;
  const box = Float64Array.from(valuesOf(boxes.tensor));
  const score = Float64Array.from(valuesOf(scores.tensor));
  const rows: number[] = [];
  for (let b = 0; b < batches; b++) {
    const boxOf = (i: number) => box.subarray((b * count + i) * 4, (b * count + i) * 4 + 4);
    for (let k = 0; k < classes; k++) {
      const at = (b * classes + k) * count;
      const order = Array.from({ length: count }, (_, i) => i)
        .filter((i) => score[at + i] > floor)
        .sort((i, j) => score[at + j] - score[at + i] || i - j);
      const kept: number[] = [];
      for (const i of order) {
        if (kept.length >= most) break;
        if (kept.some((j) => suppresses(boxOf(i), boxOf(j), center, iou))) continue;
        kept.push(i);
        rows.push(b, k, i);
      }
    }
  }
  return [constant(rows, [rows.length / 3, 3], "i32", true)];
}

/**
 * Unique: the distinct slices of X along `axis` (elements, when it is absent), sorted (slices
 * compared element by element, NaN above every number and equal to itself) or in order of first
 * occurrence; then each one's first index, each slice's position among them, and their counts.
 */
function unique(c: NodeContext): Known[] {
  const x = constInput(c, 0, "X");
  const a = attrs(c), shape = typeOf(x).shape, data = x.tensor.data as TensorData;
  const given = a.int("axis");
  const axis = given === undefined ? undefined : given < 0 ? given + shape.length : given;
  if (axis !== undefined && !(axis >= 0 && axis < shape.length)) {
    throw new KilnError(`${c.label}: axis ${given} is out of range for rank ${shape.length}`, {
      code: "invalid-graph",
      fix: `use an axis in [${-shape.length}, ${shape.length - 1}]`,
    });
  }
  // Slices as lists of flat element indices: along the axis, or one element each.
  const n = axis === undefined ? data.length : shape[axis];
  const inner = axis === undefined ? 1 : shape.slice(axis + 1).reduce((p, d) => p * d, 1);
  const outer = axis === undefined ? 1 : shape.slice(0, axis).reduce((p, d) => p * d, 1);
  const slice = (s: number) =>
    axis === undefined
      ? [s]
      : Array.from({ length: outer * inner }, (_, e) =>
        (Math.floor(e / inner) * n + s) * inner + (e % inner));
  const value = (i: number) => Number(data[i]);
  const compare = (s: number, t: number) => {
    const [p, q] = [slice(s), slice(t)];
    for (let e = 0; e < p.length; e++) {
      const [u, v] = [value(p[e]), value(q[e])];
      if (u === v || (Number.isNaN(u) && Number.isNaN(v))) continue;
      return Number.isNaN(u) ? 1 : Number.isNaN(v) ? -1 : u - v;
    }
    return 0;
  };
  const firsts: number[] = [], inverse: number[] = [];
  for (let s = 0; s < n; s++) {
    const found = firsts.findIndex((f) => compare(f, s) === 0);
    inverse.push(found >= 0 ? found : firsts.push(s) - 1);
  }
  const counts = firsts.map((_, u) => inverse.filter((v) => v === u).length);
  const order = firsts.map((_, u) => u);
  if (a.flag("sorted", true)) order.sort((u, v) => compare(firsts[u], firsts[v]));
  const rank = order.map(() => 0);
  order.forEach((u, r) => (rank[u] = r));
  // Y[outer, u, inner] = X[outer, firsts[order[u]], inner].
  const y = new (data.constructor as new (n: number) => TensorData)(outer * order.length * inner);
  for (let o = 0, e = 0; o < outer; o++) {
    for (const u of order) {
      const from = (o * n + firsts[u]) * inner;
      for (let i = 0; i < inner; i++) y[e++] = data[from + i];
    }
  }
  const yShape = axis === undefined
    ? [order.length]
    : shape.map((d, i) => i === axis ? order.length : d);
  const ints = (v: number[]) => constant(v, [v.length], "i32", true);
  return [
    { kind: "const", tensor: { data: y, shape: yShape, dtype: x.tensor.dtype }, i64: x.i64 },
    ints(order.map((u) => firsts[u])),
    ints(inverse.map((u) => rank[u])),
    ints(order.map((u) => counts[u])),
  ];
}

/** Converters of the ops computed while importing because their output length is data. */
export const SELECT_CONVERTERS: Record<string, Converter<Known>> = {
  NonMaxSuppression: nonMaxSuppression,
  Unique: unique,
};
