/**
 * Einsum: kiln's op of the same name and equation (`jit/ops/einsum.ts`), which checks the
 * equation against the operands.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { EINSUM_FIX } from "../../jit/ops/einsum.ts";
import { attrs, type Known, type NodeContext } from "../import/node_context.ts";

/** Converts an Einsum node. */
export function einsum(c: NodeContext): Known[] {
  const equation = attrs(c).string("equation");
  if (equation === undefined) {
    throw new KilnError(`${c.label}: Einsum without an equation`, {
      code: "bad-attribute",
      fix: EINSUM_FIX,
    });
  }
  return c.emit("Einsum", c.inputs() as Known[], { equation }, 1);
}
