/**
 * A kernel's last axis split as one of its loads splits it: a value laid out by heads and read as
 * [tokens, heads · dim] through a transpose (BERT's attention output, quantized for the next
 * product: its rows' ranges, then the quantization) is not affine in `heads · dim`, so every point
 * unravelled its coordinates (0.38 ms for a [128, 768] quantization on the 2-core VM); over
 * [tokens, heads, dim] the reads are affine and the linear walks take the kernel (0.09 ms). The
 * split space enumerates the same points in the same order, so a kernel's rows, its threads'
 * shares and the program's calls do not change; a reduction of the last axis reduces its parts.
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import {
  type Expr,
  type IndexStep,
  type KernelIR,
  type Load,
  mapLoads,
  walk,
} from "../../jit/ir/kernel_ir.ts";
import { type Shape, sizeOf } from "../../jit/ir/shape.ts";

/**
 * `kernel` (elementwise, or reducing its last axis alone) over its space with the last axis split
 * as a load's leading reshape splits it, where that load is affine only over the split space;
 * else `kernel` itself.
 */
export function splitLastAxis(kernel: KernelIR): KernelIR {
  const { space, reduced } = kernel;
  const last = space.length - 1;
  // Elementwise, or reducing the last axis alone (its parts then reduced together).
  if (last < 0 || !(reduced.length === 0 || (reduced.length === 1 && reduced[0] === last))) {
    return kernel;
  }
  const loads = loadsOf(kernel);
  if (loads.some((l) => l.steps.some((s) => s.kind === "gather"))) return kernel;
  const shapeOf = (l: Load) => kernel.inputs[l.input].shape;
  for (const l of loads) {
    const parts = splitBy(l.steps[0], space);
    if (!parts || affineOffset(l.steps, space, shapeOf(l))) continue;
    const split = [...space.slice(0, -1), ...parts];
    const merge: IndexStep = { kind: "reshape", from: split, to: space };
    const within = (steps: readonly IndexStep[]) => [merge, ...steps];
    const memo = new Map<Expr, Expr>();
    const loaded = (e: Expr) => mapLoads(e, (x) => ({ ...x, steps: within(x.steps) }), memo);
    const refined: KernelIR = {
      ...kernel,
      space: split,
      reduced: reduced.length ? parts.map((_, i) => last + i) : [],
      reductions: kernel.reductions.map((r) => ({ ...r, expr: loaded(r.expr) })),
      outputs: kernel.outputs.map((o) => ({ ...o, expr: loaded(o.expr), steps: within(o.steps) })),
    };
    const affine = loadsOf(refined).every((x) => affineOffset(x.steps, split, shapeOf(x)));
    if (affine) return refined;
  }
  return kernel;
}

/** The loads of `kernel`'s reductions and outputs. */
function loadsOf(kernel: KernelIR): Load[] {
  const found = new Set<Load>();
  for (const e of [...kernel.reductions, ...kernel.outputs]) {
    walk(e.expr, (x) => x.kind === "load" && found.add(x));
  }
  return [...found];
}

/**
 * The axes a leading reshape `step` splits `space`'s last axis into (its other axes as they are),
 * or `undefined`.
 */
function splitBy(step: IndexStep | undefined, space: Shape): number[] | undefined {
  if (step?.kind !== "reshape" || step.from.join() !== space.join()) return undefined;
  const lead = space.length - 1;
  if (step.to.slice(0, lead).join() !== space.slice(0, lead).join()) return undefined;
  const parts = step.to.slice(lead);
  return parts.length > 1 && sizeOf(parts) === space[lead] ? [...parts] : undefined;
}
