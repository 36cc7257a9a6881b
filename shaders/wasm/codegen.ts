/**
 * WebAssembly generation from the kernel IR (`shaders/wasm/encoder.ts` writes the module). Each kernel becomes one exported
 * function `run(buffers…, scratch, rowStart, rowEnd, packedB)` taking the byte address of every
 * input and output in a shared memory arena, the thread's scratch, the range of rows to compute
 * (threads and shape buckets split rows), and for tiled matmuls the address of B's packed
 * panels (see `shaders/wasm/matmul.ts`; 0 for other kernels).
 * Per row it runs each reduction as a loop over the reduced coordinates, then stores row outputs
 * once and full outputs in a final loop — the same schedule as the reference interpreter.
 *
 * Loops whose accesses are all affine and linear in the loop index (elementwise kernels over the
 * longest such suffix of axes, a row kernel's reductions and full outputs over the reduced axes)
 * walk each buffer from a base address with a constant stride, f32x4 at a time where the whole
 * expression has a vector lowering, with a scalar tail; everything else keeps the per-element
 * coordinate path.
 *
 * Values are f32 (f32/f16), f64 (f64) or i32 (integers and bool; u32 uses unsigned ops); storage
 * is 32-bit words (f64: 64-bit), widened and narrowed at the arena's edge. Kernels with f64
 * values take the per-element scalar path only (`KernelFunction.wide`). Ops lower through
 * `shaders/wasm/alu.ts` (every result re-rounded to its dtype); exp, log, erf, sin and cos come from the
 * in-module vector library (`shaders/wasm/math.ts`); pow and fmod call the host's scalar functions through
 * imports, lane by lane.
 * Float sums accumulate in f64 (two f64x2 lanes pairs in vector loops), as the reference does,
 * except the single sum of a small window (`KernelFunction.narrowSums`).
 *
 * @module
 */
import { affineOffset, strideOver } from "../../jit/ir/access.ts";
import { type Expr, type KernelIR, walk } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { isFloat, isWide, type Memo } from "./alu.ts";
import { linearLowering } from "./linear.ts";
import type { Wasm } from "./encoder.ts";
import { KernelFunction, type ModuleOptions } from "./module.ts";
import { vectorWindows } from "./windows.ts";
import { type MatmulContext, tiledGemm } from "./matmul.ts";
import { gemmBody } from "./matmul_ikj.ts";
import { halfMatmulView, indirectionFill, matmulPlan, tableTaps } from "./matmul_plan.ts";

/** A load node of the kernel IR. */
export type LoadExpr = Extract<Expr, { kind: "load" }>;

/** Generates the module for `kernel` (not for opaque kernels). */
export function generateWasm(
  wasm: Wasm,
  given: KernelIR,
  options: ModuleOptions = {},
): Uint8Array {
  // An f16 matmul is generated as the tiles compute it (the program packs B for it the same way).
  const kernel = halfMatmulView(given);
  const fn = new KernelFunction(wasm, kernel, options);
  const { m, local, get, ic, coord, kept, unravel, whileLoop, countedLoop, row, it } = fn;
  const { keyOf, value, store, accumulate, wideSum, accs } = fn;
  const { start, end } = fn.params;
  const f64 = wasm.f64, f32 = wasm.f32, i32 = wasm.i32;
  const nIn = kernel.inputs.length;
  const space = kernel.space;
  const red = kernel.reduced;
  const inner = sizeOf(red.map((i) => space[i]));
  const body: number[] = [];
  const path = linearLowering(fn);

  /** A row kernel's row outputs (from the reductions' results) at the current coordinates. */
  function rowStores(): number[] {
    const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
    const memo: Memo = new Map();
    for (const [k, o] of kernel.outputs.entries()) if (o.level === "row") store(o, k, memo, stmts);
    return stmts;
  }

  /**
   * A row kernel's body: its reductions, then its row outputs, then its full outputs, each along
   * a linear walk where the accesses allow (built only for kernels that take this path).
   */
  function rowKernelBody(): number[] {
    const fullOuts = kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) =>
      o.level === "full"
    );
    /**
     * Softmax's shape: an output `term / sum(term)` (or one that uses that quotient, as the
     * dynamo exporter's `Where(IsNaN(y), 0, y)` does) would evaluate `term` (an exp) twice per
     * point. The sum's loop stores each term into the output instead, and the output loop reads
     * it back wherever the output uses `term` — the same f32 values, so the same results.
     */
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

    /**
     * LayerNorm's shape: reduction `k` sums `(x - acc j)²` where reduction `j` sums `x`. Then `j`'s
     * pass also sums `x²` (in f64, like every float sum) and `k` needs no pass of its own:
     * `Σ(x - a)² = Σx² - 2aΣx + n·a²` with `a` the rounded result of `j`, the same deviations the
     * reference squares; f64 keeps the cancellation harmless for f32 data unless the mean is
     * some 10⁴ standard deviations from zero.
     */
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
    const folded = new Set<number>();
    const rowBody: number[] = [];
    kernel.reductions.forEach((r, k) => {
      if (folded.has(k)) return;
      const fl = isFloat(r.dtype);
      const F = isWide(r.dtype) ? m.f64 : m.f32;
      const wide = wideSum(r);
      const acc = wide ? local(f64) : accs[k];
      const init = r.op === "max"
        ? (fl ? F.const(-Infinity) : ic(r.dtype === "u32" ? 0 : -2147483648))
        : r.op === "min"
        ? (fl ? F.const(Infinity) : ic(r.dtype === "u32" ? -1 : 2147483647))
        : wide
        ? m.f64.const(0)
        : fl
        ? F.const(0)
        : ic(0);
      rowBody.push(m.local.set(acc, init));
      const keep = keepOf(k);
      const variance = variances.get(k);
      const squares = variance === undefined ? undefined : local(f64);
      if (squares !== undefined) rowBody.push(m.local.set(squares, m.f64.const(0)));
      const linearStmts = inner > 0 ? path.linearReduction(r, { acc, keep, squares }) : [];
      if (keep !== undefined && !linearStmts) reused.delete(keep);
      if (linearStmts) rowBody.push(...linearStmts);
      else {
        const stmts: number[] = [...unravel(red, it)];
        stmts.push(...accumulate(r, acc, value(r.expr, new Map(), stmts)));
        rowBody.push(...countedLoop(it, inner, stmts));
      }
      if (wide) {
        const total = r.op === "mean"
          ? m.f64.div(get(acc, f64), m.f64.const(inner))
          : get(acc, f64);
        rowBody.push(m.local.set(accs[k], fn.ops.round(m.f32.demote(total), r.dtype)));
        if (squares !== undefined && linearStmts) {
          folded.add(variance!);
          const a = () => m.f64.promote(get(accs[k], f32));
          const sum = m.f64.max(
            m.f64.const(0),
            m.f64.add(
              m.f64.sub(
                get(squares, f64),
                m.f64.mul(m.f64.mul(m.f64.const(2), a()), get(acc, f64)),
              ),
              m.f64.mul(m.f64.const(inner), m.f64.mul(a(), a())),
            ),
          );
          const rv = kernel.reductions[variance!];
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
    });
    const rowOuts = kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) =>
      o.level === "row"
    );
    if (rowOuts.length) rowBody.push(...rowStores());
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
        for (const [o, k] of fullOuts) store(o, k, memo, stmts);
        rowBody.push(...(red.length ? countedLoop(it, inner, stmts) : stmts));
      }
    }
    return rowBody;
  }

  const gemm = fn.wide ? undefined : matmulPlan(kernel);
  const elementwise = gemm ? undefined : path.elementwiseBody();
  if (gemm) {
    const tableFill = indirectionFill(kernel);
    const taps = tableFill === undefined ? undefined : tableTaps(kernel);
    const context: MatmulContext = { fn, tableFill, taps, ...path };
    body.push(...(tiledGemm(context, gemm) ?? gemmBody(context, gemm)));
  } else if (elementwise) body.push(...elementwise);
  else {
    // The kept coordinates count up like an odometer from the first row's: unravelling every
    // row took a division and a remainder per axis (lenet's first pool, 4704 rows: 104 -> 96 µs).
    const next = kept.filter((a) => space[a] > 1).reverse().flatMap((a) => [
      m.local.set(coord[a], m.i32.add(get(coord[a], i32), ic(1))),
      m.br("row", m.i32.lt_s(get(coord[a], i32), ic(space[a]))),
      m.local.set(coord[a], ic(0)),
    ]);
    const one = rowKernelBody();
    // Four windows at once where a pool's or depthwise conv's windows lie inside (see
    // `vectorWindows`); one window, guarded, elsewhere.
    const four = fn.wide ? undefined : vectorWindows(fn, path, { row, rowStores });
    const step = four ? [m.if(four.enter(), m.block(null, four.run), m.block(null, one))] : one;
    body.push(
      m.local.set(row, get(start, i32)),
      ...unravel(kept, row),
      whileLoop(() => m.i32.lt_s(get(row, i32), get(end, i32)), [
        ...step,
        m.block("row", next),
        m.local.set(row, m.i32.add(get(row, i32), ic(1))),
      ]),
    );
  }
  return fn.finish(body);
}
