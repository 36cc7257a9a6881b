/**
 * The kernel function a generator builds ({@linkcode KernelFunction}, the mirror of WGSL's
 * `KernelLowering`): the module around it (features, the imported arena memory, the host math
 * imports), its parameters, locals and coordinates, the statement forms every generator uses,
 * and at the end the exported `run` function, the in-module math library it calls, the
 * validation and the binary. `wasm_codegen.ts` and the generators it calls fill in the body.
 *
 * @module
 */
import { KilnError } from "../../jit/errors.ts";
import { type KernelIR, walk } from "../../jit/kernel_ir.ts";
import { MATH } from "./wasm_alu.ts";
import type { Binaryen, BinaryenModule } from "./wasm_codegen.ts";
import type { KernelBuffer } from "../../jit/kernel_ir.ts";
import { addMathFunctions, type MathFunction } from "./wasm_math.ts";

/** Scalar helpers the generated code imports from the host (`env.*`, f64 → f64). */
export const IMPORTS: readonly string[] = ["sin", "cos", "pow", "fmod", "f16"];

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
}

/** A new module with the features, memory import and host imports every kernel uses. */
function kernelModule(binaryen: Binaryen, options: ModuleOptions): BinaryenModule {
  const m = new binaryen.Module();
  m.setFeatures(
    binaryen.Features.NontrappingFPToInt | binaryen.Features.SIMD128 |
      (options.shared ? binaryen.Features.Atomics : 0) |
      (options.fma ? binaryen.Features.RelaxedSIMD : 0),
  );
  m.setMemory(1, 65536, null, [], options.shared ?? false, false, "0");
  m.addMemoryImport("0", "env", "memory");
  const f64 = binaryen.f64;
  for (const name of IMPORTS) {
    m.addFunctionImport(
      name,
      "env",
      name,
      binaryen.createType(name === "pow" || name === "fmod" ? [f64, f64] : [f64]),
      f64,
    );
  }
  return m;
}

/**
 * One kernel's exported function `run(buffers…, scratch, rowStart, rowEnd, packedB)` as it is
 * built: its module, parameters, locals (a coordinate local per axis of the space first) and the
 * statement forms every generator uses. Its members are bound, so generators destructure what
 * they use; {@linkcode KernelFunction.finish} ends it.
 */
export class KernelFunction {
  /** The module being built. */
  readonly m: BinaryenModule;
  /** Binaryen itself (types, low-level helpers). */
  readonly binaryen: Binaryen;
  /** The kernel. */
  readonly kernel: KernelIR;
  /** Whether relaxed SIMD's fused multiply-add may be used. */
  readonly fma: boolean;
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
  #params: number;
  #locals: number[] = [];
  #labels = 0;

  /** Starts `kernel`'s function in a module of its own. */
  constructor(binaryen: Binaryen, kernel: KernelIR, options: ModuleOptions) {
    this.m = kernelModule(binaryen, options);
    this.binaryen = binaryen;
    this.kernel = kernel;
    this.fma = options.fma ?? false;
    const buffers = kernel.inputs.length + kernel.outputs.length;
    this.params = { scratch: buffers, start: buffers + 1, end: buffers + 2, packedB: buffers + 3 };
    this.#params = buffers + 4;
    this.kept = kernel.space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
    this.coord = kernel.space.map(() => this.local(binaryen.i32));
  }

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
    const { m, get, ic } = this, i32 = this.binaryen.i32;
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
    const { m, get, ic, coord } = this, i32 = this.binaryen.i32, space = this.kernel.space;
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
   * module and returns its binary (the module is disposed).
   */
  finish(body: readonly number[]): Uint8Array {
    const { m, binaryen, kernel } = this;
    m.addFunction(
      "run",
      binaryen.createType(new Array(this.#params).fill(binaryen.i32)),
      binaryen.none,
      [...this.#locals],
      m.block(null, [...body]),
    );
    m.addFunctionExport("run", "run");
    const math = new Set<MathFunction>();
    for (const e of [...kernel.reductions, ...kernel.outputs].map((x) => x.expr)) {
      walk(e, (x) => {
        if (x.kind === "alu" && Object.hasOwn(MATH, x.op)) {
          math.add(MATH[x.op as keyof typeof MATH]);
        }
      });
    }
    addMathFunctions(m, binaryen, { used: math, fma: this.fma });
    if (!m.validate()) {
      m.dispose();
      throw new KilnError(`wasm: generated module for ${kernel.name} failed validation`, {
        code: "internal",
        fix: "report this kernel (kiln explain shows it); compile for another backend meanwhile",
      });
    }
    // No Binaryen passes: V8 inlines the math functions and allocates registers itself. The full
    // -O2 pipeline cost 4x the codegen time for no measured speed; the short list kept after it
    // (inlining, simplify-locals, vacuum, coalesce-locals, reorder-locals) still took 44% of
    // codegen (142 of 325 ms over the benchmarks' 33 kernels), and dropping it left every
    // steady-state time unchanged while first runs fell (W1-16M 225 -> 155 ms, W2-1024 220 -> 135
    // ms).
    const bytes = m.emitBinary();
    m.dispose();
    return bytes;
  }
}
