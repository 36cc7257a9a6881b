/**
 * Decomposition cases of the layers and algorithms that are kiln ops (`jit/ops/`: Einsum, the
 * Fourier transforms, the recurrent layers, TopK and Det, Resize, OneHot, the block moves, the optimizers,
 * QuantizeRowBlocks): each
 * runs on the reference backend as its own kernel and as its decomposition, which must agree
 * (`jit/passes/decompose_test.ts`).
 *
 * @module
 */
import type { HostTensor } from "../ir/host_tensor.ts";
import type { Attrs } from "../ops/mod.ts";
import { uniform } from "../support/random.ts";
import { f32, i32 } from "./testing.ts";

/** One case of a decomposable op: inputs, attributes, outputs, tolerance. */
export interface DecomposeCase {
  readonly inputs: HostTensor[];
  readonly attrs?: Attrs;
  readonly atol?: number;
  readonly rtol?: number;
  readonly outputs?: number;
  /** Inputs (by index) given as constants of the graph rather than graph inputs. */
  readonly constants?: readonly number[];
}

/** Cases by op name. */
export const LAYER_CASES: Record<string, DecomposeCase[]> = {
  // A batched matmul through the ellipsis, a trace and a diagonal, a broadcast letter, an
  // implicit output, three operands, attention's scores, several M and K letters.
  Einsum: [
    {
      inputs: [f32(uniform(24, 60), [2, 3, 4]), f32(uniform(40, 61), [2, 4, 5])],
      attrs: { equation: "...ij,...jk->...ik" },
      atol: 1e-6,
    },
    { inputs: [f32(uniform(9, 62), [3, 3])], attrs: { equation: "ii->" }, atol: 1e-6 },
    { inputs: [f32(uniform(18, 63), [2, 3, 3])], attrs: { equation: "bii->bi" } },
    {
      inputs: [f32(uniform(3, 64), [1, 3]), f32(uniform(12, 65), [4, 3])],
      attrs: { equation: "ij,kj" },
      atol: 1e-6,
    },
    {
      inputs: [f32(uniform(6, 66), [2, 3]), f32(uniform(12, 67), [3, 4]), f32(uniform(4, 68), [4])],
      attrs: { equation: "ab,bc,c->a" },
      atol: 1e-6,
    },
    // Products as MatMuls: attention's scores (B transposed), two M letters and two K letters,
    // the output permuted.
    {
      inputs: [f32(uniform(48, 69), [2, 2, 3, 4]), f32(uniform(80, 70), [2, 2, 5, 4])],
      attrs: { equation: "bhqd,bhkd->bhqk" },
      atol: 1e-6,
    },
    {
      inputs: [f32(uniform(60, 71), [2, 3, 2, 5]), f32(uniform(40, 72), [2, 5, 4])],
      attrs: { equation: "abcd,cdn->nab" },
      atol: 1e-6,
    },
  ],
  // A real signal along axis 1, padded to 8 and onesided; a complex one cut to 4, inverse; STFT
  // with and without a window, of a complex signal.
  DFT: [
    {
      inputs: [f32(uniform(2 * 6 * 3, 70), [2, 6, 3, 1])],
      attrs: { axis: 1, length: 8, inverse: 0, onesided: 1 },
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(2 * 5 * 2, 71), [2, 5, 2])],
      attrs: { axis: 1, length: 4, inverse: 1, onesided: 0 },
      atol: 1e-5,
    },
  ],
  STFT: [
    {
      inputs: [f32(uniform(2 * 20, 72), [2, 20, 1]), f32(uniform(6, 73, 0, 1), [6])],
      attrs: { step: 4, frame: 6, onesided: 1 },
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(30 * 2, 74), [1, 30, 2])],
      attrs: { step: 5, frame: 8, onesided: 0 },
      atol: 1e-5,
    },
  ],
  // A forward RNN with a bias and Relu; a bidirectional GRU from initial states, linear before
  // reset, clipped, rows of lengths 3 and 1; a batch-first LSTM with every optional input,
  // peepholes and input_forget.
  RNN: [{
    inputs: [
      f32(uniform(24, 80), [3, 2, 4]),
      f32(uniform(20, 81), [1, 5, 4]),
      f32(uniform(25, 82), [1, 5, 5]),
      f32(uniform(10, 83), [1, 10]),
    ],
    attrs: { hidden_size: 5, present: "b", activations: "Relu" },
    outputs: 2,
    atol: 1e-5,
  }],
  GRU: [{
    inputs: [
      f32(uniform(24, 84), [3, 2, 4]),
      f32(uniform(120, 85), [2, 15, 4]),
      f32(uniform(150, 86), [2, 15, 5]),
      f32(uniform(60, 87), [2, 30]),
      f32(uniform(20, 88), [2, 2, 5]),
    ],
    attrs: {
      hidden_size: 5,
      present: "b,h",
      direction: "bidirectional",
      linear_before_reset: 1,
      clip: 2,
      sequence_lens: [3, 1],
    },
    outputs: 2,
    atol: 1e-5,
  }],
  LSTM: [{
    inputs: [
      f32(uniform(24, 89), [2, 3, 4]),
      f32(uniform(80, 90), [1, 20, 4]),
      f32(uniform(100, 91), [1, 20, 5]),
      f32(uniform(40, 92), [1, 40]),
      f32(uniform(10, 93), [2, 1, 5]),
      f32(uniform(10, 94), [2, 1, 5]),
      f32(uniform(15, 95), [1, 15]),
    ],
    attrs: { hidden_size: 5, present: "b,h,c,p", layout: 1, input_forget: 1 },
    outputs: 3,
    atol: 1e-5,
  }],
  // Largest and smallest with NaNs and ties, along a middle axis; integers; Det of 1×1 to 4×4.
  TopK: [
    {
      inputs: [f32([3, NaN, 1, 3, -2, NaN, 0, 5, 1, 1, 2, 9], [2, 3, 2])],
      attrs: { k: 2, axis: 1, largest: 1 },
      outputs: 2,
      atol: 0,
      rtol: 0,
    },
    {
      inputs: [f32([3, NaN, 1, 3, -2, NaN, 0, 5, 1, 1, 2, 9], [2, 6])],
      attrs: { k: 6, axis: 1, largest: 0 },
      outputs: 2,
      atol: 0,
      rtol: 0,
    },
    { inputs: [i32([4, -1, 4, 7, 0, 2], [6])], attrs: { k: 3, axis: 0, largest: 1 }, outputs: 2 },
  ],
  Det: [
    { inputs: [f32(uniform(4 * 9, 96), [4, 3, 3])], atol: 1e-5 },
    { inputs: [f32(uniform(2 * 16, 97), [2, 4, 4])], atol: 1e-5 },
    { inputs: [f32([2.5], [1, 1])], atol: 0 },
  ],
  // One step past the first (T = 3) and the first (T = 0, where Momentum's and Adam's terms
  // differ), with regularization, decay and Nesterov's form.
  Adagrad: [
    {
      inputs: [
        f32([0.1], []),
        i32([3], []),
        ...[1, 2].map((s) => f32(uniform(6, s), [2, 3])),
        f32(uniform(6, 3, 0, 1), [2, 3]),
      ],
      attrs: { decay_factor: 0.1, epsilon: 1e-5, norm_coefficient: 0.01 },
      outputs: 2,
      atol: 1e-6,
    },
  ],
  Momentum: [
    {
      inputs: [f32([0.1], []), i32([0], []), ...[4, 5, 6].map((s) => f32(uniform(6, s), [6]))],
      attrs: { alpha: 0.9, beta: 0.5, norm_coefficient: 0.01, mode: "standard" },
      outputs: 2,
      atol: 1e-6,
    },
    {
      inputs: [f32([0.1], []), i32([2], []), ...[7, 8, 9].map((s) => f32(uniform(6, s), [6]))],
      attrs: { alpha: 0.9, beta: 0.5, norm_coefficient: 0, mode: "nesterov" },
      outputs: 2,
      atol: 1e-6,
    },
  ],
  Adam: [
    {
      inputs: [
        f32([0.1], []),
        i32([3], []),
        ...[10, 11, 12].map((s) => f32(uniform(6, s), [2, 3])),
        f32(uniform(6, 13, 0, 1), [2, 3]),
      ],
      attrs: {
        alpha: 0.8,
        beta: 0.9,
        epsilon: 1e-5,
        norm_coefficient: 0.01,
        norm_coefficient_post: 0.1,
      },
      outputs: 3,
      atol: 1e-5,
    },
    {
      inputs: [
        f32([0.1], []),
        i32([0], []),
        ...[14, 15, 16].map((s) => f32(uniform(4, s), [4])),
        f32(uniform(4, 17, 0, 1), [4]),
      ],
      outputs: 3,
      atol: 1e-5,
    },
  ],
  // Rows of 40 in blocks of 16 (the last cut short), one block of zeros; rows of 64 in 32s.
  QuantizeRowBlocks: [
    {
      inputs: [
        f32([...uniform(40, 57, -2, 2), ...new Array(16).fill(0), ...uniform(24, 58)], [2, 40]),
      ],
      attrs: { block: 16 },
      atol: 0,
      rtol: 0,
    },
    { inputs: [f32(uniform(128, 59, -1, 1), [2, 64])], attrs: { block: 32 }, atol: 0, rtol: 0 },
  ],
  // Rows of 64 in 32s, one block of zeros (its scale 0, its bytes 0); a row of 128 in 64s.
  PackRowBlocks: [
    {
      inputs: [
        f32([...uniform(64, 60, -2, 2), ...new Array(32).fill(0), ...uniform(32, 61)], [2, 64]),
      ],
      attrs: { block: 32 },
      outputs: 2,
      atol: 0,
      rtol: 0,
    },
    {
      inputs: [f32(uniform(128, 62, -1, 1), [1, 128])],
      attrs: { block: 64 },
      outputs: 2,
      atol: 0,
      rtol: 0,
    },
  ],
  // Linear up by 1.5 and 2 (half pixel), cubic down with antialiasing, nearest of integers,
  // tf_crop_and_resize with a region and an extrapolation value.
  Resize: [
    {
      inputs: [f32(uniform(2 * 4 * 5, 98), [1, 2, 4, 5])],
      attrs: { sizes: [1, 2, 6, 10], scales: [1, 1, 1.5, 2], mode: "linear" },
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(8 * 8, 99), [1, 1, 8, 8])],
      attrs: { sizes: [1, 1, 5, 3], scales: [1, 1, 0.625, 0.375], mode: "cubic", antialias: 1 },
      atol: 1e-5,
    },
    {
      inputs: [i32([1, 2, 3, 4, 5, 6], [1, 1, 2, 3])],
      attrs: { sizes: [1, 1, 4, 7], scales: [1, 1, 2, 7 / 3], mode: "nearest", nearest: "floor" },
      atol: 0,
    },
    {
      inputs: [f32(uniform(16, 100), [1, 1, 4, 4])],
      attrs: {
        sizes: [1, 1, 3, 3],
        scales: [1, 1, 0.75, 0.75],
        mode: "linear",
        coordinates: "tf_crop_and_resize",
        roi: [0, 0, 0.4, -0.2, 1, 1, 1.2, 0.6],
        extrapolation: 10,
      },
      atol: 1e-5,
    },
  ],
  // Integer indices with a negative one and one out of range, along the last axis; float indices
  // (floored) along the first.
  OneHot: [
    {
      inputs: [i32([0, 2, -1, 5, 1, -4], [2, 3]), f32([-1, 3], [2])],
      attrs: { depth: 4, axis: 2 },
      atol: 0,
    },
    {
      inputs: [f32([1.7, 0.2, 2.9], [3]), i32([0, 7], [2])],
      attrs: { depth: 3, axis: 0 },
      atol: 0,
    },
  ],
  // Blocks of 2 in both of DepthToSpace's modes; SpaceToDepth of blocks of 3.
  DepthToSpace: [
    { inputs: [f32(uniform(2 * 8 * 2 * 3, 101), [2, 8, 2, 3])], attrs: { blocksize: 2 }, atol: 0 },
    {
      inputs: [f32(uniform(8 * 2 * 3, 102), [1, 8, 2, 3])],
      attrs: { blocksize: 2, mode: "CRD" },
      atol: 0,
    },
  ],
  SpaceToDepth: [
    { inputs: [f32(uniform(2 * 6 * 9, 103), [1, 2, 6, 9])], attrs: { blocksize: 3 }, atol: 0 },
  ],
  // Grids reaching past the image (±1.4) under each padding, reflection's up to three widths
  // out (reflected more than once); each mode; both corner rules.
  GridSample: [
    { attrs: {}, ...gridInputs(104) },
    { attrs: { mode: "nearest", padding_mode: "border", align_corners: 1 }, ...gridInputs(105) },
    { attrs: { mode: "bicubic", padding_mode: "reflection" }, ...gridInputs(106, 5) },
    {
      attrs: { mode: "bilinear", padding_mode: "reflection", align_corners: 1 },
      ...gridInputs(107, 5),
    },
  ],
};

/** Data [2, 3, 4, 5] and a grid [2, 3, 4, 2] of coordinates in [−reach, reach], from `seed`. */
function gridInputs(seed: number, reach = 1.4) {
  const data = f32(uniform(2 * 3 * 4 * 5, seed), [2, 3, 4, 5]);
  return { inputs: [data, f32(uniform(2 * 3 * 4 * 2, seed + 50, -reach, reach), [2, 3, 4, 2])] };
}
