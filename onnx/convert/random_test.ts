import assert from "node:assert/strict";
import { OnnxModel } from "../../mod.ts";
import { encodeModel, type ModelProto, protoOf } from "../wire/proto.ts";

const N = 4000;

/** A one-node model over `x: f32[N]`, with `inits` as initializers, outputs `y` (and more). */
function model(node: ModelProto["graph"]["node"][0], inits: ModelProto["graph"]["initializer"]) {
  const vec = { tensorType: { elemType: 1, shape: { dim: [{ dimValue: N }] } } };
  return encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "g",
      node: [node],
      initializer: inits,
      input: [{ name: "x", type: vec }],
      output: node.output.map((name) => ({ name, type: {} })),
    },
  });
}
const x = {
  data: new Float32Array(N).map((_, i) => 1 + (i % 7)),
  shape: [N],
  dtype: "f32" as const,
};

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: training Dropout and Bernoulli draw masks per run, seeded by the node`, async () => {
    const dropout = OnnxModel.fromBytes(model(
      {
        opType: "Dropout",
        input: ["x", "ratio", "training"],
        output: ["y", "mask"],
        attribute: [{ name: "seed", type: 2, i: 7 }],
      },
      [
        protoOf("ratio", { data: new Float32Array([0.25]), shape: [], dtype: "f32" }),
        protoOf("training", { data: new Uint8Array([1]), shape: [], dtype: "bool" }),
      ],
    ));
    const r = await dropout.run({ x }, { backend, cache: false });
    const [y, mask] = [r.y.data as Float32Array, r.mask.data as Uint8Array];
    let kept = 0;
    for (let i = 0; i < N; i++) {
      assert.equal(y[i], mask[i] ? Math.fround(x.data[i] * Math.fround(1 / 0.75)) : 0, `y[${i}]`);
      kept += mask[i];
    }
    assert.ok(Math.abs(kept / N - 0.75) < 0.04, `kept ${kept / N}`);
    const next = await dropout.run({ x }, { backend, cache: false });
    assert.notDeepEqual(next.mask.data, mask, "a new mask each run");
    const bernoulli = OnnxModel.fromBytes(model(
      { opType: "Bernoulli", input: ["p"], output: ["y"], attribute: [] },
      [protoOf("p", { data: new Float32Array(N).fill(0.2), shape: [N], dtype: "f32" })],
    ));
    const coins = (await bernoulli.run({ x }, { backend, cache: false })).y.data as Float32Array;
    assert.ok(coins.every((v) => v === 0 || v === 1));
    const heads = coins.reduce((s, v) => s + v, 0) / N;
    assert.ok(Math.abs(heads - 0.2) < 0.03, `heads ${heads}`);
    dropout.dispose();
    bernoulli.dispose();
  });
}

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: Multinomial draws each class as often as its softmax probability`, async () => {
    const probabilities = [[0.2, 0.3, 0.5], [0.9, 0.05, 0.05]];
    const logits = {
      tensorType: { elemType: 1, shape: { dim: [{ dimValue: 2 }, { dimValue: 3 }] } },
    };
    const m = OnnxModel.fromBytes(encodeModel({
      irVersion: 8,
      opsetImport: [{ domain: "", version: 17 }],
      graph: {
        name: "g",
        node: [{
          opType: "Multinomial",
          input: ["x"],
          output: ["y"],
          attribute: [
            { name: "sample_size", type: 2, i: N },
            { name: "seed", type: 1, f: 3 },
            { name: "dtype", type: 2, i: 7 },
          ],
        }],
        initializer: [],
        input: [{ name: "x", type: logits }],
        output: [{ name: "y", type: {} }],
      },
    }));
    const x = {
      data: Float32Array.from(probabilities.flat(), Math.log),
      shape: [2, 3],
      dtype: "f32" as const,
    };
    const { y } = await m.run({ x }, { backend, cache: false });
    assert.deepEqual(y.shape, [2, N]);
    const draws = Array.from(y.data as ArrayLike<number>, Number);
    probabilities.forEach((row, b) =>
      row.forEach((p, k) => {
        const seen = draws.slice(b * N, (b + 1) * N).filter((d) => d === k).length / N;
        assert.ok(Math.abs(seen - p) < 0.03, `row ${b} class ${k}: ${seen} against ${p}`);
      })
    );
    assert.ok(draws.every((d) => d >= 0 && d <= 2));
    m.dispose();
  });
}
