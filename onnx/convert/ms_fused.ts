/**
 * The fused ops of ONNX Runtime's `com.microsoft` domain that its transformer optimizer writes
 * into BERT-, GPT- and T5-style models (`onnxruntime.transformers.optimizer`, and models exported
 * through it): Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd, FusedMatMul, SkipLayerNormalization,
 * SkipSimplifiedLayerNormalization, and SimplifiedLayerNormalization (which ONNX Runtime registers
 * in ONNX's own domain). Each becomes the kiln ops it fuses, which fuse again in kiln's kernels.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import { trailing } from "../../jit/ops/llm.ts";
import {
  attrs,
  type Converter,
  type Known,
  type NodeContext,
  opOf,
  typeOf,
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

/** QuickGelu: x · sigmoid(alpha · x). */
function quickGelu(c: NodeContext): Known[] {
  const op = opOf(c), x = c.required(0), alpha = attrs(c).float("alpha", 1.702)!;
  return [op("Mul", [x, op("Sigmoid", [op("Mul", [x, scalar(alpha, typeOf(x).dtype)])])])];
}

/** FusedMatMul: alpha · A·B with either operand's last two axes swapped first. */
function fusedMatMul(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c);
  if (a.int("transBatchA", 0) || a.int("transBatchB", 0)) {
    throw new KilnError(`${c.label}: FusedMatMul with transBatchA or transBatchB`, {
      code: "unsupported",
      fix:
        "kiln runs FusedMatMul with transA, transB and alpha; re-export without the batch transposes",
    });
  }
  const swap = (k: Known, on: number) => {
    const rank = typeOf(k).shape.length;
    if (!on || rank < 2) return k;
    const perm = [...Array(rank).keys()];
    [perm[rank - 2], perm[rank - 1]] = [perm[rank - 1], perm[rank - 2]];
    return op("Transpose", [k], { perm });
  };
  const y = op("MatMul", [
    swap(c.required(0), a.int("transA", 0)!),
    swap(c.required(1), a.int("transB", 0)!),
  ]);
  const alpha = a.float("alpha", 1)!;
  return [alpha === 1 ? y : op("Mul", [y, scalar(alpha, typeOf(y).dtype)])];
}

/**
 * Layer normalization over `axes` of `x` (the last, unless given), times gamma plus beta
 * (`simplified`: RMS normalization, no mean taken: its place holds 1/σ again), with the mean and
 * 1/σ it used (kept as size-1 axes).
 */
function normalized(
  c: NodeContext,
  x: Known,
  gamma: Known,
  beta: Known | undefined,
  simplified: boolean,
  axes = [-1],
): Known[] {
  const op = opOf(c), t = typeOf(x).dtype, keep = { axes, keepdims: 1 };
  const eps = scalar(attrs(c).float("epsilon", 1e-5)!, t);
  const mean = simplified ? undefined : op("ReduceMean", [x], keep);
  const d = mean ? op("Sub", [x, mean]) : x;
  const inv = op("Reciprocal", [
    op("Sqrt", [op("Add", [op("ReduceMean", [op("Mul", [d, d])], keep), eps])]),
  ]);
  const y = op("Mul", [op("Mul", [d, inv]), gamma]);
  return [beta ? op("Add", [y, beta]) : y, mean ?? inv, inv];
}

/**
 * SkipLayerNormalization (`simplified`: SkipSimplifiedLayerNormalization): the normalization of
 * input + skip (+ bias), with its mean, 1/σ and the sum itself as outputs 1 to 3.
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
    const beta = simplified ? undefined : c.input(3);
    const [y, mean, inv] = normalized(c, sum, c.required(2), beta, simplified);
    return [y, mean, inv, sum];
  };
}

/** SimplifiedLayerNormalization (ONNX Runtime's RMS norm): over the axes from `axis` on. */
function simplifiedLayerNormalization(c: NodeContext): Known[] {
  const x = c.required(0), axes = trailing(attrs(c).int("axis", -1)!, typeOf(x).shape.length);
  // Statistics in f32 whatever stash_type says (kiln has no wider float), as RMSNormalization's.
  attrs(c).int("stash_type");
  const [y, , inv] = normalized(c, x, c.required(1), undefined, true, axes);
  return [y, inv];
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
