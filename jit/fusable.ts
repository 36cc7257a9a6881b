/**
 * The one predicate that decides which nodes fusion cannot express as kernel IR and keeps whole
 * (an `opaque` kernel that only a backend with a kernel for the op runs): custom ops, and average
 * pools whose divisor is not the window size (padding excluded from the count, or windows that
 * overhang the input under `ceil_mode`). Everything else — gathers, concat, split, every pad
 * mode, the arg-reductions, cumulative sums — is index arithmetic or reductions and fuses.
 * Fusion and the generated backends both ask here, so they never disagree.
 *
 * @module
 */
import { type Attrs, getOp, InferContext, type ValueType } from "./ops/mod.ts";
import { resolveWindow } from "./ops/nn.ts";

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
  if (getOp(node.op).category === "custom") return true;
  if (node.op !== "AveragePool") return false;
  const ctx = new InferContext({
    op: node.op,
    where: node.label,
    inputs: node.inputs,
    attrs: node.attrs,
  });
  const spatial = node.inputs[0].shape.slice(2);
  const win = resolveWindow(ctx, spatial, ctx.ints("kernel_shape"));
  const padded = [...win.padsBegin, ...win.padsEnd].some((p) => p > 0);
  const overhang = win.out.some((o, i) =>
    (o - 1) * win.strides[i] + (win.kernel[i] - 1) * win.dilations[i] >=
      spatial[i] + win.padsBegin[i] + win.padsEnd[i]
  );
  return overhang || (padded && ctx.int("count_include_pad", 0) === 0);
}
