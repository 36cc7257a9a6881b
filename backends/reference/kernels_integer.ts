/**
 * Reference kernels of the integer products (`jit/ops/integer_products.ts`): the operands less
 * their zero points summed in float64 (exact while the sums stay under 2^53) by MatMul's and
 * Conv's own reference loops, then wrapped to int32 as ONNX Runtime's accumulators wrap; the
 * QLinear ops requantize each step in f32 arithmetic, rounding half to even.
 *
 * @module
 */
import type { Kernel, KernelArgs } from "./kernel.ts";
import { nnKernels } from "./kernels_nn.ts";
import { quantRange } from "../../jit/ops/quantize.ts";
import { roundHalfEven } from "./scalar_math.ts";
import { read, writer } from "./tensor_io.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { sizeOf } from "../../jit/ir/shape.ts";

/**
 * `t` less its zero point, in float64: one for the tensor, or one per index of `axis` (a's rows,
 * b's columns or a weight's output channels).
 */
function shiftedBy(t: RefTensor, zero: RefTensor | undefined, axis: number): RefTensor {
  const v = read(t), out = new Float64Array(v.length), z = zero ? read(zero) : [0];
  const inner = sizeOf(t.shape.slice(axis + 1)), n = t.shape[axis];
  for (let i = 0; i < v.length; i++) {
    out[i] = v[i] - z[z.length > 1 ? Math.floor(i / inner) % n : 0];
  }
  return { data: out, shape: t.shape, dtype: "f64" };
}

/** A 2-D tensor transposed. */
function transposed(t: RefTensor): RefTensor {
  const [r, c] = t.shape, v = read(t), out = new Float64Array(v.length);
  for (let i = 0; i < r; i++) for (let j = 0; j < c; j++) out[j * r + i] = v[i * c + j];
  return { data: out, shape: [c, r], dtype: "f64" };
}

/** The float64 sums of MatMul or Conv (`args`' attributes) of shifted operands `a` and `b`. */
function sums(kind: "MatMul" | "Conv", args: KernelArgs, a: RefTensor, b: RefTensor) {
  const outputs = [{ shape: args.outputs[0].shape, dtype: "f64" as const }];
  return read({ ...outputs[0], data: nnKernels[kind]({ ...args, inputs: [a, b], outputs })[0] });
}

/** MatMulInteger's or ConvInteger's operands and zero points, by the zero-point flags. */
function flagged(args: KernelArgs): (RefTensor | undefined)[] {
  const [a, b, ...zeros] = args.inputs;
  const az = args.ctx.int("a_zero", 0) ? zeros.shift() : undefined;
  return [a, b, az, args.ctx.int("b_zero", 0) ? zeros.shift() : undefined];
}

/** The exact products, wrapped to int32. */
function integerProduct(kind: "MatMul" | "Conv"): Kernel {
  return (args) => {
    const [a, b, az, bz] = flagged(args);
    const rank = a!.shape.length;
    const x = shiftedBy(a!, az, kind === "Conv" ? 0 : rank - 2);
    const w = shiftedBy(b!, bz, kind === "Conv" ? 0 : b!.shape.length - 1);
    // Int32Array's store wraps each sum modulo 2^32, as an int32 accumulator does.
    return [Int32Array.from(sums(kind, args, x, w))];
  };
}

/**
 * QLinearMatMul and QLinearConv: the exact i32 sums plus the i32 bias, times
 * a_scale · b_scale / y_scale, rounded half to even, plus y's zero point, saturated.
 */
function qlinear(kind: "MatMul" | "Conv"): Kernel {
  return (args) => {
    const [a, as, az, b, bs, bz, ys, yz, bias] = args.inputs;
    const transB = args.ctx.int("transB", 0) === 1, f = Math.fround;
    const x = shiftedBy(a, az, kind === "Conv" ? 0 : a.shape.length - 2);
    const w = shiftedBy(b, bz, kind === "Conv" || transB ? 0 : b.shape.length - 1);
    const acc = sums(kind, args, x, transB ? transposed(w) : w);
    const shape = args.outputs[0].shape, n = kind === "Conv" ? shape[1] : shape.at(-1)!;
    const inner = kind === "Conv" ? sizeOf(shape.slice(2)) : 1;
    const [sa, sb, sy, zy] = [as, bs, ys, yz].map(read);
    const c = bias ? read(bias) : undefined, dtype = args.outputs[0].dtype;
    const [lo, hi] = quantRange(dtype, 8);
    const y = writer(dtype, acc.length);
    for (let i = 0; i < acc.length; i++) {
      const j = Math.floor(i / inner) % n, pick = (v: ArrayLike<number>) => v[v.length > 1 ? j : 0];
      const total = ((acc[i] | 0) + (c ? pick(c) : 0)) | 0;
      const scale = f(f(sa[0] * pick(sb)) / sy[0]);
      y.out[i] = Math.min(hi, Math.max(lo, roundHalfEven(f(f(total) * scale)) + zy[0]));
    }
    return [y.finish()];
  };
}

/** Kernels of the integer products, by op name. */
export const integerKernels: Record<string, Kernel> = {
  MatMulInteger: integerProduct("MatMul"),
  ConvInteger: integerProduct("Conv"),
  QLinearMatMul: qlinear("MatMul"),
  QLinearConv: qlinear("Conv"),
};
