/**
 * The one predicate that decides which nodes fusion cannot express as kernel IR and keeps whole
 * (an `opaque` kernel that only a backend with a kernel for the op runs): custom ops. Everything
 * else — gathers, concat, split, every pad mode, the arg-reductions, cumulative sums, average
 * pools whose divisor changes along the edges (a constant map, see `poolDivisors`) — is index
 * arithmetic or reductions and fuses. Fusion and the generated backends both ask here, so they
 * never disagree.
 *
 * @module
 */
import { type Attrs, getOp, type ValueType } from "../ops/mod.ts";

/** What the predicate reads of a node. */
export interface NodeShape {
  /** Op name. */
  readonly op: string;
  /** Attributes. */
  readonly attrs: Attrs;
  /** Input types. */
  readonly inputs: readonly ValueType[];
  /** Label for messages. */
  readonly label: string;
}

/** Whether `node` must run as its own opaque kernel (see the module documentation). */
export function runsWhole(node: NodeShape): boolean {
  return getOp(node.op).category === "custom";
}
