/**
 * The reference TfIdfVectorizer (`jit/ops/tfidf.ts`): each row's n-grams counted at each skip
 * distance by walking the sequence, then weighed as the mode says.
 *
 * @module
 */
import { distances, tfidfGrams } from "../../jit/ops/tfidf.ts";
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Kernels by op name. */
export const tfidfKernels: Record<string, Kernel> = {
  TfIdfVectorizer: ({ inputs: [x], outputs, ctx }) => {
    const { grams, width } = tfidfGrams(ctx.attrs, (what, fix) => ctx.fail(what, fix));
    const length = x.shape.at(-1)!, rows = x.shape.length === 2 ? x.shape[0] : 1, v = read(x);
    const maxSkip = ctx.int("max_skip_count", 0), mode = ctx.choice("mode", ["TF", "IDF", "TFIDF"]);
    const weights = (ctx.attrs.weights as readonly number[] | undefined) ?? [];
    const out = new Float64Array(rows * width);
    for (let r = 0; r < rows; r++) {
      for (const { tokens, column } of grams) {
        for (const d of distances(tokens.length, maxSkip, length)) {
          for (let p = 0; p + (tokens.length - 1) * d < length; p++) {
            if (tokens.every((t, j) => v[r * length + p + j * d] === t)) out[r * width + column]++;
          }
        }
      }
    }
    const weighed = out.map((count, i) => {
      const w = weights.length ? weights[i % width] : 1;
      return mode === "TF" ? count : mode === "TFIDF" ? count * w : count > 0 ? w : 0;
    });
    return [written(outputs[0].dtype, weighed)];
  },
};
