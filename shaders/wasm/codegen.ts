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
import { type KernelIR, storedA } from "../../jit/ir/kernel_ir.ts";
import { linearLowering } from "./linear.ts";
import type { Wasm } from "./encoder.ts";
import { KernelFunction, type ModuleOptions } from "./module.ts";
import { vectorWindows } from "./windows.ts";
import { rowKernelBody, rowStores } from "./row_kernel.ts";
import type { MatmulContext } from "./gemm_state.ts";
import { matmulBody } from "./matmul_dot.ts";
import {
  halfMatmulView,
  indirectionFill,
  integerPlan,
  integerView,
  matmulPlan,
  tableTaps,
} from "./matmul_plan.ts";
import { integerGemm } from "./int_gemm.ts";
import { splitLastAxis } from "./split_space.ts";
import { blockProductBody, blockUnpackBody } from "./block_product.ts";

/** Generates the module for `kernel` (not for opaque kernels). */
export function generateWasm(
  wasm: Wasm,
  given: KernelIR,
  options: ModuleOptions = {},
): Uint8Array {
  // A prologue (which fusion leaves only where every generator computes it) takes the kernel's
  // own expressions.
  if (given.blockProduct && storedA(given.blockProduct)) {
    const fn = new KernelFunction(wasm, given, options);
    return fn.finish(blockProductBody(fn, given.blockProduct));
  }
  if (given.blockUnpack) {
    const fn = new KernelFunction(wasm, given, options);
    return fn.finish(blockUnpackBody(fn, given.blockUnpack));
  }
  const integer = integerPlan(given, options.byteDot);
  if (integer) {
    // An integer matmul whose outputs dequantize its sums is generated as the tiles compute it;
    // where its operands do not fit the tiles, it takes the generic paths below as it is.
    const fn = new KernelFunction(wasm, integerView(given) ?? given, options);
    const tableFill = indirectionFill(given);
    const taps = tableFill === undefined ? undefined : tableTaps(given);
    const body = integerGemm({ fn, tableFill, taps, ...linearLowering(fn) }, integer);
    if (body) return fn.finish(body);
  }
  // An f16 matmul is generated as the tiles compute it (the program packs B for it the same way).
  // The exact precision's kernels (f32, `KernelIR.exact`) take every path below in the order of
  // the reduced coordinates (tiles, windows: a lane an output; row walks scalar).
  // An elementwise kernel reading a reshaped transpose is walked over the reshape's split axes.
  const kernel = splitLastAxis(halfMatmulView(given));
  const fn = new KernelFunction(wasm, kernel, options);
  const { m, get, ic, coord, kept, unravel, whileLoop, row } = fn;
  const { start, end } = fn.params;
  const i32 = wasm.i32;
  const space = kernel.space;
  const body: number[] = [];
  const path = linearLowering(fn);

  const gemm = fn.wide ? undefined : matmulPlan(kernel);
  const elementwise = gemm ? undefined : path.elementwiseBody();
  if (gemm) {
    const tableFill = indirectionFill(kernel);
    const taps = tableFill === undefined ? undefined : tableTaps(kernel);
    const context: MatmulContext = { fn, tableFill, taps, ...path };
    body.push(...matmulBody(context, gemm));
  } else if (elementwise) body.push(...elementwise);
  else {
    // The kept coordinates count up like an odometer from the first row's: unravelling every
    // row took a division and a remainder per axis (lenet's first pool, 4704 rows: 104 -> 96 µs).
    const next = kept.filter((a) => space[a] > 1).reverse().flatMap((a) => [
      m.local.set(coord[a], m.i32.add(get(coord[a], i32), ic(1))),
      m.br("row", m.i32.lt_s(get(coord[a], i32), ic(space[a]))),
      m.local.set(coord[a], ic(0)),
    ]);
    const one = rowKernelBody(fn, path);
    // Four windows at once where a pool's or depthwise conv's windows lie inside (see
    // `vectorWindows`); one window, guarded, elsewhere.
    const four = fn.wide
      ? undefined
      : vectorWindows(fn, path, { row, rowStores: () => rowStores(fn) });
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
