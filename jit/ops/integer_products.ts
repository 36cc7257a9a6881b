/**
 * Integer products: `MatMulInteger`, `ConvInteger`, `QLinearMatMul` and `QLinearConv` (and,
 * through them, com.microsoft's QGemm and the QDQ format's products) sum the products of
 * zero-point-shifted 8-bit values in int32, exactly, as ONNX Runtime does.
 *
 * - Matmuls become `IntegerMatMul` over i16 operands (the shifted values fit): integer dot
 *   products on wasm, exact float chunks elsewhere (`integer_matmul.ts`).
 * - Convolutions become `IntegerConv` over the same i16 operands: integer dot products on wasm
 *   (patches gathered through the float tiles' indirection table), float convolutions exact by
 *   channel slices elsewhere (`integer_conv.ts`).
 * - With constant weights the chunks are as few as the weights' actual magnitudes allow, not as
 *   the type's bound asks (258 products a chunk), and the weights are shifted once, in one pass
 *   (folded op by op, each of BERT-base's [768, 3072] weights took about 150 ms of an import).
 *
 * Summed whole in f32, BERT-base's K = 768 and 3072 rounded where ONNX Runtime's int32 sums do
 * not. Operands too wide for even one exact product (16-bit types) take i32 arithmetic
 * throughout. Which zero points MatMulInteger and ConvInteger are given is said by the
 * attributes `a_zero` and `b_zero` (1 where given, in that order after the operands): a product
 * without one is bounded by the unshifted type. The QLinear ops take kiln's extensions for ONNX
 * Runtime's QDQ fusion of a Gemm: an i32 `bias` after y's zero point and `transB`.
 *
 * @module
 */
import type { DType } from "../ir/dtype.ts";
import { broadcastOffsets, broadcastRun, sizeOf, tryBroadcast } from "../ir/shape.ts";
import { quantRange } from "./quantize.ts";
import { convShape, matmulShape } from "./nn.ts";
import {
  type Attrs,
  constantTensor,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  ownedTensor,
} from "./registry.ts";

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

/** A product's operands, zero points (where given) and how an operand's zero point lines up. */
interface Operands {
  readonly a: EmitRef;
  readonly az?: EmitRef;
  readonly b: EmitRef;
  readonly bz?: EmitRef;
}

const toI32 = (e: Emitter, x: EmitRef) => e.op("Cast", [x], { to: "i32" });

/**
 * The exact i32 product of `a` [..., M, K] and `b` [..., K, N], integer tensors shifted by their
 * zero points, whose products are at most `bound` (`a`'s magnitude at most `maxA`): an
 * IntegerMatMul of i16 operands (`max_a` lets a decomposition into float chunks take as few as
 * constant weights' actual magnitudes allow), or i32 arithmetic where a shifted operand passes i16.
 */
function integerMatMul(e: Emitter, a: EmitRef, b: EmitRef, bound: number, maxA: number): EmitRef {
  const fits = (x: EmitRef) => e.typeOf(x).dtype === "i16";
  if (!fits(a) || !fits(b)) return e.op("MatMul", [toI32(e, a), toI32(e, b)]);
  // Its chunks of K are worked out only where a backend decomposes it (`max_a` bounds them).
  return e.op("IntegerMatMul", [a, b], { bound, max_a: maxA });
}

/**
 * A constant `x` less a constant zero point `zero` (broadcast to it), as a constant of `to`, in
 * one pass; `undefined` for any other operands (graph ops then).
 */
function foldedShift(e: Emitter, x: EmitRef, zero: EmitRef | undefined, to: "i16" | "i32") {
  const xs = e.constantOf(x), zs = zero ? e.constantOf(zero) : [0];
  if (!xs || !zs) return undefined;
  const shape = e.typeOf(x).shape, zshape = zero ? e.typeOf(zero).shape : [];
  if (tryBroadcast([shape, zshape])?.join() !== shape.join()) return undefined;
  const out = to === "i16" ? new Int16Array(xs.length) : new Int32Array(xs.length);
  const run = broadcastRun(zshape, shape);
  if (run) {
    for (let r = 0, i = 0; i < out.length; r++) {
      const z = zs[r % zs.length];
      for (const end = i + run; i < end; i++) out[i] = xs[i] - z;
    }
  } else {
    const at = broadcastOffsets(zshape, shape)!;
    for (let i = 0; i < out.length; i++) out[i] = xs[i] - zs[at[i]];
  }
  return ownedTensor(e, out, shape, to);
}

/** `x` less its zero point, as i16 where the difference fits it (8-bit operands), else as i32. */
function shiftedInt(e: Emitter, x: EmitRef, zero: EmitRef | undefined): EmitRef {
  const to = magnitude(e.typeOf(x).dtype, zero !== undefined) <= 32767 ? "i16" : "i32";
  const folded = foldedShift(e, x, zero, to);
  if (folded) return folded;
  const v = zero ? e.op("Sub", [toI32(e, x), toI32(e, zero)]) : x;
  return e.op("Cast", [v], { to });
}

/**
 * A per-channel tensor (1-D) reshaped to broadcast along the first axis of rank `rank`: a
 * constant as a constant, so that a weight's shift by its per-channel zero points folds (a
 * Reshape in the graph kept ONNX Runtime's per-channel QDQ weights shifted in every run, and
 * their products bounded by the type, not by the weights).
 */
function channels(e: Emitter, k: EmitRef, rank: number): EmitRef {
  const { shape: s, dtype } = e.typeOf(k);
  if (rank <= 0 || s.length !== 1) return k;
  const shape = [s[0], ...Array(rank - 1).fill(1)], known = e.constantOf(k);
  return known ? constantTensor(e, known, shape, dtype) : e.op("Reshape", [k], { shape });
}

/**
 * `a ⋆ b` of the zero-point-shifted operands in i32: MatMul (B transposed where `transB`) or
 * Conv with `attrs`. A per-channel zero point of b lines up with the product's output channels:
 * a Conv's first axis, a transposed B's rows.
 */
function product(
  e: Emitter,
  kind: "MatMul" | "Conv",
  { a, az, b, bz }: Operands,
  attrs: Attrs,
  transB = false,
): EmitRef {
  const [at, bt] = [e.typeOf(a), e.typeOf(b)];
  const maxA = magnitude(at.dtype, az !== undefined);
  const bound = maxA * magnitude(bt.dtype, bz !== undefined);
  const wRank = bt.shape.length;
  if (kind === "Conv") {
    const x = shiftedInt(e, a, az), w = shiftedInt(e, b, bz && channels(e, bz, wRank));
    // 16-bit operands, shifted, pass i16: i32 arithmetic throughout.
    if (e.typeOf(x).dtype === "i32" || e.typeOf(w).dtype === "i32") {
      return e.op("Conv", [toI32(e, x), toI32(e, w)], attrs);
    }
    return e.op("IntegerConv", [x, w], { ...attrs, bound, max_a: maxA });
  }
  // ONNX allows a per-row zero point of a (1-D of M): it lines up with a's rows.
  const rows = az && e.typeOf(az).shape.length === 1 && e.typeOf(az).shape[0] > 1
    ? channels(e, az, 2)
    : az;
  const bv = shiftedInt(e, b, bz && (transB ? channels(e, bz, 2) : bz));
  const bT = transB ? e.op("Transpose", [bv], { perm: [1, 0] }) : bv;
  return integerMatMul(e, shiftedInt(e, a, rows), bT, bound, maxA);
}

/**
 * The i32 sums `acc` (plus an i32 `bias` per output channel) rescaled by
 * `a_scale · b_scale / y_scale` and quantized to y's zero point's type: rounded half to even,
 * saturated, as ONNX Runtime requantizes (b's scale and the bias per output channel where 1-D).
 */
function requantized(
  e: Emitter,
  kind: "MatMul" | "Conv",
  acc: EmitRef,
  bias: EmitRef | undefined,
  [as, bs, ys, yz]: EmitRef[],
): EmitRef {
  const outRank = e.typeOf(acc).shape.length - 1;
  const perChannel = (k: EmitRef) => kind === "Conv" ? channels(e, k, outRank) : k;
  if (bias) acc = e.op("Add", [acc, toI32(e, perChannel(bias))]);
  const scale = e.op("Div", [e.op("Mul", [as, perChannel(bs)]), ys]);
  const dtype = e.typeOf(yz).dtype, [lo, hi] = quantRange(dtype, 8);
  const real = e.op("Mul", [e.op("Cast", [acc], { to: "f32" }), scale]);
  const q = e.op("Add", [e.op("Round", [real]), e.op("Cast", [yz], { to: "f32" })]);
  return e.op("Cast", [e.op("Clip", [q], { min: lo, max: hi })], { to: dtype });
}

/** MatMulInteger's and ConvInteger's operands: zero points after them where the flags say. */
function givenZeros([a, b, ...rest]: readonly EmitRef[], attrs: Attrs): Operands {
  const zeros = [...rest];
  const az = attrs.a_zero ? zeros.shift() : undefined,
    bz = attrs.b_zero ? zeros.shift() : undefined;
  return { a, az, b, bz };
}

/** Checks an integer product's operands and zero points; returns its zero points' indices. */
function checkIntegers(ctx: InferContext, operands: readonly number[], zeros: readonly number[]) {
  const types = Object.keys(RANGE) as DType[];
  for (const i of operands) ctx.requireDType(i, types);
  zeros.forEach((z, i) => ctx.requireDType(z, [ctx.input(operands[i]).dtype]));
}

/**
 * Checks MatMulInteger's and ConvInteger's zero points, given where their flags say: each of its
 * operand's dtype, and one value or one per row of a (MatMul's M; a Conv's input takes one only)
 * or per column of b (MatMul's N, a Conv's output channels), as the products line them up.
 */
function checkZeros(ctx: InferContext, kind: "MatMul" | "Conv"): void {
  // The operand (0: a, 1: b) each zero point input belongs to, in their order.
  const owners = [0, 1].filter((o) => ctx.int(o === 0 ? "a_zero" : "b_zero", 0));
  if (ctx.inputs.length !== 2 + owners.length) {
    ctx.fail(
      `${ctx.inputs.length - 2} zero points where the flags name ${owners.length}`,
      "set a_zero and b_zero to 1 for each zero point given",
    );
  }
  const [a, b] = [ctx.input(0).shape, ctx.input(1).shape];
  const lanes = kind === "Conv" ? [1, b[0]] : [a.length > 1 ? a[a.length - 2] : 1, b[b.length - 1]];
  owners.forEach((owner, j) => {
    const at = 2 + j, shape = ctx.input(at).shape;
    ctx.requireDType(at, [ctx.input(owner).dtype]);
    if (sizeOf(shape) !== 1 && !(shape.length === 1 && shape[0] === lanes[owner])) {
      ctx.fail(
        `zero point ${at} has shape [${shape}], where ${kind}Integer takes one value or ` +
          `${lanes[owner]} (one per ${owner === 0 ? "row of a" : "column of b"})`,
        `give input ${at} as a scalar or a 1-D tensor of ${lanes[owner]}`,
        "shape-mismatch",
      );
    }
  });
}

/** The integer products, by op name. */
const integerProducts: OpDef[] = [
  {
    name: "MatMulInteger",
    category: "composite",
    arity: [2, 4],
    primitive: false,
    infer: (ctx) => {
      checkIntegers(ctx, [0, 1], []);
      const a = ctx.input(0).shape, b = ctx.input(1).shape;
      checkZeros(ctx, "MatMul");
      return [{ shape: matmulShape(ctx, a, b), dtype: "i32" }];
    },
    decompose: (e, ins, attrs) => [product(e, "MatMul", givenZeros(ins, attrs), {})],
  },
  {
    name: "ConvInteger",
    category: "composite",
    arity: [2, 4],
    primitive: false,
    infer: (ctx) => {
      checkIntegers(ctx, [0, 1], []);
      checkZeros(ctx, "Conv");
      return [{ shape: convShape(ctx, [0, 1]), dtype: "i32" }];
    },
    decompose: (e, ins, attrs) => [product(e, "Conv", givenZeros(ins, attrs), convAttrs(attrs))],
  },
  {
    name: "QLinearMatMul",
    category: "composite",
    arity: [8, 9],
    primitive: false,
    infer: (ctx) => {
      checkQLinear(ctx);
      const [a, b] = [ctx.input(0).shape, ctx.input(3).shape];
      const bt = ctx.int("transB", 0) ? [...b].reverse() : b;
      return [{ shape: matmulShape(ctx, a, bt), dtype: ctx.input(7).dtype }];
    },
    decompose: (e, [a, as, az, b, bs, bz, ys, yz, bias], attrs) => {
      const acc = product(e, "MatMul", { a, az, b, bz }, {}, !!attrs.transB);
      return [requantized(e, "MatMul", acc, bias, [as, bs, ys, yz])];
    },
  },
  {
    name: "QLinearConv",
    category: "composite",
    arity: [8, 9],
    primitive: false,
    infer: (ctx) => {
      checkQLinear(ctx);
      const bias = ctx.inputs.length > 8 ? [8] : [];
      return [{ shape: convShape(ctx, [0, 3, ...bias]), dtype: ctx.input(7).dtype }];
    },
    decompose: (e, [x, xs, xz, w, ws, wz, ys, yz, bias], attrs) => {
      const acc = product(e, "Conv", { a: x, az: xz, b: w, bz: wz }, convAttrs(attrs));
      return [requantized(e, "Conv", acc, bias, [xs, ws, ys, yz])];
    },
  },
];

/** A QLinear op's types: 8-bit operands and zero points, f32 scales, an i32 bias. */
function checkQLinear(ctx: InferContext): void {
  checkIntegers(ctx, [0, 3], [2, 5]);
  for (const i of [1, 4, 6]) ctx.requireDType(i, ["f32"]);
  ctx.requireDType(7, ["u8", "i8"]);
  if (ctx.inputs.length > 8) ctx.requireDType(8, ["i32"]);
}

/** The convolution's own attributes (the zero-point flags left out). */
function convAttrs({ a_zero: _a, b_zero: _b, ...conv }: Attrs): Attrs {
  return conv;
}

defineOps(integerProducts);
