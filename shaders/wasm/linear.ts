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
import {
  type AffineOffset,
  affineOffset,
  groupSize,
  type GuardedOffset,
  guardedOffset,
  linearSuffix,
  strideOver,
} from "../../jit/ir/access.ts";
import type { Expr, Reduction } from "../../jit/ir/kernel_ir.ts";
import { walk } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { isFloat, type Memo } from "./alu.ts";
import { HIGH_HALF } from "./math.ts";
import type { Load } from "../../jit/ir/kernel_ir.ts";
import type { KernelFunction } from "./module.ts";
import { type Accesses, type Linear, spreadLoad, type Walk, walkAt } from "./walk.ts";
import {
  GUARDED_UNROLLED,
  outputAddress,
  paddedWindow,
  segmentBody,
  segmentStart,
  unravelIndex,
} from "./padded.ts";

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
  const { m, wasm, kernel, coord, bufferOf, local, get, ic, whileLoop } = fn;
  const { keyOf, accs } = fn;
  const { value, wideSum, accumulate } = fn;
  const { loadAddress } = fn.index;
  const { vectorKind, valu, lanes } = fn.ops;
  const { start, end } = fn.params;
  const i32 = wasm.i32, f32 = wasm.f32, f64 = wasm.f64;
  const v128 = wasm.v128, f4 = m.f32x4;
  const space = kernel.space, red = kernel.reduced, inner = sizeOf(red.map((i) => space[i]));
  const accessesOf = (
    exprs: readonly Expr[],
    outs: readonly number[],
    uniform?: readonly number[],
  ): Accesses | undefined => {
    // Walks step 32-bit elements: f64 kernels keep the per-element path.
    if (fn.wide) return undefined;
    const found = new Set<Load>();
    for (const e of exprs) walk(e, (x) => x.kind === "load" && found.add(x));
    const loads: [Load, AffineOffset][] = [];
    const guarded = new Map<Load, GuardedOffset>();
    for (const l of found) {
      const shape = bufferOf(l.input).shape;
      const a = affineOffset(l.steps, space, shape);
      if (a) {
        loads.push([l, a]);
        continue;
      }
      // A Concat's part read at a row's coordinates (ViT's class token before its patches):
      // the row is in its bounds or not as a whole, so it is walked like any other buffer.
      const g = uniform && guardedOffset(l.steps, space, shape);
      if (!g || g.guards.some((x) => uniform!.some((axis) => x.at.weights[axis] !== 0))) {
        return undefined;
      }
      loads.push([l, g.offset]);
      guarded.set(l, g);
    }
    const stores: [number, AffineOffset][] = [];
    for (const k of outs) {
      const a = affineOffset(kernel.outputs[k].steps, space, kernel.outputs[k].shape);
      if (!a) return undefined;
      stores.push([k, a]);
    }
    return guarded.size ? { loads, stores, guarded } : { loads, stores };
  };
  const linearOver = (acc: Accesses, group: readonly number[]) =>
    [...acc.loads, ...acc.stores].every(([, a]) => strideOver(a, group, space) !== undefined);
  /** Base addresses at the current coordinates (statements into `stmts`). */
  const walks = (acc: Accesses, group: readonly number[], stmts: number[]): Linear => {
    const guards = new Map<Expr, { ok: number; fill: number }>();
    const lin: Linear = { j: local(i32), loads: new Map(), stores: new Map(), guards };
    for (const [l, a] of acc.loads) {
      const base = local(i32);
      // loadAddress evaluates a load's guards at the walk's start (a guarded load's hold or fail
      // along the whole walk), and points the load at its buffer's start where they fail.
      const address = loadAddress(l, stmts);
      stmts.push(m.local.set(base, address.address));
      lin.loads.set(l, { base, stride: strideOver(a, group, space)! });
      const g = acc.guarded?.get(l);
      if (!g) continue;
      const ok = local(i32);
      const all = address.guards.reduce((x, c) => m.i32.and(x, get(c.ok, i32)), ic(1));
      stmts.push(m.local.set(ok, all));
      guards.set(l, { ok, fill: g.fill });
    }
    for (const [k, a] of acc.stores) {
      const base = local(i32);
      stmts.push(m.local.set(base, outputAddress(fn, k, stmts)));
      lin.stores.set(k, { base, stride: strideOver(a, group, space)! });
    }
    return lin;
  };
  const at = (w: Walk, j: number, lane = 0) => walkAt(fn, w, j, lane);

  /** Whether values `exprs`, stored as outputs `outs` (one each), have an f32x4 lowering. */
  const vectorizable = (exprs: readonly Expr[], outs: readonly number[]) =>
    outs.every((k, i) =>
      vectorKind(exprs[i]) === (kernel.outputs[k].dtype === "bool" ? "mask" : "f32")
    );
  /** Evaluates `expr` for four consecutive points of a linear walk. */
  const vvalue = (expr: Expr, lin: Linear, memo: Memo, stmts: number[]): number => {
    const hit = memo.get(keyOf(expr));
    if (hit !== undefined) return get(hit, v128);
    const invariant = lin.hoisted?.get(keyOf(expr));
    if (invariant !== undefined) return f4.splat(get(invariant, f32));
    let code: number;
    switch (expr.kind) {
      case "const":
        return expr.dtype === "bool"
          ? m.i32x4.splat(ic(expr.value ? -1 : 0))
          : f4.splat(m.f32.const(expr.value));
      case "acc":
        return lin.acc
          ? m.v128.load(0, 4, at(lin.acc, lin.j))
          : f4.splat(get(accs[expr.index], f32));
      case "load": {
        const w = lin.loads.get(expr)!;
        // Four windows at a row's end: the lanes outside the padding read the fill, one by one.
        // A stride of 0 (a value broadcast along the walk) is one load, splatted.
        const edge = lin.lanes?.get(expr);
        // Bool lanes are i32 words (0/1), made a mask below.
        const bool = expr.dtype === "bool";
        const one = (l: number) =>
          bool ? m.i32.load(0, 4, at(w, lin.j, l)) : m.f32.load(0, 4, at(w, lin.j, l));
        const four = bool
          ? (f: (l: number) => number) =>
            [1, 2, 3].reduce((v, l) => m.i32x4.replace_lane(v, l, f(l)), m.i32x4.splat(f(0)))
          : lanes;
        code = edge
          ? four((l) => edge.lanes[l] ? one(l) : bool ? ic(edge.fill) : m.f32.const(edge.fill))
          : w.stride === 1
          ? m.v128.load(0, 4, at(w, lin.j))
          : w.stride === 0
          ? (bool ? m.i32x4.splat(one(0)) : f4.splat(one(0)))
          : w.stride === 2 || w.stride === 3
          ? spreadLoad(fn, w.stride, at(w, lin.j), stmts)
          : four(one);
        // A padded tap whose guard holds or fails along the whole walk (see `vectorWindows`):
        // where it fails, the fill, and no load (the walk may point outside the buffer).
        const guard = lin.guards?.get(expr);
        if (guard) {
          const fill = expr.dtype === "f32"
            ? f4.splat(m.f32.const(guard.fill))
            : m.i32x4.splat(ic(guard.fill));
          code = m.if(get(guard.ok, i32), code, fill);
        }
        // Bool words are 0 or 1; a lane mask is all ones or zeros.
        if (bool) code = m.i32x4.neg(code);
        break;
      }
      case "alu":
        for (const a of expr.args) vvalue(a, lin, memo, stmts);
        code = valu(expr, (i) => vvalue(expr.args[i], lin, memo, stmts));
        break;
    }
    const l = local(v128);
    stmts.push(m.local.set(l, code));
    memo.set(keyOf(expr), l);
    return get(l, v128);
  };
  /** Stores output `k` for one (`width` 1) or four points of a linear walk. */
  const storeLinear = (
    k: number,
    width: 1 | 4,
    lin: Linear,
    memo: Memo,
    stmts: number[],
    expr: Expr = kernel.outputs[k].expr,
  ) => {
    const o = kernel.outputs[k], w = lin.stores.get(k)!;
    if (width === 1) {
      const v = value(expr, memo, stmts, lin);
      const address = at(w, lin.j);
      stmts.push(isFloat(o.dtype) ? m.f32.store(0, 4, address, v) : m.i32.store(0, 4, address, v));
      return;
    }
    let v = vvalue(expr, lin, memo, stmts);
    if (o.dtype === "bool") v = m.v128.and(v, m.i32x4.splat(ic(1)));
    if (w.stride === 1) stmts.push(m.v128.store(0, 4, at(w, lin.j), v));
    else {
      const t = local(v128);
      stmts.push(m.local.set(t, v));
      // One address, the lanes at constant offsets from it (a conv's NCHW output: its channels
      // a plane apart along the tile's columns).
      const forward = w.stride > 0, address = forward ? local(i32) : -1;
      if (forward) stmts.push(m.local.set(address, at(w, lin.j)));
      for (let l = 0; l < 4; l++) {
        const lane = f4.extract_lane(get(t, v128), l);
        stmts.push(
          forward
            ? m.f32.store(4 * w.stride * l, 4, get(address, i32), lane)
            : m.f32.store(0, 4, at(w, lin.j, l), lane),
        );
      }
    }
  };
  /**
   * Evaluates, before a loop, the largest f32 subexpressions of `exprs` that read no buffer (they
   * depend on reductions and constants only: LayerNorm's `sqrt(var + eps)`), for `lin` to reuse.
   */
  const hoist = (lin: Linear, exprs: readonly Expr[], stmts: number[]): Linear => {
    const hoisted: Memo = new Map(), memo: Memo = new Map();
    // Memoized by node: a shared subexpression is looked at once, not once per path to it.
    const pure = new Map<Expr, boolean>(), seen = new Set<Expr>();
    const readsNothing = (e: Expr): boolean => {
      let r = pure.get(e);
      if (r === undefined) {
        r = e.kind === "alu" ? e.args.every(readsNothing) : e.kind !== "load";
        pure.set(e, r);
      }
      return r;
    };
    const visit = (e: Expr) => {
      if (e.kind !== "alu" || seen.has(e) || hoisted.has(keyOf(e))) return;
      seen.add(e);
      if (e.dtype === "f32" && readsNothing(e)) {
        const l = local(f32);
        stmts.push(m.local.set(l, value(e, memo, stmts)));
        hoisted.set(keyOf(e), l);
      } else e.args.forEach(visit);
    };
    exprs.forEach(visit);
    return { ...lin, hoisted };
  };
  /** `count` points of a linear walk: four at a time while they fit (if `vector`), then one. */
  const linearLoop = (
    lin: Linear,
    count: () => number,
    vector: ((stmts: number[]) => void) | undefined,
    scalar: (stmts: number[]) => void,
  ): number[] => {
    const j = () => get(lin.j, i32);
    const run = (width: number, fill: (stmts: number[]) => void) => {
      const stmts: number[] = [];
      fill(stmts);
      return whileLoop(
        () =>
          width === 1 ? m.i32.lt_s(j(), count()) : m.i32.le_s(m.i32.add(j(), ic(width)), count()),
        [...stmts, m.local.set(lin.j, m.i32.add(j(), ic(width)))],
      );
    };
    return [m.local.set(lin.j, ic(0)), ...(vector ? [run(4, vector)] : []), run(1, scalar)];
  };
  /**
   * Stores outputs `outs` (the values `exprs`) at `count()` points of a linear walk, four at a
   * time where `vector`.
   */
  const linearStores = (
    lin: Linear,
    count: () => number,
    outs: readonly number[],
    vector: boolean,
    exprs: readonly Expr[] = outs.map((k) => kernel.outputs[k].expr),
  ): number[] => {
    const each = (width: 1 | 4) => (stmts: number[]) => {
      const memo = new Map<number, number>();
      outs.forEach((k, i) => storeLinear(k, width, lin, memo, stmts, exprs[i]));
    };
    return linearLoop(lin, count, vector ? each(4) : undefined, each(1));
  };

  /** Elementwise kernels: segments of the longest linear suffix of axes, no per-point unravel. */
  function elementwiseBody(): number[] | undefined {
    if (fn.wide || red.length || kernel.reductions.length) return undefined;
    const outs = kernel.outputs.map((_, k) => k), exprs = kernel.outputs.map((o) => o.expr);
    const acc = accessesOf(exprs, outs);
    if (!acc) return segmentBody(fn, linearStores, exprs, outs, vectorizable(exprs, outs));
    const group = linearSuffix([...acc.loads, ...acc.stores].map(([, a]) => a), space);
    const size = groupSize(group, space);
    const { p, n, seg } = segmentStart(fn, size);
    const lin = walks(acc, group, seg);
    seg.push(
      ...linearStores(lin, () => get(n, i32), outs, size >= 4 && vectorizable(exprs, outs)),
      m.local.set(p, m.i32.add(get(p, i32), get(n, i32))),
    );
    return [
      m.local.set(p, get(start, i32)),
      whileLoop(() => m.i32.lt_s(get(p, i32), get(end, i32)), seg),
    ];
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
  const laneFold = (r: Reduction): LaneFold => {
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
  };

  /**
   * One reduction over a row along a linear walk into local `acc`, or `undefined` when its
   * accesses are not linear. `keep`: an output that stores each reduced value on the way;
   * `squares`: an f64 local that also sums the squares of the values (a float sum's only).
   */
  const linearReduction = (
    r: Reduction,
    { acc, keep, squares }: { acc: number; keep?: number; squares?: number },
  ): number[] | undefined => {
    const access = accessesOf([r.expr], keep === undefined ? [] : [keep], red);
    if (!access) {
      const plain = !fn.wide && keep === undefined && squares === undefined &&
        inner <= GUARDED_UNROLLED;
      return plain ? paddedWindow(fn, hoist, r, acc) : undefined;
    }
    const linearInRow = linearOver(access, red);
    if (
      !linearInRow && inner <= UNROLLED && keep === undefined && squares === undefined &&
      !access.guarded
    ) {
      return unrolled(r, acc, access);
    }
    // Walk the reduced axes as one index where every access is linear in it; otherwise (conv's
    // channel and window axes) loop over the outer ones and walk only the last.
    const group = linearInRow ? red : red.slice(-1);
    const outer = red.slice(0, red.length - group.length);
    const count = groupSize(group, space);
    const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
    const { hoisted } = hoist({ j: -1, loads: new Map(), stores: new Map() }, [r.expr], stmts);
    const vector = count >= 4 && r.dtype === "f32" && vectorKind(r.expr) === "f32";
    const { wide, lo, hi, lanesLo, lanesHi, init, fold } = laneFold(r);
    const sq = squares === undefined
      ? undefined
      : { sum: squares, lo: local(v128), hi: local(v128) };
    const combine: number[] = [];
    if (vector) {
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
    }
    const walk: number[] = [];
    const lin: Linear = { ...walks(access, group, walk), hoisted };
    walk.push(
      ...linearLoop(
        lin,
        () => ic(count),
        vector
          ? (st) => {
            const memo = new Map<number, number>();
            const v = () => vvalue(r.expr, lin, memo, st);
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
  };

  /**
   * A small reduction window whose accesses are affine but not one stride (a pool's 2×2) as
   * straight-line code: every load at its base plus a constant, in the reference's order. Loops
   * of two or three cost more in setup than the loads (lenet's first pool: 96 -> 69 µs).
   */
  const unrolled = (r: Reduction, acc: number, access: Accesses): number[] => {
    const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
    const origin = walks(access, red, stmts);
    const { hoisted } = hoist(origin, [r.expr], stmts);
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
  };

  /** A row kernel's full outputs along a linear walk, or `undefined` when they are not linear. */
  const linearOutputs = (
    outs: readonly number[],
    exprs: readonly Expr[] = outs.map((k) => kernel.outputs[k].expr),
  ): number[] | undefined => {
    const access = accessesOf(exprs, outs, red);
    if (!access || !linearOver(access, red)) return undefined;
    const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
    const lin = hoist(walks(access, red, stmts), exprs, stmts);
    stmts.push(
      ...linearStores(lin, () => ic(inner), outs, inner >= 4 && vectorizable(exprs, outs), exprs),
    );
    return stmts;
  };

  return {
    accessesOf,
    linearOver,
    walks,
    vectorizable,
    linearStores,
    storeFour: (k, lin, memo, stmts, expr) => storeLinear(k, 4, lin, memo, stmts, expr),
    elementwiseBody,
    linearReduction,
    linearOutputs,
    hoist,
    vvalue,
    laneFold,
  };
}
