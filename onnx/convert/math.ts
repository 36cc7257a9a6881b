/**
 * Arithmetic ops onto kiln ops: Pow across dtypes (ONNX lets the exponent's type differ; the
 * result has the base's), IsInf, Shrink, BitShift, the bitwise ops of opset 18 on integers, and the
 * quantization ops QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (`jit/ops/quantize.ts`);
 * Hardmax (before opset 13 on a 2-D view), ReduceProd, LRN, TopK and Det map onto kiln ops of
 * their names.
 *
 * @module
 */
import { type DType, isFloat, isInt } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { fusedQdq } from "./qdq.ts";
import {
  asConstant,
  attrs,
  constInts,
  type Converter,
  type Known,
  type NodeContext,
  opOf,
  reduceAxes,
  typeOf,
} from "../import/node_context.ts";
import { dtypeOfCode } from "../wire/proto.ts";

/** The type QuantizeLinear `c` quantizes to: its zero point's, else `output_dtype`'s, else u8. */
function quantizedType(c: NodeContext, zero: Known | undefined): DType {
  const code = attrs(c).int("output_dtype", 0)!;
  return zero ? typeOf(zero).dtype : code ? dtypeOfCode(code, c.label) as DType : "u8";
}

/** QuantizeLinear's and DequantizeLinear's inputs (the zero point where given) and layout. */
function scaled(c: NodeContext): [Known[], { axis: number; block_size: number }] {
  const zero = c.input(2), a = attrs(c);
  const layout = { axis: a.int("axis", 1)!, block_size: a.int("block_size", 0)! };
  return [[c.required(0), c.required(1), ...(zero ? [zero] : [])], layout];
}

/** Opset 18's bitwise ops on integers: kiln's And, Or, Xor and Not are bitwise there. */
function bitwise(kind: "And" | "Or" | "Xor" | "Not"): Converter<Known> {
  return (c) => {
    const xs = kind === "Not" ? [c.required(0)] : [c.required(0), c.required(1)];
    if (xs.some((x) => !isInt(typeOf(x).dtype))) {
      throw new KilnError(`${c.label}: Bitwise${kind} of ${xs.map((x) => typeOf(x).dtype)}`, {
        code: "dtype-mismatch",
        fix: "bitwise ops take integer tensors (use And/Or/Xor/Not for bool)",
      });
    }
    return c.emit(kind, xs);
  };
}

/** Converters by ONNX op type. */
export const MATH_CONVERTERS: Record<string, Converter<Known>> = {
  BitwiseAnd: bitwise("And"),
  BitwiseOr: bitwise("Or"),
  BitwiseXor: bitwise("Xor"),
  BitwiseNot: bitwise("Not"),
  Atan: (c) => [opOf(c)("Atan", [c.required(0)])],
  Asin: (c) => [opOf(c)("Asin", [c.required(0)])],
  Acos: (c) => [opOf(c)("Acos", [c.required(0)])],
  MeanVarianceNormalization: (c) =>
    c.emit("MeanVarianceNormalization", [c.required(0)], {
      axes: attrs(c).ints("axes") ?? [0, 2, 3],
    }),
  Pow: (c) => {
    const op = opOf(c);
    const x = c.required(0), given = c.required(1);
    // An exponent known at import (an initializer, as exporters fold torch.pow(x, 3.0)'s) is a
    // constant of the graph, not a parameter: code generators then see its value (wasm squares
    // and cubes in the module instead of calling the host's pow for every value).
    const y = given.kind === "const" && given.tensor.data.length === 1 ? asConstant(given) : given;
    const [xt, yt] = [typeOf(x).dtype, typeOf(y).dtype];
    if (xt === yt) return c.emit("Pow", [x, y]);
    if (isFloat(xt)) return [op("Pow", [x, op("Cast", [y], { to: xt })])];
    // An integer base: computed in float, the result in the base's type.
    const p = op("Pow", [op("Cast", [x], { to: "f32" }), op("Cast", [y], { to: "f32" })]);
    return [{ ...op("Cast", [p], { to: xt }), i64: x.i64 }];
  },
  // Kiln ops (jit/ops/activations.ts): the converters map the attributes.
  IsInf: (c) => {
    const a = attrs(c);
    const flags = {
      detect_negative: +a.flag("detect_negative", true),
      detect_positive: +a.flag("detect_positive", true),
    };
    return c.emit("IsInf", [c.required(0)], flags);
  },
  Shrink: (c) => {
    const a = attrs(c);
    const bias = a.float("bias", 0)!, lambd = a.float("lambd", 0.5)!;
    return c.emit("Shrink", [c.required(0)], { bias, lambd });
  },
  Hardmax: (c) => {
    const op = opOf(c);
    let x = c.required(0);
    const shape = typeOf(x).shape, rank = shape.length;
    const a = attrs(c).int("axis", c.opset >= 13 ? -1 : 1)!;
    const axis = a < 0 ? a + rank : a;
    if (c.opset >= 13) return [op("Hardmax", [x], { axis })];
    // Before opset 13 the input is seen as 2-D: [prod(shape[:axis]), prod(shape[axis:])].
    const rows = shape.slice(0, axis).reduce((p, d) => p * d, 1);
    x = op("Reshape", [x], { shape: [rows, -1] });
    return [op("Reshape", [op("Hardmax", [x], { axis: 1 })], { shape: [...shape] })];
  },
  TopK: (c) => {
    const x = c.required(0), rank = typeOf(x).shape.length;
    const k = (c.opset >= 10 ? constInts(c, 1, "K") : attrs(c).ints("k")) ?? [];
    const a = attrs(c).int("axis", -1)!;
    attrs(c).flag("sorted", true); // Sorted either way (unsorted allows any order).
    if (k.length !== 1) {
      throw new KilnError(`${c.label}: TopK of K [${k}]`, {
        code: "out-of-range",
        fix: "pass one K",
      });
    }
    const largest = attrs(c).flag("largest", true) ? 1 : 0;
    const [values, indices] = c.emit("TopK", [x], {
      k: k[0],
      axis: a < 0 ? a + rank : a,
      largest,
    }, 2);
    return [values, { ...indices, i64: true }];
  },
  Det: (c) => c.emit("Det", [c.required(0)], {}, 1),
  ReduceProd: (c) => {
    const r = reduceAxes(c);
    return c.emit("ReduceProd", [c.required(0)], r === "identity" ? { noop: 1 } : r);
  },
  BitShift: (c) =>
    c.emit("BitShift", [c.required(0), c.required(1)], {
      direction: attrs(c).string("direction"),
    }),
  LRN: (c) => {
    const a = attrs(c);
    const size = a.int("size")!, alpha = a.float("alpha", 1e-4)!;
    const beta = a.float("beta", 0.75)!, bias = a.float("bias", 1)!;
    return c.emit("LRN", [c.required(0)], { size, alpha, beta, bias });
  },
  // Kiln ops (jit/ops/quantize.ts), expanded at import so a weight's dequantization folds once;
  // a QuantizeLinear of a product between DequantizeLinears runs as ONNX Runtime fuses it.
  QuantizeLinear: (c) => {
    const [ins, layout] = scaled(c), zero = c.input(2);
    attrs(c).int("saturate"); // float8 only; 8-bit integers always saturate
    const four = zero?.kind === "const" && zero.fourBit === true;
    const fused = four ? undefined : fusedQdq(c);
    if (fused) return [fused];
    const to = quantizedType(c, zero);
    return c.emit("QuantizeLinear", ins, { ...layout, to, ...(four ? { bits: 4 } : {}) });
  },
  DequantizeLinear: (c) => c.emit("DequantizeLinear", ...scaled(c)),
  DynamicQuantizeLinear: (c) => c.emit("DynamicQuantizeLinear", [c.required(0)], {}, 3),
};
