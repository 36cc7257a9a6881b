/**
 * The body of a row kernel (softmax, layer norm, a reduction with its epilogue) for one row:
 * each reduction as a loop over the reduced coordinates, then the row outputs once, then the
 * full outputs in a final loop — the reference interpreter's schedule — each loop along a linear
 * walk where the accesses allow. Two shapes are recognized on the way: softmax's (the sum's
 * terms kept for the outputs that divide by it) and layer norm's (the variance folded into the
 * mean's pass).
 *
 * @module
 */
import { affineOffset, strideOver } from "../../jit/ir/access.ts";
import { type Expr, type KernelIR, type Reduction, walk } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { keptForm } from "../../jit/schedule/in_place.ts";
import { isFloat, isWide, type Memo } from "./alu.ts";
import type { LinearLowering } from "./linear.ts";
import type { KernelFunction } from "./module.ts";

/** A row kernel's row outputs (from the reductions' results) at the current coordinates. */
export function rowStores(fn: KernelFunction): number[] {
  const { m, coord, ic, store, kernel } = fn;
  const stmts: number[] = kernel.reduced.map((a) => m.local.set(coord[a], ic(0)));
  const memo: Memo = new Map();
  for (const [k, o] of kernel.outputs.entries()) if (o.level === "row") store(o, k, memo, stmts);
  return stmts;
}

/** The full outputs of a kernel, each with its index among the outputs. */
type FullOutputs = readonly (readonly [KernelIR["outputs"][number], number])[];

/**
 * Softmax's shape: an output `term / sum(term)` (or one that uses that quotient, as the dynamo
 * exporter's `Where(IsNaN(y), 0, y)` does) would evaluate `term` (an exp) twice per point. The
 * sum's loop stores each term into the output instead, and the output loop reads it back
 * wherever the output uses `term` — the same f32 values, so the same results. `reused` maps such
 * an output to its sum; `finals` are the outputs' expressions reading the terms back.
 */
function softmaxTerms(fn: KernelFunction, fullOuts: FullOutputs) {
  const { kernel, keyOf } = fn;
  const { space, reduced: red } = kernel;
  const nIn = kernel.inputs.length;
  const reused: Map<number, number> = new Map();
  const finals = fullOuts.map(([o, j]) => {
    const e = o.expr;
    if (!red.length || e.dtype !== "f32" || o.dtype !== "f32") return e;
    let k = -1, term: Expr | undefined;
    walk(e, (x) => {
      if (term || x.kind !== "alu" || x.op !== "Div" || x.args[1].kind !== "acc") return;
      const r = kernel.reductions[x.args[1].index];
      if (r?.op !== "sum" || keyOf(r.expr) !== keyOf(x.args[0])) return;
      [k, term] = [x.args[1].index, x.args[0]];
    });
    const store = affineOffset(o.steps, space, o.shape);
    if (
      !term || [...reused.values()].includes(k) || !store || strideOver(store, red, space) !== 1
    ) return e;
    reused.set(j, k);
    const back: Expr = { kind: "load", input: nIn + j, steps: o.steps, dtype: "f32" };
    const termKey = keyOf(term);
    const read = (x: Expr): Expr =>
      keyOf(x) === termKey ? back : x.kind === "alu" ? { ...x, args: x.args.map(read) } : x;
    return read(e);
  });
  return { reused, finals };
}

/**
 * LayerNorm's shape: reduction `k` sums `(x - acc j)²` where reduction `j` sums `x`. Then `j`'s
 * pass also sums `x²` (in f64, like every float sum) and `k` needs no pass of its own:
 * `Σ(x - a)² = Σx² - 2aΣx + n·a²` with `a` the rounded result of `j`, the same deviations the
 * reference squares; f64 keeps the cancellation harmless for f32 data unless the mean is some
 * 10⁴ standard deviations from zero. The map takes `j` to `k`.
 */
function varianceFolds(fn: KernelFunction): Map<number, number> {
  const { kernel, keyOf, wideSum } = fn;
  const variances = new Map<number, number>();
  kernel.reductions.forEach((r, k) => {
    const e = r.expr;
    if (!wideSum(r) || r.dtype !== "f32" || e.kind !== "alu" || e.op !== "Mul") return;
    const [d, d2] = e.args;
    if (keyOf(d) !== keyOf(d2) || d.kind !== "alu" || d.op !== "Sub") return;
    const [x, a] = d.args;
    const j = a.kind === "acc" ? a.index : -1;
    const rj = kernel.reductions[j];
    if (rj && wideSum(rj) && rj.dtype === "f32" && keyOf(rj.expr) === keyOf(x)) {
      if (!variances.has(j)) variances.set(j, k);
    }
  });
  return variances;
}

/** What the reductions of one row kernel share while their loops are built. */
interface Reducing {
  readonly path: LinearLowering;
  /** Elements a row reduces over. */
  readonly inner: number;
  readonly reused: Map<number, number>;
  readonly variances: ReadonlyMap<number, number>;
  /** Reductions computed by another's pass (a variance by its mean's). */
  readonly folded: Set<number>;
  /** The output whose terms reduction `k` stores, if any (see {@linkcode softmaxTerms}). */
  readonly keepOf: (k: number) => number | undefined;
}

/** The initial value of reduction `r`'s accumulator (`wide`: an f64 sum). */
function initial(fn: KernelFunction, r: Reduction, wide: boolean): number {
  const { m, ic } = fn;
  const fl = isFloat(r.dtype);
  const F = isWide(r.dtype) ? m.f64 : m.f32;
  if (r.op === "max") return fl ? F.const(-Infinity) : ic(r.dtype === "u32" ? 0 : -2147483648);
  if (r.op === "min") return fl ? F.const(Infinity) : ic(r.dtype === "u32" ? -1 : 2147483647);
  return wide ? m.f64.const(0) : fl ? F.const(0) : ic(0);
}

/** Reduction `k`'s loop and its result, into `rowBody` (a folded variance's result too). */
function reduction(fn: KernelFunction, r: Reduction, k: number, s: Reducing): number[] {
  const { m, local, get, ic, unravel, countedLoop, it, value, accumulate, wideSum, accs } = fn;
  const { f64, f32, i32 } = fn.wasm;
  const { inner, path } = s;
  const red = fn.kernel.reduced;
  const rowBody: number[] = [];
  const fl = isFloat(r.dtype);
  const F = isWide(r.dtype) ? m.f64 : m.f32;
  const wide = wideSum(r);
  const acc = wide ? local(f64) : accs[k];
  rowBody.push(m.local.set(acc, initial(fn, r, wide)));
  const keep = s.keepOf(k);
  const variance = s.variances.get(k);
  const squares = variance === undefined ? undefined : local(f64);
  if (squares !== undefined) rowBody.push(m.local.set(squares, m.f64.const(0)));
  const linearStmts = inner > 0 ? path.linearReduction(r, { acc, keep, squares }) : [];
  if (keep !== undefined && !linearStmts) s.reused.delete(keep);
  if (linearStmts) rowBody.push(...linearStmts);
  else {
    const stmts: number[] = [...unravel(red, it)];
    stmts.push(...accumulate(r, acc, value(r.expr, new Map(), stmts)));
    rowBody.push(...countedLoop(it, inner, stmts));
  }
  if (wide) {
    const total = r.op === "mean" ? m.f64.div(get(acc, f64), m.f64.const(inner)) : get(acc, f64);
    rowBody.push(m.local.set(accs[k], fn.ops.round(m.f32.demote(total), r.dtype)));
    if (squares !== undefined && linearStmts) {
      s.folded.add(variance!);
      const a = () => m.f64.promote(get(accs[k], f32));
      const sum = m.f64.max(
        m.f64.const(0),
        m.f64.add(
          m.f64.sub(get(squares, f64), m.f64.mul(m.f64.mul(m.f64.const(2), a()), get(acc, f64))),
          m.f64.mul(m.f64.const(inner), m.f64.mul(a(), a())),
        ),
      );
      const rv = fn.kernel.reductions[variance!];
      const v = rv.op === "mean" ? m.f64.div(sum, m.f64.const(inner)) : sum;
      rowBody.push(m.local.set(accs[variance!], m.f32.demote(v)));
    }
  } else if (r.op === "mean") {
    const mean = fl
      ? F.div(get(accs[k], fn.typeOf(r.dtype)), F.const(inner))
      : inner === 0
      ? ic(0)
      : m.i32.div_s(get(accs[k], i32), ic(inner));
    rowBody.push(m.local.set(accs[k], mean));
  }
  return rowBody;
}

/**
 * A row kernel's body: its reductions, then its row outputs, then its full outputs, each along
 * a linear walk where the accesses allow (built only for kernels that take this path).
 */
export function rowKernelBody(fn: KernelFunction, path: LinearLowering): number[] {
  const { kernel, unravel, countedLoop, it } = fn;
  const red = kernel.reduced;
  const inner = sizeOf(red.map((i) => kernel.space[i]));
  const fullOuts = kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) =>
    o.level === "full"
  );
  const { reused, finals } = softmaxTerms(fn, fullOuts);
  const fullAccess = path.accessesOf(
    fullOuts.map(([o]) => o.expr),
    fullOuts.map(([, j]) => j),
    red,
  );
  const linearFull = red.length > 0 && inner > 0 && fullAccess !== undefined &&
    path.linearOver(fullAccess, red);
  const keepOf = (k: number) => {
    for (const [j, kk] of reused) if (kk === k && linearFull) return j;
    return undefined;
  };
  const s: Reducing = {
    path,
    inner,
    reused,
    variances: varianceFolds(fn),
    folded: new Set(),
    keepOf,
  };
  const rowBody: number[] = [];
  kernel.reductions.forEach((r, k) => {
    if (!s.folded.has(k)) rowBody.push(...reduction(fn, r, k, s));
  });
  if (kernel.outputs.some((o) => o.level === "row")) rowBody.push(...rowStores(fn));
  if (fullOuts.length) {
    const linearStmts = linearFull
      ? path.linearOutputs(
        fullOuts.map(([, k]) => k),
        fullOuts.map(([o, k], i) => (reused.has(k) ? finals[i] : o.expr)),
      )
      : undefined;
    if (linearStmts) rowBody.push(...linearStmts);
    else {
      const stmts: number[] = [...unravel(red, it)];
      const memo: Memo = new Map();
      for (const [o, k] of fullOuts) storePoint(fn, o, k, memo, stmts);
      rowBody.push(...(red.length ? countedLoop(it, inner, stmts) : stmts));
    }
  }
  return rowBody;
}

/**
 * Stores output `k` at the current point into `stmts`; one stored over its input as
 * `Where(c, input, y)` (`keptForm`) nowhere `c` keeps the input where it lies, so `y` (a decode
 * step's new cache entry) is computed at the points written alone. Where the arena left the two
 * apart (their addresses differ), the whole value is stored.
 */
function storePoint(
  fn: KernelFunction,
  o: KernelIR["outputs"][number],
  k: number,
  memo: Memo,
  stmts: number[],
): void {
  const kept = keptForm(fn.kernel, k);
  if (!kept) return fn.store(o, k, memo, stmts);
  const { m, get, kernel } = fn, i32 = fn.wasm.i32;
  const stays = m.i32.and(
    fn.value(kept.c, memo, stmts),
    m.i32.eq(get(kept.input, i32), get(kernel.inputs.length + k, i32)),
  );
  // The branch's locals stay in it: a later output computes its own afresh.
  const written: number[] = [];
  fn.store(o, k, new Map(memo), written);
  stmts.push(m.if(m.i32.eqz(stays), m.block(null, written)));
}
