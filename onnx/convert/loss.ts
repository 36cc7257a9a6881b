/**
 * The training losses as composites of kiln ops: NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss (its LogSoftmax, then the same loss). Per element the class score is
 * picked with GatherElements along the class axis; `ignore_index` masks elements out (their
 * target is replaced by 0 for the gather, so an ignore index outside `[0, C)` is never read);
 * the class weights are gathered by target. Reductions follow ONNX: `none`, `sum`, or `mean`
 * (divided by the summed weights of the elements kept when there are weights or an ignore
 * index, by the element count otherwise).
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import { attrs, type Known, type NodeContext, opOf, typeOf } from "../import/node_context.ts";

/** The loss of log-probabilities `logp` ([N, C, d…]) for the node `c` converts. */
function nll(c: NodeContext, logp: Known, target: Known, weight: Known | undefined): Known {
  const op = opOf(c);
  const a = attrs(c);
  const reduction = a.string("reduction", "mean")!;
  if (!["none", "sum", "mean"].includes(reduction)) {
    throw new KilnError(`${c.label}: reduction "${reduction}" is not none, sum or mean`, {
      code: "bad-attribute",
      fix: 'set reduction to "none", "sum" or "mean"',
    });
  }
  const ignore = a.int("ignore_index");
  const x = typeOf(logp), t = typeOf(target);
  if (x.shape.length < 2 || t.shape.length !== x.shape.length - 1) {
    throw new KilnError(
      `${c.label}: scores of shape [${x.shape}] need targets of shape [N, d…] (got [${t.shape}])`,
      { code: "shape-mismatch", fix: "pass scores [N, C, d1, …] and targets [N, d1, …]" },
    );
  }
  const float = x.dtype;
  const keep = ignore === undefined
    ? undefined
    : op("Not", [op("Equal", [target, scalar(ignore, t.dtype)])]);
  const safe = keep ? op("Where", [keep, target, scalar(0, t.dtype)]) : target;
  const picked = op("Squeeze", [
    op("GatherElements", [logp, op("Unsqueeze", [safe], { axes: [1] })], { axis: 1 }),
  ], { axes: [1] });
  let w = weight ? op("Gather", [weight, safe], { axis: 0 }) : undefined;
  if (keep) w = op("Where", [keep, w ?? scalar(1, float), scalar(0, float)]);
  const neg = op("Neg", [picked]);
  // Where, not a product with the 0/1 weight: an ignored element contributes 0 even if its
  // score is infinite.
  let loss = w ? op("Mul", [neg, w]) : neg;
  if (keep) loss = op("Where", [keep, loss, scalar(0, float)]);
  if (reduction === "none") return loss;
  const all = { axes: t.shape.map((_, i) => i), keepdims: 0 };
  const total = op("ReduceSum", [loss], all);
  if (reduction === "sum") return total;
  if (!w) return op("ReduceMean", [loss], all);
  return op("Div", [total, op("ReduceSum", [w], all)]);
}

/** Converters by ONNX op type. */
export const LOSS_CONVERTERS: Record<string, (c: NodeContext) => Known[]> = {
  NegativeLogLikelihoodLoss: (c) => [nll(c, c.required(0), c.required(1), c.input(2))],
  SoftmaxCrossEntropyLoss: (c) => {
    const [logp] = c.emit("LogSoftmax", [c.required(0)], { axis: 1 });
    return [nll(c, logp, c.required(1), c.input(2)), logp];
  },
};
