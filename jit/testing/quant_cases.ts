/**
 * Decomposition cases of the quantization ops (`jit/ops/quantize.ts`) and the integer products
 * (`jit/ops/integer_products.ts`): each runs on the reference backend as its own kernel and as
 * its decomposition, which must agree exactly (`jit/passes/decompose_test.ts`). Sums past 2^24
 * and constant weights (whose shift and chunks fold) are among them.
 *
 * @module
 */
import { uniform } from "../support/random.ts";
import type { DecomposeCase } from "./layer_cases.ts";
import { f32, i32 } from "./testing.ts";
import type { HostTensor } from "../ir/host_tensor.ts";

const u8s = (values: ArrayLike<number>, shape = [values.length]): HostTensor => ({
  data: Uint8Array.from(values),
  shape,
  dtype: "u8",
});
const i8 = (values: ArrayLike<number>, shape = [values.length]): HostTensor => ({
  data: Int8Array.from(values),
  shape,
  dtype: "i8",
});
/** `n` integers in [lo, hi] from seed `seed`. */
const ints = (n: number, seed: number, lo: number, hi: number) =>
  Array.from(uniform(n, seed, lo, hi + 1), Math.floor);

/** Cases by op name. */
export const QUANT_CASES: Record<string, DecomposeCase[]> = {
  // Per tensor without a zero point (u8), per axis into i8, per block (the last one short),
  // and int4's range; halves round to even.
  QuantizeLinear: [
    { inputs: [f32([-3, -0.5, 0.5, 1.5, 2.5, 300, 127.4, 0.1], [2, 4]), f32([1])] },
    {
      inputs: [f32(uniform(24, 111, -40, 40), [2, 3, 4]), f32([0.5, 0.25, 1], [3]), i8([3, -2, 0])],
    },
    {
      inputs: [
        f32(uniform(10, 112, -9, 9), [2, 5]),
        f32([0.5, 1, 2, 0.25], [2, 2]),
        u8s([1, 2, 3, 4], [2, 2]),
      ],
      attrs: { axis: 1, block_size: 3 },
    },
    { inputs: [f32(uniform(12, 113, -20, 20), [12]), f32([1]), i8([1])], attrs: { bits: 4 } },
  ],
  DequantizeLinear: [
    { inputs: [u8s([0, 7, 128, 255], [4]), f32([0.5]), u8s([128], [1])] },
    {
      inputs: [i8([-128, -1, 0, 5, 127, 60], [2, 3]), f32([0.1, 0.2, 0.3], [3])],
      attrs: { axis: 1 },
    },
    {
      inputs: [i8([1, -2, 3, -4, 5, -6, 7, -8, 9, -10], [2, 5]), f32([0.5, 1, 2, 0.25], [2, 2])],
      attrs: { axis: 1, block_size: 3 },
    },
    { inputs: [i32([1 << 25, -(1 << 25) - 3, 17], [3]), f32([0.125])] },
  ],
  // A range around 0 and one wholly above it (the zero point at 0); a long tensor (rows first).
  DynamicQuantizeLinear: [
    { inputs: [f32(uniform(24, 108, -3, 5), [4, 6])], outputs: 3 },
    { inputs: [f32(uniform(10, 109, 2, 9))], outputs: 3 },
    { inputs: [f32(uniform(1 << 16, 110, -1, 1), [16, 4096])], outputs: 3 },
  ],
  // Around 0, wholly above it, and large (rows first).
  RangeWithZero: [
    { inputs: [f32(uniform(24, 105, -3, 5), [4, 6])], outputs: 2 },
    { inputs: [f32(uniform(10, 106, 2, 9))], outputs: 2 },
    { inputs: [f32(uniform(1 << 16, 107, -4, 1), [16, 4096])], outputs: 2 },
  ],
  // u8 × i8 with both zero points (K = 300: past one exact f32 chunk), b's per column; no zero
  // points; only b's, with constant weights (their chunks and shift fold).
  MatMulInteger: [
    {
      inputs: [
        u8s(ints(2 * 300, 120, 0, 255), [2, 300]),
        i8(ints(300 * 3, 121, -128, 127), [300, 3]),
        u8s([3]),
        i8([1, -2, 0]),
      ],
      attrs: { a_zero: 1, b_zero: 1 },
    },
    { inputs: [i8(ints(12, 122, -128, 127), [3, 4]), i8(ints(8, 123, -128, 127), [4, 2])] },
    {
      inputs: [u8s(ints(8, 124, 0, 255), [2, 4]), i8(ints(12, 125, -20, 20), [4, 3]), i8([5])],
      attrs: { b_zero: 1 },
      constants: [1, 2],
    },
  ],
  // A patch of 3·3·40 = 360 products (two exact chunks), weights' zero points per channel; the
  // same with constant weights (one grouped convolution of their fewest chunks).
  ConvInteger: [
    {
      inputs: [
        u8s(ints(40 * 25, 126, 0, 255), [1, 40, 5, 5]),
        u8s(ints(2 * 40 * 9, 127, 0, 255), [2, 40, 3, 3]),
        u8s([100]),
        u8s([3, 200]),
      ],
      attrs: { a_zero: 1, b_zero: 1, pads: [1, 1, 1, 1] },
    },
    {
      inputs: [
        u8s(ints(40 * 16, 128, 0, 255), [1, 40, 4, 4]),
        i8(ints(3 * 40 * 9, 129, -128, 127), [3, 40, 3, 3]),
        u8s([7]),
      ],
      attrs: { a_zero: 1, strides: [2, 2] },
      constants: [1],
    },
  ],
  // Requantized to u8 and to i8 (saturating at both ends); transB and an i32 bias (kiln's QDQ Gemm).
  QLinearMatMul: [
    {
      inputs: [
        u8s(ints(2 * 6, 130, 0, 255), [2, 6]),
        f32([0.02]),
        u8s([128]),
        i8(ints(6 * 4, 131, -128, 127), [6, 4]),
        f32([0.01, 0.02, 0.005, 0.03]),
        i8([0, 0, 0, 0]),
        f32([0.05]),
        u8s([10]),
      ],
    },
    {
      inputs: [
        i8(ints(3 * 5, 132, -128, 127), [3, 5]),
        f32([0.1]),
        i8([-3]),
        i8(ints(2 * 5, 133, -128, 127), [2, 5]),
        f32([0.05]),
        i8([2]),
        f32([0.7]),
        i8([1]),
        i32([300, -4000]),
      ],
      attrs: { transB: 1 },
    },
  ],
  QLinearConv: [
    {
      inputs: [
        u8s(ints(2 * 3 * 16, 134, 0, 255), [1, 6, 4, 4]),
        f32([0.03]),
        u8s([120]),
        i8(ints(4 * 6 * 4, 135, -128, 127), [4, 6, 2, 2]),
        f32([0.01, 0.02, 0.015, 0.03]),
        i8([0, 0, 0, 0]),
        f32([0.2]),
        u8s([100]),
        i32([50, -50, 1000, 0]),
      ],
      attrs: { strides: [2, 2] },
      constants: [3],
    },
  ],
  // ONNX Runtime's QOperator ops: operands with and without zero points, broadcasting, both
  // pooling layouts, Softmax's meaning before opset 13; approximated functions a step apart.
  QLinearAdd: [
    {
      inputs: [
        u8s(ints(6, 190, 0, 255), [2, 3]),
        f32([0.05]),
        u8s([120]),
        u8s(ints(3, 191, 0, 255)),
        f32([0.02]),
        u8s([10]),
        f32([0.07]),
        u8s([100]),
      ],
      attrs: { zeros: [1, 1, 1] },
    },
  ],
  QLinearMul: [
    {
      inputs: [
        i8(ints(6, 192, -128, 127), [2, 3]),
        f32([0.05]),
        i8([3]),
        i8(ints(6, 193, -128, 127), [2, 3]),
        f32([0.1]),
        f32([0.4]),
        i8([-5]),
      ],
      attrs: { zeros: [1, 0, 1] },
    },
  ],
  QLinearSigmoid: [
    {
      inputs: [u8s(ints(12, 194, 0, 255), [3, 4]), f32([0.05]), u8s([128]), f32([1 / 256])],
      attrs: { zeros: [1, 0] },
      atol: 1,
    },
  ],
  QLinearLeakyRelu: [
    {
      inputs: [u8s(ints(8, 195, 0, 255)), f32([0.1]), u8s([128]), f32([0.08]), u8s([64])],
      attrs: { zeros: [1, 1], alpha: 0.2 },
    },
  ],
  QLinearGlobalAveragePool: [
    {
      inputs: [
        u8s(ints(18, 196, 0, 255), [1, 2, 3, 3]),
        f32([0.1]),
        u8s([7]),
        f32([0.1]),
        u8s([7]),
      ],
      attrs: { zeros: [1, 1] },
      atol: 1,
    },
    {
      inputs: [
        u8s(ints(18, 197, 0, 255), [1, 3, 3, 2]),
        f32([0.1]),
        u8s([7]),
        f32([0.2]),
        u8s([0]),
      ],
      attrs: { zeros: [1, 1], channels_last: 1 },
      atol: 1,
    },
  ],
  QLinearConcat: [
    {
      inputs: [
        u8s(ints(4, 198, 0, 255), [2, 2]),
        f32([0.1]),
        u8s([100]),
        u8s(ints(6, 199, 0, 255), [2, 3]),
        f32([0.05]),
        u8s([3]),
        f32([0.08]),
        u8s([90]),
      ],
      attrs: { zeros: [1, 1, 1], axis: 1 },
    },
  ],
  QLinearSoftmax: [
    {
      inputs: [
        u8s(ints(12, 200, 0, 255), [3, 4]),
        f32([0.1]),
        u8s([128]),
        f32([1 / 256]),
        u8s([0]),
      ],
      attrs: { zeros: [1, 1] },
      atol: 1,
    },
    {
      inputs: [
        u8s(ints(12, 201, 0, 255), [2, 2, 3]),
        f32([0.1]),
        u8s([128]),
        f32([1 / 256]),
        u8s([0]),
      ],
      attrs: { zeros: [1, 1], axis: 1, opset: 12 },
      atol: 1,
    },
  ],
  // B transposed with a bias, quantized; alpha with a bias and A transposed, left in f32.
  QGemm: [
    {
      inputs: [
        u8s(ints(2 * 5, 202, 0, 255), [2, 5]),
        f32([0.02]),
        u8s([128]),
        i8(ints(3 * 5, 203, -128, 127), [3, 5]),
        f32([0.01, 0.03, 0.02]),
        i8([0, 0, 0]),
        i32([100, -200, 3000]),
        f32([0.05]),
        u8s([10]),
      ],
      attrs: { transB: 1, a_zero: 1, b_zero: 1, bias: 1, y_scale: 1, y_zero: 1 },
    },
    {
      inputs: [
        u8s(ints(5 * 2, 204, 0, 255), [5, 2]),
        f32([0.02]),
        i8(ints(5 * 3, 205, -128, 127), [5, 3]),
        f32([0.01]),
        i32([100, -200, 3000]),
      ],
      attrs: { transA: 1, alpha: 0.5, bias: 1 },
      atol: 1e-6,
    },
  ],
};
