/**
 * The training losses: `NegativeLogLikelihoodLoss` of log-probabilities and
 * `SoftmaxCrossEntropyLoss` of scores (their LogSoftmax, then the same loss, with the
 * log-probabilities as a second output), as ONNX defines them. Per element the class score is
 * picked with GatherElements along the class axis; `ignore_index` masks elements out (their
 * target is replaced by 0 for the gather, so an ignore index outside `[0, C)` is never read);
 * the class weights are gathered by target. `reduction`: `none`, `sum`, or `mean` (divided by the
 * summed weights of the elements kept where there are weights or an ignore index, by the element
 * count otherwise).
 *
 * @module
 */
import { formatShape } from "../ir/shape.ts";
import { FLOATS, INTEGERS } from "./elementwise.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** The reductions a loss takes; the first is ONNX's default. */
export const LOSS_REDUCTIONS = ["mean", "none", "sum"] as const;

/** The loss's type: scores [N, C, d…], targets [N, d…] of integers, weights [C]. */
function lossType(ctx: InferContext): ValueType {
  const dtype = ctx.requireDType(0, FLOATS);
  ctx.requireDType(1, INTEGERS);
  const reduction = ctx.choice("reduction", LOSS_REDUCTIONS);
  if (ctx.has("ignore_index")) ctx.int("ignore_index");
  const x = ctx.input(0).shape, t = ctx.input(1).shape;
  const classes = x[1] ?? 0;
  if (x.length < 2 || t.length !== x.length - 1 || t.some((d, i) => d !== x[i < 1 ? 0 : i + 1])) {
    ctx.fail(
      `scores ${formatShape(x)} need targets [N, d…] of their shape less the classes, not ${
        formatShape(t)
      }`,
      "pass scores [N, C, d1, …] and targets [N, d1, …]",
      "shape-mismatch",
    );
  }
  const w = ctx.inputs[2];
  if (w && (w.dtype !== dtype || w.shape.join() !== `${classes}`)) {
    ctx.fail(
      `weights ${w.dtype}${formatShape(w.shape)}`,
      `give ${dtype}[${classes}]`,
      "shape-mismatch",
    );
  }
  return { shape: reduction === "none" ? t : [], dtype };
}

/** The loss of log-probabilities `logp` as the decomposition computes it. */
function nll(e: Emitter, [logp, target, weight]: readonly EmitRef[], a: Attrs): EmitRef {
  const reduction = (a.reduction as string | undefined) ?? "mean";
  const ignore = a.ignore_index as number | undefined;
  const t = e.typeOf(target), float = e.typeOf(logp).dtype;
  const keep = ignore === undefined
    ? undefined
    : e.op("Not", [e.op("Equal", [target, e.scalar(ignore, t.dtype)])]);
  const safe = keep ? e.op("Where", [keep, target, e.scalar(0, t.dtype)]) : target;
  const picked = e.op("Squeeze", [
    e.op("GatherElements", [logp, e.op("Unsqueeze", [safe], { axes: [1] })], { axis: 1 }),
  ], { axes: [1] });
  let w = weight ? e.op("Gather", [weight, safe], { axis: 0 }) : undefined;
  if (keep) w = e.op("Where", [keep, w ?? e.scalar(1, float), e.scalar(0, float)]);
  const neg = e.op("Neg", [picked]);
  // Where, not a product with the 0/1 weight: an ignored element adds 0 even if its score is
  // infinite.
  let loss = w ? e.op("Mul", [neg, w]) : neg;
  if (keep) loss = e.op("Where", [keep, loss, e.scalar(0, float)]);
  if (reduction === "none") return loss;
  const all = { axes: t.shape.map((_, i) => i), keepdims: 0 };
  const total = e.op("ReduceSum", [loss], all);
  if (reduction === "sum") return total;
  if (!w) return e.op("ReduceMean", [loss], all);
  return e.op("Div", [total, e.op("ReduceSum", [w], all)]);
}

const lossOps: OpDef[] = [{
  name: "NegativeLogLikelihoodLoss",
  category: "composite",
  arity: [2, 3],
  primitive: false,
  infer: (ctx) => [lossType(ctx)],
  decompose: (e, ins, a) => [nll(e, ins, a)],
}, {
  name: "SoftmaxCrossEntropyLoss",
  category: "composite",
  arity: [2, 3],
  primitive: false,
  infer: (ctx) => [lossType(ctx), ctx.input(0)],
  decompose: (e, [scores, ...rest], a) => {
    const logp = e.op("LogSoftmax", [scores], { axis: 1 });
    return [nll(e, [logp, ...rest], a), logp];
  },
}];

defineOps(lossOps);
