/**
 * The prompt every generation benchmark feeds (`generate.ts`, `generate_kernels.ts` and ONNX
 * Runtime Web's `ort_generate.ts`): the same seeded ids, so their runners' ids compare.
 *
 * @module
 */
import { rng } from "../jit/support/random.ts";

/** `length` token ids below `vocab`, drawn from the stream of seed 1. */
export function seededPrompt(length: number, vocab: number): number[] {
  const next = rng(1);
  return Array.from({ length }, () => Math.floor(next() * vocab));
}
