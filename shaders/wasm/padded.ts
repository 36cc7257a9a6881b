/**
 * Padded and piecewise accesses on the WebAssembly generator's linear path: a pool's or a
 * depthwise convolution's window whose border reads a fill (straight-line code, the guards
 * skipped where the window is wholly inside), and elementwise kernels that are linear only
 * along a suffix of axes once the others are fixed (a channel shuffle, a concat). Both take
 * their accesses from `jit/ir/access.ts` (`guardedOffset`, `segmentOffset`) and emit through the
 * `KernelFunction` being built.
 *
 * @module
 */
import {
  type AffineOffset,
  affineOffset,
  groupSize,
  type GuardedOffset,
  guardedOffset,
  segmentOffset,
  strideOver,
} from "../../jit/ir/access.ts";
import { type Expr, type KernelIR, type Reduction, walk } from "../../jit/ir/kernel_ir.ts";
import { DEPTHWISE_WINDOW } from "../../jit/ir/index_maps.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { Load } from "../../jit/ir/kernel_ir.ts";
import type { KernelFunction } from "./module.ts";
import type { Linear } from "./walk.ts";

/**
 * The loads of a window's reduction `expr` with their offsets: affine, or affine with guards
 * (`guardedOffset`); `undefined` when some load is neither.
 */
export function windowAccesses(
  fn: KernelFunction,
  expr: Expr,
): [Load, GuardedOffset][] | undefined {
  const space = fn.kernel.space;
  const found = new Set<Load>();
  walk(expr, (x) => x.kind === "load" && found.add(x));
  const access: [Load, GuardedOffset][] = [];
  for (const l of found) {
    const shape = fn.bufferOf(l.input).shape;
    const plain = affineOffset(l.steps, space, shape);
    const g = plain ? { offset: plain, guards: [], fill: 0 } : guardedOffset(l.steps, space, shape);
    if (!g) return undefined;
    access.push([l, g]);
  }
  return access;
}

/**
 * `scale · (Σ weights·coord + base)` at a window's origin (its reduced coordinates taken as 0),
 * plus the local `plus` when given (a buffer's address).
 */
export function originOf(fn: KernelFunction, a: AffineOffset, scale = 1, plus?: number): number {
  const { m, wasm, kernel, coord, get, ic } = fn;
  const i32 = wasm.i32, red = kernel.reduced;
  const sum = a.weights.reduce(
    (e, w, d) =>
      w === 0 || red.includes(d) ? e : m.i32.add(e, m.i32.mul(get(coord[d], i32), ic(w * scale))),
    ic(a.base * scale),
  );
  return plus === undefined ? sum : m.i32.add(get(plus, i32), sum);
}

/**
 * The start of an elementwise segment loop: local `p` (the first point of a segment; from the
 * row range's start) and `n`, the points left in the segment of `size` that `p` is in, capped
 * at the range's end; `seg` begins the loop body (the coordinates of `p`, then `n`).
 */
export function segmentStart(
  fn: KernelFunction,
  size: number,
): { p: number; n: number; seg: number[] } {
  const { m, wasm, kernel, local, get, ic, unravel } = fn;
  const { end } = fn.params;
  const i32 = wasm.i32;
  const p = local(i32), n = local(i32);
  const seg: number[] = unravel(kernel.space.map((_, i) => i), p);
  seg.push(
    m.local.set(n, m.i32.sub(ic(size), m.i32.rem_u(get(p, i32), ic(size)))),
    m.local.set(
      n,
      m.select(
        m.i32.lt_s(m.i32.sub(get(end, i32), get(p, i32)), get(n, i32)),
        m.i32.sub(get(end, i32), get(p, i32)),
        get(n, i32),
      ),
    ),
  );
  return { p, n, seg };
}

/** The byte address output `k` is stored at for the current coordinates (statements into `stmts`). */
export function outputAddress(fn: KernelFunction, k: number, stmts: number[]): number {
  const { m, wasm, kernel, get, ic } = fn;
  const { coords } = fn.index.steps(kernel.outputs[k].steps, stmts);
  const buffer = get(kernel.inputs.length + k, wasm.i32);
  return m.i32.add(buffer, m.i32.shl(fn.index.linear(coords, kernel.outputs[k].shape), ic(2)));
}

/**
 * Padded windows (see `paddedWindow`) of at most this many points run unrolled: every depthwise
 * conv fusion keeps as a window (11×11). Larger ones take the generic path, 30× slower (a 9×9
 * depthwise conv: 110 ms, unrolled 3.1 ms).
 */
export const GUARDED_UNROLLED: number = DEPTHWISE_WINDOW;

/** Coordinates of linear index `p` in a row-major space of `extents`. */
export function unravelIndex(p: number, extents: readonly number[]): number[] {
  const out = extents.map(() => 0);
  for (let i = extents.length - 1, rest = p; i >= 0; i--) {
    out[i] = rest % extents[i];
    rest = Math.floor(rest / extents[i]);
  }
  return out;
}

/**
 * A window's points (its reduced coordinates, row-major), how far an affine offset moves from
 * the window's origin to each, and the least and greatest such move (whether a guard can fail
 * anywhere in the window is decided by those two).
 */
export function windowPoints(kernel: KernelIR): {
  points: number[][];
  shift(a: AffineOffset, point: readonly number[]): number;
  span(a: AffineOffset): [number, number];
} {
  const red = kernel.reduced;
  const extents = red.map((a) => kernel.space[a]);
  const points = Array.from({ length: sizeOf(extents) }, (_, p) => unravelIndex(p, extents));
  const shift = (a: AffineOffset, point: readonly number[]) =>
    red.reduce((sum, axis, i) => sum + a.weights[axis] * point[i], 0);
  const span = (a: AffineOffset): [number, number] => {
    const shifts = points.map((p) => shift(a, p));
    return [Math.min(...shifts), Math.max(...shifts)];
  };
  return { points, shift, span };
}

/**
 * A padded window (a pool's, a depthwise convolution's) as straight-line code, as
 * `shaders/wasm/linear.ts` unrolls small unpadded ones: each load at its base plus a constant, the padded
 * ones read only where their guards hold — one add and one unsigned compare per guard and point,
 * from the guard's value at the window's origin. Before, each point took the per-element path:
 * its coordinates by division and every bound checked (shufflenet's 3×3 pool: 6 ns a point).
 */
export function paddedWindow(
  fn: KernelFunction,
  hoist: (lin: Linear, exprs: readonly Expr[], stmts: number[]) => Linear,
  r: Reduction,
  acc: number,
): number[] | undefined {
  const { m, wasm, kernel, coord, local, get, ic } = fn;
  const { value, accumulate } = fn;
  const i32 = wasm.i32, red = kernel.reduced;
  const access = windowAccesses(fn, r.expr);
  if (!access) return undefined;
  const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
  const atOrigin = (a: AffineOffset, scale = 1, plus?: number) => {
    const l = local(i32);
    stmts.push(m.local.set(l, originOf(fn, a, scale, plus)));
    return l;
  };
  const origins = access.map(([l, g]) => ({
    base: atOrigin(g.offset, 4, l.input),
    guards: g.guards.map((x) => ({ value: atOrigin(x.at), ...x })),
  }));
  const { hoisted } = hoist({ j: -1, loads: new Map(), stores: new Map() }, [r.expr], stmts);
  const { points, shift, span } = windowPoints(kernel);
  /** Every point, its padded loads guarded (`guarded`) or not. */
  const taps = (guarded: boolean): number[] => {
    const out: number[] = [];
    for (const point of points) {
      const lin: Linear = {
        j: -1,
        loads: new Map(),
        stores: new Map(),
        hoisted,
        guards: new Map(),
      };
      access.forEach(([l, g], i) => {
        const o = origins[i];
        const base = local(i32);
        out.push(m.local.set(base, m.i32.add(get(o.base, i32), ic(4 * shift(g.offset, point)))));
        lin.loads.set(l, { base, stride: 0 });
        if (!guarded || o.guards.length === 0) return;
        const ok = local(i32);
        const each = o.guards.map((x) =>
          m.i32.lt_u(m.i32.add(get(x.value, i32), ic(shift(x.at, point))), ic(x.bound))
        );
        out.push(m.local.set(ok, each.reduce((a, b) => m.i32.and(a, b))));
        lin.guards!.set(l, { ok, fill: g.fill });
      });
      out.push(...accumulate(r, acc, value(r.expr, new Map(), out, lin)));
    }
    return out;
  };
  // Windows wholly inside (most of them) skip the guards: each guard's least and greatest value
  // over the window are in bounds (shufflenet's 3×3 pool: 35 -> 27 ns a window).
  const inside = origins.flatMap((o) =>
    o.guards.flatMap((x) =>
      span(x.at).map((d) => m.i32.lt_u(m.i32.add(get(x.value, i32), ic(d)), ic(x.bound)))
    )
  ).reduce((a, b) => m.i32.and(a, b));
  stmts.push(m.if(inside, m.block(null, taps(false)), m.block(null, taps(true))));
  return stmts;
}

/**
 * Pushes onto `seg` the stores of every output along walk `lin` of `count()` points, four at a
 * time where `wide` (a segment of four or more) and the values allow.
 */
export type SegmentStores = (
  seg: number[],
  lin: Linear,
  count: () => number,
  wide: boolean,
) => void;

/**
 * Elementwise kernels whose accesses are not affine but walk a suffix of axes linearly once the
 * other axes are fixed (see `segmentOffset`: a channel shuffle, a concat, a gather of rows):
 * per segment of that suffix, each buffer's start and guards come from the per-element path,
 * and the segment is walked by `stores`, four points at a time where the values allow (a guard
 * holds or fails along a whole segment: where it fails, the fill, and no load).
 */
export function segmentBody(
  fn: KernelFunction,
  stores: SegmentStores,
  exprs: readonly Expr[],
  outs: readonly number[],
): number[] | undefined {
  const { m, wasm, kernel, bufferOf, local, get, ic, whileLoop } = fn;
  const { loadAddress } = fn.index;
  const { start, end } = fn.params;
  const i32 = wasm.i32, space = kernel.space;
  const found = new Set<Load>();
  for (const e of exprs) walk(e, (x) => x.kind === "load" && found.add(x));
  const loads = [...found];
  const accesses = [
    ...loads.map((l) => ({ steps: l.steps, shape: bufferOf(l.input).shape, store: false })),
    ...outs.map((k) => ({ ...kernel.outputs[k], store: true })),
  ];
  let group: number[] = [], offsets: { weights: readonly number[]; guarded: boolean }[] = [];
  for (let a = space.length - 1; a >= 0; a--) {
    const next = [a, ...group];
    const each = accesses.map((x) => segmentOffset(x.steps, space, x.shape, next));
    const ok = each.every((o, i) =>
      o !== undefined && !(o.guarded && accesses[i].store) &&
      strideOver({ weights: o.weights, base: 0 }, next, space) !== undefined
    );
    if (!ok) break;
    [group, offsets] = [next, each as typeof offsets];
  }
  const size = groupSize(group, space);
  if (size < 4) return undefined;
  const strides = offsets.map((o) => strideOver({ weights: o.weights, base: 0 }, group, space)!);
  const { p, n, seg } = segmentStart(fn, size);
  const lin: Linear = { j: local(i32), loads: new Map(), stores: new Map(), guards: new Map() };
  for (const [i, l] of loads.entries()) {
    const { address, guards } = loadAddress(l, seg);
    const base = local(i32);
    seg.push(m.local.set(base, address));
    lin.loads.set(l, { base, stride: strides[i] });
    if (guards.length === 0) continue;
    // One fill per load (the per-element path applies each guard's own).
    if (guards.some((g) => g.fill !== guards[0].fill)) return undefined;
    const ok = local(i32);
    seg.push(m.local.set(ok, guards.reduce((a, g) => m.i32.and(a, get(g.ok, i32)), ic(1))));
    lin.guards!.set(l, { ok, fill: guards[0].fill });
  }
  outs.forEach((k, i) => {
    const base = local(i32);
    seg.push(m.local.set(base, outputAddress(fn, k, seg)));
    lin.stores.set(k, { base, stride: strides[loads.length + i] });
  });
  stores(seg, lin, () => get(n, i32), size >= 4);
  seg.push(m.local.set(p, m.i32.add(get(p, i32), get(n, i32))));
  return [
    m.local.set(p, get(start, i32)),
    whileLoop(() => m.i32.lt_s(get(p, i32), get(end, i32)), seg),
  ];
}
