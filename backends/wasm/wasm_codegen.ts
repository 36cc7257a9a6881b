/**
 * WebAssembly generation from the kernel IR with Binaryen. Each kernel becomes one exported
 * function `run(buffers…, scratch, rowStart, rowEnd, packedB)` taking the byte address of every
 * input and output in a shared memory arena, the thread's scratch, the range of rows to compute
 * (threads and shape buckets split rows), and for tiled matmuls where B is prepacked (see
 * `wasm_matmul.ts`).
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
import type { DType } from "../../jit/dtype.ts";
import {
  type AffineOffset,
  affineOffset,
  groupSize,
  linearSuffix,
  strideOver,
} from "../../jit/access.ts";
import {
  type Expr,
  type IndexStep,
  type KernelIR,
  type Reduction,
  walk,
} from "../../jit/kernel_ir.ts";
import { type Shape, sizeOf, stridesOf } from "../../jit/shape.ts";
import { aluLowering, exactReciprocal, isFloat, MATH } from "./wasm_alu.ts";
import { addMathFunctions, HIGH_HALF, type MathFunction } from "./wasm_math.ts";
import { gemmBody, indirection, type MatmulContext, matmulPlan, tiledGemm } from "./wasm_matmul.ts";

/** The subset of the Binaryen.js API this generator uses. */
// deno-lint-ignore no-explicit-any
export type Binaryen = any;

/** Scalar helpers the generated code imports from the host (`env.*`, f64 → f64). */
export const IMPORTS: readonly string[] = ["sin", "cos", "pow", "fmod", "f16"];

/** A load node of the kernel IR. */
export type LoadExpr = Extract<Expr, { kind: "load" }>;

/** Locals holding evaluated expressions, by structural key. */
type Memo = Map<string, number>;

const keys = new WeakMap<Expr, string>();
/**
 * A structural key: equal subexpressions (fusion often builds the same load or product twice,
 * as distinct objects) are evaluated once per point.
 */
function keyOf(e: Expr): string {
  let key = keys.get(e);
  if (key === undefined) {
    key = e.kind === "alu"
      ? `${e.op}:${e.dtype}:${JSON.stringify(e.attrs ?? {})}(${e.args.map(keyOf).join(",")})`
      : JSON.stringify(e);
    keys.set(e, key);
  }
  return key;
}

/** A buffer walked by a linear loop: a base byte address (a local) and a stride in elements. */
export interface Walk {
  /** Local holding the base address. */
  readonly base: number;
  /** Elements per step of the loop index. */
  readonly stride: number;
}

/** The walks of one linear loop. */
export interface Linear {
  /** Local holding the loop index. */
  readonly j: number;
  /** Each load's walk. */
  readonly loads: Map<Expr, Walk>;
  /** Each stored output's walk. */
  readonly stores: Map<number, Walk>;
  /** Where a matmul epilogue reads its accumulators (instead of the reduction's local). */
  readonly acc?: Walk;
  /** Loop-invariant f32 subexpressions evaluated before the loop, by key. */
  readonly hoisted?: Map<string, number>;
}

/** The affine accesses of some expressions and stores. */
export interface Accesses {
  /** Loads with their offsets. */
  readonly loads: [LoadExpr, AffineOffset][];
  /** Output indices with their offsets. */
  readonly stores: [number, AffineOffset][];
}

/** Options of {@linkcode generateWasm}. */
export interface GenerateOptions {
  /** Import the arena as a shared memory (for worker threads). */
  readonly shared?: boolean;
  /**
   * Use relaxed SIMD's fused multiply-add in matmul tiles (where the engine has it: V8 ≥ 11.4,
   * not Node 20). Matmul sums are order-dependent anyway; fusing rounds once instead of twice.
   */
  readonly fma?: boolean;
}

/** Generates the module for `kernel` (not for opaque kernels). */
export function generateWasm(
  binaryen: Binaryen,
  kernel: KernelIR,
  options: GenerateOptions = {},
): Uint8Array {
  const m = new binaryen.Module();
  const indirect = indirection(kernel);
  m.setFeatures(
    binaryen.Features.NontrappingFPToInt | binaryen.Features.SIMD128 |
      (options.shared ? binaryen.Features.Atomics : 0) |
      (options.fma ? binaryen.Features.RelaxedSIMD : 0) |
      (indirect ? binaryen.Features.BulkMemory : 0),
  );
  m.setMemory(
    1,
    65536,
    null,
    indirect ? [{ offset: 0, data: new Uint8Array(indirect.table.buffer), passive: true }] : [],
    options.shared ?? false,
    false,
    "0",
  );
  m.addMemoryImport("0", "env", "memory");
  const f64 = binaryen.f64, f32 = binaryen.f32, i32 = binaryen.i32;
  for (const name of IMPORTS) {
    m.addFunctionImport(
      name,
      "env",
      name,
      binaryen.createType(name === "pow" || name === "fmod" ? [f64, f64] : [f64]),
      f64,
    );
  }

  const nIn = kernel.inputs.length, nOut = kernel.outputs.length;
  /** Buffer `i` of the kernel's parameters: inputs, then outputs (read back by reuse below). */
  const bufferOf = (i: number) => (i < nIn ? kernel.inputs[i] : kernel.outputs[i - nIn]);
  // run(buffers…, scratch, rowStart, rowEnd, packedB)
  const params = nIn + nOut + 4;
  const locals: number[] = [];
  const local = (type: number) => params + locals.push(type) - 1;
  const get = (l: number, type: number) => m.local.get(l, type);
  const addrOf = (buffer: number) => get(buffer, i32);
  const space = kernel.space;
  const kept = space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
  const red = kernel.reduced;
  const inner = sizeOf(red.map((i) => space[i]));
  const coord = space.map(() => local(i32));
  const row = local(i32), it = local(i32);
  const ic = (n: number) => m.i32.const(n | 0);
  const typeOf = (d: DType) => (isFloat(d) ? f32 : i32);
  const { constant, round, alu, vectorKind, valu, lanes } = aluLowering({
    m,
    binaryen,
    local,
  });

  /** Statements that set coordinate locals for `axes` from the linear index in local `from`. */
  const unravel = (axes: readonly number[], from: number): number[] => {
    const out: number[] = [];
    const rest = local(i32);
    out.push(m.local.set(rest, get(from, i32)));
    for (let j = axes.length - 1; j >= 0; j--) {
      const d = space[axes[j]];
      out.push(m.local.set(coord[axes[j]], d === 1 ? ic(0) : m.i32.rem_u(get(rest, i32), ic(d))));
      if (j > 0) {
        out.push(m.local.set(rest, d === 1 ? get(rest, i32) : m.i32.div_u(get(rest, i32), ic(d))));
      }
    }
    return out;
  };

  /** Index steps as statements into fresh locals; returns the final coordinate locals and guards. */
  const steps = (
    list: readonly IndexStep[],
    stmts: number[],
  ): { coords: number[]; guards: { ok: number; fill: number }[] } => {
    let c = coord;
    const guards: { ok: number; fill: number }[] = [];
    for (const s of list) {
      if (s.kind === "reshape") {
        const lin = local(i32);
        const from = stridesOf(s.from);
        stmts.push(
          m.local.set(
            lin,
            c.reduce(
              (
                acc,
                x,
                i,
              ) => (s.from[i] === 1 ? acc : m.i32.add(acc, m.i32.mul(get(x, i32), ic(from[i])))),
              ic(0),
            ),
          ),
        );
        const to = stridesOf(s.to);
        c = s.to.map((d, i) => {
          const l = local(i32);
          stmts.push(
            m.local.set(
              l,
              d === 1 ? ic(0) : m.i32.rem_s(m.i32.div_s(get(lin, i32), ic(to[i])), ic(d)),
            ),
          );
          return l;
        });
        continue;
      }
      const out = s.coeff.map((rowCoeff, j) => {
        const l = local(i32);
        const expr = rowCoeff.reduce(
          (
            acc,
            w,
            d,
          ) => (w === 0
            ? acc
            : m.i32.add(acc, w === 1 ? get(c[d], i32) : m.i32.mul(get(c[d], i32), ic(w)))),
          ic(s.offset[j]),
        );
        stmts.push(m.local.set(l, expr));
        return l;
      });
      if (s.bounds) {
        const ok = local(i32);
        stmts.push(
          m.local.set(
            ok,
            out.reduce((acc, l, j) =>
              m.i32.and(
                acc,
                m.i32.and(
                  m.i32.ge_s(get(l, i32), ic(0)),
                  m.i32.lt_s(get(l, i32), ic(s.bounds![j])),
                ),
              ), ic(1)),
          ),
        );
        guards.push({ ok, fill: s.fill ?? 0 });
      }
      c = out;
    }
    return { coords: c, guards };
  };

  const linear = (coords: number[], shape: Shape) => {
    const strides = stridesOf(shape);
    return coords.reduce(
      (
        acc,
        l,
        i,
      ) => (shape[i] === 1 ? acc : m.i32.add(acc, m.i32.mul(get(l, i32), ic(strides[i])))),
      ic(0),
    );
  };

  /** The byte address a load reads (out-of-bounds reads are redirected to element 0) and its guards. */
  function loadAddress(expr: Extract<Expr, { kind: "load" }>, stmts: number[]) {
    const buf = bufferOf(expr.input);
    const { coords, guards } = steps(expr.steps, stmts);
    const all = guards.reduce((acc, g) => m.i32.and(acc, get(g.ok, i32)), ic(1));
    const address = m.i32.add(
      addrOf(expr.input),
      m.i32.shl(m.select(all, linear(coords, buf.shape), ic(0)), ic(2)),
    );
    return { address, guards };
  }

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
          ? m.f32.load(0, 4, at(lin.acc, lin.j))
          : get(accs[expr.index], typeOf(expr.dtype));
      case "load": {
        if (lin) {
          const address = at(lin.loads.get(expr)!, lin.j);
          code = isFloat(expr.dtype) ? m.f32.load(0, 4, address) : m.i32.load(0, 4, address);
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
          alu(
            expr.op,
            args,
            expr.args.map((a) => a.dtype),
            expr.dtype,
            expr.attrs as Record<string, unknown>,
          ),
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
  let labels = 0;
  /** `body` while `cond()` holds (checked first); `cond` builds a fresh expression per use. */
  const whileLoop = (cond: () => number, body: number[]): number => {
    const label = `while${labels++}`;
    return m.if(cond(), m.loop(label, m.block(null, [...body, m.br(label, cond())])));
  };
  /** `inside` for `counter` = 0, 1, … `count` - 1 (a constant). */
  const countedLoop = (counter: number, count: number, inside: number[]): number[] =>
    count === 0 ? [] : [
      m.local.set(counter, ic(0)),
      whileLoop(() => m.i32.lt_s(get(counter, i32), ic(count)), [
        ...inside,
        m.local.set(counter, m.i32.add(get(counter, i32), ic(1))),
      ]),
    ];
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

  // The linear path: when every access of a loop is affine and linear in the loop's index, each
  // buffer is walked from a base address with a constant stride — four lanes at a time where the
  // whole expression has an f32x4 lowering, one at a time for the tail and everything else.
  const v128 = binaryen.v128, f4 = m.f32x4;
  const accessesOf = (exprs: readonly Expr[], outs: readonly number[]): Accesses | undefined => {
    const found = new Set<LoadExpr>();
    for (const e of exprs) walk(e, (x) => x.kind === "load" && found.add(x));
    const loads: [LoadExpr, AffineOffset][] = [];
    for (const l of found) {
      const a = affineOffset(l.steps, space, bufferOf(l.input).shape);
      if (!a) return undefined;
      loads.push([l, a]);
    }
    const stores: [number, AffineOffset][] = [];
    for (const k of outs) {
      const a = affineOffset(kernel.outputs[k].steps, space, kernel.outputs[k].shape);
      if (!a) return undefined;
      stores.push([k, a]);
    }
    return { loads, stores };
  };
  const linearOver = (acc: Accesses, group: readonly number[]) =>
    [...acc.loads, ...acc.stores].every(([, a]) => strideOver(a, group, space) !== undefined);
  /** Base addresses at the current coordinates (statements into `stmts`). */
  const walks = (acc: Accesses, group: readonly number[], stmts: number[]): Linear => {
    const lin: Linear = { j: local(i32), loads: new Map(), stores: new Map() };
    for (const [l, a] of acc.loads) {
      const base = local(i32);
      stmts.push(m.local.set(base, loadAddress(l, stmts).address));
      lin.loads.set(l, { base, stride: strideOver(a, group, space)! });
    }
    for (const [k, a] of acc.stores) {
      const base = local(i32);
      const { coords } = steps(kernel.outputs[k].steps, stmts);
      stmts.push(
        m.local.set(
          base,
          m.i32.add(addrOf(nIn + k), m.i32.shl(linear(coords, kernel.outputs[k].shape), ic(2))),
        ),
      );
      lin.stores.set(k, { base, stride: strideOver(a, group, space)! });
    }
    return lin;
  };
  const at = (w: Walk, j: number, lane = 0) =>
    w.stride === 0 ? get(w.base, i32) : m.i32.add(
      get(w.base, i32),
      m.i32.mul(lane ? m.i32.add(get(j, i32), ic(lane)) : get(j, i32), ic(4 * w.stride)),
    );

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
        code = w.stride === 1
          ? m.v128.load(0, 4, at(w, lin.j))
          : lanes((l) => m.f32.load(0, 4, at(w, lin.j, w.stride === 0 ? 0 : l)));
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
      for (let l = 0; l < 4; l++) {
        stmts.push(m.f32.store(0, 4, at(w, lin.j, l), f4.extract_lane(get(t, v128), l)));
      }
    }
  };
  /**
   * Evaluates, before a loop, the largest f32 subexpressions of `exprs` that read no buffer (they
   * depend on reductions and constants only: LayerNorm's `sqrt(var + eps)`), for `lin` to reuse.
   */
  const hoist = (lin: Linear, exprs: readonly Expr[], stmts: number[]): Linear => {
    const hoisted = new Map<string, number>(), memo = new Map<string, number>();
    const readsNothing = (e: Expr): boolean =>
      e.kind === "alu" ? e.args.every(readsNothing) : e.kind !== "load";
    const visit = (e: Expr) => {
      if (e.kind !== "alu" || hoisted.has(keyOf(e))) return;
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
      const memo = new Map<string, number>();
      outs.forEach((k, i) => storeLinear(k, width, lin, memo, stmts, exprs[i]));
    };
    return linearLoop(lin, count, vector ? each(4) : undefined, each(1));
  };

  /** Elementwise kernels: segments of the longest linear suffix of axes, no per-point unravel. */
  function elementwiseBody(): number[] | undefined {
    if (red.length || kernel.reductions.length) return undefined;
    const outs = kernel.outputs.map((_, k) => k), exprs = kernel.outputs.map((o) => o.expr);
    const acc = accessesOf(exprs, outs);
    if (!acc) return undefined;
    const group = linearSuffix([...acc.loads, ...acc.stores].map(([, a]) => a), space);
    const size = groupSize(group, space);
    const p = local(i32), n = local(i32);
    const seg: number[] = unravel(space.map((_, i) => i), p);
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
   * One reduction over a row along a linear walk into local `acc`, or `undefined` when its
   * accesses are not linear. `keep`: an output that stores each reduced value on the way;
   * `squares`: an f64 local that also sums the squares of the values (a float sum's only).
   */
  const linearReduction = (
    r: Reduction,
    { acc, keep, squares }: { acc: number; keep?: number; squares?: number },
  ): number[] | undefined => {
    const access = accessesOf([r.expr], keep === undefined ? [] : [keep]);
    if (!access) return undefined;
    // Walk the reduced axes as one index where every access is linear in it; otherwise (conv's
    // channel and window axes) loop over the outer ones and walk only the last.
    const group = linearOver(access, red) ? red : red.slice(-1);
    const outer = red.slice(0, red.length - group.length);
    const count = groupSize(group, space);
    const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
    const { hoisted } = hoist({ j: -1, loads: new Map(), stores: new Map() }, [r.expr], stmts);
    const vector = count >= 4 && r.dtype === "f32" && vectorKind(r.expr) === "f32";
    const wide = wideSum(r);
    // Sums: f64 partial sums of the low (`lo`) and high (`hi`) lanes. Max/min: the extremes in
    // `lo` by pmax/pmin (one instruction on x86, where max/min cost ~8 for their NaN and ±0 rules;
    // with the accumulator first they keep it on ties, as the scalar rule does, and skip NaNs),
    // and in `hi` a mask of the lanes that met a NaN, which then sticks.
    const lo = local(v128), hi = local(v128), sqLo = local(v128), sqHi = local(v128);
    const lanesLo = local(v128), lanesHi = local(v128);
    const combine: number[] = [];
    if (vector) {
      stmts.push(
        m.local.set(
          lo,
          wide
            ? m.f64x2.splat(m.f64.const(0))
            : f4.splat(m.f32.const(r.op === "max" ? -Infinity : Infinity)),
        ),
        m.local.set(hi, wide ? get(lo, v128) : m.v128.const(new Array(16).fill(0))),
        m.local.set(sqLo, get(hi, v128)),
        m.local.set(sqHi, get(hi, v128)),
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
        combine.push(
          total(acc, lo, hi),
          ...(squares === undefined ? [] : [total(squares, sqLo, sqHi)]),
        );
      } else {
        for (let l = 0; l < 4; l++) {
          combine.push(...accumulate(r, acc, f4.extract_lane(get(lo, v128), l)));
        }
        combine.push(m.if(m.v128.any_true(get(hi, v128)), m.local.set(acc, m.f32.const(NaN))));
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
            const memo = new Map<string, number>();
            const v = () => vvalue(r.expr, lin, memo, st);
            if (keep !== undefined) {
              st.push(
                m.v128.store(0, 4, at(lin.stores.get(keep)!, lin.j), v()),
              );
            }
            if (wide) {
              const f2 = m.f64x2;
              st.push(
                m.local.set(lanesLo, f2.promote_low_f32x4(v())),
                m.local.set(lanesHi, f2.promote_low_f32x4(m.i8x16.shuffle(v(), v(), HIGH_HALF))),
                m.local.set(lo, f2.add(get(lo, v128), get(lanesLo, v128))),
                m.local.set(hi, f2.add(get(hi, v128), get(lanesHi, v128))),
              );
              if (squares !== undefined) {
                st.push(
                  m.local.set(
                    sqLo,
                    f2.add(get(sqLo, v128), f2.mul(get(lanesLo, v128), get(lanesLo, v128))),
                  ),
                  m.local.set(
                    sqHi,
                    f2.add(get(sqHi, v128), f2.mul(get(lanesHi, v128), get(lanesHi, v128))),
                  ),
                );
              }
            } else {
              st.push(
                m.local.set(lo, (r.op === "max" ? f4.pmax : f4.pmin)(get(lo, v128), v())),
                m.local.set(hi, m.v128.or(get(hi, v128), f4.ne(v(), v()))),
              );
            }
          }
          : undefined,
        (st) => {
          const memo = new Map<string, number>();
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

  /** A row kernel's full outputs along a linear walk, or `undefined` when they are not linear. */
  const linearOutputs = (
    outs: readonly number[],
    exprs: readonly Expr[] = outs.map((k) => kernel.outputs[k].expr),
  ): number[] | undefined => {
    const access = accessesOf(exprs, outs);
    if (!access || !linearOver(access, red)) return undefined;
    const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
    const lin = hoist(walks(access, red, stmts), exprs, stmts);
    stmts.push(
      ...linearStores(lin, () => ic(inner), outs, inner >= 4 && vectorizable(exprs, outs), exprs),
    );
    return stmts;
  };

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
  const linearFull = red.length > 0 && inner > 0 &&
    accessesOf(fullOuts.map(([o]) => o.expr), fullOuts.map(([, j]) => j)) !== undefined &&
    linearOver(accessesOf(fullOuts.map(([o]) => o.expr), fullOuts.map(([, j]) => j))!, red);
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
      if (![...variances.keys()].includes(j)) variances.set(j, k);
    }
  });
  const folded = new Set<number>();
  const rowBody: number[] = [...unravel(kept, row)];
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
    const linearStmts = inner > 0 ? linearReduction(r, { acc, keep, squares }) : [];
    if (keep !== undefined && !linearStmts) reused.delete(keep);
    if (linearStmts) rowBody.push(...linearStmts);
    else {
      const stmts: number[] = [...unravel(red, it)];
      stmts.push(...accumulate(r, acc, value(r.expr, new Map(), stmts)));
      rowBody.push(...countedLoop(it, inner, stmts));
    }
    if (wide) {
      const total = r.op === "mean" ? m.f64.div(get(acc, f64), m.f64.const(inner)) : get(acc, f64);
      rowBody.push(m.local.set(accs[k], round(m.f32.demote(total), r.dtype)));
      if (squares !== undefined && linearStmts) {
        folded.add(variance!);
        const a = () => m.f64.promote(get(accs[k], f32));
        const sum = m.f64.max(
          m.f64.const(0),
          m.f64.add(
            m.f64.sub(get(squares, f64), m.f64.mul(m.f64.mul(m.f64.const(2), a()), get(acc, f64))),
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
  const rowOuts = kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) => o.level === "row");
  if (rowOuts.length) {
    const stmts: number[] = red.map((a) => m.local.set(coord[a], ic(0)));
    const memo = new Map<string, number>();
    for (const [o, k] of rowOuts) store(o, k, memo, stmts);
    rowBody.push(...stmts);
  }
  if (fullOuts.length) {
    const linearStmts = linearFull
      ? linearOutputs(
        fullOuts.map(([, k]) => k),
        fullOuts.map(([o, k], i) => (reused.has(k) ? finals[i] : o.expr)),
      )
      : undefined;
    if (linearStmts) rowBody.push(...linearStmts);
    else {
      const stmts: number[] = [...unravel(red, it)];
      const memo = new Map<string, number>();
      for (const [o, k] of fullOuts) store(o, k, memo, stmts);
      rowBody.push(...(red.length ? countedLoop(it, inner, stmts) : stmts));
    }
  }
  const scratch = nIn + nOut, start = nIn + nOut + 1, end = nIn + nOut + 2, packedB = end + 1;
  const gemm = matmulPlan(kernel);
  const elementwise = gemm ? undefined : elementwiseBody();
  if (gemm) {
    const context: MatmulContext = {
      m,
      binaryen,
      kernel,
      fma: options.fma ?? false,
      indirection: indirect,
      kept,
      coord,
      accs,
      params: { scratch, start, end, packedB },
      local,
      get,
      ic,
      unravel,
      loadAddress,
      value,
      store,
      whileLoop,
      accessesOf,
      linearOver,
      walks,
      vectorizable,
      countedLoop,
      linearStores,
    };
    body.push(...(tiledGemm(context, gemm) ?? gemmBody(context, gemm)));
  } else if (elementwise) body.push(...elementwise);
  else {
    body.push(
      m.local.set(row, get(start, i32)),
      whileLoop(() => m.i32.lt_s(get(row, i32), get(end, i32)), [
        ...rowBody,
        m.local.set(row, m.i32.add(get(row, i32), ic(1))),
      ]),
    );
  }
  m.addFunction(
    "run",
    binaryen.createType(new Array(params).fill(i32)),
    binaryen.none,
    locals,
    m.block(null, body),
  );
  m.addFunctionExport("run", "run");
  const math = new Set<MathFunction>();
  for (const e of [...kernel.reductions, ...kernel.outputs].map((x) => x.expr)) {
    walk(e, (x) => x.kind === "alu" && MATH[x.op] && math.add(MATH[x.op]));
  }
  addMathFunctions(m, binaryen, math);
  if (!m.validate()) {
    m.dispose();
    throw new Error(`wasm: generated module for ${kernel.name} failed validation`);
  }
  // No Binaryen passes: V8 inlines the math functions and allocates registers itself. The full
  // -O2 pipeline cost 4x the codegen time for no measured speed; the short list kept after it
  // (inlining, simplify-locals, vacuum, coalesce-locals, reorder-locals) still took 44% of codegen
  // (142 of 325 ms over the benchmarks' 33 kernels), and dropping it left every steady-state
  // time unchanged while first runs fell (W1-16M 225 -> 155 ms, W2-1024 220 -> 135 ms).
  const bytes = m.emitBinary();
  m.dispose();
  return bytes;
}
