/**
 * Shape arithmetic shared by shape inference, the reference kernels and the code generators:
 * element counts, strides, NumPy broadcasting and axis normalization. Shapes are static in kiln;
 * every dimension is a non-negative integer known when the graph is built.
 *
 * @module
 */
import { KilnError } from "../support/errors.ts";

/** A static tensor shape: one non-negative integer per dimension. */
export type Shape = readonly number[];

/** Number of elements of `shape` (1 for a scalar). */
export function sizeOf(shape: Shape): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Row-major strides of `shape`, in elements. */
export function stridesOf(shape: Shape): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

/** `[2, 3]` → `"[2, 3]"`, for messages. */
export function formatShape(shape: Shape): string {
  return `[${shape.join(", ")}]`;
}

/** Whether two shapes are identical. */
export function sameShape(a: Shape, b: Shape): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** Whether `shape` is a valid static shape (non-negative safe integers). */
export function isValidShape(shape: unknown): shape is Shape {
  return Array.isArray(shape) &&
    shape.every((d) => Number.isSafeInteger(d) && d >= 0);
}

/**
 * The NumPy broadcast of several shapes, or `undefined` when they are incompatible.
 */
export function tryBroadcast(shapes: readonly Shape[]): number[] | undefined {
  const rank = Math.max(0, ...shapes.map((s) => s.length));
  const out = new Array<number>(rank).fill(1);
  for (const s of shapes) {
    for (let i = 0; i < s.length; i++) {
      const o = rank - s.length + i;
      const d = s[i];
      if (d === out[o] || d === 1) continue;
      if (out[o] !== 1) return undefined;
      out[o] = d;
    }
  }
  return out;
}

/**
 * Maps each element of the broadcast output `out` to an element offset in an input of shape
 * `shape`. Returns `undefined` when the input already has the output's shape (identity map).
 */
export function broadcastOffsets(shape: Shape, out: Shape): Int32Array | undefined {
  if (sameShape(shape, out)) return undefined;
  const rank = out.length;
  const inStrides = stridesOf(shape);
  const strides = new Array<number>(rank).fill(0);
  for (let i = 0; i < shape.length; i++) {
    const o = rank - shape.length + i;
    strides[o] = shape[i] === 1 ? 0 : inStrides[i];
  }
  return offsetsFor(out, strides, 0);
}

/**
 * Where a tensor of `shape` broadcasts to `out` in runs of consecutive elements of `out` that read
 * one element of it (its non-1 axes contiguous and all of `out`'s there: per tensor, or per
 * channel of leading axes), the runs' length: run `r` reads element `r % sizeOf(shape)`.
 * `undefined` otherwise ({@linkcode broadcastOffsets} then). Loops over runs read a weight's
 * per-channel scale or zero point without an offset an element.
 */
export function broadcastRun(shape: Shape, out: Shape): number | undefined {
  const aligned = [...Array(out.length - shape.length).fill(1), ...shape];
  const axes = aligned.flatMap((d, i) => (d === 1 ? [] : [i]));
  if (axes.length === 0) return Math.max(1, sizeOf(out));
  const [first, last] = [axes[0], axes.at(-1)!];
  for (let d = first; d <= last; d++) if (aligned[d] !== out[d]) return undefined;
  return Math.max(1, sizeOf(out.slice(last + 1)));
}

/**
 * Offsets `base + Σ index[d] * strides[d]` for every index of `shape`, in row-major order.
 * The general strided view behind broadcasting, transposes and slices in the reference backend.
 */
export function offsetsFor(shape: Shape, strides: readonly number[], base: number): Int32Array {
  const n = sizeOf(shape);
  const offsets = new Int32Array(n);
  const rank = shape.length;
  if (n === 0) return offsets;
  const index = new Array<number>(rank).fill(0);
  let off = base;
  for (let i = 0; i < n; i++) {
    offsets[i] = off;
    for (let d = rank - 1; d >= 0; d--) {
      index[d]++;
      off += strides[d];
      if (index[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      index[d] = 0;
    }
  }
  return offsets;
}

/**
 * Normalizes a possibly negative `axis` for a tensor of `rank` dimensions.
 * `where` names the node for the error message.
 */
export function normalizeAxis(axis: number, rank: number, where: string): number {
  if (!Number.isInteger(axis) || axis < -rank || axis >= rank) {
    throw new KilnError(
      `${where}: axis ${axis} is out of range for a tensor of rank ${rank}`,
      {
        code: "bad-axis",
        fix: rank === 0
          ? "a scalar has no axes; reshape it to [1] first"
          : `use an axis in [${-rank}, ${rank - 1}]`,
      },
    );
  }
  return axis < 0 ? axis + rank : axis;
}

/** Normalizes a list of axes, rejecting duplicates. */
export function normalizeAxes(axes: readonly number[], rank: number, where: string): number[] {
  const out = axes.map((a) => normalizeAxis(a, rank, where));
  if (new Set(out).size !== out.length) {
    throw new KilnError(`${where}: axes [${axes.join(", ")}] repeat an axis`, {
      code: "bad-axis",
      fix: "list each axis once",
    });
  }
  return out;
}
