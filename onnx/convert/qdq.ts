/**
 * The QDQ format's quantized products as ONNX Runtime runs them. A Conv, MatMul or Gemm between
 * a DequantizeLinear of its input, a DequantizeLinear of its weights (and of an i32 bias), whose
 * result a QuantizeLinear takes, is what ONNX Runtime fuses into QLinearConv, QLinearMatMul or
 * QGemm: one integer product summed in i32 and requantized once. Run as written (a float product
 * of dequantized values, then QuantizeLinear) the sums round in f32 and the scale applies in
 * another order, so now and then a value lands on the other side of a rounding boundary and the
 * difference grows layer by layer (ResNet-50 in QDQ int8: 1.5e-2 from ONNX Runtime's output,
 * where ONNX Runtime Web's is exact). QuantizeLinear's converter asks {@linkcode fusedQdq}
 * first; what does not match runs as written.
 *
 * @module
 */
import { sizeOf } from "../../jit/ir/shape.ts";
import { window } from "./conv.ts";
import {
  attrs,
  constant,
  type Known,
  type NodeContext,
  typeOf,
  valuesOf,
} from "../import/node_context.ts";

/** A DequantizeLinear's inputs and axis. */
interface Dequantized {
  readonly q: Known;
  readonly scale: Known;
  readonly zero?: Known;
  readonly axis: number;
}

/** The DequantizeLinear (of the standard domain, per tensor or per axis) that made `name`. */
function dequantized(c: NodeContext, name: string | undefined): Dequantized | undefined {
  const p = name ? c.producer(name) : undefined;
  if (!p || p.node.opType !== "DequantizeLinear" || (p.node.domain ?? "") !== "") return undefined;
  const [q, scale, zero] = p.inputs;
  const a = attrs(p);
  if (!q || !scale || a.int("block_size", 0) !== 0) return undefined;
  const rank = typeOf(q).shape.length, axis = a.int("axis", 1)!;
  return { q, scale, zero, axis: axis < 0 ? axis + rank : axis };
}

const perTensor = (k: Known | undefined) => !k || sizeOf(typeOf(k).shape) === 1;
const is8Bit = (k: Known) => typeOf(k).dtype === "u8" || typeOf(k).dtype === "i8";

/**
 * Whether `w` is quantized per tensor or per output channel (`axis`) and `x` per tensor, both
 * 8-bit: the forms ONNX Runtime's fusion takes.
 */
function fusable(x: Dequantized, w: Dequantized, axis: number): boolean {
  return is8Bit(x.q) && is8Bit(w.q) && perTensor(x.scale) && perTensor(x.zero) &&
    (perTensor(w.scale) || w.axis === axis);
}

/**
 * The i32 bias a DequantizeLinear makes at the product's scale (zero point 0), as ONNX Runtime
 * adds it to the sums; `undefined` for a bias of any other form (no fusion then).
 */
function integerBias(c: NodeContext, name: string | undefined, x: Dequantized, w: Dequantized) {
  const b = dequantized(c, name);
  if (!b || typeOf(b.q).dtype !== "i32") return undefined;
  const values = (k: Known) => k.kind === "const" ? valuesOf(k.tensor) : undefined;
  const zero = b.zero ? values(b.zero) : [0];
  const [bs, xs, ws] = [b.scale, x.scale, w.scale].map(values);
  // The bias scale must be a·b's (ONNX Runtime assumes it; checked here where it is constant).
  const fits = zero?.every((z) => z === 0) && bs && xs && ws &&
    bs.every((s, i) => s === Math.fround(xs[0] * ws[ws.length === 1 ? 0 : i]));
  return fits ? b.q : undefined;
}

/**
 * QuantizeLinear `c` of a Conv (2-D), MatMul or Gemm (alpha = beta = 1, A not transposed)
 * between dequantized 8-bit operands, as one requantized integer product; `undefined` when its
 * input is not such a product.
 */
export function fusedQdq(c: NodeContext): Known | undefined {
  const [ys, yz] = [c.required(1), c.input(2)];
  const p = c.producer(c.node.input[0]);
  if (!yz || !is8Bit(yz) || !perTensor(ys) || !perTensor(yz) || !p) return undefined;
  const node = p.node, type = node.opType;
  if ((node.domain ?? "") !== "" || !["Conv", "MatMul", "Gemm"].includes(type)) return undefined;
  const x = dequantized(c, node.input[0]), w = dequantized(c, node.input[1]);
  if (!x || !w) return undefined;
  const a = attrs(p), wRank = typeOf(w.q).shape.length;
  const transB = type === "Gemm" && a.int("transB", 0) === 1;
  // The axis of w that is the product's output channels.
  const outAxis = type === "Conv" ? 0 : transB ? 0 : wRank - 1;
  if (!fusable(x, w, outAxis)) return undefined;
  const biasName = type === "MatMul" ? undefined : node.input[2];
  const bias = biasName ? integerBias(c, biasName, x, w) : undefined;
  if (biasName && !bias) return undefined;
  if (type === "Conv" && wRank !== 4) return undefined;
  if (type === "Gemm") {
    const plain = a.int("transA", 0) === 0 && a.float("alpha", 1) === 1 &&
      a.float("beta", 1) === 1;
    if (!plain) return undefined;
  }
  // ONNX's QLinear ops take zero points: a DequantizeLinear without one has 0 of its type.
  const zeroOf = (d: Dequantized) => d.zero ?? constant([0], [], typeOf(d.q).dtype);
  const ins = [x.q, x.scale, zeroOf(x), w.q, w.scale, zeroOf(w), ys, yz, ...(bias ? [bias] : [])];
  if (type === "Conv") return c.emit("QLinearConv", ins, window(p))[0];
  return c.emit("QLinearMatMul", ins, transB ? { transB: 1 } : {})[0];
}
