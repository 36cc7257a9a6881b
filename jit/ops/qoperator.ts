/**
 * The quantized ops of ONNX Runtime's QOperator format (`quantize_static(…,
 * quant_format=QuantFormat.QOperator)`): QLinearAdd, QLinearMul, QLinearSigmoid,
 * QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearConcat and QLinearSoftmax each dequantize
 * their operands, run the float op, and quantize the result as QuantizeLinear does (round half to
 * even, saturated to the zero point's type), so they fuse like the standard quantization ops around
 * them. QGemm is `alpha · (A·B + C)·scale`, A·B and the i32 bias C summed exactly in i32 over the
 * zero-point-shifted operands (MatMulInteger), quantized where y's scale is given.
 *
 * Inputs (kiln's order): each operand, its scale and, where `zeros` says so (1 per operand, then
 * 1 for y), its zero point; then y's scale and zero point. QGemm's take ONNX Runtime's order, its
 * optional inputs flagged by `a_zero`, `b_zero`, `bias` and `y` (y's scale and zero point).
 *
 * @module
 */
import type { DType } from "../ir/dtype.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  inferNode,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** A QOperator op's quantized operands and its output's scale and zero point. */
export interface Quantized<T> {
  readonly operands: readonly { x: T; scale: T; zero?: T }[];
  readonly y: { scale: T; zero?: T };
}

/** The inputs of a QOperator op by role, from the `zeros` flags. */
export function quantizedRoles<T>(xs: readonly T[], a: Attrs): Quantized<T> {
  const zeros = (a.zeros as readonly number[] | undefined) ?? [];
  const rest = [...xs], operands: { x: T; scale: T; zero?: T }[] = [];
  for (let k = 0; k < zeros.length - 1; k++) {
    const [x, scale] = rest.splice(0, 2);
    operands.push({ x, scale, zero: zeros[k] ? rest.shift() : undefined });
  }
  const scale = rest.shift()!;
  return { operands, y: { scale, zero: zeros.at(-1) ? rest.shift() : undefined } };
}

/** The float op between dequantized operands: its name and attributes from the node's. */
export type FloatOp = (a: Attrs, shapes: readonly (readonly number[])[]) => [string, Attrs];

/** The QOperator ops' float ops (the reference runs the same ones). */
export const FLOAT_OPS: Record<string, FloatOp> = {
  QLinearAdd: () => ["Add", {}],
  QLinearMul: () => ["Mul", {}],
  QLinearSigmoid: () => ["Sigmoid", {}],
  QLinearLeakyRelu: (a) => ["LeakyRelu", { alpha: (a.alpha as number | undefined) ?? 0.01 }],
  QLinearGlobalAveragePool: (a, [shape]) => {
    const from = a.channels_last === 1 ? 1 : 2;
    return ["ReduceMean", { axes: shape.slice(2).map((_, i) => i + from), keepdims: 1 }];
  },
  QLinearConcat: (a) => ["Concat", { axis: (a.axis as number | undefined) ?? 0 }],
  QLinearSoftmax: (a, [shape]) => {
    const raw = (a.axis as number | undefined) ?? -1;
    return ["Softmax", { axis: raw < 0 ? raw + shape.length : raw }];
  },
};

/** Softmax before opset 13: over the 2-D view [prod(shape[:axis]), prod(shape[axis:])]. */
function flatSoftmax(e: Emitter, x: EmitRef, axis: number): EmitRef {
  const shape = e.typeOf(x).shape, rows = shape.slice(0, axis).reduce((p, d) => p * d, 1);
  const flat = e.op("Reshape", [x], { shape: [rows, -1] });
  return e.op("Reshape", [e.op("Softmax", [flat], { axis: 1 })], { shape: [...shape] });
}

/** Whether a QLinearSoftmax keeps Softmax's meaning before opset 13. */
export const flatOpset = (name: string, a: Attrs): boolean =>
  name === "QLinearSoftmax" && ((a.opset as number | undefined) ?? 13) < 13;

/** A QOperator op's types: its float op's shape, in y's zero point's type (u8 without one). */
function qoperatorInfer(ctx: InferContext): ValueType[] {
  const r = quantizedRoles(ctx.inputs, ctx.attrs);
  for (const o of r.operands) {
    ctx.requireDType(ctx.inputs.indexOf(o.x), ["u8", "i8"]);
    if (o.scale.dtype !== "f32") {
      ctx.fail("a scale is not f32", "give f32 scales", "dtype-mismatch");
    }
  }
  if (!r.operands.length) ctx.fail("no operands", "give each operand, its scale and zero point");
  const floats = r.operands.map((o) => ({ shape: o.x.shape, dtype: "f32" as DType }));
  const [op, attrs] = FLOAT_OPS[ctx.op](ctx.attrs, floats.map((t) => t.shape));
  const [y] = flatOpset(ctx.op, ctx.attrs) ? [floats[0]] : inferNode(op, floats, attrs, ctx.where);
  const dtype = r.y.zero?.dtype ?? "u8";
  if (dtype !== "u8" && dtype !== "i8") {
    ctx.fail(`quantization to ${dtype}`, "kiln quantizes to uint8 and int8", "unsupported");
  }
  return [{ shape: y.shape, dtype }];
}

/** The QOperator op `name`, as the module says. */
function qoperator(name: string): OpDef {
  return {
    name,
    category: "composite",
    arity: [2, Infinity],
    primitive: false,
    infer: qoperatorInfer,
    decompose: (e, xs, a) => {
      const r = quantizedRoles(xs, a);
      const real = r.operands.map((o) =>
        e.op("DequantizeLinear", [o.x, o.scale, ...(o.zero ? [o.zero] : [])])
      );
      const [op, attrs] = FLOAT_OPS[name](a, real.map((x) => e.typeOf(x).shape));
      const y = flatOpset(name, a)
        ? flatSoftmax(e, real[0], attrs.axis as number)
        : e.op(op, real, attrs);
      return [e.op("QuantizeLinear", [y, r.y.scale, ...(r.y.zero ? [r.y.zero] : [])])];
    },
  };
}

/** QGemm's inputs by role, from the flags of the optional ones. */
export function qgemmRoles<T>(xs: readonly T[], a: Attrs) {
  const rest = [...xs], next = (flag: unknown) => (flag === 1 ? rest.shift() : undefined);
  const [x, xScale] = rest.splice(0, 2), xZero = next(a.a_zero);
  const [w, wScale] = rest.splice(0, 2), wZero = next(a.b_zero);
  const bias = next(a.bias), yScale = next(a.y_scale), yZero = next(a.y_zero);
  return { x, xScale, xZero, w, wScale, wZero, bias, yScale, yZero };
}

/** QGemm's types: [M, N], quantized where y's scale is given (u8 without a zero point), else f32. */
function qgemmInfer(ctx: InferContext): ValueType[] {
  const r = qgemmRoles(ctx.inputs, ctx.attrs);
  const [a, b] = [r.x.shape, r.w.shape];
  const [m, k] = ctx.int("transA", 0) ? [a[1], a[0]] : a;
  const [k2, n] = ctx.int("transB", 0) ? [b[1], b[0]] : b;
  if (a.length !== 2 || b.length !== 2 || k !== k2) {
    ctx.fail(
      `QGemm of [${a}] by [${b}]`,
      "give 2-D operands whose inner sizes agree",
      "shape-mismatch",
    );
  }
  ctx.float("alpha", 1);
  const dtype = r.yScale ? r.yZero?.dtype ?? "u8" : "f32";
  return [{ shape: [m, n], dtype }];
}

/** QGemm, as the module says. */
const qGemm: OpDef = {
  name: "QGemm",
  category: "composite",
  arity: [5, 9],
  primitive: false,
  infer: qgemmInfer,
  decompose: (e, xs, a) => {
    const r = qgemmRoles(xs, a), alpha = (a.alpha as number | undefined) ?? 1;
    const t = (x: EmitRef) => e.op("Transpose", [x], { perm: [1, 0] });
    const f = (k: EmitRef) => e.op("Cast", [k], { to: "f32" });
    const scale = e.op("Mul", [r.xScale, r.wScale]); // per column of the product when 1-D
    const zeros = [r.xZero, r.wZero].filter((z) => z !== undefined);
    const operands = [a.transA === 1 ? t(r.x) : r.x, a.transB === 1 ? t(r.w) : r.w];
    let acc = e.op("MatMulInteger", [...operands, ...zeros], {
      a_zero: +!!r.xZero,
      b_zero: +!!r.wZero,
    });
    // The i32 bias joins the i32 sums before the rescale; alpha scales the product alone.
    if (r.bias && alpha === 1) acc = e.op("Add", [acc, e.op("Cast", [r.bias], { to: "i32" })]);
    let y = e.op("Mul", [f(acc), scale]);
    if (alpha !== 1) y = e.op("Mul", [y, e.scalar(alpha, "f32")]);
    if (r.bias && alpha !== 1) y = e.op("Add", [y, e.op("Mul", [f(r.bias), scale])]);
    if (!r.yScale) return [y];
    return [e.op("QuantizeLinear", [y, r.yScale, ...(r.yZero ? [r.yZero] : [])])];
  },
};

defineOps([...Object.keys(FLOAT_OPS).map(qoperator), qGemm]);
