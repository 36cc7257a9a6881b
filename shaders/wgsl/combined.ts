/**
 * Combined outputs (`KernelOutput.combine`) in WGSL: each invocation keeps the largest value it
 * would store in a private variable, and at its end folds that into the output's one word by
 * `atomicMax` on its bits (a non-negative f32's bits order as the number does), once a subgroup
 * where the device has subgroups; the runtime clears the words as each run starts. A
 * DynamicQuantizeLinear's range so becomes two words of the kernel that computes its input.
 *
 * @module
 */
import type { KernelBuffer, KernelIR, KernelOutput } from "../../jit/ir/kernel_ir.ts";
import type { KernelLowering } from "./expr.ts";

/** The WGSL element type of a combined output's binding. */
export const COMBINED = "atomic<u32>";

/** An output's binding element type: {@linkcode COMBINED} where it is combined, else `type`. */
export function outputType(o: KernelBuffer | KernelOutput, type: string): string {
  return "combine" in o && o.combine ? COMBINED : type;
}

/** Whether `kernel` has a combined output. */
export function combines(kernel: KernelIR): boolean {
  return kernel.outputs.some((o) => o.combine);
}

/**
 * The directives a shader folding `kernel`'s combined outputs by subgroups needs: `subgroups`
 * enabled (unless `enabled` already), their uniformity diagnostic off, as the fold runs after
 * invocations may have returned. None where it has no combined output or folds without them.
 */
export function combinedDirectives(
  kernel: KernelIR,
  subgroups: boolean,
  enabled = false,
): string[] {
  if (!subgroups || !combines(kernel)) return [];
  return [...(enabled ? [] : ["enable subgroups;"]), "diagnostic(off, subgroup_uniformity);"];
}

/** Module-scope declarations of the private largest values of `l`'s combined outputs. */
export function combinedDecls(l: KernelLowering): string[] {
  return l.kernel.outputs.flatMap((o, k) =>
    o.combine ? [`var<private> ${l.largest(k)}: f32 = 0.0;`] : []
  );
}

/**
 * The lines ending an entry point that fold each invocation's largest values into their words:
 * `subgroups` (the shader enables them and turns their uniformity diagnostic off) takes the
 * subgroup's largest first and one lane updates, so that the word sees a subgroup's atomic, not
 * each invocation's. The bits are masked to clear the sign of a −0 (which would outrank every
 * number) and of a NaN (which then does, as the reference's NaN wins a max); a word already as
 * large is not updated.
 */
export function combinedFlush(l: KernelLowering, subgroups: boolean): string[] {
  return l.kernel.outputs.flatMap((o, k) => {
    if (!o.combine) return [];
    const name = l.largest(k), word = `&${l.outputs[k]}[0]`;
    const bits = `(bitcast<u32>(${name}) & 0x7fffffffu)`;
    const value = subgroups ? `subgroupMax(${bits})` : bits;
    const when = `${subgroups ? "subgroupElect() && " : ""}${name}_bits > atomicLoad(${word})`;
    return [
      `  let ${name}_bits = ${value};`,
      `  if (${when}) { atomicMax(${word}, ${name}_bits); }`,
    ];
  });
}
