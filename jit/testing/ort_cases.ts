/**
 * Decomposition cases of ONNX Runtime's transformer ops that are kiln ops
 * (`jit/ops/normalization.ts`, `jit/ops/ort_attention.ts`): each runs on the reference backend as
 * its own kernel and as its decomposition, which must agree (`jit/passes/decompose_test.ts`).
 *
 * @module
 */
import { uniform } from "../support/random.ts";
import type { DecomposeCase } from "./layer_cases.ts";
import { f32, i32 } from "./testing.ts";

/** Cases by op name. */
export const ORT_CASES: Record<string, DecomposeCase[]> = {
  // Q, K and V biases, key counts with starts ([2B]), causal after a past; 0/1 flags per query
  // with an attention bias over heads; a square mask with the default scale.
  MultiHeadAttention: [
    {
      inputs: [
        f32(uniform(2 * 2 * 8, 160), [2, 2, 8]),
        f32(uniform(2 * 2 * 8, 161), [2, 2, 8]),
        f32(uniform(2 * 2 * 4, 162), [2, 2, 4]),
        f32(uniform(20, 163), [20]),
        i32([4, 3, 1, 0]),
        f32(uniform(2 * 2 * 2 * 4, 164), [2, 2, 2, 4]),
        f32(uniform(2 * 2 * 2 * 2, 165), [2, 2, 2, 2]),
      ],
      attrs: { num_heads: 2, bias: 1, mask: 1, past: 1, unidirectional: 1 },
      outputs: 3,
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(3 * 4, 166), [1, 3, 4]),
        f32(uniform(2 * 4, 167), [1, 2, 4]),
        f32(uniform(2 * 4, 168), [1, 2, 4]),
        i32([1, 0, 1, 1, 0, 0], [1, 3, 2]),
        f32(uniform(2 * 3 * 2, 169), [1, 2, 3, 2]),
      ],
      attrs: { num_heads: 2, mask: 1, attention_bias: 1, scale: 0.3, mask_filter_value: -300 },
      outputs: 3,
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(2 * 4, 170), [1, 2, 4]),
        f32(uniform(3 * 4, 171), [1, 3, 4]),
        f32(uniform(3 * 4, 172), [1, 3, 4]),
        i32([1, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1], [1, 1, 4, 4]),
      ],
      attrs: { num_heads: 1, mask: 1 },
      outputs: 3,
      atol: 1e-5,
    },
  ],
  // A padded first prompt of two sequences; a packed prompt after a past with rotation, a window
  // and a softcap; two sequences decoding a token each after different pasts, rotated at given
  // positions (interleaved) with an attention bias.
  GroupQueryAttention: [
    {
      inputs: [
        f32(uniform(2 * 3 * 16, 173), [2, 3, 16]),
        f32(uniform(2 * 3 * 8, 174), [2, 3, 8]),
        f32(uniform(2 * 3 * 8, 175), [2, 3, 8]),
        i32([2, 1]),
      ],
      attrs: { num_heads: 4, kv_num_heads: 2 },
      outputs: 3,
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(2 * 16, 176), [1, 2, 16]),
        f32(uniform(3 * 4, 177), [1, 1, 3, 4]),
        f32(uniform(3 * 4, 178), [1, 1, 3, 4]),
        i32([4]),
        f32(uniform(8 * 2, 179), [8, 2]),
        f32(uniform(8 * 2, 180), [8, 2]),
      ],
      attrs: {
        num_heads: 2,
        kv_num_heads: 1,
        packed: 1,
        past: 1,
        do_rotary: 1,
        local_window_size: 2,
        softcap: 3,
        total_sequence_length: 5,
      },
      outputs: 3,
      atol: 1e-5,
    },
    {
      inputs: [
        f32(uniform(2 * 8, 181), [2, 1, 8]),
        f32(uniform(2 * 4, 182), [2, 1, 4]),
        f32(uniform(2 * 4, 183), [2, 1, 4]),
        f32(uniform(2 * 3 * 4, 184), [2, 1, 3, 4]),
        f32(uniform(2 * 3 * 4, 185), [2, 1, 3, 4]),
        i32([3, 2]),
        f32(uniform(6 * 2, 186), [6, 2]),
        f32(uniform(6 * 2, 187), [6, 2]),
        i32([5, 2], [2, 1]),
        f32(uniform(2 * 4, 188), [1, 2, 1, 4]),
      ],
      attrs: {
        num_heads: 2,
        kv_num_heads: 1,
        past: 1,
        do_rotary: 1,
        rotary_interleaved: 1,
        positions: 1,
        attention_bias: 1,
        total_sequence_length: 4,
      },
      outputs: 3,
      atol: 1e-5,
    },
  ],
  // Segments and a mask (counts 3 and 1); words alone; position ids shared by the batch.
  EmbedLayerNormalization: [
    {
      inputs: [
        i32([1, 4, 2, 0, 3, 3], [2, 3]),
        f32(uniform(5 * 4, 140, -1, 1), [5, 4]),
        f32(uniform(6 * 4, 141, -1, 1), [6, 4]),
        f32(uniform(4, 142, 0.5, 1.5)),
        f32(uniform(4, 143)),
        i32([0, 1, 1, 0, 0, 1], [2, 3]),
        f32(uniform(2 * 4, 144), [2, 4]),
        i32([1, 1, 1, 1, 0, 0], [2, 3]),
      ],
      attrs: { segments: 1, mask: 1, epsilon: 1e-5 },
      outputs: 3,
      atol: 1e-5,
    },
    {
      inputs: [
        i32([2, 0], [1, 2]),
        f32(uniform(3 * 8, 145), [3, 8]),
        f32(uniform(4 * 8, 146), [4, 8]),
        f32(uniform(8, 147)),
        f32(uniform(8, 148)),
      ],
      outputs: 3,
      atol: 1e-5,
    },
    {
      inputs: [
        i32([2, 0, 1, 1], [2, 2]),
        f32(uniform(3 * 4, 149), [3, 4]),
        f32(uniform(4 * 4, 150), [4, 4]),
        f32(uniform(4, 151)),
        f32(uniform(4, 152)),
        i32([3, 1], [1, 2]),
      ],
      attrs: { positions: 1 },
      outputs: 3,
      atol: 1e-5,
    },
  ],
};
