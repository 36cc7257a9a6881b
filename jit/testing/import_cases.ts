/**
 * Decomposition cases of the ONNX ops that became kiln ops when their compositions left the
 * importer's converters (issue 49: one home for decompositions): normalizations, scatters,
 * quantization and the pools and convolutions built of others. Each runs on the reference backend
 * as its own kernel and as its decomposition, which must agree (`jit/passes/decompose_test.ts`).
 *
 * @module
 */
import { uniform } from "../support/random.ts";
import type { DecomposeCase } from "./layer_cases.ts";
import { f32, i32 } from "./testing.ts";
import type { HostTensor } from "../ir/host_tensor.ts";

const u8 = (values: number[]): HostTensor => ({
  data: Uint8Array.from(values),
  shape: [values.length],
  dtype: "u8",
});
const u32 = (values: number[]): HostTensor => ({
  data: Uint32Array.from(values),
  shape: [values.length],
  dtype: "u32",
});

const bnInputs = () => [
  f32(uniform(2 * 3 * 4, 12), [2, 3, 2, 2]),
  f32(uniform(3, 13)),
  f32(uniform(3, 14)),
  f32(uniform(3, 15)),
  f32(uniform(3, 16, 0.5, 2)),
];

/** Cases by op name. */
export const IMPORT_CASES: Record<string, DecomposeCase[]> = {
  // Inference with the given statistics; training with the batch's and the blended running ones.
  BatchNormalization: [
    { inputs: bnInputs(), atol: 1e-5 },
    { inputs: bnInputs(), attrs: { training_mode: 1, momentum: 0.7 }, outputs: 3, atol: 1e-5 },
    {
      inputs: [f32(uniform(12, 17), [4, 3]), ...bnInputs().slice(1)],
      attrs: { training_mode: 1, epsilon: 1e-3 },
      outputs: 3,
      atol: 1e-5,
    },
  ],
  MeanVarianceNormalization: [
    { inputs: [f32(uniform(2 * 3 * 4 * 5, 20, -2, 2), [2, 3, 4, 5])], atol: 1e-5 },
    { inputs: [f32(uniform(24, 21, -2, 2), [2, 3, 4])], attrs: { axes: [2] }, atol: 1e-5 },
  ],
  // Run-time indices (the cases' inputs are graph inputs): duplicates, negatives, each reduction
  // the match form takes, and an update shape smaller than data's.
  ScatterElements: [
    {
      inputs: [
        f32(uniform(12, 22), [3, 4]),
        i32([1, -1, 1, 0, 2, 2], [2, 3]),
        f32(uniform(6, 23), [2, 3]),
      ],
      attrs: { axis: 1 },
    },
    {
      inputs: [
        f32(uniform(12, 24), [3, 4]),
        i32([0, 2, 0, 0, 1, 2], [2, 3]),
        f32(uniform(6, 25), [2, 3]),
      ],
      attrs: { axis: 0, reduction: "add" },
      atol: 1e-6,
    },
    {
      inputs: [
        f32(uniform(12, 26), [3, 4]),
        i32([0, 2, 0, 0, 1, 2], [2, 3]),
        f32(uniform(6, 27), [2, 3]),
      ],
      attrs: { axis: -2, reduction: "max" },
    },
    {
      inputs: [f32(uniform(12, 28), [3, 4]), i32([3, 3, 0], [1, 3]), f32(uniform(3, 29), [1, 3])],
      attrs: { axis: 1, reduction: "min" },
    },
  ],
  ScatterND: [
    {
      inputs: [
        f32(uniform(24, 30), [2, 3, 4]),
        i32([1, 2, 0, -1, 1, 2], [3, 2]),
        f32(uniform(12, 31), [3, 4]),
      ],
    },
    {
      inputs: [
        f32(uniform(24, 32), [2, 3, 4]),
        i32([1, 0, 1], [3, 1]),
        f32(uniform(36, 33), [3, 3, 4]),
      ],
      attrs: { reduction: "add" },
      atol: 1e-6,
    },
  ],
  Tile: [
    { inputs: [f32(uniform(6, 34), [2, 3])], attrs: { repeats: [2, 3] } },
    { inputs: [f32(uniform(6, 35), [2, 1, 3])], attrs: { repeats: [1, 4, 0] } },
  ],
  // Crop one axis and pad another (odd differences: the extra goes after), default axes too.
  CenterCropPad: [
    { inputs: [f32(uniform(20, 36), [4, 5])], attrs: { shape: [7, 2] } },
    { inputs: [f32(uniform(24, 37), [2, 3, 4])], attrs: { shape: [1, 6], axes: [-1, 1] } },
  ],
  // Run-time tuples (negatives too), a batch axis, whole rows.
  GatherND: [
    { inputs: [f32(uniform(24, 38), [2, 3, 4]), i32([1, 2, 0, -1], [2, 2])] },
    {
      inputs: [f32(uniform(24, 39), [2, 3, 4]), i32([2, 0, 1, 1], [2, 2, 1])],
      attrs: { batch_dims: 1 },
    },
    { inputs: [f32(uniform(24, 40), [2, 3, 4]), i32([1, -2, 0], [3, 1])] },
  ],
  // Indices as MaxPool makes them (a cropped output and a padded one too).
  MaxUnpool: [
    {
      inputs: [f32([5, 6, 7, 8], [1, 1, 2, 2]), i32([1, 6, 8, 15], [1, 1, 2, 2])],
      attrs: { kernel_shape: [2, 2], strides: [2, 2] },
    },
    {
      inputs: [f32([5, 6, 7, 8], [1, 1, 2, 2]), i32([0, 3, 4, 7], [1, 1, 2, 2])],
      attrs: { kernel_shape: [2, 2], strides: [2, 2], pads: [1, 0, 0, 0] },
    },
    {
      inputs: [f32([5, 6, 7, 8], [1, 1, 2, 2]), i32([1, 6, 8, 15], [1, 1, 2, 2])],
      attrs: { kernel_shape: [2, 2], strides: [2, 2], output_shape: [1, 1, 5, 5] },
    },
  ],
  LpPool: [
    {
      inputs: [f32(uniform(2 * 3 * 5 * 5, 41, -2, 2), [2, 3, 5, 5])],
      attrs: { kernel_shape: [3, 3], p: 2 },
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(2 * 7, 42, -2, 2), [1, 2, 7])],
      attrs: { kernel_shape: [3], strides: [2], pads: [1, 1], p: 3 },
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(32, 43, -2, 2), [1, 2, 4, 4])],
      attrs: { kernel_shape: [2, 2], dilations: [2, 1], pads: [1, 0, 0, 1], p: 1 },
      atol: 1e-5,
    },
  ],
  // 1-D to 3-D: strides, dilations, groups, output padding, crops, bias.
  ConvTranspose: [
    {
      inputs: [
        f32(uniform(2 * 4 * 5, 44), [2, 4, 5]),
        f32(uniform(4 * 3 * 3, 45), [4, 3, 3]),
        f32(uniform(6, 46)),
      ],
      attrs: { group: 2, strides: [2], dilations: [2], output_padding: [1], pads: [1, 0] },
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(3 * 4 * 3, 47), [1, 3, 4, 3]),
        f32(uniform(3 * 2 * 3 * 2, 48), [3, 2, 3, 2]),
      ],
      attrs: { strides: [3, 2], pads: [1, 0, 0, 1] },
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(2 * 3 * 2 * 2, 49), [1, 2, 3, 2, 2]),
        f32(uniform(2 * 2 * 2 * 2 * 2, 50), [2, 2, 2, 2, 2]),
      ],
      attrs: { strides: [1, 2, 1] },
      atol: 1e-5,
    },
  ],
  // Ties (the first tap wins), padding, dilations, ceil mode's overhang, column-major order.
  MaxPoolIndices: [
    {
      inputs: [f32([1, 3, 3, 2, 0, 5, 5, 1, 4, 4, 2, 2, 7, 1, 7, 0], [1, 1, 4, 4])],
      attrs: { kernel_shape: [2, 2], strides: [2, 2] },
    },
    {
      inputs: [f32(uniform(2 * 3 * 5 * 6, 51), [2, 3, 5, 6])],
      attrs: {
        kernel_shape: [3, 2],
        pads: [1, 0, 1, 1],
        dilations: [1, 2],
        ceil_mode: 1,
        strides: [2, 2],
      },
    },
    {
      inputs: [f32(uniform(2 * 5 * 5, 52), [1, 2, 5, 5])],
      attrs: { kernel_shape: [2, 3], strides: [1, 2], storage_order: 1 },
    },
  ],
  RMSNormalization: [
    { inputs: [f32(uniform(24, 53, -2, 2), [2, 3, 4]), f32(uniform(4, 54))], atol: 1e-5 },
    {
      inputs: [f32(uniform(24, 55, -2, 2), [2, 3, 4]), f32(uniform(12, 56), [3, 4])],
      attrs: { axis: 1, epsilon: 1e-3 },
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(24, 67, -2, 2), [2, 3, 4]), f32(uniform(4, 68))],
      attrs: { stats: 1 },
      outputs: 2,
      atol: 1e-5,
    },
  ],
  Swish: [{ inputs: [f32([-30, -2, -0.5, 0, 0.5, 3, 40])], attrs: { alpha: 1.5 }, atol: 1e-6 }],
  // 4-D with caches per token; 3-D with positions and a partial rotation, interleaved.
  RotaryEmbedding: [
    {
      inputs: [
        f32(uniform(2 * 2 * 3 * 4, 57), [2, 2, 3, 4]),
        f32(uniform(2 * 3 * 2, 58), [2, 3, 2]),
        f32(uniform(2 * 3 * 2, 59), [2, 3, 2]),
      ],
      atol: 1e-6,
    },
    {
      inputs: [
        f32(uniform(1 * 3 * 12, 60), [1, 3, 12]),
        f32(uniform(8, 61), [8, 1]),
        f32(uniform(8, 62), [8, 1]),
        i32([5, 0, 7], [1, 3]),
      ],
      attrs: { num_heads: 2, rotary_embedding_dim: 2, interleaved: 1 },
      atol: 1e-6,
    },
    // Interleaved over the whole head; halves over part of it.
    {
      inputs: [
        f32(uniform(1 * 2 * 3 * 4, 67), [1, 2, 3, 4]),
        f32(uniform(3 * 2, 68), [1, 3, 2]),
        f32(uniform(3 * 2, 69), [1, 3, 2]),
      ],
      attrs: { interleaved: 1 },
      atol: 1e-6,
    },
    {
      inputs: [
        f32(uniform(2 * 2 * 8, 70), [2, 2, 8]),
        f32(uniform(6 * 2, 71), [6, 2]),
        f32(uniform(6 * 2, 72), [6, 2]),
        i32([4, 1, 0, 5], [2, 2]),
      ],
      attrs: { num_heads: 1, rotary_embedding_dim: 4 },
      atol: 1e-6,
    },
  ],
  // Linear from each batch's index (one write past the end), circular wrapping round.
  TensorScatter: [
    {
      inputs: [
        f32(uniform(2 * 5 * 3, 63), [2, 5, 3]),
        f32(uniform(2 * 2 * 3, 64), [2, 2, 3]),
        i32([1, 4]),
      ],
    },
    {
      inputs: [
        f32(uniform(2 * 5 * 3, 65), [2, 5, 3]),
        f32(uniform(2 * 2 * 3, 66), [2, 2, 3]),
        i32([3, 4]),
      ],
      attrs: { mode: "circular" },
    },
  ],
  // Shifts within the width, at it and past it (0), values whose shift leaves the width.
  BitShift: [
    { inputs: [u8([1, 3, 200, 255, 7, 9]), u8([1, 7, 1, 0, 8, 9])], attrs: { direction: "LEFT" } },
    { inputs: [u8([1, 3, 200, 255, 7, 9]), u8([1, 1, 3, 0, 8, 2])], attrs: { direction: "RIGHT" } },
    {
      inputs: [u32([1, 0xffffffff, 0x80000000, 5]), u32([31, 4, 1, 32])],
      attrs: { direction: "LEFT" },
    },
    {
      inputs: [u32([1, 0xffffffff, 0x80000000, 5]), u32([0, 4, 31, 40])],
      attrs: { direction: "RIGHT" },
    },
  ],
  AffineGrid: [
    { inputs: [f32(uniform(12, 69, -1, 1), [2, 2, 3])], attrs: { size: [2, 3, 4, 5] }, atol: 1e-6 },
    {
      inputs: [f32(uniform(12, 70, -1, 1), [1, 3, 4])],
      attrs: { size: [1, 1, 2, 3, 4], align_corners: 1 },
      atol: 1e-6,
    },
  ],
  // Offsets that leave the image, two offset groups, groups, a mask, bias, strides and pads.
  DeformConv: [
    {
      inputs: [
        f32(uniform(2 * 4 * 5 * 5, 71, -1, 1), [2, 4, 5, 5]),
        f32(uniform(6 * 2 * 2 * 2, 72, -1, 1), [6, 2, 2, 2]),
        f32(uniform(2 * 2 * 4 * 2 * 3 * 3, 73, -2.5, 2.5), [2, 16, 3, 3]),
        f32(uniform(6, 74)),
        f32(uniform(2 * 8 * 3 * 3, 75), [2, 8, 3, 3]),
      ],
      attrs: { group: 2, offset_group: 2, strides: [2, 2], pads: [1, 1, 0, 0] },
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(3 * 4 * 4, 76, -1, 1), [1, 3, 4, 4]),
        f32(uniform(2 * 3 * 3 * 1, 77, -1, 1), [2, 3, 3, 1]),
        f32(uniform(6 * 2 * 4, 78, -1.5, 1.5), [1, 6, 2, 4]),
      ],
      attrs: { dilations: [1, 1] },
      atol: 1e-5,
    },
  ],
  GlobalLpPool: [
    { inputs: [f32(uniform(2 * 3 * 4 * 5, 79, -2, 2), [2, 3, 4, 5])], atol: 1e-5 },
    { inputs: [f32(uniform(2 * 3 * 7, 80, -2, 2), [2, 3, 7])], attrs: { p: 1 }, atol: 1e-5 },
    {
      inputs: [f32(uniform(2 * 2 * 2 * 2 * 3, 81, -2, 2), [2, 2, 2, 2, 3])],
      attrs: { p: 3 },
      atol: 1e-5,
    },
  ],
  // Overlapping 2×2 blocks of 2 channels with pads and dilations; a 1-D image, strides.
  Col2Im: [
    {
      inputs: [f32(uniform(1 * 8 * 12, 82), [1, 8, 12])],
      attrs: { image_shape: [4, 4], block_shape: [2, 2], pads: [1, 0, 0, 1], dilations: [1, 2] },
      atol: 1e-5,
    },
    {
      inputs: [f32(uniform(2 * 3 * 4, 83), [2, 3, 4])],
      attrs: { image_shape: [9], block_shape: [3], strides: [2] },
      atol: 1e-5,
    },
  ],
  // Regions known when decomposed: adaptive sampling, a region past the edge, avg and max, both
  // coordinate modes, a fixed sampling ratio.
  RoiAlign: [
    {
      inputs: [
        f32(uniform(2 * 3 * 6 * 5, 84), [2, 3, 6, 5]),
        f32([0, 0, 4, 3, 1.5, 2.2, 9, 7.5, 2, 1, 3, 2], [3, 4]),
        i32([0, 1, 1]),
      ],
      constants: [1, 2],
      attrs: { output_height: 2, output_width: 3, spatial_scale: 0.9 },
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(3 * 6 * 5, 85), [1, 3, 6, 5]),
        f32([0.5, 0.5, 3.5, 4, 1, 1, 2, 2], [2, 4]),
        i32([0, 0]),
      ],
      constants: [1, 2],
      attrs: {
        mode: "max",
        sampling_ratio: 2,
        coordinate_transformation_mode: "output_half_pixel",
      },
      atol: 1e-5,
    },
  ],
  // A region past the image, one whose bins are empty, a scale.
  MaxRoiPool: [
    {
      inputs: [
        f32(uniform(2 * 3 * 6 * 5, 86, -2, 2), [2, 3, 6, 5]),
        f32([0, 0, 0, 4, 3, 1, 1, 2, 9, 7, 1, 7, 7, 9, 9], [3, 5]),
      ],
      constants: [1],
      attrs: { pooled_shape: [2, 3], spatial_scale: 0.8 },
    },
  ],
  // 4-D grouped-query heads after a past with a causal mask; 3-D with a bool mask shorter than the
  // keys, a softcap and the scores as a fourth output.
  Attention: [
    {
      inputs: [
        f32(uniform(2 * 4 * 3 * 8, 87, -1, 1), [2, 4, 3, 8]),
        f32(uniform(2 * 2 * 3 * 8, 88, -1, 1), [2, 2, 3, 8]),
        f32(uniform(2 * 2 * 3 * 6, 89, -1, 1), [2, 2, 3, 6]),
        f32(uniform(2 * 2 * 2 * 8, 90, -1, 1), [2, 2, 2, 8]),
        f32(uniform(2 * 2 * 2 * 6, 91, -1, 1), [2, 2, 2, 6]),
      ],
      attrs: { past: 1, is_causal: 1 },
      outputs: 3,
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(1 * 3 * 16, 92, -1, 1), [1, 3, 16]),
        f32(uniform(1 * 5 * 16, 93, -1, 1), [1, 5, 16]),
        f32(uniform(1 * 5 * 16, 94, -1, 1), [1, 5, 16]),
        {
          data: Uint8Array.from([1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 1, 1]),
          shape: [3, 4],
          dtype: "bool",
        },
      ],
      attrs: {
        mask: 1,
        q_num_heads: 2,
        kv_num_heads: 2,
        softcap: 2,
        qk_output: 1,
        qk_matmul_output_mode: 2,
      },
      outputs: 4,
      atol: 1e-5,
    },
  ],
  // Seeded: the compile draws the same uniforms for the node and for its expansion.
  Bernoulli: [{ inputs: [f32(uniform(24, 95), [4, 6])], attrs: { seed: 7 } }],
  Multinomial: [{
    inputs: [f32(uniform(12, 96, -2, 2), [3, 4])],
    attrs: { seed: 8, sample_size: 5 },
  }],
  Dropout: [{
    inputs: [f32(uniform(24, 97), [4, 6])],
    attrs: { seed: 9, ratio: 0.25, mask: 1 },
    outputs: 2,
    atol: 1e-6,
  }],
  // Batched, both operands transposed first, alpha; a transposed 2-D A.
  FusedMatMul: [
    {
      inputs: [f32(uniform(2 * 3 * 4, 98), [2, 4, 3]), f32(uniform(2 * 5 * 4, 99), [2, 5, 4])],
      attrs: { transA: 1, transB: 1, alpha: 0.5 },
      atol: 1e-6,
    },
    {
      inputs: [f32(uniform(12, 100), [4, 3]), f32(uniform(20, 101), [4, 5])],
      attrs: { transA: 1 },
      atol: 1e-6,
    },
  ],
  // Unigrams and bigrams with skips over two rows, weighed (TFIDF), and IDF of unigrams.
  TfIdfVectorizer: [
    {
      inputs: [i32([1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], [2, 6])],
      attrs: {
        mode: "TFIDF",
        min_gram_length: 1,
        max_gram_length: 2,
        max_skip_count: 2,
        ngram_counts: [0, 4],
        ngram_indexes: [0, 1, 2, 3, 4, 5, 6],
        pool_int64s: [2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
        weights: [1, 0.5, 2, 1, 0.25, 3, 1],
      },
    },
    {
      inputs: [i32([4, 2, 2, 5, 4, 9], [6])],
      attrs: {
        mode: "IDF",
        ngram_counts: [0],
        ngram_indexes: [1, 0, 2],
        pool_int64s: [2, 4, 5],
        weights: [0.5, 2, 3],
      },
    },
  ],
  InstanceNormalization: [
    {
      inputs: [
        f32(uniform(2 * 3 * 4 * 5, 102, -2, 2), [2, 3, 4, 5]),
        f32(uniform(3, 103)),
        f32(uniform(3, 104)),
      ],
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(2 * 2 * 6, 105, -2, 2), [2, 2, 6]),
        f32(uniform(2, 106)),
        f32(uniform(2, 107)),
      ],
      attrs: { epsilon: 1e-2 },
      atol: 1e-5,
    },
  ],
};
