import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { OnnxModel } from "../model.ts";
import { encodeModel, type ModelProto } from "../wire/proto.ts";
import "../../mod.ts";

type Attribute = ModelProto["graph"]["node"][0]["attribute"][number];
const ints = (name: string, v: number[]): Attribute => ({ name, type: 7, ints: v });
const int = (name: string, v: number): Attribute => ({ name, type: 2, i: v });
const floats = (name: string, v: number[]): Attribute => ({ name, type: 6, floats: v });
const str = (name: string, v: string): Attribute => ({
  name,
  type: 3,
  s: new TextEncoder().encode(v),
});

/** A TfIdfVectorizer model over int32 tokens of `shape`. */
function model(shape: number[], attribute: Attribute[]): Uint8Array {
  const m: ModelProto = {
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "g",
      node: [{ opType: "TfIdfVectorizer", input: ["x"], output: ["y"], attribute }],
      initializer: [],
      input: [{
        name: "x",
        type: { tensorType: { elemType: 6, shape: { dim: shape.map((d) => ({ dimValue: d })) } } },
      }],
      output: [{ name: "y", type: { tensorType: { elemType: 1 } } }],
    },
  };
  return encodeModel(m);
}

/** Counts by the specification: every start and skip distance (unigrams once). */
function counted(
  row: number[],
  grams: number[][],
  columns: number[],
  width: number,
  maxSkip: number,
): number[] {
  const out = new Array(width).fill(0);
  grams.forEach((g, i) => {
    const distances = g.length === 1 ? 1 : maxSkip + 1;
    for (let d = 1; d <= distances; d++) {
      for (let p = 0; p + (g.length - 1) * d < row.length; p++) {
        if (g.every((t, j) => row[p + j * d] === t)) out[columns[i]]++;
      }
    }
  });
  return out;
}

const rows = [[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]];
const pool = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7]; // unigrams 2 3 5 4, bigrams 56 78 67
const grams = [[2], [3], [5], [4], [5, 6], [7, 8], [6, 7]];

Deno.test("TfIdfVectorizer counts n-grams with skips in every mode, on every backend", async () => {
  // Columns 1 and 5 each take two n-grams (their counts add); column 7 takes none.
  const columns = [0, 1, 2, 3, 1, 4, 5];
  const weights = [0.5, 1, 2, 3, 4, 5];
  for (const [mode, maxSkip] of [["TF", 3], ["IDF", 0], ["TFIDF", 5]] as const) {
    const bytes = model([2, 6], [
      str("mode", mode),
      int("min_gram_length", 1),
      int("max_gram_length", 2),
      int("max_skip_count", maxSkip),
      ints("ngram_counts", [0, 4]),
      ints("ngram_indexes", columns),
      ints("pool_int64s", pool),
      ...(mode === "TF" ? [] : [floats("weights", weights)]),
    ]);
    const tf = rows.flatMap((r) => counted(r, grams, columns, 6, maxSkip));
    const want = tf.map((n, i) =>
      mode === "TF" ? n : mode === "IDF" ? (n > 0 ? weights[i % 6] : 0) : n * weights[i % 6]
    );
    for (const backend of ["reference", "wasm", "webgpu"]) {
      const m = OnnxModel.fromBytes(bytes);
      const { y } = await m.run({
        x: { data: Int32Array.from(rows.flat()), shape: [2, 6], dtype: "i32" },
      }, { backend, cache: false });
      assert.deepEqual(y.shape, [2, 6], `${mode} ${backend}`);
      assert.deepEqual(Array.from(y.data as Float32Array), want, `${mode} ${backend}`);
      m.dispose();
    }
  }
});

Deno.test("TfIdfVectorizer: bigrams only on one row; strings are a typed error", async () => {
  const bytes = model([6], [
    str("mode", "TF"),
    int("min_gram_length", 2),
    int("max_gram_length", 2),
    int("max_skip_count", 5),
    ints("ngram_counts", [0, 4]),
    ints("ngram_indexes", [0, 1, 2, 3, 4, 5, 6]),
    ints("pool_int64s", pool),
  ]);
  const { y } = await OnnxModel.fromBytes(bytes).run({
    x: { data: Int32Array.from(rows[1]), shape: [6], dtype: "i32" },
  }, { backend: "reference", cache: false });
  // Unigrams are outside [2, 2]: their columns stay 0.
  const want = counted(rows[1], grams, [0, 1, 2, 3, 4, 5, 6], 7, 5).map((n, i) => i < 4 ? 0 : n);
  assert.deepEqual(Array.from(y.data as Float32Array), want);
  assert.throws(
    () =>
      OnnxModel.fromBytes(model([6], [
        ints("ngram_counts", [0]),
        ints("ngram_indexes", [0]),
        { name: "pool_strings", type: 8, strings: [new TextEncoder().encode("a")] },
      ])).graph(),
    (e) => e instanceof KilnError && /over strings/.test(e.message) && /Fix:/.test(e.message),
  );
});
