/**
 * The training losses, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: kiln's ops of the
 * same names and attributes (`jit/ops/loss.ts`).
 *
 * @module
 */
import { attrs, type Known, type NodeContext } from "../import/node_context.ts";

/** The loss node `c` as kiln's op `name`: its inputs and attributes as they are. */
function loss(c: NodeContext, name: string, outputs: number): Known[] {
  const a = attrs(c);
  const ignore = a.int("ignore_index");
  const attributes = {
    reduction: a.string("reduction", "mean")!,
    ...(ignore === undefined ? {} : { ignore_index: ignore }),
  };
  const ins = [c.required(0), c.required(1), ...(c.input(2) ? [c.input(2)!] : [])];
  return c.emit(name, ins, attributes, outputs);
}

/** Converters by ONNX op type. */
export const LOSS_CONVERTERS: Record<string, (c: NodeContext) => Known[]> = {
  NegativeLogLikelihoodLoss: (c) => loss(c, "NegativeLogLikelihoodLoss", 1),
  SoftmaxCrossEntropyLoss: (c) => loss(c, "SoftmaxCrossEntropyLoss", 2),
};
