/**
 * The fused ops of ONNX Runtime's `com.microsoft` domain that its transformer optimizer writes
 * into BERT-, GPT- and T5-style models (`onnxruntime.transformers.optimizer`, and models exported
 * through it): Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd, FusedMatMul, SkipLayerNormalization,
 * SkipSimplifiedLayerNormalization, and SimplifiedLayerNormalization (which ONNX Runtime registers
 * in ONNX's own domain). Each becomes the kiln ops it fuses (Gelu, Swish, LayerNormalization,
 * RMSNormalization, MatMul), which fuse again in kiln's kernels.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import {
  attrs,
  type Converter,
  type Known,
  type NodeContext,
  opOf,
} from "../import/node_context.ts";

/** `x + bias` where the node has input `i` (a bias over the last axis), else `x`. */
function biased(c: NodeContext, x: Known, i: number): Known {
  const bias = c.input(i);
  return bias ? opOf(c)("Add", [x, bias]) : x;
}

/** FastGelu: GELU's tanh approximation of x (+ bias). */
function fastGelu(c: NodeContext): Known[] {
  return [opOf(c)("Gelu", [biased(c, c.required(0), 1)], { approximate: "tanh" })];
}

/** QuickGelu: x · sigmoid(alpha · x), kiln's Swish. */
function quickGelu(c: NodeContext): Known[] {
  return c.emit("Swish", [c.required(0)], { alpha: attrs(c).float("alpha", 1.702) });
}

/**
 * FusedMatMul: kiln's op of that name (`jit/ops/nn.ts`), expanded at import so that a transposed
 * weight folds once.
 */
function fusedMatMul(c: NodeContext): Known[] {
  const a = attrs(c);
  return c.emit("FusedMatMul", [c.required(0), c.required(1)], {
    transA: a.int("transA", 0),
    transB: a.int("transB", 0),
    alpha: a.float("alpha", 1),
    transBatchA: a.int("transBatchA", 0),
    transBatchB: a.int("transBatchB", 0),
  });
}

/**
 * SkipLayerNormalization (`simplified`: SkipSimplifiedLayerNormalization): kiln's
 * LayerNormalization (RMSNormalization) of input + skip (+ bias) over the last axis, with its mean
 * (an RMS norm's 1/σ again), 1/σ and the sum itself as outputs 1 to 3.
 */
function skipNorm(simplified: boolean): Converter<Known> {
  return (c) => {
    const op = opOf(c);
    const sum = biased(c, op("Add", [c.required(0), c.required(1)]), simplified ? 3 : 4);
    if (simplified && c.node.output[1]) {
      throw new KilnError(`${c.label}: SkipSimplifiedLayerNormalization's mean output`, {
        code: "unsupported",
        fix: "an RMS normalization takes no mean: leave output 1 unnamed",
      });
    }
    const epsilon = attrs(c).float("epsilon", 1e-5)!, gamma = c.required(2);
    if (simplified) {
      const [y, inv] = c.emit("RMSNormalization", [sum, gamma], { epsilon, stats: 1 }, 2);
      return [y, inv, inv, sum];
    }
    const beta = c.input(3), a = { axis: -1, epsilon, stats: 1 };
    const [y, mean, inv] = c.emit(
      "LayerNormalization",
      beta ? [sum, gamma, beta] : [sum, gamma],
      a,
      3,
    );
    return [y, mean, inv, sum];
  };
}

/** SimplifiedLayerNormalization (ONNX Runtime's RMS norm, kiln's RMSNormalization with 1/σ). */
function simplifiedLayerNormalization(c: NodeContext): Known[] {
  const a = attrs(c);
  return c.emit("RMSNormalization", [c.required(0), c.required(1)], {
    axis: a.int("axis", -1),
    epsilon: a.float("epsilon", 1e-5),
    stash_type: a.int("stash_type", 1),
    stats: 1,
  }, 2);
}

/** Converters of `com.microsoft` fused ops, by op type. */
export const MS_FUSED_CONVERTERS: Record<string, Converter<Known>> = {
  Gelu: (c) => [opOf(c)("Gelu", [c.required(0)], { approximate: "none" })],
  BiasGelu: (c) => [opOf(c)("Gelu", [biased(c, c.required(0), 1)], { approximate: "none" })],
  FastGelu: fastGelu,
  QuickGelu: quickGelu,
  BiasAdd: (c) => {
    const op = opOf(c);
    return [op("Add", [op("Add", [c.required(0), c.required(1)]), c.required(2)])];
  },
  FusedMatMul: fusedMatMul,
  SkipLayerNormalization: skipNorm(false),
  SkipSimplifiedLayerNormalization: skipNorm(true),
  SimplifiedLayerNormalization: simplifiedLayerNormalization,
};

/** ONNX Runtime's contrib ops registered in ONNX's own domain. */
export const ORT_DEFAULT_DOMAIN_CONVERTERS: Record<string, Converter<Known>> = {
  SimplifiedLayerNormalization: simplifiedLayerNormalization,
};
