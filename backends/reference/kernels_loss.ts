/**
 * Reference kernels for the training losses (`jit/ops/loss.ts`), computed directly in float64:
 * per element of the targets the picked class's negative log-probability, weighted, then reduced.
 *
 * @module
 */
import { sizeOf } from "../../jit/ir/shape.ts";
import { LOSS_REDUCTIONS } from "../../jit/ops/loss.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import type { Kernel, KernelArgs } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Log-probabilities along axis 1 of `x` ([N, C, d…]), row by row of classes. */
function logSoftmax(x: RefTensor): Float64Array {
  const v = read(x), [n, c] = x.shape, inner = sizeOf(x.shape.slice(2));
  const out = new Float64Array(v.length);
  for (let b = 0; b < n; b++) {
    for (let d = 0; d < inner; d++) {
      const at = (k: number) => (b * c + k) * inner + d;
      let max = -Infinity;
      for (let k = 0; k < c; k++) max = Math.max(max, v[at(k)]);
      let sum = 0;
      for (let k = 0; k < c; k++) sum += Math.exp(v[at(k)] - max);
      for (let k = 0; k < c; k++) out[at(k)] = v[at(k)] - max - Math.log(sum);
    }
  }
  return out;
}

/** The loss of log-probabilities `logp` (of `x`'s shape) for targets and weights in `args`. */
function nll(args: KernelArgs, logp: ArrayLike<number>): number[] {
  const [x, target, weight] = args.inputs;
  const reduction = args.ctx.choice("reduction", LOSS_REDUCTIONS);
  const ignore = args.ctx.has("ignore_index") ? args.ctx.int("ignore_index") : undefined;
  const t = read(target), w = weight ? read(weight) : undefined;
  const [, c] = x.shape, inner = sizeOf(x.shape.slice(2));
  const losses: number[] = [];
  let total = 0, weights = 0;
  for (let i = 0; i < t.length; i++) {
    const cls = t[i];
    if (cls === ignore) {
      losses.push(0);
      continue;
    }
    const b = Math.floor(i / inner), d = i % inner;
    // A class outside [0, C) picks nothing: NaN, as no class's probability can be read.
    const score = cls >= 0 && cls < c ? logp[(b * c + cls) * inner + d] : NaN;
    const wi = w ? w[cls] ?? NaN : 1;
    losses.push(-score * wi);
    total += -score * wi;
    weights += wi;
  }
  if (reduction === "none") return losses;
  if (reduction === "sum") return [total];
  return [w || ignore !== undefined ? total / weights : total / t.length];
}

/** Kernels of the loss family, by op name. */
export const lossKernels: Record<string, Kernel> = {
  NegativeLogLikelihoodLoss: (args) => [
    written(args.outputs[0].dtype, nll(args, read(args.inputs[0]))),
  ],
  SoftmaxCrossEntropyLoss: (args) => {
    const logp = logSoftmax(args.inputs[0]);
    return [written(args.outputs[0].dtype, nll(args, logp)), written(args.outputs[1].dtype, logp)];
  },
};
