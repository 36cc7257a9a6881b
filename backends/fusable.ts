/**
 * Which nodes a kernel-IR code generator can run: everything that fuses into kernel IR. Ops that
 * kiln runs as whole kernels (gathers, concat, split, cumsum, argmax, edge/reflect padding,
 * average pooling that excludes padding) have no generated form yet, so a generated backend
 * declines them and the scheduler places them on a backend that has them.
 *
 * @module
 */

import { getOp, InferContext } from "../jit/ops/mod.ts";
import type { NodeInfo } from "./backend.ts";

const WHOLE_OPS = new Set(["Gather", "GatherElements", "Concat", "Split", "ArgMax", "CumSum"]);

/**
 * Whether a generated backend can run `node`. Custom ops are declined: running a custom op's own
 * per-backend kernel is not wired into the generated backends yet, so they run on the reference.
 */
export function fusable(node: NodeInfo): boolean {
  if (getOp(node.op).category === "custom") return false;
  if (WHOLE_OPS.has(node.op)) return false;
  if (node.op === "Pad") return (node.attrs.mode ?? "constant") === "constant";
  if (node.op === "AveragePool") {
    const ctx = new InferContext({
      op: node.op,
      where: node.label,
      inputs: node.inputs,
      attrs: node.attrs,
    });
    return ctx.int("count_include_pad", 0) === 1 || ctx.ints("pads", []).every((p) => p === 0);
  }
  return true;
}
