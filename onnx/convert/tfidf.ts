/**
 * TfIdfVectorizer over integer tokens: kiln's op (`jit/ops/tfidf.ts`), its pool and n-gram
 * attributes mapped; string pools are not taken.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { attribute, attrs, type Converter, type Known } from "../import/node_context.ts";

/** The converter. */
export const TFIDF_CONVERTERS: Record<string, Converter<Known>> = {
  TfIdfVectorizer: (c) => {
    const a = attrs(c), pool = a.ints("pool_int64s");
    if (!pool || attribute(c, "pool_strings")?.strings?.length) {
      throw new KilnError(`${c.label}: TfIdfVectorizer over strings is not supported`, {
        code: "unsupported",
        fix: "map the tokens to integers and use pool_int64s",
      });
    }
    return c.emit("TfIdfVectorizer", [c.required(0)], {
      mode: a.string("mode", "TF"),
      min_gram_length: a.int("min_gram_length", 1),
      max_gram_length: a.int("max_gram_length", 1),
      max_skip_count: a.int("max_skip_count", 0),
      ngram_counts: a.ints("ngram_counts") ?? [],
      ngram_indexes: a.ints("ngram_indexes") ?? [],
      pool_int64s: pool,
      weights: a.floats("weights"),
    });
  },
};
