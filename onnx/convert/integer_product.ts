/**
 * Integer products: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv (and com.microsoft's
 * QGemm and the QDQ format's products, through {@linkcode product}) sum the products of
 * zero-point-shifted 8-bit values in int32, exactly, as ONNX Runtime does.
 *
 * - Matmuls become `IntegerMatMul` over i16 operands (the shifted values fit): integer dot
 *   products on wasm, exact float chunks elsewhere (`jit/ops/integer_matmul.ts`).
 * - Convolutions run as float convolutions of the shifted values: each product of two of them is
 *   an integer of at most 255² = 65025, exact in f32, and so is every partial sum while it stays
 *   under 2^24 whatever the order; a longer patch is split by channels into the groups of one
 *   grouped convolution, summed in i32.
 * - With constant weights the chunks are as few as the weights' actual magnitudes allow, not as
 *   the type's bound asks (258 products a chunk).
 *
 * Summed whole in f32 (as before), BERT-base's K = 768 and 3072 rounded where ONNX Runtime's
 * int32 sums do not. Operands too wide for even one exact product (16-bit types) take i32
 * arithmetic throughout.
 *
 * @module
 */
import type { DType } from "../../jit/ir/dtype.ts";
import { type Attrs, exactTerms } from "../../jit/ops/mod.ts";
import { window } from "./conv.ts";
import { foldedMap } from "./fold.ts";
import {
  type Converter,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** Value ranges of the integer types a quantized product reads. */
const RANGE: Partial<Record<DType, [number, number]>> = {
  u8: [0, 255],
  i8: [-128, 127],
  u16: [0, 65535],
  i16: [-32768, 32767],
};

/**
 * Largest magnitude of an operand of type `dtype`, after subtracting a zero point of the same
 * type where `shifted` (the difference of two such values).
 */
export function magnitude(dtype: DType, shifted: boolean): number {
  const [lo, hi] = RANGE[dtype] ?? [-(2 ** 31), 2 ** 31 - 1];
  return shifted ? hi - lo : Math.max(-lo, hi);
}

const toI32 = (op: OpFn, x: Known) => op("Cast", [x], { to: "i32" });

/**
 * The exact i32 product of `a` [..., M, K] and `b` [..., K, N], integer tensors shifted by their
 * zero points, whose products are at most `bound` (`a`'s magnitude at most `maxA`): an
 * IntegerMatMul of i16 operands (each backend runs it as integer dot products or as exact float
 * chunks, see `jit/ops/integer_matmul.ts`; with constant weights, as few chunks as their actual
 * magnitudes allow), or i32 arithmetic where a shifted operand passes i16.
 */
function integerMatMul(op: OpFn, a: Known, b: Known, bound: number, maxA: number): Known {
  const fits = (x: Known) => typeOf(x).dtype === "i16";
  if (!fits(a) || !fits(b)) return op("MatMul", [toI32(op, a), toI32(op, b)]);
  const [k, n] = typeOf(b).shape.slice(-2), most = Math.ceil(k / Math.max(1, exactTerms(bound)));
  const weights = b.kind === "const" && typeOf(b).shape.length === 2
    ? b.tensor.data as ArrayLike<number>
    : undefined;
  const parts = weights
    ? fewestParts(k, n, (p, j) => Math.abs(weights[p * n + j]), maxA, most)
    : undefined;
  return op("IntegerMatMul", [a, b], { bound, ...(parts ? { parts } : {}) });
}

/**
 * The fewest chunks of a contraction of length `len` (below `most`, else `most`) whose sums stay
 * exact in f32 for every output `j` of `outputs`: with constant weights of magnitude
 * `abs(k, j)` and the other operand at most `maxA`, each chunk's sum is at most `maxA` times the
 * chunk's weights. Quantized weights are mostly far below their type's bound: BERT-base's
 * K = 768 then sums in one float product, where the bound alone asks for three.
 */
function fewestParts(
  len: number,
  outputs: number,
  abs: (k: number, j: number) => number,
  maxA: number,
  most: number,
): number {
  // A chunk's |w| (integers) summed may reach this: times max|a|, it stays under 2^24.
  const limit = exactTerms(maxA);
  // Prefix sums along the contraction, per output: a chunk's sum is one difference.
  const prefix = new Float64Array((len + 1) * outputs);
  for (let k = 0; k < len; k++) {
    for (let j = 0; j < outputs; j++) {
      prefix[(k + 1) * outputs + j] = prefix[k * outputs + j] + abs(k, j);
    }
  }
  const fits = (size: number) => {
    for (let s = 0; s < len; s += size) {
      const e = Math.min(len, s + size);
      for (let j = 0; j < outputs; j++) {
        if (prefix[e * outputs + j] - prefix[s * outputs + j] > limit) return false;
      }
    }
    return true;
  };
  for (let parts = 1; parts < most; parts++) if (fits(Math.ceil(len / parts))) return parts;
  return most;
}

/**
 * The exact i32 convolution of `x` [N, C, ...] by `w` [M, C/group, ...], f32 tensors of
 * integers whose products are at most `bound` (`x` at most `maxA`): channels in slices whose
 * patches sum exactly (as few as constant weights' magnitudes allow), the slices' convolutions
 * summed in i32. Grouped convolutions too long for one exact sum take i32 arithmetic.
 */
export function exactConv(
  op: OpFn,
  [x, w]: Known[],
  attrs: Attrs,
  bound: number,
  maxA: number,
): Known {
  const ws = typeOf(w).shape, [m, channels] = ws;
  const taps = ws.slice(2).reduce((p, d) => p * d, 1), chunk = exactTerms(bound);
  const per = Math.floor(chunk / taps);
  // Channel slices the type bound asks for, or (constant weights) as few as their sums need.
  let parts = per < 1 ? Infinity : Math.ceil(channels / per);
  if (w.kind === "const" && parts > 1) {
    const data = w.tensor.data as ArrayLike<number>;
    const abs = (c: number, o: number) => {
      let sum = 0;
      for (let t = 0; t < taps; t++) sum += Math.abs(data[(o * channels + c) * taps + t]);
      return sum;
    };
    parts = fewestParts(channels, m, abs, maxA, Math.min(parts, channels + 1));
  }
  if (parts === 1) return toI32(op, op("Conv", [x, w], attrs));
  if (parts > channels || Number(attrs.group ?? 1) !== 1) {
    return op("Conv", [toI32(op, x), toI32(op, w)], attrs);
  }
  // The slices as the groups of one grouped convolution (channels zero-padded to a multiple of
  // `parts`), summed in i32: one kernel of parts × M output channels, where a kernel a slice
  // kept the H200's small-spatial convolutions on a handful of tiles each (0.5 ms apiece).
  const size = Math.ceil(channels / parts), pad = size * parts - channels;
  const padded = (t: Known) =>
    pad ? op("Pad", [t], { pads: [0, pad], axes: [1], mode: "constant", value: 0 }) : t;
  const grouped = op("Reshape", [
    op("Transpose", [op("Reshape", [padded(w)], { shape: [m, parts, size, ...ws.slice(2)] })], {
      perm: [1, 0, 2, ...ws.slice(2).map((_, i) => 3 + i)],
    }),
  ], { shape: [parts * m, size, ...ws.slice(2)] });
  const y = op("Conv", [padded(x), grouped], { ...attrs, group: parts });
  const [n, , ...spatial] = typeOf(y).shape;
  const sums = toI32(op, op("Reshape", [y], { shape: [n, parts, m, ...spatial] }));
  return op("ReduceSum", [sums], { axes: [1], keepdims: 0 });
}

/** `x` as f32, less its zero point `zero` (reshaped by `align`) when there is one. */
function shifted(op: OpFn, x: Known, zero: Known | undefined, align = (z: Known) => z): Known {
  const z = zero && align(zero);
  const folded = foldedShift(x, z, "f32");
  if (folded) return folded;
  const f = (k: Known) => op("Cast", [k], { to: "f32" });
  return z ? op("Sub", [f(x), f(z)]) : f(x);
}

/**
 * `x` less its zero point, as i16 where the difference fits it (8-bit operands), else as i32.
 */
function shiftedInt(op: OpFn, x: Known, zero: Known | undefined, align = (z: Known) => z) {
  const to = magnitude(typeOf(x).dtype, zero !== undefined) <= 32767 ? "i16" : "i32";
  const z = zero && align(zero);
  const folded = foldedShift(x, z, to);
  if (folded) return folded;
  const v = z ? op("Sub", [toI32(op, x), toI32(op, z)]) : x;
  return op("Cast", [v], { to });
}

/**
 * A constant `x` less a constant zero point `zero` (broadcast to it), as a constant of `to`, in
 * one pass (see `fold.ts`). `undefined` for any other operands (graph ops then).
 */
function foldedShift(x: Known, zero: Known | undefined, to: "i16" | "i32" | "f32") {
  return foldedMap(x, [zero], to, (v, z) => v - z);
}

/** Largest product of the shifted operands `a` and `b` (zero points `az`, `bz` or none). */
export const productBound = (a: Known, az: Known | undefined, b: Known, bz: Known | undefined) =>
  magnitude(typeOf(a).dtype, az !== undefined) * magnitude(typeOf(b).dtype, bz !== undefined);

/** A per-output-channel tensor (1-D) reshaped to broadcast along a Conv's channel axis. */
function channels(op: OpFn, k: Known, rank: number): Known {
  const s = typeOf(k).shape;
  return rank > 0 && s.length === 1
    ? op("Reshape", [k], { shape: [s[0], ...Array(rank - 1).fill(1)] })
    : k;
}

/**
 * `a ⋆ b` of the zero-point-shifted operands in i32 (MatMul, B transposed where `transB`, or
 * Conv with `extra`'s attributes).
 */
export function product(
  c: NodeContext,
  kind: "MatMul" | "Conv",
  [a, az, b, bz]: (Known | undefined)[],
  extra: Attrs,
  transB = false,
): Known {
  const op = opOf(c), bound = productBound(a!, az, b!, bz);
  // A per-channel zero point of b lines up with the product's output channels: a Conv's first
  // axis, a transposed B's rows.
  const wRank = typeOf(b!).shape.length;
  const bAlign = (z: Known) =>
    kind === "Conv" ? channels(op, z, wRank) : transB ? channels(op, z, 2) : z;
  const maxA = magnitude(typeOf(a!).dtype, az !== undefined);
  if (kind === "Conv") {
    const operands = [shifted(op, a!, az), shifted(op, b!, bz, bAlign)];
    return exactConv(op, operands, extra, bound, maxA);
  }
  const bv = shiftedInt(op, b!, bz, bAlign);
  const bt = transB ? op("Transpose", [bv], { perm: [1, 0] }) : bv;
  return integerMatMul(op, shiftedInt(op, a!, az), bt, bound, maxA);
}

/** MatMulInteger and ConvInteger: `(a − a_zero) ⋆ (b − b_zero)` in i32. */
function integerProduct(c: NodeContext, kind: "MatMul" | "Conv", extra: Attrs): Known {
  return product(c, kind, [c.required(0), c.input(2), c.required(1), c.input(3)], extra);
}

/**
 * QLinearMatMul and QLinearConv: the integer product of the zero-point-shifted operands plus
 * Conv's i32 bias, in i32, then requantized (see {@linkcode requantized}).
 */
function qlinear(c: NodeContext, kind: "MatMul" | "Conv"): Known {
  const [a, as, az, b, bs, bz, ys, yz] = [0, 1, 2, 3, 4, 5, 6, 7].map((i) => c.required(i));
  const extra = kind === "Conv" ? window(c, { pool: false }) : {};
  const acc = product(c, kind, [a, az, b, bz], extra);
  return requantized(opOf(c), kind, acc, kind === "Conv" ? c.input(8) : undefined, [
    as,
    bs,
    ys,
    yz,
  ]);
}

/**
 * The i32 sums `acc` (plus an i32 `bias` per output channel) rescaled by
 * `a_scale · b_scale / y_scale` and quantized to y's zero point's type: rounded half to even,
 * saturated, as ONNX Runtime requantizes (b's scale and the bias per output channel where 1-D).
 */
export function requantized(
  op: OpFn,
  kind: "MatMul" | "Conv",
  acc: Known,
  bias: Known | undefined,
  [as, bs, ys, yz]: Known[],
): Known {
  const outRank = typeOf(acc).shape.length - 1;
  const perChannel = (k: Known) => kind === "Conv" ? channels(op, k, outRank) : k;
  if (bias) acc = op("Add", [acc, toI32(op, perChannel(bias))]);
  const scale = op("Div", [op("Mul", [as, perChannel(bs)]), ys]);
  const [lo, hi] = RANGE[typeOf(yz).dtype] ?? [0, 255];
  const real = op("Mul", [op("Cast", [acc], { to: "f32" }), scale]);
  const q = op("Add", [op("Round", [real]), op("Cast", [yz], { to: "f32" })]);
  return op("Cast", [op("Clip", [q], { min: lo, max: hi })], { to: typeOf(yz).dtype });
}

/** The converters of this module, by op type. */
export const INTEGER_PRODUCT_CONVERTERS: Record<string, Converter<Known>> = {
  MatMulInteger: (c) => [integerProduct(c, "MatMul", {})],
  ConvInteger: (c) => [integerProduct(c, "Conv", window(c, { pool: false }))],
  QLinearMatMul: (c) => [qlinear(c, "MatMul")],
  QLinearConv: (c) => [qlinear(c, "Conv")],
};
