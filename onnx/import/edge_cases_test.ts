/**
 * Edge cases that a mutating fuzzer does not reach, each as ONNX Runtime answers it: TopK over
 * rows with NaN, Pad with mixed-sign pads, LSTM sequence lengths outside the sequence.
 */
import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { OnnxModel } from "../model.ts";
import type { ModelProto } from "../wire/proto.ts";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { testModel, valueInfo } from "../testdata.ts";
import "../../mod.ts";

type Graph = ModelProto["graph"];
type Attribute = Graph["node"][0]["attribute"][number];
const input = (name: string, elemType: number, shape: number[]) => valueInfo(name, elemType, shape);
const int = (name: string, v: number): Attribute => ({ name, type: 2, i: v });

function model(
  node: Graph["node"],
  inputs: Graph["input"],
  outputs: [string, number][],
  initializer: Graph["initializer"] = [],
): OnnxModel {
  return testModel({
    node,
    initializer,
    input: inputs,
    output: outputs.map(([name, elemType]) => valueInfo(name, elemType)),
  });
}

const f32 = (values: number[], shape: number[]): HostTensor => ({
  data: Float32Array.from(values),
  shape,
  dtype: "f32",
});
const BACKENDS = ["reference", "wasm", "webgpu"];

Deno.test("TopK with NaN: indices in range, values matching them, NaN ordered above numbers", async () => {
  const topk = (largest: number) =>
    model(
      [{
        opType: "TopK",
        input: ["x", "k"],
        output: ["v", "i"],
        attribute: [int("largest", largest)],
      }],
      [input("x", 1, [2, 5])],
      [["v", 1], ["i", 7]],
      [{ name: "k", dims: [1], dataType: 7, int64Data: [3] }],
    );
  const x = f32([1, NaN, 5, 3, NaN, 2, 4, NaN, 0, 4], [2, 5]);
  const cases = [
    { largest: 1, v: [NaN, NaN, 5, NaN, 4, 4], i: [1, 4, 2, 2, 1, 4] },
    { largest: 0, v: [1, 3, 5, 0, 2, 4], i: [0, 3, 2, 3, 0, 1] },
  ];
  for (const { largest, v, i } of cases) {
    const m = topk(largest);
    for (const backend of BACKENDS) {
      const out = await m.run({ x }, { backend, cache: false });
      assert.deepEqual([...out.v.data], v, `${backend} largest=${largest}`);
      assert.deepEqual([...out.i.data].map(Number), i, `${backend} largest=${largest}`);
    }
    m.dispose();
  }
});

Deno.test("Pad reflect past the cropped axis is refused; within it, crop then reflect", async () => {
  const pad = (pads: number[]) =>
    model(
      [{
        opType: "Pad",
        input: ["x", "p"],
        output: ["y"],
        attribute: [{ name: "mode", type: 3, s: new TextEncoder().encode("reflect") }],
      }],
      [input("x", 1, [2, 4])],
      [["y", 1]],
      [{ name: "p", dims: [4], dataType: 7, int64Data: pads }],
    );
  const x = f32([0, 1, 2, 3, 4, 5, 6, 7], [2, 4]);
  // Crop two at the start, then reflect three at the end: the cropped axis has two elements.
  for (const backend of BACKENDS) {
    await assert.rejects(
      () => pad([0, -2, 0, 3]).run({ x }, { backend }),
      (e) => e instanceof KilnError && /reflect pads/.test(e.message) && /Fix:/.test(e.message),
    );
    const { y } = await pad([0, -1, 0, 2]).run({ x }, { backend });
    assert.deepEqual(y.shape, [2, 5]);
    assert.deepEqual([...y.data], [1, 2, 3, 2, 1, 5, 6, 7, 6, 5]);
  }
});

Deno.test("LSTM sequence_lens past seq_length, negative or of the wrong count are refused", async () => {
  const [seq, batch, hidden] = [3, 2, 2];
  const lstm = model(
    [{
      opType: "LSTM",
      input: ["x", "w", "r", "", "lens"],
      output: ["y"],
      attribute: [int("hidden_size", hidden)],
    }],
    [input("x", 1, [seq, batch, 1]), input("lens", 6, [batch])],
    [["y", 1]],
    [
      { name: "w", dims: [1, 4 * hidden, 1], dataType: 1, floatData: Array(4 * hidden).fill(0.1) },
      {
        name: "r",
        dims: [1, 4 * hidden, hidden],
        dataType: 1,
        floatData: Array(8 * hidden).fill(0.1),
      },
    ],
  );
  const x = f32([1, 2, 3, 4, 5, 6], [seq, batch, 1]);
  const lens = (v: number[]): HostTensor => ({
    data: Int32Array.from(v),
    shape: [v.length],
    dtype: "i32",
  });
  for (const backend of ["reference", "wasm"]) {
    for (const bad of [[5, 3], [-1, 3]]) {
      await assert.rejects(
        () => lstm.run({ x, lens: lens(bad) }, { backend }),
        (e) => e instanceof KilnError && /sequence_lens/.test(e.message) && /Fix:/.test(e.message),
        `${backend} ${bad}`,
      );
    }
    const { y } = await lstm.run({ x, lens: lens([2, 3]) }, { backend });
    assert.deepEqual(y.shape, [seq, 1, batch, hidden]);
    // Row 0 stops after two steps: its third output is zero.
    assert.deepEqual([...y.data.slice(2 * batch * hidden, 2 * batch * hidden + hidden)], [0, 0]);
  }
  lstm.dispose();
});

Deno.test("a pooling window of 2^30 with SAME padding is a typed limit error, not a hang", async () => {
  const pool = model(
    [{
      opType: "AveragePool",
      input: ["x"],
      output: ["y"],
      attribute: [
        { name: "auto_pad", type: 3, s: new TextEncoder().encode("SAME_LOWER") },
        { name: "kernel_shape", type: 7, ints: [2 ** 30, 2 ** 30] },
      ],
    }],
    [input("x", 1, [1, 1, 8, 8])],
    [["y", 1]],
  );
  await assert.rejects(
    () => pool.run({ x: f32(Array(64).fill(1), [1, 1, 8, 8]) }, { backend: "reference" }),
    (e) => e instanceof KilnError && e.code === "limit" && /taps/.test(e.message),
  );
});

Deno.test("LRN with a size past the channels sums the channels there are (size stays the divisor)", async () => {
  const lrn = (size: number) =>
    model(
      [{
        opType: "LRN",
        input: ["x"],
        output: ["y"],
        attribute: [int("size", size), { name: "alpha", type: 1, f: 0.5 }],
      }],
      [input("x", 1, [1, 3, 1, 1])],
      [["y", 1]],
    );
  const x = f32([1, 2, 3], [1, 3, 1, 1]);
  const squares = 1 + 4 + 9; // every channel is inside every window of this size
  for (const size of [7, 2 ** 30]) {
    const { y } = await lrn(size).run({ x }, { backend: "wasm" });
    const want = [1, 2, 3].map((v) => v / (1 + (0.5 / size) * squares) ** 0.75);
    [...y.data].forEach((v, i) =>
      assert.ok(Math.abs(Number(v) - want[i]) < 1e-5, `${size}: ${v} vs ${want[i]}`)
    );
  }
});

Deno.test("LayerNormalization with Mean/InvStdDev outputs and an axis past the rank is a typed error", () => {
  const ln = model(
    [{
      opType: "LayerNormalization",
      input: ["x", "s"],
      output: ["y", "m", "v"],
      attribute: [int("axis", 2 ** 30)],
    }],
    [input("x", 1, [2, 3]), input("s", 1, [3])],
    [["y", 1], ["m", 1], ["v", 1]],
  );
  assert.throws(() => ln.graph(), (e) => e instanceof KilnError && e.code === "bad-axis");
});

Deno.test("Clip without a limit clips infinities to the type's finite range, as ONNX defines", async () => {
  const clip = model(
    [{ opType: "Clip", input: ["x", "", "hi"], output: ["y"], attribute: [] }],
    [input("x", 1, [4])],
    [["y", 1]],
    [{ name: "hi", dims: [], dataType: 1, floatData: [1] }],
  );
  for (const backend of BACKENDS) {
    const { y } = await clip.run({ x: f32([-Infinity, NaN, -2, 5], [4]) }, { backend });
    assert.deepEqual([...y.data], [-3.4028234663852886e38, NaN, -2, 1], backend);
  }
});

Deno.test("RoiAlign with no output points, a negative ratio or a huge output is a typed error", async () => {
  const roi = (attribute: Attribute[]) =>
    model(
      [{ opType: "RoiAlign", input: ["x", "rois", "b"], output: ["y"], attribute }],
      [input("x", 1, [1, 1, 4, 4])],
      [["y", 1]],
      [
        { name: "rois", dims: [1, 4], dataType: 1, floatData: [0, 0, 3, 3] },
        { name: "b", dims: [1], dataType: 7, int64Data: [0] },
      ],
    );
  const x = f32(Array.from({ length: 16 }, (_, i) => i), [1, 1, 4, 4]);
  const cases: [Attribute[], string, RegExp][] = [
    // A negative height made a [1, 1, -6, 5] output, zero an empty one.
    [[int("output_height", -5)], "bad-attribute", /output -5×1/],
    [[int("output_height", 0)], "bad-attribute", /output 0×1/],
    [[int("sampling_ratio", -1)], "bad-attribute", /sampling_ratio -1/],
    // Every point's samples are listed at import: 2^30 of them is a limit, not hours of work.
    [[int("output_height", 2 ** 30)], "limit", /RoiAlign/],
    [[int("sampling_ratio", 2 ** 20)], "limit", /RoiAlign/],
  ];
  for (const [attribute, code, pattern] of cases) {
    await assert.rejects(
      () => roi(attribute).run({ x }, { backend: "reference" }),
      (e) => e instanceof KilnError && e.code === code && pattern.test(e.message),
      JSON.stringify(attribute),
    );
  }
  const { y } = await roi([int("output_height", 2), int("output_width", 2)]).run({ x }, {
    backend: "reference",
  });
  assert.deepEqual(y.shape, [1, 1, 2, 2]);
});

Deno.test("TfIdfVectorizer: a huge skip counts as a long one, negative or huge indexes are typed errors", async () => {
  const ints = (name: string, v: number[]): Attribute => ({ name, type: 7, ints: v });
  const tfidf = (attribute: Attribute[]) =>
    model(
      [{ opType: "TfIdfVectorizer", input: ["x"], output: ["y"], attribute }],
      [input("x", 6, [1, 6])],
      [["y", 1]],
    );
  const bigrams = (skip: number, indexes = [0, 1]) => [
    { name: "mode", type: 3, s: new TextEncoder().encode("TF") },
    int("min_gram_length", 2),
    int("max_gram_length", 2),
    int("max_skip_count", skip),
    ints("ngram_counts", [0, 0]),
    ints("ngram_indexes", indexes),
    ints("pool_int64s", [2, 3, 5, 4]),
  ];
  const x = { data: Int32Array.of(2, 3, 5, 4, 2, 9), shape: [1, 6], dtype: "i32" as const };
  // (2, 3) adjacent once; (5, 4) adjacent once; with any skip (2, 3)... 2 at 0 and 4, 3 at 1.
  const wide = await tfidf(bigrams(5)).run({ x }, { backend: "reference" });
  const huge = await tfidf(bigrams(2 ** 30)).run({ x }, { backend: "reference" });
  assert.deepEqual(huge.y.data, wide.y.data);
  for (
    const [attribute, code] of [
      [bigrams(-1), "bad-attribute"],
      [bigrams(1, [0, -1]), "bad-attribute"],
      [bigrams(1, [0, 2 ** 40]), "limit"],
      [
        bigrams(1).map((a) => a.name === "ngram_counts" ? ints("ngram_counts", [0, -2]) : a),
        "bad-attribute",
      ],
    ] as const
  ) {
    await assert.rejects(
      () => tfidf([...attribute]).run({ x }, { backend: "reference" }),
      (e) =>
        e instanceof KilnError && e.code === code &&
        /TfIdfVectorizer|budget|elements/.test(e.message),
      JSON.stringify(attribute.slice(3, 6)),
    );
  }
});

Deno.test("boolean attributes other than 0 or 1 and ReverseSequence's other axes are typed errors", async () => {
  const x = f32([1, 2, 3, 4, 5, 6, 7, 8, 9], [3, 3]);
  const trilu = (upper: number) =>
    model([{ opType: "Trilu", input: ["x"], output: ["y"], attribute: [int("upper", upper)] }], [
      input("x", 1, [3, 3]),
    ], [["y", 1]]);
  // ONNX Runtime keeps the lower part for upper = -1 and 2^30: no reading is the right one.
  for (const upper of [-1, 2, 2 ** 30]) {
    await assert.rejects(
      () => trilu(upper).run({ x }, { backend: "reference" }),
      (e) => e instanceof KilnError && e.code === "bad-attribute" && /upper is/.test(e.message),
    );
  }
  assert.deepEqual([...(await trilu(0).run({ x }, { backend: "reference" })).y.data], [
    1,
    0,
    0,
    4,
    5,
    0,
    7,
    8,
    9,
  ]);
  const reverse = (time: number, batch: number) =>
    model(
      [{
        opType: "ReverseSequence",
        input: ["x", "lens"],
        output: ["y"],
        attribute: [int("time_axis", time), int("batch_axis", batch)],
      }],
      [input("x", 1, [3, 3])],
      [["y", 1]],
      [
        { name: "lens", dims: [3], dataType: 7, int64Data: [1, 2, 3] },
      ],
    );
  // Axes -1 and -2 gathered through strides that do not exist: zeros where ORT answered.
  for (const [time, batch] of [[-1, -2], [0, 0], [2, 1]]) {
    await assert.rejects(
      () => reverse(time, batch).run({ x }, { backend: "reference" }),
      (e) =>
        e instanceof KilnError && e.code === "bad-attribute" && /ReverseSequence/.test(e.message),
      `${time} ${batch}`,
    );
  }
  const { y } = await reverse(0, 1).run({ x }, { backend: "reference" });
  assert.deepEqual([...y.data], [1, 5, 9, 4, 2, 6, 7, 8, 3]);
});

Deno.test("Pow follows C's pow (as ONNX's reference and ONNX Runtime), not JavaScript's", async () => {
  const xs = [1, 1, -1, NaN, 2, -2, -0, Infinity, -8, 0.5];
  const ys = [NaN, Infinity, -Infinity, 0, NaN, 3, -1, -0.75, 1 / 3, -Infinity];
  // 1^NaN, 1^inf and (-1)^-inf are 1 in C (NaN in Math.pow); the rest as IEEE 754 says.
  const want = [1, 1, 1, 1, NaN, -8, -Infinity, 0, NaN, Infinity];
  const pow = model([{ opType: "Pow", input: ["x", "y"], output: ["z"], attribute: [] }], [
    input("x", 1, [10]),
    input("y", 1, [10]),
  ], [["z", 1]]);
  for (const backend of BACKENDS) {
    const { z } = await pow.run({ x: f32(xs, [10]), y: f32(ys, [10]) }, { backend });
    assert.deepEqual([...z.data], want, backend);
  }
});

Deno.test("ScatterND with infinite or NaN values changes only the places its updates land on", async () => {
  const scatter = (reduction: string) =>
    model(
      [{
        opType: "ScatterND",
        input: ["data", "indices", "updates"],
        output: ["y"],
        attribute: [{ name: "reduction", type: 3, s: new TextEncoder().encode(reduction) }],
      }],
      [input("data", 1, [4, 4, 4]), input("indices", 7, [2, 1]), input("updates", 1, [2, 4, 4])],
      [["y", 1]],
    );
  // The edge sweep's special values, cycled, with the indices fed (constant ones fold): a product
  // of the 0/1 matches with the updates made NaN of places whose own update was -inf.
  const indices = { data: BigInt64Array.of(0n, 2n), shape: [2, 1], dtype: "i64" as const };
  const special = [NaN, -0, 0, Infinity, -Infinity, 3e38, -3e38, 1e-40, 1, -1];
  const cycle = (n: number, from: number) =>
    Array.from({ length: n }, (_, i) => special[(i + from) % 10]);
  const [d, u] = [cycle(64, 0), cycle(32, 0)];
  const none = [...u.slice(0, 16), ...d.slice(16, 32), ...u.slice(16), ...d.slice(48)];
  const add = d.map((v, i) =>
    Math.fround(i < 16 ? v + u[i] : i >= 32 && i < 48 ? v + u[i - 16] : v)
  );
  for (const backend of BACKENDS) {
    const inputs = { data: f32(d, [4, 4, 4]), indices, updates: f32(u, [2, 4, 4]) };
    const placed = (await scatter("none").run(inputs, { backend })).y.data;
    assert.deepEqual([...placed], [...Float32Array.from(none)], backend);
    // Sums in f32 (a subnormal's last bits, and -0 + +0 is +0): within 1e-44.
    const summed = (await scatter("add").run(inputs, { backend })).y.data;
    assertClose(numbers(summed), add, { atol: 1e-44, rtol: 1e-6, message: backend });
  }
});
