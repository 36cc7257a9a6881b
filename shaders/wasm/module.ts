/**
 * The kernel function a generator builds ({@linkcode KernelFunction}, the mirror of WGSL's
 * `KernelLowering`): the module around it (features, the imported arena memory, the host math
 * imports), its parameters, locals and coordinates, the statement forms every generator uses,
 * and at the end the exported `run` function, the in-module math library it calls, the
 * validation and the binary. `shaders/wasm/codegen.ts` and the generators it calls fill in the body.
 *
 * @module
 */
import { type DType, isFloat } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import {
  type Expr,
  type KernelBuffer,
  type KernelIR,
  type Reduction,
  usesF64,
  walk,
} from "../../jit/ir/kernel_ir.ts";
import { ExprTable } from "../../jit/ir/expr_table.ts";
import {
  type AluLowering,
  aluLowering,
  elementShift,
  exactReciprocal,
  isWide,
  MATH,
  type Memo,
  powerFunction,
} from "./alu.ts";
import type { Wasm, WasmModule } from "./encoder.ts";
import { type IndexLowering, indexLowering } from "./index.ts";
import { type Linear, walkAt } from "./walk.ts";
import { addMathFunctions, type MathFunction } from "./math.ts";

/** Most terms a kernel's single float sum may have and still accumulate in f32 (5×5 windows). */
export const NARROW_SUM_TERMS = 25;

/** Scalar helpers the generated code imports from the host (`env.*`, f64 → f64). */
export const IMPORTS: readonly string[] = ["exp", "log", "erf", "sin", "cos", "pow", "fmod"];

/** Options of a {@linkcode KernelFunction} (and of `generateWasm`). */
export interface ModuleOptions {
  /** Import the arena as a shared memory (for worker threads). */
  readonly shared?: boolean;
  /**
   * Use relaxed SIMD's fused multiply-add in matmul tiles and the math library's polynomials
   * (where the engine has it: V8 ≥ 11.4, not Node 20). Matmul sums are order-dependent anyway;
   * fusing rounds once instead of twice (exp over 4M floats: 6.3 -> 5.7 ms).
   */
  readonly fma?: boolean;
  /**
   * Run integer products of bytes (one u8 and one i8 operand) on relaxed SIMD's byte dot product,
   * where the engine computes it exactly (`exactByteDot`); otherwise they take the generic loops.
   */
  readonly byteDot?: boolean;
}

/** A new module with the features, memory import and host imports every kernel uses. */
function kernelModule(wasm: Wasm, options: ModuleOptions): WasmModule {
  const m = new wasm.Module();
  m.setMemory(1, 65536, options.shared ?? false);
  m.addMemoryImport("env", "memory");
  const f64 = wasm.f64;
  for (const name of IMPORTS) {
    m.addFunctionImport(
      name,
      "env",
      name,
      wasm.createType(name === "pow" || name === "fmod" ? [f64, f64] : [f64]),
      f64,
    );
  }
  return m;
}

/**
 * One kernel's exported function `run(buffers…, scratch, rowStart, rowEnd, packedB)` as it is
 * built: its module, parameters and locals (coordinates, row, reduction results first), the
 * statement forms every generator uses, and the lowering of values: loads (through the index
 * steps, guarded), ALU ops, accumulations and stores. Its members are bound, so generators
 * destructure what they use; {@linkcode KernelFunction.finish} ends it.
 */
export class KernelFunction {
  /** The module being built. */
  readonly m: WasmModule;
  /** The encoder (value types, parameter lists). */
  readonly wasm: Wasm;
  /** The kernel. */
  readonly kernel: KernelIR;
  /** Whether relaxed SIMD's fused multiply-add may be used. */
  readonly fma: boolean;
  /** Whether integer products of bytes take relaxed SIMD's byte dot product. */
  readonly byteDot: boolean;
  /** Parameter indices after the buffers: the thread's scratch, the row range, B's panels. */
  readonly params: {
    readonly scratch: number;
    readonly start: number;
    readonly end: number;
    readonly packedB: number;
  };
  /** Coordinate locals, one per axis of the space. */
  readonly coord: readonly number[];
  /** The kept (not reduced) axes of the space. */
  readonly kept: readonly number[];
  /** The row local of a row loop. */
  readonly row: number;
  /** A counter over the reduced axes. */
  readonly it: number;
  /**
   * Reduction result locals (the results: wide float sums accumulate in f64 locals of their own).
   */
  readonly accs: readonly number[];
  /**
   * Whether the kernel's float sums accumulate in f32 rather than f64: a kernel whose one
   * reduction sums at most {@linkcode NARROW_SUM_TERMS} terms (a depthwise conv's window, a
   * pool's). Such a sum's f32 rounding error is within the f32 result's own tolerance, as a
   * matmul's f32 sums are, and four windows then fold with one f32x4 add instead of two f64x2
   * widenings and adds (see `shaders/wasm/windows.ts`).
   * Every path of the kernel sums in the same order, so results do not depend on which path
   * (the four-window run or the one-window border) or which thread computed a window. An exact
   * kernel's sums are all f32 (`KernelIR.exact`), term by term.
   */
  readonly narrowSums: boolean;
  /** The ALU ops' scalar and vector lowerings. */
  readonly ops: AluLowering;
  /** Index steps, offsets and load addresses (`shaders/wasm/index.ts`). */
  readonly index: IndexLowering;
  // Equal subexpressions (fusion builds a DAG; decomposed ops reuse an operand) get one id, so
  // each is evaluated once per point into one local.
  #ids = new ExprTable();
  #params: number;
  #locals: number[] = [];
  #labels = 0;

  /** Starts `kernel`'s function in a module of its own. */
  constructor(wasm: Wasm, kernel: KernelIR, options: ModuleOptions) {
    this.m = kernelModule(wasm, options);
    this.wasm = wasm;
    this.kernel = kernel;
    // The exact precision rounds every product before its sum (`KernelIR.exact`).
    this.fma = !kernel.exact && (options.fma ?? false);
    this.byteDot = options.byteDot ?? false;
    const buffers = kernel.inputs.length + kernel.outputs.length;
    this.params = { scratch: buffers, start: buffers + 1, end: buffers + 2, packedB: buffers + 3 };
    this.#params = buffers + 4;
    this.kept = kernel.space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
    this.coord = kernel.space.map(() => this.local(wasm.i32));
    this.row = this.local(wasm.i32);
    this.it = this.local(wasm.i32);
    this.ops = aluLowering(this);
    this.index = indexLowering(this);
    this.accs = kernel.reductions.map((r) => this.local(this.typeOf(r.dtype)));
    const inner = kernel.reduced.reduce((n, a) => n * kernel.space[a], 1);
    this.wide = usesF64(kernel);
    this.narrowSums = kernel.exact === true ||
      (kernel.reductions.length === 1 && kernel.reductions[0].dtype === "f32" &&
        inner <= NARROW_SUM_TERMS);
  }

  /** The wasm type values of `d` live in: f64 for f64, f32 for other floats, i32 for the rest. */
  readonly typeOf = (d: DType): number =>
    isWide(d) ? this.wasm.f64 : isFloat(d) ? this.wasm.f32 : this.wasm.i32;

  /**
   * Whether any value of the kernel is f64. Such kernels take the per-element scalar path only
   * (no f32x4 walks, windows or matmul tiles): an f64 model is about exact results, and every
   * fast path assumes 32-bit elements.
   */
  readonly wide: boolean;

  /** A load of a `d` element at byte `address`. */
  readonly load = (d: DType, address: number): number =>
    isWide(d)
      ? this.m.f64.load(0, 8, address)
      : isFloat(d)
      ? this.m.f32.load(0, 4, address)
      : this.m.i32.load(0, 4, address);

  /** f32x4 `a·b + c`: one fused multiply-add where the kernel may (`fma`), else a multiply and an add. */
  readonly madd = (a: number, b: number, c: number): number =>
    this.fma ? this.m.f32x4.relaxed_madd(a, b, c) : this.m.f32x4.add(c, this.m.f32x4.mul(a, b));

  /** Structural id of an expression: equal subexpressions share one (and one local). */
  readonly keyOf = (e: Expr): number => this.#ids.id(e);

  /**
   * Evaluates `expr` at the current point (of walk `lin`, when given) into locals (statements
   * pushed to `stmts`); returns a getter expression.
   */
  readonly value = (expr: Expr, memo: Memo, stmts: number[], lin?: Linear): number => {
    const { m, wasm, get, keyOf, typeOf } = this, i32 = wasm.i32;
    const { constant, round, alu } = this.ops;
    const hit = memo.get(keyOf(expr)) ?? lin?.hoisted?.get(keyOf(expr));
    if (hit !== undefined) return get(hit, typeOf(expr.dtype));
    let code: number;
    switch (expr.kind) {
      case "const":
        return constant(expr.value, expr.dtype);
      case "acc":
        // A tile's sums in the scratch: f32, or an integer product's i32.
        return lin?.acc
          ? this.load(expr.dtype, walkAt(this, lin.acc, lin.j))
          : get(this.accs[expr.index], typeOf(expr.dtype));
      case "load": {
        if (lin) {
          const guard = lin.guards?.get(expr);
          let address = walkAt(this, lin.loads.get(expr)!, lin.j);
          // Where a guard fails the walk may point outside the buffer: read its start instead.
          if (guard) address = m.select(get(guard.ok, i32), address, get(expr.input, i32));
          code = this.load(expr.dtype, address);
          if (guard) code = m.select(get(guard.ok, i32), code, constant(guard.fill, expr.dtype));
          break;
        }
        const { address, guards } = this.index.loadAddress(expr, stmts);
        code = this.load(expr.dtype, address);
        for (const g of [...guards].reverse()) {
          code = m.select(get(g.ok, i32), code, constant(g.fill, expr.dtype));
        }
        break;
      }
      case "alu": {
        const args = expr.args.map((a) => this.value(a, memo, stmts, lin));
        const r = expr.op === "Div" && expr.dtype === "f32" && exactReciprocal(expr.args[1]);
        if (r) {
          code = m.f32.mul(args[0], m.f32.const(r));
          break;
        }
        const dtypes = expr.args.map((a) => a.dtype);
        code = round(alu(expr.op, args, dtypes, expr.dtype, expr), expr.dtype);
        break;
      }
    }
    const l = this.local(typeOf(expr.dtype));
    stmts.push(m.local.set(l, code));
    memo.set(keyOf(expr), l);
    return get(l, typeOf(expr.dtype));
  };

  /**
   * Whether `r` is a float sum accumulated in f64: every float sum except a small window's (see
   * {@linkcode narrowSums}).
   */
  readonly wideSum = (r: Reduction): boolean =>
    isFloat(r.dtype) && !isWide(r.dtype) && (r.op === "sum" || r.op === "mean") &&
    !this.narrowSums;

  /** Statements folding value `v` into reduction `r`'s accumulator `acc` (f64 for wide sums). */
  readonly accumulate = (r: Reduction, acc: number, v: number): number[] => {
    const { m, get } = this, { f64, f32, i32 } = this.wasm;
    if (this.wideSum(r)) return [m.local.set(acc, m.f64.add(get(acc, f64), m.f64.promote(v)))];
    const fl = isFloat(r.dtype), t = this.typeOf(r.dtype);
    const F = isWide(r.dtype) ? m.f64 : m.f32, ft = isWide(r.dtype) ? f64 : f32;
    if (r.op === "sum" || r.op === "mean") {
      return [
        fl
          ? m.local.set(acc, F.add(get(acc, ft), v))
          : m.local.set(acc, m.i32.add(get(acc, i32), v)),
      ];
    }
    const x = this.local(t);
    // NaN sticks; on ties the earlier value stays, as in the reference.
    const keep = fl
      ? m.i32.or(
        F.ne(get(acc, ft), get(acc, ft)),
        r.op === "max" ? F.ge(get(acc, ft), get(x, ft)) : F.le(get(acc, ft), get(x, ft)),
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

  /** Stores output `k` (evaluated into `memo`'s locals) at the current coordinates. */
  readonly store = (o: KernelIR["outputs"][number], k: number, memo: Memo, stmts: number[]) => {
    const { m, get, ic } = this, i32 = this.wasm.i32;
    const v = this.value(o.expr, memo, stmts);
    const { coords } = this.index.steps(o.steps, stmts);
    const buffer = get(this.kernel.inputs.length + k, i32);
    const address = m.i32.add(
      buffer,
      m.i32.shl(this.index.linear(coords, o.shape), ic(elementShift(o.dtype))),
    );
    stmts.push(
      isWide(o.dtype)
        ? m.f64.store(0, 8, address, v)
        : isFloat(o.dtype)
        ? m.f32.store(0, 4, address, v)
        : m.i32.store(0, 4, address, v),
    );
  };

  /**
   * Statements storing every output of a product's kernel at column `n` of the current row, its
   * sum being `sum` (an f32 expression): the epilogue evaluated point by point, as the i-k-j loop
   * and the block products do, and the tiled loop where no pointer walks its epilogue along n.
   */
  readonly pointOutputs = (nb: number, n: number, sum: number): number[] => {
    const { m, coord, ic } = this;
    const st = [
      m.local.set(coord[nb + 1], n),
      m.local.set(coord[nb + 2], ic(0)),
      m.local.set(this.accs[0], sum),
    ];
    const memo: Memo = new Map();
    this.kernel.outputs.forEach((o, j) => this.store(o, j, memo, st));
    return st;
  };

  /** A fresh local of `type`. */
  readonly local = (type: number): number => this.#params + this.#locals.push(type) - 1;

  /** `local.get`. */
  readonly get = (local: number, type: number): number => this.m.local.get(local, type);

  /** An i32 constant. */
  readonly ic = (n: number): number => this.m.i32.const(n | 0);

  /** Buffer `i` of the parameters: inputs, then outputs. */
  readonly bufferOf = (i: number): KernelBuffer => {
    const { inputs, outputs } = this.kernel;
    return i < inputs.length ? inputs[i] : outputs[i - inputs.length];
  };

  /** `body` while `cond()` holds (checked first); `cond` builds a fresh expression per use. */
  readonly whileLoop = (cond: () => number, body: number[]): number => {
    const label = `while${this.#labels++}`;
    const m = this.m;
    return m.if(cond(), m.loop(label, m.block(null, [...body, m.br(label, cond())])));
  };

  /** `inside` for `counter` = 0, 1, … `count` - 1 (a constant). */
  readonly countedLoop = (counter: number, count: number, inside: number[]): number[] => {
    const { m, get, ic } = this, i32 = this.wasm.i32;
    return count === 0 ? [] : [
      m.local.set(counter, ic(0)),
      this.whileLoop(() => m.i32.lt_s(get(counter, i32), ic(count)), [
        ...inside,
        m.local.set(counter, m.i32.add(get(counter, i32), ic(1))),
      ]),
    ];
  };

  /** Statements that set coordinate locals for `axes` from the linear index in local `from`. */
  readonly unravel = (axes: readonly number[], from: number): number[] => {
    const { m, get, ic, coord } = this, i32 = this.wasm.i32, space = this.kernel.space;
    const out: number[] = [];
    const rest = this.local(i32);
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

  /**
   * Adds `body` as the exported `run` with the math functions the kernel calls, validates the
   * module and returns its binary.
   */
  finish(body: readonly number[]): Uint8Array {
    const { m, wasm, kernel } = this;
    m.addFunction(
      "run",
      wasm.createType(new Array(this.#params).fill(wasm.i32)),
      wasm.none,
      [...this.#locals],
      m.block(null, [...body]),
    );
    m.addFunctionExport("run", "run");
    const math = new Set<MathFunction>();
    for (const x of [...kernel.reductions, ...kernel.outputs]) {
      // Every f16 result (an expression's, a reduction's) is rounded to f16 (`AluLowering.round`).
      if (x.dtype === "f16") math.add("vf16");
      walk(x.expr, (e) => {
        if (e.kind === "alu" && Object.hasOwn(MATH, e.op)) {
          math.add(MATH[e.op as keyof typeof MATH]);
        }
        const power = powerFunction(e);
        if (power) math.add(power);
        if (e.dtype === "f16") math.add("vf16");
      });
    }
    addMathFunctions(m, wasm, { used: math, fma: this.fma });
    if (!m.validate()) {
      throw new KilnError(`wasm: generated module for ${kernel.name} failed validation`, {
        code: "internal",
        fix: "report this kernel (kiln explain shows it); compile for another backend meanwhile",
      });
    }
    // No optimization passes: V8 inlines the math functions and allocates registers itself.
    // Binaryen's -O2 pipeline (when kiln generated through Binaryen) cost 4x the codegen time for
    // no measured speed; its short list (inlining, simplify-locals, vacuum, coalesce-locals,
    // reorder-locals) still took 44% of codegen, and dropping it left every steady-state time
    // unchanged while first runs fell (W1-16M 225 -> 155 ms, W2-1024 220 -> 135 ms).
    const bytes = m.emitBinary();
    return bytes;
  }
}
