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
