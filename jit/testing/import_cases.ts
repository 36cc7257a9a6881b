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
import { f32 } from "./testing.ts";

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
};
