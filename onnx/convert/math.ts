/**
 * Arithmetic ops onto kiln ops: Pow across dtypes (ONNX lets the exponent's type differ; the
 * result has the base's), IsInf, Shrink, BitShift, the bitwise ops of opset 18 on integers, and the
 * quantization ops QuantizeLinear and DequantizeLinear for 8-bit types (DynamicQuantizeLinear is
 * kiln's op, `jit/ops/quantize.ts`);
 * Hardmax (before opset 13 on a 2-D view), ReduceProd, LRN, TopK and Det map onto kiln ops of
 * their names.
 *
 * @module
 */
import { type DType, isFloat, isInt } from "../../jit/ir/dtype.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { fusedQdq } from "./qdq.ts";
import { foldedMap } from "./fold.ts";
import {
  asConstant,
  attrs,
  constInts,
  type Converter,
  FOLD_LIMIT,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  reduceAxes,
  typeOf,
} from "../import/node_context.ts";
import { dtypeOfCode } from "../wire/proto.ts";

/** Ranges of the 8-bit quantized types. */
const RANGE: Partial<Record<DType, [number, number]>> = { u8: [0, 255], i8: [-128, 127] };

/** `scale` reshaped to broadcast along `axis` of `shape` when it is per axis (1-D, not 1). */
function alongAxis(op: OpFn, k: Known, shape: readonly number[], axis: number): Known {
  const s = typeOf(k).shape;
  if (s.length !== 1 || shape.length === 0) return k;
  const at = axis < 0 ? axis + shape.length : axis;
  return op("Reshape", [k], { shape: shape.map((_, i) => (i === at ? s[0] : 1)) });
}

/**
 * Scales (and zero points) against `shape`: per tensor, per axis (1-D along `axis`), or, with
 * opset 21's `block_size`, per block along `axis` (each entry repeated over its block's elements).
 */
function perBlock(c: NodeContext, shape: readonly number[], axis: number): (k: Known) => Known {
  const op = opOf(c), block = attrs(c).int("block_size", 0)!;
  const at = axis < 0 ? axis + shape.length : axis;
  if (!block) return (k) => alongAxis(op, k, shape, axis);
  return (k) => {
    const ks = typeOf(k).shape;
    if (ks.length !== shape.length || ks[at] !== Math.ceil(shape[at] / block)) {
      throw new KilnError(
        `${c.label}: blocks of ${block} along axis ${axis} of [${shape}] with [${ks}]`,
        {
          code: "shape-mismatch",
          fix: "give the scale and zero point the input's shape, ceil(size / block_size) on axis",
        },
      );
    }
    const wide = [...ks.slice(0, at + 1), block, ...ks.slice(at + 1)];
    let y = op("Expand", [op("Unsqueeze", [k], { axes: [at + 1] })], { shape: wide });
    y = op("Reshape", [y], { shape: [...ks.slice(0, at), ks[at] * block, ...ks.slice(at + 1)] });
    return ks[at] * block === shape[at]
      ? y
      : op("Slice", [y], { starts: [0], ends: [shape[at]], axes: [at] });
  };
}

/**
 * `round(x / scale) + zero`, saturated into `dtype` and cast; into 4 bits' range with `fourBit`
 * (a uint4 or int4 zero point, held in u8 or i8).
 */
export function quantize(
  op: OpFn,
  x: Known,
  scale: Known,
  zero: Known | undefined,
  dtype: DType,
  fourBit = false,
): Known {
  const [lo, hi] = fourBit ? (dtype === "i8" ? [-8, 7] : [0, 15]) : RANGE[dtype]!;
  let q = op("Round", [op("Div", [x, scale])]);
  if (zero) q = op("Add", [q, op("Cast", [zero], { to: "f32" })]);
  return op("Cast", [op("Clip", [q], { min: lo, max: hi })], { to: dtype });
}

/** `(x − zero) · scale` in f32 (constants folded in one pass: see `fold.ts`). */
export function dequantize(op: OpFn, x: Known, scale: Known, zero: Known | undefined): Known {
  const folded = foldedDequantize(x, scale, zero);
  if (folded) return folded;
  let v = op("Cast", [x], { to: "f32" });
  if (zero) v = op("Sub", [v, op("Cast", [zero], { to: "f32" })]);
  return op("Mul", [v, scale]);
}

/**
 * A constant `(x − zero) · scale` as f32 arithmetic rounds it (the difference of two integers of
 * 16 bits or fewer is exact; the product rounds once), or `undefined` unless all are constant
 * and broadcast to x.
 */
function foldedDequantize(x: Known, scale: Known, zero: Known | undefined): Known | undefined {
  if (x.kind !== "const" || scale.kind !== "const" || (zero && zero.kind !== "const")) {
    return undefined;
  }
  // Past the fold limit a weight stays in its bytes, dequantized as it is read (f32 would take
  // four times an int8 weight's memory; before a QuantizeLinear its product reads the bytes).
  if (x.fourBit || x.tensor.dtype === "i32" || x.i64 || sizeOf(x.tensor.shape) > FOLD_LIMIT) {
    return undefined;
  }
  if (scale.tensor.dtype !== "f32" || scale.bf16) return undefined;
  return foldedMap(x, [zero, scale], "f32", (v, z, s) => (v - z) * s);
}

function quantizedType(c: NodeContext, zero: Known | undefined): DType {
  const code = attrs(c).int("output_dtype", 0)!;
  const dtype = zero ? typeOf(zero).dtype : code ? dtypeOfCode(code, c.label) : "u8";
  if (!RANGE[dtype as DType]) {
    throw new KilnError(`${c.label}: quantization to ${dtype}`, {
      code: "unsupported",
      fix: "kiln quantizes to uint8 and int8",
    });
  }
  return dtype as DType;
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
  QuantizeLinear: (c) => {
    const op = opOf(c);
    const [x, scale, zero] = [c.required(0), c.required(1), c.input(2)];
    const shape = typeOf(x).shape, axis = attrs(c).int("axis", 1)!;
    attrs(c).int("saturate"); // float8 only; 8-bit integers always saturate
    const spread = perBlock(c, shape, axis);
    const four = zero?.kind === "const" && zero.fourBit === true;
    const z = zero && spread(zero);
    const fused = four ? undefined : fusedQdq(c);
    return [fused ?? quantize(op, x, spread(scale), z, quantizedType(c, zero), four)];
  },
  DequantizeLinear: (c) => {
    const [x, scale, zero] = [c.required(0), c.required(1), c.input(2)];
    const spread = perBlock(c, typeOf(x).shape, attrs(c).int("axis", 1)!);
    return [dequantize(opOf(c), x, spread(scale), zero && spread(zero))];
  },
  DynamicQuantizeLinear: (c) => c.emit("DynamicQuantizeLinear", [c.required(0)], {}, 3),
};
