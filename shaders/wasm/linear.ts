/**
 * The linear path of the WebAssembly generator: when every access of a loop is affine and linear
 * in the loop's index (`jit/ir/access.ts`), each buffer is walked from a base address with a
 * constant stride — four lanes at a time where the whole expression has an f32x4 lowering, one
 * at a time for the tail and everything else. Elementwise kernels run segments of the longest
 * such suffix of axes; row kernels run their reductions and full outputs over the reduced axes;
 * matmul epilogues walk a tile's columns. It emits into the `KernelFunction` that
 * `generateWasm` is building.
 *
 * @module
 */
import { groupSize, linearSuffix } from "../../jit/ir/access.ts";
import { type Expr, type Reduction, walk } from "../../jit/ir/kernel_ir.ts";
import { keptForm } from "../../jit/schedule/in_place.ts";
import type { Memo } from "./alu.ts";
import { HIGH_HALF } from "./math.ts";
import type { KernelFunction } from "./module.ts";
import type { Accesses, Linear } from "./walk.ts";
import {
  GUARDED_UNROLLED,
  paddedWindow,
  segmentBody,
  segmentStart,
  type SegmentStores,
  unravelIndex,
} from "./padded.ts";

import {
  accessesOf,
  hoist,
  type Lin,
  linearLoop,
  linearLoweringState,
  linearOver,
  linearStores,
  storeLinear,
  vectorizable,
  vvalue,
  walks,
} from "./linear_walk.ts";
/** Reduction windows of at most this many points run unrolled (see `unrolled`). */
const UNROLLED = 16;

/** The linear path's emitters. */
export interface LinearLowering {
  /**
   * The affine accesses of `exprs` and outputs `outs`, if all are affine; given `uniform` axes,
   * loads with bounds too, where no bound depends on those axes (see `Accesses.guarded`).
   */
  accessesOf(
    exprs: readonly Expr[],
    outs: readonly number[],
    uniform?: readonly number[],
  ): Accesses | undefined;
  /** Whether every access is linear over the axes `group`. */
  linearOver(access: Accesses, group: readonly number[]): boolean;
  /** Base addresses at the current coordinates (statements into `stmts`). */
  walks(access: Accesses, group: readonly number[], stmts: number[]): Linear;
  /** Whether values `exprs`, stored as outputs `outs` (one each), have an f32x4 lowering. */
  vectorizable(exprs: readonly Expr[], outs: readonly number[]): boolean;
  /** Stores outputs `outs` at `count()` points of a walk, four at a time where `vector`. */
  linearStores(
    lin: Linear,
    count: () => number,
    outs: readonly number[],
    vector: boolean,
    exprs?: readonly Expr[],
  ): number[];
  /** Stores output `k` (the value `expr`, or its own) at four consecutive points of walk `lin`. */
  storeFour(k: number, lin: Linear, memo: Memo, stmts: number[], expr?: Expr): void;
  /** An elementwise kernel's body, or `undefined` when its accesses are not affine. */
  elementwiseBody(): number[] | undefined;
  /**
   * One reduction over a row along a linear walk into local `acc`, or `undefined` when its
   * accesses are not linear. `keep`: an output that stores each reduced value on the way;
   * `squares`: an f64 local that also sums the squares of the values (a float sum's only).
   */
  linearReduction(
    r: Reduction,
    options: { acc: number; keep?: number; squares?: number },
  ): number[] | undefined;
  /** A row kernel's full outputs along a linear walk, or `undefined` when they are not linear. */
  linearOutputs(outs: readonly number[], exprs?: readonly Expr[]): number[] | undefined;
  /** Loop-invariant f32 subexpressions of `exprs`, evaluated into `stmts` for `lin` to reuse. */
  hoist(lin: Linear, exprs: readonly Expr[], stmts: number[]): Linear;
  /** `expr` at four consecutive points of walk `lin`, as f32x4 (statements into `stmts`). */
  vvalue(expr: Expr, lin: Linear, memo: Memo, stmts: number[]): number;
  /**
   * Per-lane partial results of f32 reduction `r` over f32x4 values (see {@linkcode LaneFold}).
   */
  laneFold(r: Reduction): LaneFold;
}

/** Per-lane partial results of an f32 reduction over f32x4 values, in locals. */
export interface LaneFold {
  /** Whether it sums in f64 partial sums (a wide sum, see `KernelFunction.wideSum`). */
  readonly wide: boolean;
  /**
   * Wide sums: low lanes' f64 partial sums. Narrow sums: the four lanes' f32 sums. Max/min: the
   * extremes so far.
   */
  readonly lo: number;
  /** Wide sums: high lanes' f64 partial sums. Max/min: the mask of lanes that met a NaN. */
  readonly hi: number;
  /** Sums: the low half of the last value folded, widened to f64. */
  readonly lanesLo: number;
  /** Sums: the high half of the last value folded, widened to f64. */
  readonly lanesHi: number;
  /** Statements that start the partial results. */
  readonly init: readonly number[];
  /** Statements folding in the f32x4 value `v()` builds (a fresh node each call). */
  fold(v: () => number): number[];
}

/** The linear path's emitters for one function. */
export function linearLowering(fn: KernelFunction): LinearLowering {
  const L = linearLoweringState(fn);
  return {
    accessesOf: (...a) => accessesOf(L, ...a),
    linearOver: (...a) => linearOver(L, ...a),
    walks: (...a) => walks(L, ...a),
    vectorizable: (...a) => vectorizable(L, ...a),
    linearStores: (...a) => linearStores(L, ...a),
    storeFour: (k, lin, memo, stmts, expr) => storeLinear(L, k, 4, lin, memo, stmts, expr),
    elementwiseBody: (...a) => elementwiseBody(L, ...a),
    linearReduction: (...a) => linearReduction(L, ...a),
    linearOutputs: (...a) => linearOutputs(L, ...a),
    hoist: (...a) => hoist(L, ...a),
    vvalue: (...a) => vvalue(L, ...a),
    laneFold: (...a) => laneFold(L, ...a),
  };
}

/** Elementwise kernels: segments of the longest linear suffix of axes, no per-point unravel. */
function elementwiseBody(L: Lin): number[] | undefined {
  const { fn, m, kernel, get, whileLoop, start, end, i32, space, red } = L;
  if (fn.wide || red.length || kernel.reductions.length) return undefined;
  const outs = kernel.outputs.map((_, k) => k), exprs = kernel.outputs.map((o) => o.expr);
  const stores = segmentStores(L, outs, exprs);
  const acc = accessesOf(L, exprs, outs);
  if (!acc) return segmentBody(fn, stores, exprs, outs);
  const group = linearSuffix([...acc.loads, ...acc.stores].map(([, a]) => a), space);
  const size = groupSize(group, space);
  const { p, n, seg } = segmentStart(fn, size);
  const lin = walks(L, acc, group, seg);
  stores(seg, lin, () => get(n, i32), size >= 4);
  seg.push(m.local.set(p, m.i32.add(get(p, i32), get(n, i32))));
  return [
    m.local.set(p, get(start, i32)),
    whileLoop(() => m.i32.lt_s(get(p, i32), get(end, i32)), seg),
  ];
}

/**
 * The stores of an elementwise kernel's segment: outputs stored over an input where it does not
 * stay (see {@linkcode keptSegments}) only in segments where it does not, the rest always.
 */
function segmentStores(L: Lin, outs: readonly number[], exprs: readonly Expr[]): SegmentStores {
  const { m } = L;
  return (seg, lin, count, wide) => {
    const kept = keptSegments(L, lin);
    const rest = outs.filter((k) => !kept.has(k));
    const vector = (ks: number[]) => wide && vectorizable(L, ks.map((k) => exprs[k]), ks);
    if (rest.length) {
      seg.push(...linearStores(L, lin, count, rest, vector(rest), rest.map((k) => exprs[k])));
    }
    for (const [k, keep] of kept) {
      const stores = linearStores(L, lin, count, [k], vector([k]));
      seg.push(m.if(m.i32.eqz(keep(seg)), m.block(null, stores)));
    }
  };
}

/**
 * The outputs stored over an input (`KernelIR.inPlace`) as `Where(c, input, …)` with `c` the
 * same along a segment (its loads do not move along the walk), each with the test, evaluated at
 * the segment's start (statements into `stmts`), that the segment keeps the input's values where
 * they already are: `c` holds and the output's address is the input's. A decode step's present
 * cache is its past but for one new entry: every segment (an entry's channels) but that one is
 * left alone.
 */
function keptSegments(L: Lin, lin: Linear): Map<number, (stmts: number[]) => number> {
  const { m, kernel, get, ic, value, i32 } = L;
  const kept = new Map<number, (stmts: number[]) => number>();
  for (const { output, input } of kernel.inPlace ?? []) {
    const c = keptForm(kernel, output)?.c;
    if (!c) continue;
    let moves = false;
    walk(c, (y) => {
      moves ||= y.kind === "acc" || (y.kind === "load" && lin.loads.get(y)?.stride !== 0);
    });
    if (moves) continue;
    const same = () => m.i32.eq(get(input, i32), get(kernel.inputs.length + output, i32));
    kept.set(output, (stmts) => {
      stmts.push(m.local.set(lin.j, ic(0)));
      return m.i32.and(value(c, new Map(), stmts, lin), same());
    });
  }
  return kept;
}

/**
 * Per-lane partial results of f32 reduction `r` over f32x4 values. Wide sums: f64 partial sums
 * of the low (`lo`) and high (`hi`) lanes (`lanesLo`/`lanesHi`: the last value's halves,
 * widened); narrow sums: f32 sums in `lo`, lane by lane as the scalar path adds. Max/min: the
 * extremes in `lo` by pmax/pmin (one instruction on x86, where max/min cost ~8 for their NaN
 * and ±0 rules; with the accumulator first they keep it on ties, as the scalar rule does, and
 * skip NaNs), and in `hi` a mask of the lanes that met a NaN, which then
 * sticks. `init` starts them; `fold(v)` folds in the value `v()` builds (a fresh node a call).
 */
function laneFold(L: Lin, r: Reduction): LaneFold {
  const { m, local, get, wideSum, v128, f4 } = L;
  const op = r.op, wide = wideSum(r);
  const narrow = !wide && (op === "sum" || op === "mean");
  const lo = local(v128), hi = local(v128), lanesLo = local(v128), lanesHi = local(v128);
  const f2 = m.f64x2;
  const init = [
    m.local.set(
      lo,
      wide
        ? f2.splat(m.f64.const(0))
        : narrow
        ? f4.splat(m.f32.const(0))
        : f4.splat(m.f32.const(op === "max" ? -Infinity : Infinity)),
    ),
    m.local.set(hi, wide ? get(lo, v128) : m.v128.const(new Array(16).fill(0))),
  ];
  const fold = (v: () => number): number[] =>
    wide
      ? [
        m.local.set(lanesLo, f2.promote_low_f32x4(v())),
        m.local.set(lanesHi, f2.promote_low_f32x4(m.i8x16.shuffle(v(), v(), HIGH_HALF))),
        m.local.set(lo, f2.add(get(lo, v128), get(lanesLo, v128))),
        m.local.set(hi, f2.add(get(hi, v128), get(lanesHi, v128))),
      ]
      : narrow
      ? [m.local.set(lo, f4.add(get(lo, v128), v()))]
      : [
        m.local.set(lo, (op === "max" ? f4.pmax : f4.pmin)(get(lo, v128), v())),
        m.local.set(hi, m.v128.or(get(hi, v128), f4.ne(v(), v()))),
      ];
  return { wide, lo, hi, lanesLo, lanesHi, init, fold };
}

/**
 * One reduction over a row along a linear walk into local `acc`, or `undefined` when its
 * accesses are not linear. `keep`: an output that stores each reduced value on the way;
 * `squares`: an f64 local that also sums the squares of the values (a float sum's only).
 */
function linearReduction(
  L: Lin,
  r: Reduction,
  { acc, keep, squares }: { acc: number; keep?: number; squares?: number },
): number[] | undefined {
  const {
    fn,
    m,
    coord,
    local,
    get,
    ic,
    whileLoop,
    value,
    accumulate,
    vectorKind,
    i32,
    f64,
    v128,
    space,
    red,
    inner,
    at,
  } = L;
  const access = accessesOf(L, [r.expr], keep === undefined ? [] : [keep], red);
  if (!access) {
    const plain = !fn.wide && keep === undefined && squares === undefined &&
      inner <= GUARDED_UNROLLED;
    return plain ? paddedWindow(fn, (...a) => hoist(L, ...a), r, acc) : undefined;
  }
  const linearInRow = linearOver(L, access, red);
  if (
    !linearInRow && inner <= UNROLLED && keep === undefined && squares === undefined &&
    !access.guarded
  ) {
    return unrolled(L, r, acc, access);
  }
  // Walk the reduced axes as one index where every access is linear in it; otherwise (conv's
  // channel and window axes) loop over the outer ones and walk only the last.
  const group = linearInRow ? red : red.slice(-1);
  const outer = red.slice(0, red.length - group.length);
  const count = groupSize(group, space);
  const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
  const { hoisted } = hoist(L, { j: -1, loads: new Map(), stores: new Map() }, [r.expr], stmts);
  // Lanes of partial sums are not the exact precision's order (`KernelIR.exact`): its walks are
  // scalar, one term after another.
  const vector = !fn.kernel.exact && count >= 4 && r.dtype === "f32" &&
    vectorKind(r.expr) === "f32";
  const { wide, lo, hi, lanesLo, lanesHi, init, fold } = laneFold(L, r);
  const sq = squares === undefined ? undefined : { sum: squares, lo: local(v128), hi: local(v128) };
  const combine = vector ? laneCombine(L, r, acc, { wide, lo, hi, init }, sq, stmts) : [];
  const walk: number[] = [];
  const lin: Linear = { ...walks(L, access, group, walk), hoisted };
  walk.push(
    ...linearLoop(
      L,
      lin,
      () => ic(count),
      vector
        ? (st) => {
          const memo = new Map<number, number>();
          const v = () => vvalue(L, r.expr, lin, memo, st);
          if (keep !== undefined) {
            st.push(
              m.v128.store(0, 4, at(lin.stores.get(keep)!, lin.j), v()),
            );
          }
          st.push(...fold(v));
          if (sq) {
            const square = (into: number, lanes: number) =>
              m.local.set(
                into,
                m.f64x2.add(get(into, v128), m.f64x2.mul(get(lanes, v128), get(lanes, v128))),
              );
            st.push(square(sq.lo, lanesLo), square(sq.hi, lanesHi));
          }
        }
        : undefined,
      (st) => {
        const memo = new Map<number, number>();
        const v = () => value(r.expr, memo, st, lin);
        if (keep !== undefined) st.push(m.f32.store(0, 4, at(lin.stores.get(keep)!, lin.j), v()));
        st.push(...accumulate(r, acc, v()));
        if (squares !== undefined) {
          const x = () => m.f64.promote(v());
          st.push(m.local.set(squares, m.f64.add(get(squares, f64), m.f64.mul(x(), x()))));
        }
      },
    ),
  );
  // The outer axes as nested loops around the walk, innermost last.
  const nest = outer.reduceRight(
    (body, a) => [
      m.local.set(coord[a], ic(0)),
      whileLoop(() => m.i32.lt_s(get(coord[a], i32), ic(space[a])), [
        ...body,
        m.local.set(coord[a], m.i32.add(get(coord[a], i32), ic(1))),
      ]),
    ],
    walk,
  );
  stmts.push(...nest, ...combine);
  return stmts;
}

/**
 * A small reduction window whose accesses are affine but not one stride (a pool's 2×2) as
 * straight-line code: every load at its base plus a constant, in the reference's order. Loops
 * of two or three cost more in setup than the loads (lenet's first pool: 96 -> 69 µs).
 */
function unrolled(L: Lin, r: Reduction, acc: number, access: Accesses): number[] {
  const { m, coord, local, get, ic, value, accumulate, i32, space, red, inner } = L;
  const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
  const origin = walks(L, access, red, stmts);
  const { hoisted } = hoist(L, origin, [r.expr], stmts);
  const extents = red.map((a) => space[a]);
  for (let p = 0; p < inner; p++) {
    const point = unravelIndex(p, extents);
    const lin: Linear = { j: origin.j, loads: new Map(), stores: new Map(), hoisted };
    for (const [l, a] of access.loads) {
      const offset = red.reduce((sum, axis, i) => sum + a.weights[axis] * point[i], 0);
      const base = local(i32);
      stmts.push(
        m.local.set(base, m.i32.add(get(origin.loads.get(l)!.base, i32), ic(4 * offset))),
      );
      lin.loads.set(l, { base, stride: 0 });
    }
    stmts.push(...accumulate(r, acc, value(r.expr, new Map(), stmts, lin)));
  }
  return stmts;
}

/** A row kernel's full outputs along a linear walk, or `undefined` when they are not linear. */
function linearOutputs(
  L: Lin,
  outs: readonly number[],
  exprs: readonly Expr[] = outs.map((k) => L.kernel.outputs[k].expr),
): number[] | undefined {
  const { m, coord, ic, red, inner } = L;
  const access = accessesOf(L, exprs, outs, red);
  if (!access || !linearOver(L, access, red)) return undefined;
  const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
  const lin = hoist(L, walks(L, access, red, stmts), exprs, stmts);
  stmts.push(
    ...linearStores(
      L,
      lin,
      () => ic(inner),
      outs,
      inner >= 4 && vectorizable(L, exprs, outs),
      exprs,
    ),
  );
  return stmts;
}

/**
 * The start of a vector reduction's lanes (into `stmts`) and the statements that combine the
 * lanes into `acc` after the walk (f64 pairs summed; f32 lanes accumulated, a NaN lane kept).
 */
function laneCombine(
  L: Lin,
  r: Reduction,
  acc: number,
  lanes: Pick<LaneFold, "wide" | "lo" | "hi" | "init">,
  sq: { sum: number; lo: number; hi: number } | undefined,
  stmts: number[],
): number[] {
  const { m, get, accumulate, f64, v128, f4 } = L;
  const { wide, lo, hi, init } = lanes;
  const combine: number[] = [];
  stmts.push(
    ...init,
    ...(sq ? [m.local.set(sq.lo, get(hi, v128)), m.local.set(sq.hi, get(hi, v128))] : []),
  );
  if (wide) {
    const total = (into: number, a: number, b: number) =>
      m.local.set(
        into,
        [0, 1].reduce(
          (s, l) =>
            m.f64.add(
              s,
              m.f64.add(
                m.f64x2.extract_lane(get(a, v128), l),
                m.f64x2.extract_lane(get(b, v128), l),
              ),
            ),
          get(into, f64),
        ),
      );
    combine.push(total(acc, lo, hi), ...(sq ? [total(sq.sum, sq.lo, sq.hi)] : []));
  } else {
    for (let l = 0; l < 4; l++) {
      combine.push(...accumulate(r, acc, f4.extract_lane(get(lo, v128), l)));
    }
    if (r.op === "max" || r.op === "min") {
      combine.push(m.if(m.v128.any_true(get(hi, v128)), m.local.set(acc, m.f32.const(NaN))));
    }
  }
  return combine;
}
