/**
 * ONNX ops that map onto kiln ops of the same name (PRelu, Trilu, Xor, Mean, Sign) or onto Cast
 * (CastLike). The reductions ONNX defines by a sum (ReduceL1, ReduceL2, ReduceSumSquare,
 * ReduceLogSum, ReduceLogSumExp) map onto kiln ops of their own. They lower on every backend and
 * fuse like the ops they are made of. The activations and the trigonometric and hyperbolic functions ONNX defines as functions
 * (Elu, Selu, Celu, ThresholdedRelu, Softplus, Softsign, Mish, Tan, Sinh, Cosh, Asinh, Acosh,
 * Atanh) map onto kiln ops, whose decompositions live in `jit/ops/`.
 *
 * @module
 */
import type { DType } from "../../jit/ir/dtype.ts";
import {
  attrs,
  constant,
  constInts,
  type Converter,
  type Known,
  opOf,
  reduceAxes,
  roundToBf16,
  typeOf,
} from "../import/node_context.ts";

/** A scalar constant of `dtype` (f16: the nearest half, as the model's own constants are). */
export function scalar(value: number, dtype: DType): Known {
  return constant([value], [], dtype);
}

/**
 * A reduction ONNX defines by a sum, mapped onto the kiln op of its name (`jit/ops/
 * sum_reductions.ts`): its axes and keepdims, or `noop` where noop_with_empty_axes leaves no axis.
 */
function sumReduction(name: string): Converter<Known> {
  return (c) => {
    const r = reduceAxes(c);
    return c.emit(name, [c.required(0)], r === "identity" ? { noop: 1 } : r);
  };
}

/**
 * A node mapped onto the kiln op of the same name (`jit/ops/activations.ts` holds its
 * decomposition), with its float attributes `names` where the node sets them.
 */
function activation(name: string, names: readonly string[] = []): Converter<Known> {
  return (c) => {
    const a = attrs(c);
    const given = names.flatMap((n) => {
      const v = a.float(n);
      return v === undefined ? [] : [[n, v] as const];
    });
    return c.emit(name, [c.required(0)], Object.fromEntries(given));
  };
}

/** Converters by ONNX op type. */
export const COMPOSITE_CONVERTERS: Record<string, Converter<Known>> = {
  // A kiln op (jit/ops/elementwise.ts), decomposed where it is legalized.
  Mish: (c) => c.emit("Mish", [c.required(0)]),
  Elu: activation("Elu", ["alpha"]),
  Selu: activation("Selu", ["alpha", "gamma"]),
  Celu: activation("Celu", ["alpha"]),
  ThresholdedRelu: activation("ThresholdedRelu", ["alpha"]),
  Softplus: activation("Softplus"),
  Softsign: activation("Softsign"),
  Sign: activation("Sign"),
  Tan: activation("Tan"),
  Sinh: activation("Sinh"),
  Cosh: activation("Cosh"),
  Asinh: activation("Asinh"),
  Acosh: activation("Acosh"),
  Atanh: activation("Atanh"),
  PRelu: (c) => {
    const x = c.required(0);
    let slope = c.required(1);
    // Opsets before 7 (PyTorch's multi-parameter PReLU): a [C] slope is per channel (axis 1).
    const xs = typeOf(x).shape, ss = typeOf(slope).shape;
    if (ss.length === 1 && xs.length > 2 && ss[0] === xs[1] && ss[0] !== xs.at(-1)) {
      [slope] = c.emit("Reshape", [slope], { shape: [ss[0], ...xs.slice(2).map(() => 1)] });
    }
    return c.emit("PRelu", [x, slope]);
  },
  Xor: (c) => c.emit("Xor", c.inputs()),
  Mean: (c) => c.emit("Mean", [c.required(0), ...c.inputs().slice(1)]),
  CastLike: (c) => {
    attrs(c).int("saturate"); // float8 only (see Cast)
    const target = c.required(1);
    const y = c.emit("Cast", [c.required(0)], { to: typeOf(target).dtype }).map((k) => ({
      ...k,
      i64: target.i64,
    }));
    return target.bf16 ? [roundToBf16(opOf(c), y[0])] : y;
  },
  ReduceL1: sumReduction("ReduceL1"),
  ReduceL2: sumReduction("ReduceL2"),
  ReduceSumSquare: sumReduction("ReduceSumSquare"),
  ReduceLogSum: sumReduction("ReduceLogSum"),
  ReduceLogSumExp: sumReduction("ReduceLogSumExp"),
  Trilu: (c) => {
    const x = c.required(0);
    const k = c.input(1) ? constInts(c, 1, "k")![0] : 0;
    const upper = attrs(c).flag("upper", true) ? 1 : 0;
    return c.emit("Trilu", [x], { k, upper }).map((o) => ({ ...o, i64: x.i64 }));
  },
};
