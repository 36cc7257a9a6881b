/**
 * Access analysis: when an index-step chain makes a buffer's element offset an affine function of
 * the kernel's coordinates, code generators can walk it with one pointer and a constant stride
 * instead of re-deriving every element's coordinates (and can use vector loads where that stride
 * is 1). Chains with bounds some point can leave (pad fills), or with a reshape followed by
 * further steps, are not affine in general and get `undefined`: generators keep their
 * per-element path for those.
 *
 * @module
 */
import type { IndexStep } from "./kernel_ir.ts";
import { type Shape, sizeOf, stridesOf } from "./shape.ts";

/** `offset = Σ_d weights[d] · coord[d] + base`, in elements of the buffer. */
export interface AffineOffset {
  /** Weight of each kernel axis. */
  readonly weights: readonly number[];
  /** Offset at the origin. */
  readonly base: number;
}

/** The element offset `steps` give into a buffer of `shape` from a kernel `space`, if affine. */
export function affineOffset(
  steps: readonly IndexStep[],
  space: Shape,
  shape: Shape,
): AffineOffset | undefined {
  // rows: current coordinates as affine functions of the space's axes (last column: constant).
  let rows: number[][] = space.map((_, i) => space.map((_, j) => (i === j ? 1 : 0)).concat(0));
  let coordShape: Shape = shape;
  for (const [i, s] of steps.entries()) {
    if (s.kind === "reshape") {
      if (i !== steps.length - 1) return undefined;
      // A final reshape re-linearizes: the offset into `to` is the linear index into `from`.
      coordShape = s.from;
      break;
    }
    rows = s.coeff.map((c, j) =>
      rows[0] === undefined
        ? space.map(() => 0).concat(s.offset[j])
        : rows[0].map((_, col) =>
          c.reduce((acc, w, d) => acc + w * rows[d][col], 0) +
          (col === space.length ? s.offset[j] : 0)
        )
    );
    // Bounds that no point of the space can leave (a convolution without padding) change
    // nothing; any other bounds make the load's value depend on more than its address.
    if (s.bounds && !rows.every((r, j) => withinBounds(r, space, s.bounds![j]))) return undefined;
  }
  const strides = stridesOf(coordShape);
  const total = space.map((_, col) => rows.reduce((acc, r, d) => acc + strides[d] * r[col], 0));
  return {
    weights: total,
    base: rows.reduce((acc, r, d) => acc + strides[d] * r[space.length], 0),
  };
}

/**
 * The stride of an affine access over `group` (axes walked in row-major order as one index),
 * or `undefined` when the access is not linear in that index.
 */
export function strideOver(
  access: AffineOffset,
  group: readonly number[],
  space: Shape,
): number | undefined {
  let stride: number | undefined;
  let inner = 1;
  for (let i = group.length - 1; i >= 0; i--) {
    const d = space[group[i]];
    if (d !== 1) {
      const w = access.weights[group[i]];
      if (stride === undefined) stride = w / inner;
      if (!Number.isInteger(stride) || w !== stride * inner) return undefined;
    }
    inner *= d;
  }
  return stride ?? 0;
}

/** Whether the affine coordinate `row` (weights per axis, then a constant) stays in `[0, bound)`. */
function withinBounds(row: readonly number[], space: Shape, bound: number): boolean {
  let lo = row[space.length], hi = row[space.length];
  space.forEach((d, i) => {
    const span = row[i] * Math.max(0, d - 1);
    lo += Math.min(0, span);
    hi += Math.max(0, span);
  });
  return lo >= 0 && hi < bound;
}

/** The longest suffix of the space's axes over which every access is linear. */
export function linearSuffix(accesses: readonly AffineOffset[], space: Shape): number[] {
  let group: number[] = [];
  for (let a = space.length - 1; a >= 0; a--) {
    const next = [a, ...group];
    if (accesses.some((x) => strideOver(x, next, space) === undefined)) break;
    group = next;
  }
  return group;
}

/** Number of points in `group`. */
export function groupSize(group: readonly number[], space: Shape): number {
  return sizeOf(group.map((a) => space[a]));
}
