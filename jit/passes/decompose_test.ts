import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { decompose } from "./decompose.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { getOp, opNames } from "../ops/mod.ts";
import { uniform } from "../support/random.ts";
import { assertClose, f32, i32, numbers, runGraph } from "../testing/testing.ts";
import { type DecomposeCase, LAYER_CASES } from "../testing/layer_cases.ts";
import { IMPORT_CASES } from "../testing/import_cases.ts";
import { QUANT_CASES } from "../testing/quant_cases.ts";
import { ORT_CASES } from "../testing/ort_cases.ts";

/** A bool tensor of 0/1 values. */
const bools = (values: number[], shape = [values.length]): HostTensor => ({
  data: Uint8Array.from(values),
  shape,
  dtype: "bool",
});

/** `n` integers of `dtype` spread over [lo, hi] (the extremes included). */
const ints = (dtype: "i16" | "i8" | "u8", n: number, lo: number, hi: number, shape: number[]) => {
  const values = Array.from(
    { length: n },
    (_, i) => lo + (Math.imul(i, 2654435761) >>> 0) % (hi - lo + 1),
  );
  values[0] = lo;
  values[n - 1] = hi;
  const data = dtype === "i16"
    ? Int16Array.from(values)
    : dtype === "i8"
    ? Int8Array.from(values)
    : Uint8Array.from(values);
  return { data, shape, dtype } as HostTensor;
};

/** `n` u32 words of packed values, every bit pattern likely (the top bits set too). */
const words = (n: number, seed: number, shape: number[]): HostTensor => ({
  data: Uint32Array.from(uniform(n, seed, 0, 2 ** 32), (v) => Math.floor(v) >>> 0),
  shape,
  dtype: "u32",
});

/** `rows` rows of `n` values in (−1, 1), with `[row, column, value]` set. */
const longRows = (rows: number, n: number, set: [number, number, number][]) => {
  const t = f32(uniform(rows * n, 40, -1, 1), [rows, n]);
  for (const [r, c, v] of set) (t.data as Float32Array)[r * n + c] = v;
  return t;
};

/** One case per decomposable op: inputs, attributes, tolerance. */
const localCases: Record<string, DecomposeCase[]> = {
  Concat: [
    {
      inputs: [f32([1, 2, 3, 4], [2, 2]), f32([5, 6], [2, 1]), f32([7, 8, -0, NaN], [2, 2])],
      attrs: { axis: 1 },
    },
    { inputs: [f32([1, 2], [1, 2]), f32([], [0, 2]), f32([3, 4], [1, 2])], attrs: { axis: -2 } },
    { inputs: [i32([1, 2, 3])], attrs: { axis: 0 } },
  ],
  Split: [
    { inputs: [f32(uniform(24, 30), [2, 12])], attrs: { axis: 1, split: [3, 0, 9] }, outputs: 3 },
    { inputs: [f32(uniform(10, 31), [5, 2])], attrs: { axis: 0, num_outputs: 2 }, outputs: 2 },
  ],
  ArgMax: [
    { inputs: [f32([1, 3, 3, 2, NaN, 5, NaN, 0, -1], [3, 3])], attrs: { axis: 1 } },
    {
      inputs: [f32([1, 3, 3, 2, 2, 0], [2, 3])],
      attrs: { axis: 1, select_last_index: 1, keepdims: 0 },
    },
    { inputs: [i32([4, -1, 9, 9], [2, 2])], attrs: { axis: 0 } },
    // Long rows take two steps (rows of 1024, padded): ties across rows, a NaN, the padding.
    {
      inputs: [longRows(3, 40000, [[0, 39999, 7], [0, 1500, 7], [1, 30000, NaN]])],
      attrs: { axis: 1 },
    },
    { inputs: [longRows(2, 20481, [[1, 20480, 9]])], attrs: { axis: -1, keepdims: 0 } },
  ],
  ArgMin: [
    {
      inputs: [longRows(2, 20000, [[0, 19999, -9], [1, 5, -9], [1, 19000, -9]])],
      attrs: { axis: 1 },
    },
    { inputs: [f32([1, -3, -3, 2, NaN, 5], [2, 3])], attrs: { axis: -1, keepdims: 0 } },
    { inputs: [f32([2, 1, 1, 0, 0, 3], [3, 2])], attrs: { axis: 0, select_last_index: 1 } },
  ],
  CumSum: [
    { inputs: [f32(uniform(24, 32), [2, 3, 4])], attrs: { axis: 1 }, atol: 1e-5 },
    { inputs: [f32(uniform(12, 33), [3, 4])], attrs: { axis: -1, exclusive: 1 }, atol: 1e-5 },
    { inputs: [i32([1, 2, 3, 4, 5])], attrs: { axis: 0, reverse: 1 } },
    { inputs: [f32([1, 2, 3, 4])], attrs: { axis: 0, reverse: 1, exclusive: 1 } },
  ],
  Reciprocal: [{ inputs: [f32([0.5, -2, 0, Infinity, NaN])] }],
  Relu: [{ inputs: [f32([-1, 0, 2, NaN, -Infinity])] }, { inputs: [i32([-3, 3])] }],
  LeakyRelu: [{ inputs: [f32([-1, 0, 2, NaN])], attrs: { alpha: 0.2 } }],
  Sigmoid: [{ inputs: [f32([-100, -1, 0, 1, 100, NaN])] }],
  Tanh: [{ inputs: [f32(uniform(64, 1, -10, 10))], atol: 1e-6 }, {
    inputs: [f32([Infinity, -Infinity, NaN, 0])],
  }],
  Gelu: [{ inputs: [f32(uniform(64, 2, -6, 6))], atol: 1e-6 }, {
    inputs: [f32(uniform(64, 3, -6, 6))],
    attrs: { approximate: "tanh" },
    atol: 1e-6,
  }],
  HardSigmoid: [{ inputs: [f32(uniform(32, 4, -6, 6))], attrs: { alpha: 0.3, beta: 0.4 } }],
  HardSwish: [{ inputs: [f32([-4, -3, -1, 0, 1, 3, 4, NaN])] }],
  Elu: [{ inputs: [f32([-3, -0.5, -0, 0, 2, NaN])], attrs: { alpha: 0.7 }, atol: 1e-6 }],
  Selu: [{ inputs: [f32([-3, -0.5, 0, 2, NaN])], atol: 1e-6 }],
  Celu: [{ inputs: [f32([-3, -0.5, 0, 2, NaN])], attrs: { alpha: 2 }, atol: 1e-6 }],
  ThresholdedRelu: [{ inputs: [f32([-1, 0.5, 1, 1.5, NaN])], attrs: { alpha: 1 } }],
  Softplus: [{ inputs: [f32([-30, -1, 0, 1, 30, NaN, 3e38, -3e38, Infinity])], atol: 1e-5 }],
  Softsign: [{ inputs: [f32([-3, -0.5, 0, 2, NaN, Infinity])] }],
  Tan: [{ inputs: [f32([-1.2, -0.3, 0, 0.7, 1.3])], atol: 1e-5 }],
  Sinh: [{ inputs: [f32([-3, -0.5, 0, 0.25, 2])], atol: 1e-5 }],
  Cosh: [{ inputs: [f32([-3, -0.5, 0, 0.25, 2])], atol: 1e-5 }],
  Atan: [{ inputs: [f32([-1e30, -7, -1, -0.3, 0, 0.2, 1, 2.5, 1e6, NaN])], atol: 1e-6 }],
  Asin: [{ inputs: [f32([-1, -0.9, -0.3, 0, 0.5, 0.99, 1, 1.5, NaN])], atol: 1e-6 }],
  Acos: [{ inputs: [f32([-1, -0.9, -0.3, 0, 0.5, 0.99, 1, 1.5, NaN])], atol: 1e-6 }],
  Asinh: [{ inputs: [f32([-3, -0.5, 0, 0.25, 2, -1e10, 3e38, -3e38, NaN])], atol: 1e-5 }],
  Acosh: [{ inputs: [f32([1, 1.5, 2, 10, 1e10, 3e38, NaN, 0.5])], atol: 1e-5 }],
  Atanh: [{ inputs: [f32([-0.9, -0.5, 0, 0.25, 0.75])], atol: 1e-5 }],
  ReduceL1: [
    { inputs: [f32([1, -2, 3, -4, 5, -6], [2, 3])], attrs: { axes: [1], keepdims: 0 } },
    { inputs: [f32([1, -2, NaN, -4], [2, 2])], attrs: { noop: 1 } },
  ],
  ReduceL2: [{ inputs: [f32(uniform(24, 31), [2, 3, 4])], attrs: { axes: [0, 2] }, atol: 1e-6 }],
  ReduceSumSquare: [{
    inputs: [f32(uniform(24, 32), [2, 3, 4])],
    attrs: { axes: [], keepdims: 0 },
  }],
  ReduceLogSum: [{
    inputs: [f32(uniform(12, 33, 0.5, 2), [3, 4])],
    attrs: { axes: [-1] },
    atol: 1e-6,
  }],
  ReduceLogSumExp: [
    { inputs: [f32([1000, 1001, -3, 2, NaN, 0], [3, 2])], attrs: { axes: [1], keepdims: 0 } },
    { inputs: [f32(uniform(12, 34), [3, 4])], attrs: { axes: [0] }, atol: 1e-6 },
    { inputs: [f32([1, 2])], attrs: { noop: 1 } },
  ],
  // Bools as inequality, integers bitwise (negative ones too).
  Xor: [
    { inputs: [bools([1, 0, 1, 0], [2, 2]), bools([1, 0])] },
    { inputs: [i32([5, -1, 0, 1 << 30], [4]), i32([3, 7, 0, -2], [4])] },
  ],
  Sum: [
    { inputs: [f32([1, -2, 3, NaN], [2, 2]), f32([0.5, 4]), f32([1, 2, 3, 4], [2, 2])] },
    { inputs: [i32([2147483647, -5]), i32([1, 5]), i32([3, 3])] },
  ],
  Mean: [{ inputs: [f32([1, -2, 3, Infinity], [2, 2]), f32([0.5, 4]), f32([2])], atol: 1e-6 }],
  PRelu: [
    { inputs: [f32([-2, -0.5, 0, 0.4, NaN, -Infinity], [2, 3]), f32([0.1, 0.2, 0.3])] },
    { inputs: [i32([-7, 0, 9]), i32([2])] },
  ],
  Shrink: [{ inputs: [f32([-2, -0.5, 0, 0.4, 1.5, NaN])], attrs: { bias: 0.25, lambd: 0.45 } }],
  Sign: [{ inputs: [f32([-2, -0, 0, 3, NaN, -Infinity])] }, { inputs: [i32([-7, 0, 9])] }],
  IsInf: [
    { inputs: [f32([Infinity, -Infinity, 1, NaN])] },
    { inputs: [f32([Infinity, -Infinity, 1])], attrs: { detect_positive: 0 } },
    { inputs: [f32([Infinity, -Infinity])], attrs: { detect_positive: 0, detect_negative: 0 } },
  ],
  Mish: [{
    inputs: [f32([-30, -5, -1, -0, 0, 0.5, 3, 19.5, 20.5, 40, NaN, Infinity, -Infinity])],
    atol: 1e-6,
  }],
  Clip: [{ inputs: [f32([-3, -1, 0, 1, 3, NaN])], attrs: { min: -1, max: 2 } }, {
    inputs: [i32([-3, 5])],
    attrs: { max: 1 },
  }],
  Max: [{ inputs: [f32([1, NaN, 3, -0]), f32([2, 1, NaN, 0]), f32([0], [1])] }, {
    inputs: [i32([1, 5]), i32([4, 2])],
  }],
  Min: [{ inputs: [f32([1, NaN, 3]), f32([2, 1, NaN])] }, { inputs: [f32([1, 2])] }],
  GreaterOrEqual: [{ inputs: [f32([1, 2, 3, NaN]), f32([2, 2, 2, 1])] }],
  LessOrEqual: [{ inputs: [f32([1, 2, 3, NaN]), f32([2, 2, 2, 1])] }],
  Softmax: [{ inputs: [f32(uniform(24, 5, -50, 50), [2, 3, 4])], attrs: { axis: 1 } }, {
    inputs: [f32([1000, 1001, -Infinity], [1, 3])],
  }],
  LogSoftmax: [{ inputs: [f32(uniform(24, 6, -5, 5), [4, 6])], atol: 1e-5 }],
  LayerNormalization: [
    {
      inputs: [f32(uniform(40, 7), [2, 4, 5]), f32(uniform(5, 8)), f32(uniform(5, 9))],
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(40, 10), [2, 4, 5]), f32(uniform(20, 11), [4, 5])],
      attrs: { axis: 1, epsilon: 1e-3 },
      atol: 1e-5,
    },
    // With its mean and inverse standard deviation (ONNX's optional outputs).
    {
      inputs: [f32(uniform(40, 12, -3, 3), [2, 4, 5]), f32(uniform(5, 13)), f32(uniform(5, 14))],
      attrs: { axis: 2, epsilon: 1e-5, stats: 1 },
      outputs: 3,
      atol: 1e-5,
    },
  ],
  GlobalAveragePool: [{ inputs: [f32(uniform(2 * 3 * 5 * 5, 17), [2, 3, 5, 5])] }],
  Gemm: [{
    inputs: [f32(uniform(12, 18), [4, 3]), f32(uniform(20, 19), [5, 4]), f32(uniform(5, 20))],
    attrs: { transA: 1, transB: 1, alpha: 0.5, beta: 2 },
    atol: 1e-5,
  }],
  Flatten: [{ inputs: [f32(uniform(24, 21), [2, 3, 4])], attrs: { axis: 2 } }],
  ConstantOfShape: [{ inputs: [], attrs: { shape: [2, 3], value: 2.5 } }],
  Range: [{ inputs: [], attrs: { start: -1, limit: 2, delta: 0.5 } }, {
    inputs: [],
    attrs: { start: 0, limit: 5, dtype: "i32" },
  }],
  // Ties keep the first maximum; a NaN is the maximum; an axis other than the last.
  Hardmax: [
    { inputs: [f32([1, 3, 3, 2, 0, NaN, 1, 5, -1, -2, -3, -1], [3, 4])], attrs: { axis: 1 } },
    { inputs: [f32(uniform(24, 42, -2, 2), [2, 3, 4])], attrs: { axis: 0 } },
  ],
  // An odd and an even window; one wider than the channels (clipped); a rank-3 input.
  LRN: [
    {
      inputs: [f32(uniform(20, 43, -2, 2), [1, 5, 2, 2])],
      attrs: { size: 3, alpha: 0.5, beta: 0.75, bias: 1 },
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(24, 44), [2, 4, 3])],
      attrs: { size: 2, alpha: 1e-4, beta: 0.75, bias: 2 },
    },
    {
      inputs: [f32(uniform(18, 45, -3, 3), [1, 3, 6])],
      attrs: { size: 9, alpha: 2, beta: 0.5, bias: 0.5 },
      atol: 1e-5,
    },
  ],
  // Ties both ways, the largest finite value (to inf), NaN, infinities, a subnormal, zeros.
  RoundToBf16: [{
    inputs: [
      f32([
        1.00390625,
        1.01171875,
        -2.5,
        3.4028234663852886e38,
        NaN,
        Infinity,
        -Infinity,
        1e-40,
        -0,
        0,
        3.3,
      ]),
    ],
    atol: 0,
    rtol: 0,
  }],
  // Two groups over [C, L]; three groups over [C, H, W] with a bias.
  GroupNormalization: [
    {
      inputs: [f32(uniform(24, 46, -2, 2), [2, 4, 3]), f32(uniform(4, 47)), f32(uniform(4, 48))],
      attrs: { num_groups: 2, epsilon: 1e-5 },
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(24, 49), [1, 6, 2, 2]), f32(uniform(6, 50)), f32(uniform(6, 51))],
      attrs: { num_groups: 3, epsilon: 0.01 },
      atol: 1e-5,
    },
  ],
  // Zeros, negatives (an odd and an even count), an axis kept, integers, noop.
  ReduceProd: [
    { inputs: [f32([2, -3, 0.5, -1, 4, 0, -2, -2], [2, 4])], attrs: { axes: [1], keepdims: 1 } },
    { inputs: [f32(uniform(24, 52, -1.5, 1.5), [2, 3, 4])], attrs: { axes: [0, 2], keepdims: 0 } },
    { inputs: [i32([3, -2, 5, 7, -1, -4], [2, 3])], attrs: { axes: [], keepdims: 1 }, atol: 0 },
    { inputs: [f32([1, -2], [2])], attrs: { axes: [], keepdims: 1, noop: 1 } },
  ],
  // Upper from the diagonal; lower below it in a batch; k past the columns; integers.
  Trilu: [
    { inputs: [f32(uniform(12, 53), [3, 4])], attrs: { k: 0, upper: 1 } },
    { inputs: [f32(uniform(18, 54), [2, 3, 3])], attrs: { k: -1, upper: 0 } },
    { inputs: [f32(uniform(6, 55), [2, 3])], attrs: { k: 5, upper: 1 } },
    { inputs: [i32([1, 2, 3, 4, 5, 6], [3, 2])], attrs: { k: 1, upper: 0 }, atol: 0 },
  ],
  LpNormalization: [
    { inputs: [f32([3, 4, 0, 0, -1, 2, NaN, 1], [4, 2])], attrs: { axis: 1, p: 2 } },
    { inputs: [f32(uniform(24, 41, -2, 2), [2, 3, 4])], attrs: { axis: 1, p: 1 } },
  ],
  // Shifted 8-bit values (|a·b| ≤ 255²): K = 600 sums past 2^24 in three exact f32 chunks.
  IntegerMatMul: [
    {
      inputs: [
        ints("i16", 3 * 600, -255, 255, [3, 600]),
        ints("i16", 600 * 4, -255, 255, [600, 4]),
      ],
      attrs: { bound: 65025 },
      atol: 0,
      rtol: 0,
    },
    { inputs: [ints("u8", 6, 0, 255, [2, 3]), ints("i8", 6, -128, 127, [3, 2])], atol: 0, rtol: 0 },
    // A constant weight: its f32 form (chunked, padded: K = 601 in three) is computed once.
    {
      inputs: [
        ints("i16", 2 * 601, -255, 255, [2, 601]),
        ints("i16", 601 * 3, -255, 255, [601, 3]),
      ],
      attrs: { bound: 65025 },
      constants: [1],
      atol: 0,
      rtol: 0,
    },
    {
      inputs: [ints("i16", 2 * 5, -255, 255, [2, 5]), ints("i16", 5 * 3, -255, 255, [5, 3])],
      attrs: { bound: 65025 },
      constants: [1],
      atol: 0,
      rtol: 0,
    },
  ],
  // Shifted 8-bit values: 40 channels of 3×3 sum past 2^24 in two channel slices (one grouped
  // conv); constant weights far below the bound in one; two groups in i32; unshifted u8 × i8.
  IntegerConv: [
    {
      inputs: [
        ints("i16", 40 * 25, -255, 255, [1, 40, 5, 5]),
        ints("i16", 3 * 360, -255, 255, [3, 40, 3, 3]),
      ],
      attrs: { bound: 65025, max_a: 255, pads: [1, 1, 1, 1] },
      atol: 0,
      rtol: 0,
    },
    {
      inputs: [
        ints("i16", 40 * 25, -255, 255, [1, 40, 5, 5]),
        ints("i16", 3 * 360, -20, 20, [3, 40, 3, 3]),
      ],
      attrs: { bound: 65025, max_a: 255, strides: [2, 2] },
      constants: [1],
      atol: 0,
      rtol: 0,
    },
    {
      inputs: [
        ints("i16", 2 * 8 * 16, -255, 255, [2, 8, 4, 4]),
        ints("i16", 6 * 36, -255, 255, [6, 4, 3, 3]),
      ],
      attrs: { bound: 65025, max_a: 255, group: 2 },
      atol: 0,
      rtol: 0,
    },
    {
      inputs: [ints("u8", 18, 0, 255, [1, 2, 3, 3]), ints("i8", 8, -128, 127, [2, 2, 1, 2])],
      attrs: { bound: 32640, max_a: 255 },
      atol: 0,
      rtol: 0,
    },
  ],
  // 4-bit values in blocks of 16 with zero points; 2 bits without (the middle value); 8 bits.
  BlockDequantize: [
    {
      inputs: [
        words(12, 50, [2, 6]),
        f32(uniform(6, 51), [2, 3]),
        f32([1, 8, 15, 0, 3, 7], [2, 3]),
      ],
      attrs: { bits: 4, block: 16 },
    },
    { inputs: [words(2, 52, [2, 1]), f32(uniform(2, 52), [2, 1])], attrs: { bits: 2, block: 16 } },
  ],
  // K = 40 of three blocks of 16 (the last one cut), N = 3; 8-bit blocks of 16 with a batch.
  BlockMatMul: [
    {
      inputs: [
        f32(uniform(80, 53, -1, 1), [2, 40]),
        words(18, 54, [3, 6]),
        f32(uniform(9, 54), [3, 3]),
        f32([0, 15, 8, 7, 1, 2, 3, 4, 5], [3, 3]),
      ],
      attrs: { bits: 4, block: 16 },
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(64, 55, -1, 1), [2, 1, 32]),
        words(16, 56, [2, 8]),
        f32(uniform(4, 56), [2, 2]),
      ],
      attrs: { bits: 8, block: 16 },
      atol: 1e-4,
    },
  ],
  // Scores [N, C] and [N, C, d]; targets with an ignored class; weights; each reduction.
  NegativeLogLikelihoodLoss: [
    { inputs: [f32(uniform(12, 60, -3, 0), [3, 4]), i32([1, 0, 3], [3])] },
    {
      inputs: [f32(uniform(24, 61, -3, 0), [2, 4, 3]), i32([1, 0, 3, 2, 2, 1], [2, 3])],
      attrs: { reduction: "none", ignore_index: 2 },
    },
    {
      inputs: [
        f32(uniform(24, 62, -3, 0), [2, 4, 3]),
        i32([1, 0, 3, 2, 2, 1], [2, 3]),
        f32([0.5, 1, 2, 0.25], [4]),
      ],
      attrs: { reduction: "mean", ignore_index: 0 },
    },
    {
      inputs: [f32(uniform(12, 63, -3, 0), [3, 4]), i32([3, 3, 1], [3])],
      attrs: { reduction: "sum" },
    },
  ],
  SoftmaxCrossEntropyLoss: [
    { inputs: [f32(uniform(12, 64, -3, 3), [3, 4]), i32([1, 0, 3], [3])], outputs: 2 },
    {
      inputs: [
        f32(uniform(24, 65, -3, 3), [2, 4, 3]),
        i32([1, 0, 3, 2, 2, 1], [2, 3]),
        f32([0.5, 1, 2, 0.25], [4]),
      ],
      attrs: { reduction: "sum", ignore_index: 1 },
      outputs: 2,
    },
  ],
  // Seeded: compile draws the same uniforms for the node and for its expansion.
  RandomNormal: [{ inputs: [], attrs: { shape: [64], seed: 3, mean: 1, scale: 2 }, atol: 1e-5 }],
};

/** Every case, by op name: this file's, the layers' and the ops the importer maps onto. */
const cases: Record<string, DecomposeCase[]> = {
  ...localCases,
  ...LAYER_CASES,
  ...IMPORT_CASES,
  ...QUANT_CASES,
  ...ORT_CASES,
};

Deno.test("every decomposable op has a test case here", () => {
  // The case tables are merged by op name: a name in two of them would hide one table's cases.
  const keys = [localCases, LAYER_CASES, IMPORT_CASES, QUANT_CASES, ORT_CASES].flatMap((t) =>
    Object.keys(t)
  );
  assert.equal(new Set(keys).size, keys.length, "an op with cases in two tables");
  const decomposable = opNames().filter((op) =>
    !getOp(op).primitive && getOp(op).category !== "custom"
  );
  assert.deepEqual(decomposable.sort(), Object.keys(cases).sort());
});

for (const [op, list] of Object.entries(cases)) {
  Deno.test(`${op}: decomposition into primitives matches the direct kernel`, async () => {
    for (const c of list) {
      const b = new GraphBuilder();
      // Inputs listed in `constants` are constants of the graph (a decomposition may read them).
      const known = (i: number) => c.constants?.includes(i) ?? false;
      const xs = c.inputs.map((t, i) =>
        known(i) ? b.constant(t.data, t.shape, t.dtype) : b.input(`x${i}`, t.shape, t.dtype)
      );
      b.opN(op, xs, c.attrs ?? {}, c.outputs ?? 1).forEach((y, k) => b.output(`y${k}`, y));
      const graph = b.build();
      const expanded = decompose(graph, () => true);
      assert.ok(
        expanded.nodes.every((n) => getOp(n.op).primitive),
        `${op} left composites: ${expanded.nodes.map((n) => n.op)}`,
      );
      assert.ok(!expanded.nodes.some((n) => n.op === op));
      const feeds = Object.fromEntries(
        c.inputs.flatMap((t, i) => (known(i) ? [] : [[`x${i}`, t]])),
      );
      // Unfused, the reference backend runs the op's own kernel (fused, it would run the
      // decomposition too, and the comparison could not fail).
      using exe = await compile(graph, { backend: "reference", fuse: false, cache: false });
      const direct = await exe.run(feeds);
      const viaPrimitives = await runGraph(expanded, feeds);
      for (const [name, want] of Object.entries(direct)) {
        const got = viaPrimitives[name];
        assert.deepEqual(got.shape, want.shape);
        assert.equal(got.dtype, want.dtype);
        assertClose(numbers(got.data), numbers(want.data), {
          atol: c.atol ?? 1e-6,
          rtol: c.rtol ?? 1e-5,
          message: `${op} ${name}`,
        });
      }
    }
  });
}

Deno.test("an argmax over a long row gives the reference's index on every backend", async () => {
  // A vocabulary's logits: ties across the rows of 1024 the two steps use, and the padding.
  const x = longRows(1, 151936, [[0, 151935, 5], [0, 70000, 5], [0, 150000, 5]]);
  const b = new GraphBuilder();
  b.output("y", b.op("ArgMax", [b.input("x", x.shape, "f32")], { axis: 1, keepdims: 0 }));
  const graph = b.build();
  for (const backend of ["reference", "wasm", "webgpu"]) {
    const { y } = await runGraph(graph, { x }, backend);
    assert.deepEqual(numbers(y.data), [70000], backend);
  }
  // The logits are read once: the position is searched in the winning row alone.
  using exe = await compile(graph, { backend: "reference", cache: false });
  const reads = exe.plan!.kernels.map((k) => k.space.reduce((a, d) => a * d, 1));
  assert.equal(reads.filter((n) => n >= 151936).length, 1, `kernel spaces ${reads}`);
});
