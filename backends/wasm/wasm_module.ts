/**
 * The module around a generated kernel: features, the imported arena memory, the host math
 * imports, and at the end the exported `run` function, the in-module math library it calls, the
 * validation and the binary. `wasm_codegen.ts` fills in the function body between the two.
 *
 * @module
 */
import { KilnError } from "../../jit/errors.ts";
import { type KernelIR, walk } from "../../jit/kernel_ir.ts";
import { MATH } from "./wasm_alu.ts";
import type { Binaryen, BinaryenModule } from "./wasm_codegen.ts";
import { addMathFunctions, type MathFunction } from "./wasm_math.ts";

/** Scalar helpers the generated code imports from the host (`env.*`, f64 → f64). */
export const IMPORTS: readonly string[] = ["sin", "cos", "pow", "fmod", "f16"];

/** Options of {@linkcode kernelModule}. */
export interface ModuleOptions {
  /** Import the arena as a shared memory (for worker threads). */
  readonly shared?: boolean;
  /** Enable relaxed SIMD (fused multiply-add). */
  readonly fma?: boolean;
}

/** A new module with the features, memory import and host imports every kernel uses. */
export function kernelModule(binaryen: Binaryen, options: ModuleOptions): BinaryenModule {
  const m = new binaryen.Module();
  m.setFeatures(
    binaryen.Features.NontrappingFPToInt | binaryen.Features.SIMD128 |
      (options.shared ? binaryen.Features.Atomics : 0) |
      (options.fma ? binaryen.Features.RelaxedSIMD : 0),
  );
  m.setMemory(
    1,
    65536,
    null,
    [],
    options.shared ?? false,
    false,
    "0",
  );
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

/** The kernel function of {@linkcode emitKernel}. */
export interface KernelFunction {
  /** Parameter count (all i32). */
  readonly params: number;
  /** Types of the locals after the parameters. */
  readonly locals: readonly number[];
  /** Statements of the body. */
  readonly body: readonly number[];
  /** Whether the math library may use relaxed multiply-add. */
  readonly fma?: boolean;
}

/**
 * Adds `fn` as the exported `run` with the math functions `kernel` calls, validates the module
 * and returns its binary (the module is disposed).
 */
export function emitKernel(
  m: BinaryenModule,
  binaryen: Binaryen,
  kernel: KernelIR,
  fn: KernelFunction,
): Uint8Array {
  m.addFunction(
    "run",
    binaryen.createType(new Array(fn.params).fill(binaryen.i32)),
    binaryen.none,
    [...fn.locals],
    m.block(null, [...fn.body]),
  );
  m.addFunctionExport("run", "run");
  const math = new Set<MathFunction>();
  for (const e of [...kernel.reductions, ...kernel.outputs].map((x) => x.expr)) {
    walk(e, (x) => {
      if (x.kind === "alu" && Object.hasOwn(MATH, x.op)) math.add(MATH[x.op as keyof typeof MATH]);
    });
  }
  addMathFunctions(m, binaryen, { used: math, fma: fn.fma });
  if (!m.validate()) {
    m.dispose();
    throw new KilnError(`wasm: generated module for ${kernel.name} failed validation`, {
      code: "internal",
      fix: "report this kernel (kiln explain shows it); compile for another backend meanwhile",
    });
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
