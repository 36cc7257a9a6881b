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
import type { Expr, IndexStep } from "./kernel_ir.ts";
import { type Shape, sizeOf, stridesOf } from "./shape.ts";

/** `offset = Σ_d weights[d] · coord[d] + base`, in elements of the buffer. */
export interface AffineOffset {
  /** Weight of each kernel axis. */
  readonly weights: readonly number[];
  /** Offset at the origin. */
  readonly base: number;
}

/**
 * A coordinate during composition: an affine function of the space's axes (weights, then a
 * constant), one axis of a reshape that split an affine index: `(index / stride) % extent`, or
 * opaque: an axis of a reshape whose index is not affine (a convolution's weight read through
 * its patches' split axes), which the access may still ignore.
 */
type Coord = { readonly row: number[] } | {
  readonly split: number;
  readonly stride: number;
  readonly extent: number;
} | { readonly opaque: true };

/** An axis the access cannot be affine in if it uses it. */
const OPAQUE: Coord = { opaque: true };

/** Whether `c` is the constant 0 (an axis of extent 1). */
const isZero = (c: Coord) => "row" in c && c.row.every((v) => v === 0);

/**
 * The element offset `steps` give into a buffer of `shape` from a kernel `space`, if affine.
 * Reshapes may sit anywhere in the chain: merging axes is affine, and the axes a reshape splits
 * off one index stay affine as long as later steps only use them together, as that index (a
 * head split followed by a slice, an im2col view followed by a bias load).
 */
export function affineOffset(
  steps: readonly IndexStep[],
  space: Shape,
  shape: Shape,
): AffineOffset | undefined {
  const n = space.length;
  let coords: Coord[] = space.map((_, i) => ({
    row: space.map((_, j) => (i === j ? 1 : 0)).concat(0),
  }));
  // Per reshape that split an index: that index, and the strides of the axes it split into.
  const splits: { index: number[]; strides: number[] }[] = [];
  // Σ weights[d] · coords[d] + constant as one affine row; split axes must appear all together,
  // in proportion to their strides (then they contribute their index), else it is not affine.
  const combine = (weights: readonly number[], constant: number): number[] | undefined => {
    const row = new Array<number>(n + 1).fill(0);
    row[n] = constant;
    const used = new Map<number, Map<number, number>>();
    for (const [d, c] of coords.entries()) {
      const w = weights[d] ?? 0;
      if (w === 0) continue;
      if ("opaque" in c) return undefined;
      if ("row" in c) {
        c.row.forEach((v, i) => (row[i] += w * v));
        continue;
      }
      const parts = used.get(c.split) ?? new Map<number, number>();
      parts.set(c.stride, (parts.get(c.stride) ?? 0) + w);
      used.set(c.split, parts);
    }
    for (const [g, parts] of used) {
      const { index, strides } = splits[g];
      const alpha = (parts.get(strides[0]) ?? 0) / strides[0];
      if (!Number.isInteger(alpha) || strides.some((t) => (parts.get(t) ?? 0) !== alpha * t)) {
        return undefined;
      }
      index.forEach((v, i) => (row[i] += alpha * v));
    }
    return row;
  };
  for (const s of steps) {
    if (s.kind === "gather") return undefined;
    if (s.kind === "reshape") {
      const next: Coord[] = [];
      for (const { from, to } of reshapeGroups(s.from, s.to)) {
        const realFrom = from.filter((a) => s.from[a] !== 1);
        const realTo = to.filter((a) => s.to[a] !== 1);
        for (const a of to) if (s.to[a] === 1) next[a] = { row: new Array<number>(n + 1).fill(0) };
        if (realFrom.length === 1 && realTo.length === 1) {
          next[realTo[0]] = coords[realFrom[0]];
          continue;
        }
        const inner = stridesOf(from.map((a) => s.from[a]));
        const weights = s.from.map((_, a) => (from.includes(a) ? inner[from.indexOf(a)] : 0));
        const index = combine(weights, 0);
        // Not affine: the axes it splits into are opaque, an access that uses one is not.
        if (!index) {
          for (const a of realTo) next[a] = OPAQUE;
          continue;
        }
        const outer = stridesOf(to.map((a) => s.to[a]));
        const parts = to.map((a, j) => divide(index, outer[j], s.to[a], space));
        if (parts.every((p) => p !== undefined)) {
          to.forEach((a, j) => (next[a] = { row: parts[j]! }));
          continue;
        }
        const strides: number[] = [];
        for (const [j, a] of to.entries()) {
          if (s.to[a] === 1) continue;
          next[a] = { split: splits.length, stride: outer[j], extent: s.to[a] };
          strides.push(outer[j]);
        }
        splits.push({ index, strides });
      }
      coords = next;
      continue;
    }
    const next: Coord[] = [];
    for (const [j, c] of s.coeff.entries()) {
      // A coordinate passed through unchanged keeps what it is (a split axis stays one); axes of
      // extent 1 beside it add nothing (a 1×1 convolution's kernel offsets), and a bound it
      // cannot leave changes nothing (that convolution's spatial axes, split off one index).
      const live = c.flatMap((w, d) => (w !== 0 && !isZero(coords[d]) ? [d] : []));
      const only = coords[live[0]];
      const within = (at: Coord, bound: number) =>
        "row" in at ? withinBounds(at.row, space, bound) : "extent" in at && at.extent <= bound;
      if (
        s.offset[j] === 0 && live.length === 1 && c[live[0]] === 1 &&
        (!s.bounds || within(only, s.bounds[j]))
      ) {
        next.push(only);
        continue;
      }
      const row = combine(c, s.offset[j]);
      if (!row) return undefined;
      // Bounds that no point of the space can leave (a convolution without padding) change
      // nothing; any other bounds make the load's value depend on more than its address.
      if (s.bounds && !withinBounds(row, space, s.bounds[j])) return undefined;
      next.push({ row });
    }
    coords = next;
  }
  const total = combine(stridesOf(shape), 0);
  return total && { weights: total.slice(0, n), base: total[n] };
}

/** Most batches {@linkcode batchAffineOffset} proves one by one. */
const MAX_BATCHES = 4096;

/**
 * The access of `steps` as affine in the space's axes past its first `nb` (batch) axes for every
 * fixed batch, where it is not affine in the batch axes themselves: grouped-query attention's
 * keys, each head reading the key-value head it shares by a division. The batch axes' weights
 * are NaN (the access moves along them, by no one stride) and `base` is batch 0's; a consumer
 * finds each batch's base through the index map. Proved batch by batch ({@linkcode affineOffset}
 * of the chain after a step that fixes the batch), the same weights in each; `undefined` past
 * {@linkcode MAX_BATCHES} batches, or where a batch's access is not affine or moves otherwise.
 */
export function batchAffineOffset(
  steps: readonly IndexStep[],
  space: Shape,
  shape: Shape,
  nb: number,
): AffineOffset | undefined {
  const batches = sizeOf(space.slice(0, nb));
  if (nb === 0 || batches > MAX_BATCHES || steps.some((s) => s.kind === "gather")) return undefined;
  const rest = space.slice(nb);
  let first: AffineOffset | undefined;
  for (let b = 0; b < batches; b++) {
    // The batch's coordinates, fixed by a step from the other axes into the whole space.
    const at: number[] = [];
    for (let i = nb - 1, r = b; i >= 0; r = Math.floor(r / space[i]), i--) at[i] = r % space[i];
    const fix: IndexStep = {
      kind: "affine",
      coeff: space.map((_, j) => rest.map((_, d) => (j === nb + d ? 1 : 0))),
      offset: space.map((_, j) => (j < nb ? at[j] : 0)),
    };
    const access = affineOffset([fix, ...steps], rest, shape);
    if (!access || (first && access.weights.some((w, i) => w !== first!.weights[i]))) {
      return undefined;
    }
    first ??= access;
  }
  return { weights: [...space.slice(0, nb).map(() => NaN), ...first!.weights], base: first!.base };
}

/** An affine access whose last step has bounds some point leaves: the reads there get `fill`. */
export interface GuardedOffset {
  /** The element offset where every guard holds (outside, an address not to be read). */
  readonly offset: AffineOffset;
  /** Each coordinate that may leave its bound: `0 <= Σ weights·coord + base < bound`. */
  readonly guards: readonly { readonly at: AffineOffset; readonly bound: number }[];
  /** The value read where a guard fails. */
  readonly fill: number;
}

/**
 * A padded window's access (a pool's or a depthwise convolution's input): steps affine up to a
 * last affine step with bounds, such as `affineOffset` refuses. Each bounded coordinate of that
 * step is itself affine in the space (the steps before it, ending in it alone, read as a
 * one-dimensional buffer of its bound); those that cannot leave their bound need no guard.
 */
export function guardedOffset(
  steps: readonly IndexStep[],
  space: Shape,
  shape: Shape,
): GuardedOffset | undefined {
  const last = steps.at(-1);
  if (!last || last.kind !== "affine" || !last.bounds) return undefined;
  const before = steps.slice(0, -1);
  const offset = affineOffset([...before, { ...last, bounds: undefined }], space, shape);
  if (!offset) return undefined;
  const guards: { at: AffineOffset; bound: number }[] = [];
  for (const [j, bound] of last.bounds.entries()) {
    const coordinate = {
      kind: "affine" as const,
      coeff: [last.coeff[j]],
      offset: [last.offset[j]],
    };
    const at = affineOffset([...before, coordinate], space, [bound]);
    if (!at) return undefined;
    if (!withinBounds([...at.weights, at.base], space, bound)) guards.push({ at, bound });
  }
  return { offset, guards, fill: last.fill ?? 0 };
}

/**
 * How an access moves along the axes `suffix` while the other axes stay fixed: the element offset
 * is `f(other axes) + Σ weights[a] · coord[a]` over `suffix`, with `f` any function (reshapes
 * that split a fixed axis, gathers at indices read at fixed coordinates) and every bound or
 * gather decided by the fixed axes alone (`guarded` says whether there are bounds). A channel
 * shuffle's loads split and transpose the channel axis but walk each image plane with stride 1:
 * per plane, the generic path computes where each buffer starts and whether it is read at all,
 * and the plane is walked. `undefined` when some step mixes the suffix into what it decides.
 */
export function segmentOffset(
  steps: readonly IndexStep[],
  space: Shape,
  shape: Shape,
  suffix: readonly number[],
): { readonly weights: readonly number[]; readonly guarded: boolean } | undefined {
  const n = space.length;
  // A coordinate: its weights over the suffix axes, plus a part the fixed axes decide: a known
  // constant `k`, or unknown (`undefined`).
  type C = { readonly w: number[]; readonly k?: number };
  const zero = () => new Array<number>(n).fill(0);
  const start: C[] = space.map((_, a) => {
    const w = zero();
    if (!suffix.includes(a)) return { w };
    w[a] = 1;
    return { w, k: 0 };
  });
  const fixed = (c: C) => c.w.every((x) => x === 0);
  let guarded = false;
  const run = (list: readonly IndexStep[], from: C[]): C[] | undefined => {
    let coords = from;
    for (const s of list) {
      if (s.kind === "gather") {
        // An index read at a fixed position is fixed: the gathered axis is then fixed along the
        // segment, and the other axes pass through it, moving or not (a bilinear Resize's rows,
        // gathered along the height, walk their width).
        if (!run(s.index.steps, coords)?.every(fixed)) return undefined;
        guarded = true;
        coords = [...coords.slice(0, s.axis), { w: zero() }, ...coords.slice(s.axis + s.drop)];
        continue;
      }
      if (s.kind === "reshape") {
        const next: C[] = [];
        for (const { from, to } of reshapeGroups(s.from, s.to)) {
          const realFrom = from.filter((a) => s.from[a] !== 1);
          const realTo = to.filter((a) => s.to[a] !== 1);
          for (const a of to) next[a] = s.to[a] === 1 ? { w: zero(), k: 0 } : { w: zero() };
          if (realFrom.every((a) => fixed(coords[a]))) continue;
          if (realFrom.length === 1 && realTo.length === 1) {
            next[realTo[0]] = coords[realFrom[0]];
          } else if (realTo.length === 1) {
            // Merging axes: the index is their row-major combination.
            const inner = stridesOf(realFrom.map((a) => s.from[a]));
            const w = zero();
            let k: number | undefined = 0;
            realFrom.forEach((a, i) => {
              coords[a].w.forEach((x, d) => (w[d] += inner[i] * x));
              k = k === undefined || coords[a].k === undefined
                ? undefined
                : k + inner[i] * coords[a].k!;
            });
            next[realTo[0]] = { w, k };
          } else return undefined;
        }
        coords = next;
        continue;
      }
      const next = s.coeff.map((c, j): C => {
        const w = zero();
        let k: number | undefined = s.offset[j];
        c.forEach((x, d) => {
          if (x === 0) return;
          coords[d].w.forEach((y, e) => (w[e] += x * y));
          k = k === undefined || coords[d].k === undefined ? undefined : k + x * coords[d].k!;
        });
        return { w, k };
      });
      if (s.bounds) {
        for (const [j, c] of next.entries()) {
          if (fixed(c)) {
            guarded = true;
            continue;
          }
          // Moving along the segment, it must stay in bounds from a known start.
          if (c.k === undefined || !withinBounds([...c.w, c.k], space, s.bounds[j])) {
            return undefined;
          }
        }
      }
      coords = next;
    }
    return coords;
  };
  const end = run(steps, start);
  if (!end) return undefined;
  const strides = stridesOf(shape);
  const weights = zero();
  end.forEach((c, i) => c.w.forEach((x, d) => (weights[d] += strides[i] * x)));
  return { weights, guarded };
}

/**
 * The axis groups of a reshape: consecutive axes of `from` and of `to` with equal products, each
 * as small as possible (size-1 axes join the group they sit in).
 */
export function reshapeGroups(
  from: Shape,
  to: Shape,
): { from: number[]; to: number[] }[] {
  const groups: { from: number[]; to: number[] }[] = [];
  let i = 0, j = 0;
  while (i < from.length || j < to.length) {
    const g = { from: [] as number[], to: [] as number[] };
    let a = 1, b = 1;
    do {
      if (j >= to.length || (i < from.length && a <= b)) {
        g.from.push(i);
        a *= from[i++];
      } else {
        g.to.push(j);
        b *= to[j++];
      }
    } while (a !== b && (i < from.length || j < to.length));
    while (i < from.length && from[i] === 1) g.from.push(i++);
    while (j < to.length && to[j] === 1) g.to.push(j++);
    groups.push(g);
  }
  return groups;
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

/** The least and greatest value of the affine `row` (weights per axis, then a constant). */
function range(row: readonly number[], space: Shape): [number, number] {
  let lo = row[space.length], hi = row[space.length];
  space.forEach((d, i) => {
    const span = row[i] * Math.max(0, d - 1);
    lo += Math.min(0, span);
    hi += Math.max(0, span);
  });
  return [lo, hi];
}

/** Whether the affine coordinate `row` stays in `[0, bound)`. */
function withinBounds(row: readonly number[], space: Shape, bound: number): boolean {
  const [lo, hi] = range(row, space);
  return lo >= 0 && hi < bound;
}

/**
 * `(index / stride) % extent` as an affine row, when both steps are exact term by term: for the
 * quotient, the terms with weights that are multiples of `stride` divide and the rest stay in
 * `[0, stride)`; for the remainder, the quotient's terms that are multiples of `extent` drop and
 * the rest stay in `[0, extent)` (a head split at a head boundary).
 */
function divide(
  index: readonly number[],
  stride: number,
  extent: number,
  space: Shape,
): number[] | undefined {
  const split = (row: readonly number[], by: number) => {
    const n = space.length;
    const high = row.map((w, i) => (i === n ? Math.floor(w / by) : w % by === 0 ? w / by : 0));
    const low = row.map((w, i) => w - by * high[i]);
    const [lo, hi] = range(low, space);
    return { high, low, exact: lo >= 0 && hi < by };
  };
  const quotient = split(index, stride);
  const remainder = split(quotient.high, extent);
  return quotient.exact && remainder.exact ? remainder.low : undefined;
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

/**
 * One coordinate of a reshape, `(flat / stride) % extent` of the flat index over the source
 * axes, as a division of part of it: `(Σ coord[axis] · mul) / div`, then `% mod` unless `mod`
 * is 0.
 */
export interface ReshapeCoord {
  /** Source axes (of the reshape's `from`) and their multipliers, summed. */
  readonly terms: readonly { readonly axis: number; readonly mul: number }[];
  /** Whether `terms` are the whole flat index (code generators name it once for all axes). */
  readonly whole: boolean;
  /** The divisor (1: none). */
  readonly div: number;
  /** The modulus, or 0 where the quotient stays below the extent. */
  readonly mod: number;
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/**
 * Coordinate `(Σ coord·stride_from / stride) % extent` of a reshape from `from`, simplified as
 * mixed radices allow, each source coordinate in `[0, from[axis])`: terms that are multiples of
 * stride·extent drop out; terms whose strides share a factor g with `stride` divide by it where
 * the smaller terms together stay below g (they cannot carry into the quotient); the modulus
 * goes where the quotient stays below `extent`. A convolution's patch index (an im2col's rows
 * and kernel taps, each split out of one flattened index) becomes a division or two of small
 * coordinates instead of seven of one large one. Where a source coordinate is out of range, the
 * value differs from the plain form's, but only where a bounds check already discards it.
 */
export function reshapeCoord(from: Shape, stride: number, extent: number): ReshapeCoord {
  const strides = stridesOf(from);
  const all = from.flatMap((n, axis) => (n === 1 ? [] : [{ axis, f: strides[axis], n }]));
  const live = all.filter(({ f }) => f % (stride * extent) !== 0).sort((a, b) => b.f - a.f);
  for (let split = 0;; split++) {
    const high = live.slice(0, split), low = live.slice(split);
    const g = high.reduce((acc, { f }) => gcd(acc, f), stride);
    if (low.reduce((sum, { f, n }) => sum + f * (n - 1), 0) >= g) continue;
    const div = stride / g;
    const max = high.reduce((acc, { f, n }) => acc + (f / g) * (n - 1), 0);
    return {
      terms: high.map(({ axis, f }) => ({ axis, mul: f / g })),
      whole: g === 1 && high.length === all.length && all.length > 1,
      div,
      mod: Math.floor(max / div) < extent ? 0 : extent,
    };
  }
}

/**
 * Whether `e` is the same at every point of its kernel: it reads no accumulator, and each of its
 * loads a buffer of one element (`oneElement`, by the load's input) through steps that neither
 * bound nor gather, so always that element. `memo` keeps the answers of shared subexpressions.
 */
export function sameEverywhere(
  e: Expr,
  oneElement: (input: number) => boolean,
  memo: Map<Expr, boolean> = new Map(),
): boolean {
  const known = memo.get(e);
  if (known !== undefined) return known;
  const same = e.kind === "const" ||
    (e.kind === "alu" && e.args.every((a) => sameEverywhere(a, oneElement, memo))) ||
    (e.kind === "load" && oneElement(e.input) &&
      e.steps.every((s) => s.kind === "reshape" || (s.kind === "affine" && !s.bounds)));
  memo.set(e, same);
  return same;
}
