/**
 * TfIdfVectorizer over integer tokens. Its n-grams are attributes, so the count of each is a
 * fixed sum: for every skip distance `d` (1 to `max_skip_count` + 1; once for unigrams, which no
 * skip changes) and start `p`, whether tokens `p, p + d, …` equal the n-gram, i.e. an And of
 * Equals over shifted slices of the input, summed along the sequence. Each output column adds the
 * counts of the n-grams mapped to it (`ngram_indexes`), then the mode weighs them (TF: the count;
 * IDF: the weight, or 1, where the count is positive; TFIDF: weight × count). The semantics follow
 * the ONNX specification and its reference implementation's counting (n-grams outside
 * [min_gram_length, max_gram_length] are not counted).
 *
 * @module
 */
import { formatShape } from "../ir/shape.ts";
import { checkBudget } from "../runtime/budget.ts";
import { KilnError } from "../support/errors.ts";
import { type Attrs, constantTensor, defineOps, type EmitRef, type OpDef } from "./registry.ts";

/** One counted n-gram: its tokens and the output column it counts into. */
export interface Gram {
  /** The n-gram's tokens. */
  readonly tokens: readonly number[];
  /** Its output column. */
  readonly column: number;
}

/**
 * TfIdfVectorizer's n-grams and output width from its attributes `a` (integer lists, as infer
 * has checked them); `fail` reports attributes that do not describe a pool.
 */
export function tfidfGrams(
  a: Attrs,
  fail: (what: string, fix: string) => never,
): { grams: Gram[]; width: number } {
  const list = (name: string) => (a[name] as readonly number[] | undefined) ?? [];
  const pool = list("pool_int64s"), counts = list("ngram_counts"), indexes = list("ngram_indexes");
  const minN = (a.min_gram_length as number | undefined) ?? 1;
  const maxN = (a.max_gram_length as number | undefined) ?? 1;
  const maxSkip = (a.max_skip_count as number | undefined) ?? 0;
  // ngram_counts are where each n's grams start in the pool: ascending, within it.
  if (counts.some((n, i) => n < 0 || n > pool.length || (i > 0 && n < counts[i - 1]))) {
    fail(
      `ngram_counts [${counts}] are not offsets into a pool of ${pool.length}`,
      "give ngram_counts as ascending start offsets of each n-gram length in the pool",
    );
  }
  if (maxSkip < 0 || indexes.some((i) => i < 0)) {
    fail(
      `max_skip_count ${maxSkip} and ngram_indexes [${indexes.slice(0, 8)}]`,
      "give a max_skip_count of 0 or more and output indexes of 0 or more",
    );
  }
  const grams: Gram[] = [];
  let id = 0;
  counts.forEach((start, i) => {
    const n = i + 1, end = counts[i + 1] ?? pool.length;
    for (let s = start; s + n <= end; s += n, id++) {
      if (n < minN || n > maxN) continue;
      if (indexes[id] === undefined) {
        fail(
          `n-gram ${id} has no entry in ngram_indexes`,
          "give ngram_indexes one output index per n-gram of the pool",
        );
      }
      grams.push({ tokens: pool.slice(s, s + n), column: indexes[id] });
    }
  });
  return { grams, width: Math.max(-1, ...indexes) + 1 };
}

/** A failure of attributes infer has already checked. */
const checked = (what: string): never => {
  throw new KilnError(`TfIdfVectorizer: ${what}`, { code: "internal", fix: "report this" });
};

/** The skip distances an n-gram of `n` tokens is counted at, in a sequence of `length`. */
export function distances(n: number, maxSkip: number, length: number): number[] {
  // Skips that put an n-gram's tokens past the sequence count nothing: at most C of them.
  return n === 1 ? [1] : [...Array(Math.min(maxSkip + 1, length)).keys()].map((d) => d + 1);
}

const tfIdfVectorizer: OpDef = {
  name: "TfIdfVectorizer",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const { shape, dtype } = ctx.input(0);
    if ((dtype !== "i32" && dtype !== "u32") || shape.length < 1 || shape.length > 2) {
      ctx.fail(
        `integer tokens of shape [C] or [B, C], got ${dtype}${formatShape(shape)}`,
        "pass int32 or int64 tokens of rank 1 or 2",
        "unsupported",
      );
    }
    const mode = ctx.choice("mode", ["TF", "IDF", "TFIDF"]);
    ctx.ints("pool_int64s");
    const { width } = tfidfGrams(ctx.attrs, (what, fix) => ctx.fail(what, fix, "bad-attribute"));
    const weights = (ctx.attrs.weights as readonly number[] | undefined) ?? [];
    if (mode !== "TF" && weights.length && weights.length < width) {
      ctx.fail(
        `${weights.length} weights for ${width} output columns`,
        "give one weight per output column (max(ngram_indexes) + 1)",
        "bad-attribute",
      );
    }
    const out = [...shape.slice(0, -1), width];
    checkBudget(out, "f32", ctx.where);
    return [{ shape: out, dtype: "f32" }];
  },
  decompose: (e, [x], a) => {
    const { shape, dtype } = e.typeOf(x), axis = shape.length - 1, length = shape[axis];
    const { grams, width } = tfidfGrams(a, checked);
    const token = (v: number) => e.scalar(v, dtype);
    /** Occurrences of `tokens` with distance `d` between them: [..batch, 1] of f32. */
    const occurrences = (tokens: readonly number[], d: number): EmitRef | undefined => {
      const span = (tokens.length - 1) * d;
      if (span >= length) return undefined;
      const hits = tokens.map((t, j) =>
        e.op("Equal", [
          e.op("Slice", [x], { starts: [j * d], ends: [length - span + j * d], axes: [axis] }),
          token(t),
        ])
      );
      const all = hits.reduce((acc, h) => e.op("And", [acc, h]));
      return e.op("ReduceSum", [e.op("Cast", [all], { to: "f32" })], { axes: [axis], keepdims: 1 });
    };
    const columns: (EmitRef | undefined)[] = Array.from({ length: width }, () => undefined);
    const maxSkip = (a.max_skip_count as number | undefined) ?? 0;
    for (const g of grams) {
      for (const d of distances(g.tokens.length, maxSkip, length)) {
        const n = occurrences(g.tokens, d);
        if (n) columns[g.column] = columns[g.column] ? e.op("Add", [columns[g.column]!, n]) : n;
      }
    }
    const zero = e.op("Expand", [e.scalar(0, "f32")], { shape: [...shape.slice(0, -1), 1] });
    const tf = e.op("Concat", columns.map((k) => k ?? zero), { axis });
    const mode = (a.mode as string | undefined) ?? "TF",
      weights = (a.weights as number[] | undefined) ?? [];
    if (mode === "TF") return [tf];
    const w = weights.length
      ? constantTensor(e, weights.slice(0, width), [width], "f32")
      : undefined;
    if (mode === "TFIDF") return [w ? e.op("Mul", [tf, w]) : tf];
    const seen = e.op("Cast", [e.op("Greater", [tf, e.scalar(0, "f32")])], { to: "f32" });
    return [w ? e.op("Mul", [seen, w]) : seen];
  },
};

defineOps([tfIdfVectorizer]);
