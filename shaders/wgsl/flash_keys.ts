/**
 * Keys read in place by the flash kernel. Fusion stores attention's keys by head first where they
 * are read through a transposing view (`DeviceProfile.storedKeys`), because the one-row attention
 * kernel reads a key a thread and wants neighbouring keys in neighbouring words. The flash kernel
 * fills its key tiles cooperatively and reads a key's row of the head as it lies
 * (`flash_kernel.ts`, `filler`), so for it the copy is a dispatch and a pass over the keys that
 * buy nothing: where the flash kernel runs, its scores read the copy's source through the copy's
 * own view, and the copy goes.
 *
 * @module
 */
import type { KernelIR, Load } from "../../jit/ir/kernel_ir.ts";
import { f32SumView, gathers, mapLoads, matmulOperands } from "../../jit/ir/kernel_ir.ts";

/** An attention group whose keys' copy was folded into its scores, and that copy. */
export interface KeysInPlace {
  /** The group's scores, weights and values, the scores reading the copy's source. */
  readonly members: readonly KernelIR[];
  /** The copy kernel no longer needed. */
  readonly copy: KernelIR;
}

/**
 * `members` (scores, weights, values of an attention group in `kernels`) with the scores' keys
 * read from where a plain copy kernel took them: the copy a view of one buffer into a value that
 * only the scores read and that is not among `external` (needed past the kernels). Undefined
 * where there is no such copy.
 */
export function keysInPlace(
  kernels: readonly KernelIR[],
  members: readonly KernelIR[],
  external: ReadonlySet<number>,
): KeysInPlace | undefined {
  const [scores] = members;
  // An f16 product as the group sums it (in f32): its operands are the same.
  const b = matmulOperands(f32SumView(scores))?.b;
  if (!b) return undefined;
  const value = scores.inputs[b.input].value;
  const copy = kernels.find((k) => k.outputs.some((o) => o.value === value));
  const source = copy && copiedLoad(copy);
  if (!source || external.has(value)) return undefined;
  const readers = kernels.filter((k) => k.inputs.some((i) => i.value === value));
  if (readers.length !== 1 || readers[0] !== scores) return undefined;
  return { members: [retargeted(scores, b.input, copy, source), ...members.slice(1)], copy };
}

/** The load a copy kernel stores as it is (one output, in place, no reduction), if it is one. */
function copiedLoad(k: KernelIR): Load | undefined {
  if (k.pattern !== "elementwise" || k.reductions.length !== 0 || k.outputs.length !== 1) {
    return undefined;
  }
  const [out] = k.outputs, e = out.expr;
  const inPlace = out.steps.length === 0 && out.level === "full" &&
    String(out.shape) === String(k.space);
  if (!inPlace || e.kind !== "load" || gathers(e.steps)) return undefined;
  return e.dtype === out.dtype ? e : undefined;
}

/**
 * `scores` with its loads of input `at` reading `copy`'s source through `source`'s steps after
 * their own (the copy's coordinates are its output's). Where the source is also another input
 * (Q and K slices of one joined projection), both bindings name it: a group binds a value once.
 */
function retargeted(scores: KernelIR, at: number, copy: KernelIR, source: Load): KernelIR {
  const memo = new Map();
  const load = (l: Load): Load =>
    l.input === at ? { ...l, steps: [...l.steps, ...source.steps] } : l;
  return {
    ...scores,
    inputs: scores.inputs.with(at, copy.inputs[source.input]),
    reductions: scores.reductions.map((r) => ({ ...r, expr: mapLoads(r.expr, load, memo) })),
    outputs: scores.outputs.map((o) => ({ ...o, expr: mapLoads(o.expr, load, memo) })),
  };
}
