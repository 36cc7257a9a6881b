/**
 * Reference kernels for the training optimizers (`jit/ops/training.ts`), element by element in
 * float64 as ONNX writes each formula, rounded once to the tensors' type.
 *
 * @module
 */
import type { Kernel, KernelArgs } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** R, T, X, G and the states as float64 arrays, and the attribute reader. */
function operands({ inputs, ctx }: KernelArgs) {
  const [r, t, x, g, ...states] = inputs.map(read);
  return { r: r[0], t: t[0], x, g, states, f: (name: string, d = 0) => ctx.float(name, d) };
}

/** The outputs, each in X's type. */
function outputs(args: KernelArgs, arrays: Float64Array[]) {
  return arrays.map((a, i) => written(args.outputs[i].dtype, a));
}

/** Kernels of the optimizers, by op name. */
export const trainingKernels: Record<string, Kernel> = {
  Adagrad: (args) => {
    const { r, t, x, g, states: [h], f } = operands(args);
    const rate = r / (1 + t * f("decay_factor")), eps = f("epsilon", 1e-6);
    const xs = new Float64Array(x.length), hs = new Float64Array(x.length);
    for (let i = 0; i < x.length; i++) {
      const gi = f("norm_coefficient") * x[i] + g[i];
      hs[i] = h[i] + gi * gi;
      xs[i] = x[i] - (rate * gi) / (Math.sqrt(hs[i]) + eps);
    }
    return outputs(args, [xs, hs]);
  },
  Momentum: (args) => {
    const { r, t, x, g, states: [v], f } = operands(args);
    const alpha = f("alpha"), beta = t > 0 ? f("beta") : 1;
    const nesterov = args.ctx.choice("mode", ["standard", "nesterov"]) === "nesterov";
    const xs = new Float64Array(x.length), vs = new Float64Array(x.length);
    for (let i = 0; i < x.length; i++) {
      const gi = f("norm_coefficient") * x[i] + g[i];
      vs[i] = alpha * v[i] + beta * gi;
      xs[i] = x[i] - r * (nesterov ? gi + alpha * vs[i] : vs[i]);
    }
    return outputs(args, [xs, vs]);
  },
  Adam: (args) => {
    const { r, t, x, g, states: [v, h], f } = operands(args);
    const alpha = f("alpha", 0.9), beta = f("beta", 0.999), post = f("norm_coefficient_post");
    const rate = t > 0 ? (r * Math.sqrt(1 - beta ** t)) / (1 - alpha ** t) : r;
    const xs = new Float64Array(x.length), vs = new Float64Array(x.length);
    const hs = new Float64Array(x.length);
    for (let i = 0; i < x.length; i++) {
      const gi = f("norm_coefficient") * x[i] + g[i];
      vs[i] = alpha * v[i] + (1 - alpha) * gi;
      hs[i] = beta * h[i] + (1 - beta) * gi * gi;
      xs[i] = (x[i] - (rate * vs[i]) / (Math.sqrt(hs[i]) + f("epsilon", 1e-6))) * (1 - post);
    }
    return outputs(args, [xs, vs, hs]);
  },
};
