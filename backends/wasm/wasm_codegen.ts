/**
 * WebAssembly generation from the kernel IR with Binaryen. Each kernel becomes one exported
 * function `run(buffers…, scratch, rowStart, rowEnd, packedB)` taking the byte address of every
 * input and output in a shared memory arena, the thread's scratch, the range of rows to compute
 * (threads and shape buckets split rows), and for tiled matmuls the address of B's packed
 * panels (see `wasm_matmul.ts`; 0 for other kernels).
 * Per row it runs each reduction as a loop over the reduced coordinates, then stores row outputs
 * once and full outputs in a final loop — the same schedule as the reference interpreter.
 *
 * Loops whose accesses are all affine and linear in the loop index (elementwise kernels over the
 * longest such suffix of axes, a row kernel's reductions and full outputs over the reduced axes)
 * walk each buffer from a base address with a constant stride, f32x4 at a time where the whole
 * expression has a vector lowering, with a scalar tail; everything else keeps the per-element
 * coordinate path.
 *
 * Values are f32 (f32/f16) or i32 (integers and bool; u32 uses unsigned ops); storage is 32-bit
 * words, widened and narrowed at the arena's edge. Ops lower through `wasm_alu.ts` (every result
 * re-rounded to its dtype); exp, log, erf, sin and cos come from the in-module vector library
 * (`wasm_math.ts`); pow and fmod call the host's scalar functions through imports, lane by lane.
 * Float sums accumulate in f64 (two f64x2 lanes pairs in vector loops), as the reference does.
 *
 * @module
 */
import type binaryenLib from "npm:binaryen@116.0.0";
import type { DType } from "../../jit/dtype.ts";
import { affineOffset, strideOver } from "../../jit/access.ts";
import { type Expr, ExprTable, type KernelIR, type Reduction } from "../../jit/kernel_ir.ts";
import { sizeOf } from "../../jit/shape.ts";
import { aluLowering, exactReciprocal, isFloat, type Memo } from "./wasm_alu.ts";
import { type LinearContext, linearLowering } from "./wasm_linear.ts";
import { type Linear, walkAt } from "./wasm_walk.ts";
import { indexLowering } from "./wasm_index.ts";
import { KernelFunction, type ModuleOptions } from "./wasm_module.ts";
import { vectorWindows } from "./wasm_windows.ts";
import { gemmBody, type MatmulContext, tiledGemm } from "./wasm_matmul.ts";
import { indirectionFill, matmulPlan } from "./wasm_matmul_plan.ts";

/** The Binaryen.js library (types, module constructor, low-level helpers). */
export type Binaryen = typeof binaryenLib;
/** A Binaryen module being built (its methods build expressions). */
export type BinaryenModule = binaryenLib.Module;

/** A load node of the kernel IR. */
export type LoadExpr = Extract<Expr, { kind: "load" }>;

/** Generates the module for `kernel` (not for opaque kernels). */
export function generateWasm(
  binaryen: Binaryen,
  kernel: KernelIR,
  options: ModuleOptions = {},
): Uint8Array {
  // Equal subexpressions (fusion builds a DAG; decomposed ops reuse an operand) get one id, so
  // each is evaluated once per point into one local.
  const ids = new ExprTable();
  const keyOf = (e: Expr): number => ids.id(e);
  const fn = new KernelFunction(binaryen, kernel, options);
  const { m, local, get, ic, coord, kept, unravel, whileLoop, countedLoop } = fn;
  const { start, end } = fn.params;
  const f64 = binaryen.f64, f32 = binaryen.f32, i32 = binaryen.i32;
  const nIn = kernel.inputs.length;
  const addrOf = (buffer: number) => get(buffer, i32);
  const space = kernel.space;
  const red = kernel.reduced;
  const inner = sizeOf(red.map((i) => space[i]));
  const row = local(i32), it = local(i32);
  const typeOf = (d: DType) => (isFloat(d) ? f32 : i32);
  const { constant, round, alu, vectorKind, valu, lanes } = aluLowering(fn);
  const { steps, linear, loadAddress } = indexLowering(fn);

  /** Evaluates `expr` into locals (statements pushed to `stmts`); returns a getter expression. */
  const value = (
    expr: Expr,
    memo: Memo,
    stmts: number[],
    lin?: Linear,
  ): number => {
    const hit = memo.get(keyOf(expr)) ?? lin?.hoisted?.get(keyOf(expr));
    if (hit !== undefined) return get(hit, typeOf(expr.dtype));
    let code: number;
    switch (expr.kind) {
      case "const":
        return constant(expr.value, expr.dtype);
      case "acc":
        return lin?.acc
          ? m.f32.load(0, 4, walkAt({ m, binaryen }, lin.acc, lin.j))
          : get(accs[expr.index], typeOf(expr.dtype));
      case "load": {
        if (lin) {
          const guard = lin.guards?.get(expr);
          let address = walkAt({ m, binaryen }, lin.loads.get(expr)!, lin.j);
          // Where a guard fails the walk may point outside the buffer: read its start instead.
          if (guard) address = m.select(get(guard.ok, i32), address, addrOf(expr.input));
          code = isFloat(expr.dtype) ? m.f32.load(0, 4, address) : m.i32.load(0, 4, address);
          if (guard) code = m.select(get(guard.ok, i32), code, constant(guard.fill, expr.dtype));
          break;
        }
        const { address, guards } = loadAddress(expr, stmts);
        code = isFloat(expr.dtype) ? m.f32.load(0, 4, address) : m.i32.load(0, 4, address);
        for (const g of [...guards].reverse()) {
          code = m.select(get(g.ok, i32), code, constant(g.fill, expr.dtype));
        }
        break;
      }
      case "alu": {
        const args = expr.args.map((a) => value(a, memo, stmts, lin));
        const r = expr.op === "Div" && expr.dtype === "f32" && exactReciprocal(expr.args[1]);
        if (r) {
          code = m.f32.mul(args[0], m.f32.const(r));
          break;
        }
        code = round(
          alu(expr.op, args, expr.args.map((a) => a.dtype), expr.dtype),
          expr.dtype,
        );
        break;
      }
    }
    const l = local(typeOf(expr.dtype));
    stmts.push(m.local.set(l, code));
    memo.set(keyOf(expr), l);
    return get(l, typeOf(expr.dtype));
  };

  const accs: number[] = kernel.reductions.map((r) => local(typeOf(r.dtype)));
  const body: number[] = [];
  const wideSum = (r: Reduction) => isFloat(r.dtype) && (r.op === "sum" || r.op === "mean");
  /** Statements folding value `v` into reduction `r`'s accumulator `acc` (f64 for float sums). */
  const accumulate = (r: Reduction, acc: number, v: number): number[] => {
    if (wideSum(r)) return [m.local.set(acc, m.f64.add(get(acc, f64), m.f64.promote(v)))];
    if (r.op === "sum" || r.op === "mean") return [m.local.set(acc, m.i32.add(get(acc, i32), v))];
    const fl = isFloat(r.dtype), t = typeOf(r.dtype);
    const x = local(t);
    // NaN sticks; on ties the earlier value stays, as in the reference.
    const keep = fl
      ? m.i32.or(
        m.f32.ne(get(acc, f32), get(acc, f32)),
        r.op === "max"
          ? m.f32.ge(get(acc, f32), get(x, f32))
          : m.f32.le(get(acc, f32), get(x, f32)),
      )
      : r.op === "max"
      ? (r.dtype === "u32"
        ? m.i32.ge_u(get(acc, i32), get(x, i32))
        : m.i32.ge_s(get(acc, i32), get(x, i32)))
      : (r.dtype === "u32"
        ? m.i32.le_u(get(acc, i32), get(x, i32))
        : m.i32.le_s(get(acc, i32), get(x, i32)));
    return [m.local.set(x, v), m.local.set(acc, m.select(keep, get(acc, t), get(x, t)))];
  };

  const context: LinearContext = {
    fn,
    keyOf,
    accs,
    steps,
    linear,
    loadAddress,
    value,
    wideSum,
    accumulate,
    vectorKind,
    valu,
    lanes,
  };
  const path = linearLowering(context);

  const store = (
    o: KernelIR["outputs"][number],
    k: number,
    memo: Memo,
    stmts: number[],
  ) => {
    const v = value(o.expr, memo, stmts);
    const { coords } = steps(o.steps, stmts);
    const address = m.i32.add(addrOf(nIn + k), m.i32.shl(linear(coords, o.shape), ic(2)));
    stmts.push(isFloat(o.dtype) ? m.f32.store(0, 4, address, v) : m.i32.store(0, 4, address, v));
  };
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
     * Softmax's shape: an output `term / sum(term)` would evaluate `term` (an exp) twice per point.
     * The sum's loop stores each term into the output instead, and the output loop divides what
     * it reads back — the same f32 values, so the same results.
     */
    const reused: Map<number, number> = new Map();
    const finals = fullOuts.map(([o, j]) => {
      const e = o.expr;
      if (
        !red.length || e.kind !== "alu" || e.op !== "Div" || e.dtype !== "f32" || o.dtype !== "f32"
      ) return e;
      const [term, sum] = e.args;
      const k = sum.kind === "acc" ? sum.index : -1;
      const r = kernel.reductions[k];
      const store = affineOffset(o.steps, space, o.shape);
      if (
        !r || r.op !== "sum" || keyOf(r.expr) !== keyOf(term) || [...reused.values()].includes(k) ||
        !store || strideOver(store, red, space) !== 1
      ) return e;
      reused.set(j, k);
      const back: Expr = { kind: "load", input: nIn + j, steps: o.steps, dtype: "f32" };
      return { ...e, args: [back, sum] };
    });
    const fullAccess = path.accessesOf(fullOuts.map(([o]) => o.expr), fullOuts.map(([, j]) => j));
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
      const wide = wideSum(r);
      const acc = wide ? local(f64) : accs[k];
      const init = r.op === "max"
        ? (fl ? m.f32.const(-Infinity) : ic(r.dtype === "u32" ? 0 : -2147483648))
        : r.op === "min"
        ? (fl ? m.f32.const(Infinity) : ic(r.dtype === "u32" ? -1 : 2147483647))
        : wide
        ? m.f64.const(0)
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
        rowBody.push(m.local.set(accs[k], round(m.f32.demote(total), r.dtype)));
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
        rowBody.push(
          m.local.set(accs[k], inner === 0 ? ic(0) : m.i32.div_s(get(accs[k], i32), ic(inner))),
        );
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

  const gemm = matmulPlan(kernel);
  const elementwise = gemm ? undefined : path.elementwiseBody();
  if (gemm) {
    const context: MatmulContext = {
      fn,
      tableFill: indirectionFill(kernel),
      accs,
      loadAddress,
      value,
      store,
      ...path,
    };
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
    const four = vectorWindows(context, path, { row, rowStores });
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
