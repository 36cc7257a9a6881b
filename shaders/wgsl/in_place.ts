/**
 * Outputs stored over their inputs on WebGPU (`KernelIR.inPlace`: a generation's donated KV
 * caches). The kernel binds the one buffer once, as its output, and reads the input from it:
 * WebGPU refuses a buffer bound read-only and writable in one dispatch. An output that is
 * `Where(c, input, y)` stores only where `c` fails — a decode step's present cache is its past and
 * one new entry a head, so the step writes that entry and reads nothing else of the cache, where
 * a copy had read and written the whole capacity every token.
 *
 * @module
 */
import type { Expr, KernelIR } from "../../jit/ir/kernel_ir.ts";
import { keptForm } from "../../jit/schedule/in_place.ts";
import type { KernelLowering } from "./expr.ts";

/** What `aliasedInputs` needs of a kernel's layout (`KernelLayout`). */
export interface PointsShape {
  readonly kind: "points" | "rows" | "tiles";
  readonly width: 1 | 4;
  readonly vectors: ReadonlySet<number>;
}

/**
 * The pairs of `kernel.inPlace` its layout honors, input → output: elementwise kernels whose
 * input is read as the output is stored (vec4s both, or elements both). The GPU program binds
 * the output's buffer for both; the other pairs keep buffers of their own.
 */
export function aliasedInputs(kernel: KernelIR, layout: PointsShape): Map<number, number> {
  const aliases = new Map<number, number>();
  if (layout.kind !== "points") return aliases;
  for (const { output, input } of kernel.inPlace ?? []) {
    if ((layout.width === 4) === layout.vectors.has(input)) aliases.set(input, output);
  }
  return aliases;
}

/** Whether some output of `kernel` is stored only where its input does not stay (`keptForm`). */
export function storesSome(kernel: KernelIR): boolean {
  return kernel.outputs.some((_, k) => keptForm(kernel, k) !== undefined);
}

/**
 * Stores output `k` at the current point, where it is stored over its input in `keptForm` only
 * where that input does not stay.
 */
export function storeOver(l: KernelLowering, k: number, memo: Map<Expr, string>): void {
  const o = l.kernel.outputs[k];
  const kept = keptForm(l.kernel, k);
  if (!kept) return l.store(o, k, memo);
  const c = l.value(kept.c, memo);
  // The branch's values stay in it: a later output names its own afresh.
  l.e.block(`if (${c} == 0u) {`, () => l.store({ ...o, expr: kept.y }, k, new Map(memo)));
}
