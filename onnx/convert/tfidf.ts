/**
 * TfIdfVectorizer over integer tokens, composed from kiln's ops. Its n-grams are attributes, so
 * the count of each is a fixed sum: for every skip distance `d` (1 to `max_skip_count` + 1; once
 * for unigrams, which no skip changes) and start `p`, whether tokens `p, p + d, …` equal the
 * n-gram, i.e. an And of Equals over shifted slices of the input, summed along the sequence. Each
 * output column adds the counts of the n-grams mapped to it (`ngram_indexes`), then the mode
 * weighs them (TF: the count; IDF: the weight, or 1, where the count is positive; TFIDF: weight ×
 * count). The semantics follow the ONNX specification of the operator and its reference
 * implementation's counting (n-grams outside [min_gram_length, max_gram_length] are not counted).
 *
 * @module
 */
import { checkBudget } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import {
  attribute,
  attrs,
  constant,
  type Converter,
  type Known,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** The converter. */
export const TFIDF_CONVERTERS: Record<string, Converter<Known>> = {
  TfIdfVectorizer: (c) => {
    const x = c.required(0);
    const a = attrs(c);
    const op = opOf(c);
    const { shape, dtype } = typeOf(x);
    const pool = a.ints("pool_int64s");
    if (!pool || attribute(c, "pool_strings")?.strings?.length) {
      throw new KilnError(`${c.label}: TfIdfVectorizer over strings is not supported`, {
        code: "unsupported",
        fix: "map the tokens to integers and use pool_int64s",
      });
    }
    if ((dtype !== "i32" && dtype !== "u32") || shape.length < 1 || shape.length > 2) {
      throw new KilnError(
        `${c.label}: TfIdfVectorizer takes integer tokens of shape [C] or [B, C], got ${dtype}[${shape}]`,
        { code: "unsupported", fix: "pass int32 or int64 tokens of rank 1 or 2" },
      );
    }
    const mode = a.string("mode", "TF")!;
    if (!["TF", "IDF", "TFIDF"].includes(mode)) {
      throw new KilnError(`${c.label}: unknown TfIdfVectorizer mode "${mode}"`, {
        code: "bad-attribute",
        fix: 'use mode "TF", "IDF" or "TFIDF"',
      });
    }
    const minN = a.int("min_gram_length", 1)!, maxN = a.int("max_gram_length", 1)!;
    const maxSkip = a.int("max_skip_count", 0)!;
    const counts = a.ints("ngram_counts") ?? [];
    const indexes = a.ints("ngram_indexes") ?? [];
    const weights = a.floats("weights") ?? [];
    // ngram_counts are where each n's grams start in the pool: ascending, within it.
    if (counts.some((n, i) => n < 0 || n > pool.length || (i > 0 && n < counts[i - 1]))) {
      throw new KilnError(
        `${c.label}: TfIdfVectorizer's ngram_counts [${counts}] are not offsets into its pool of ${pool.length}`,
        {
          code: "bad-attribute",
          fix: "give ngram_counts as ascending start offsets of each n-gram length in the pool",
        },
      );
    }
    if (maxSkip < 0 || indexes.some((i) => i < 0)) {
      throw new KilnError(
        `${c.label}: TfIdfVectorizer with max_skip_count ${maxSkip} and ngram_indexes [${
          indexes.slice(0, 8)
        }${indexes.length > 8 ? ", …" : ""}]`,
        {
          code: "bad-attribute",
          fix: "give a max_skip_count of 0 or more and output indexes of 0 or more",
        },
      );
    }
    const width = Math.max(-1, ...indexes) + 1;
    const axis = shape.length - 1, C = shape[axis];
    // The output is [..batch, width]: its size is checked before a column is built.
    checkBudget([...(shape.length === 2 ? [shape[0]] : []), width], "f32", c.label);
    const batch = shape.length === 2 ? [shape[0]] : [];
    // The n-grams in pool order, each with the output column it counts into.
    const grams: { tokens: number[]; column: number }[] = [];
    let id = 0;
    counts.forEach((start, i) => {
      const n = i + 1, end = counts[i + 1] ?? pool.length;
      for (let s = start; s + n <= end; s += n, id++) {
        if (n < minN || n > maxN) continue;
        if (indexes[id] === undefined) {
          throw new KilnError(`${c.label}: n-gram ${id} has no entry in ngram_indexes`, {
            code: "bad-attribute",
            fix: "give ngram_indexes one output index per n-gram of the pool",
          });
        }
        grams.push({ tokens: pool.slice(s, s + n), column: indexes[id] });
      }
    });
    const token = (v: number) => constant([v], [], dtype);
    /** Occurrences of `tokens` with distance `d` between them: [..batch, 1] of f32. */
    const occurrences = (tokens: number[], d: number): Known | undefined => {
      const span = (tokens.length - 1) * d;
      if (span >= C) return undefined;
      const hits = tokens.map((t, j) =>
        op("Equal", [
          op("Slice", [x], { starts: [j * d], ends: [C - span + j * d], axes: [axis] }),
          token(t),
        ])
      );
      const all = hits.reduce((acc, h) => op("And", [acc, h]));
      return op("ReduceSum", [op("Cast", [all], { to: "f32" })], { axes: [axis], keepdims: 1 });
    };
    const columns: (Known | undefined)[] = Array.from({ length: width }, () => undefined);
    for (const g of grams) {
      // Skips that put an n-gram's tokens past the sequence count nothing: at most C of them.
      const distances = g.tokens.length === 1
        ? [1]
        : [...Array(Math.min(maxSkip + 1, C)).keys()].map((d) => d + 1);
      for (const d of distances) {
        const n = occurrences(g.tokens, d);
        if (!n) continue;
        const had = columns[g.column];
        columns[g.column] = had ? op("Add", [had, n]) : n;
      }
    }
    const zero = constant(new Array(batch[0] ?? 1).fill(0), [...batch, 1], "f32");
    const tf = op("Concat", columns.map((k) => k ?? zero), { axis });
    if (mode === "TF") return [tf];
    // A weight per output column, as the reference implementation reads them.
    if (weights.length && weights.length < width) {
      throw new KilnError(
        `${c.label}: ${weights.length} weights for ${width} output columns`,
        {
          code: "bad-attribute",
          fix: "give one weight per output column (max(ngram_indexes) + 1)",
        },
      );
    }
    const w = weights.length ? constant(weights.slice(0, width), [width], "f32") : undefined;
    if (mode === "TFIDF") return [w ? op("Mul", [tf, w]) : tf];
    const seen = op("Cast", [op("Greater", [tf, constant([0], [], "f32")])], { to: "f32" });
    return [w ? op("Mul", [seen, w]) : seen];
  },
};
