import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { runCase } from "../../tools/conformance/conformance.ts";
import { OnnxModel } from "../model.ts";
import { encodeModel } from "../wire/proto.ts";

/**
 * ONNX's own node cases of Attention, RMSNormalization and RotaryEmbedding (opset 23), of
 * Attention, Swish and TensorScatter (opset 24) and of Attention's windows (opset 25), written by
 * ONNX 1.23.1's case generators on the GPU machine (`onnx/backend/test/case/node/attention.py`
 * and its neighbours, expected values from its reference) and run as the conformance runner runs
 * its suite. Their `_expanded` forms (the ops' function bodies) pass too and are not kept here.
 */
const CASES = new URL("../testdata/onnx_llm/", import.meta.url).pathname;

/**
 * bfloat16 outputs one bfloat16 step (2^-8, relative) from the reference's, whose every op rounds
 * to bfloat16 where kiln computes in f32 and rounds the outputs (the expanded graphs land on the
 * same values); ONNX's tolerance, rtol 1e-3, is under one step.
 */
const BF16 = [
  "test_attention_3d_causal_bf16",
  "test_attention_4d_attn_mask_causal_bf16",
  "test_attention_4d_causal_bf16",
  "test_attention_4d_causal_padded_kv_bf16",
  "test_attention_4d_padded_kv_bf16",
];

/** Cases that do not pass, per backend. */
const KNOWN: Record<string, string[]> = {
  reference: BF16,
  wasm: BF16,
  // Two float16 outputs one float16 step (2^-11) off: the WGSL attention kernels' f16 rounding.
  webgpu: [...BF16, "test_attention_4d_causal_fp16", "test_attention_4d_fp16"].sort(),
};

const cases = [...Deno.readDirSync(CASES)].map((e) => e.name).sort();

for (const backend of Object.keys(KNOWN)) {
  Deno.test(`ONNX's cases of the language-model ops of opsets 23-25 on ${backend}`, async () => {
    assert.equal(cases.length, 124);
    const missed: string[] = [];
    for (const name of cases) {
      const r = await runCase(`${CASES}${name}`, backend);
      if (r.status !== "pass") missed.push(name);
      if (r.status !== "pass" && !KNOWN[backend].includes(name)) {
        assert.fail(`${name}: ${r.status}: ${r.reason}`);
      }
    }
    assert.deepEqual(missed, KNOWN[backend]);
  });
}

Deno.test("a decoder block PyTorch exports at opset 23 (Attention with grouped-query heads, RMSNormalization) runs whole on every backend", async () => {
  // `testdata/export_opset23.py`: y recorded with ONNX Runtime 1.30's CPU provider.
  const at = (file: string) => new URL(`../testdata/${file}`, import.meta.url);
  const model = await OnnxModel.load(at("llm_opset23.onnx"));
  const x = new Float32Array((await Deno.readFile(at("llm_opset23.in.x.float32.bin"))).buffer);
  const want = new Float32Array((await Deno.readFile(at("llm_opset23.out.y.float32.bin"))).buffer);
  const scale = Math.max(...want.map(Math.abs));
  for (const backend of ["reference", "wasm", "webgpu"]) {
    using exe = await model.compile({ x: [2, 12, 64] }, { backend, cache: false });
    const ops = exe.plan!.kernels.flatMap((k) => k.ops).join(" ");
    // Attention and RMSNormalization are kiln ops, expanded by fusion (their kernels name them).
    assert.match(ops, /Attention/, backend);
    assert.match(ops, /RMSNormalization/, backend);
    if (backend !== "reference") {
      assert.ok(exe.plan!.kernels.some((k) => k.group?.startsWith("attention")), backend);
    }
    const y = (await exe.run({ x: { data: x, shape: [2, 12, 64], dtype: "f32" } })).y.data;
    let err = 0;
    for (let i = 0; i < want.length; i++) err = Math.max(err, Math.abs(Number(y[i]) - want[i]));
    assert.ok(err / scale < 1e-5, `${backend}: error ${err / scale}`);
  }
  model.dispose();
});

/** One `op` node over float inputs `x0`, `x1`, … of `shapes`, output `y`, at `opset`. */
function node(
  op: string,
  shapes: number[][],
  attribute: { name: string; type: number; i: number }[],
  opset: number,
): OnnxModel {
  const dims = (shape: number[]) => ({ dim: shape.map((n) => ({ dimValue: n })) });
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 10,
    opsetImport: [{ domain: "", version: opset }],
    graph: {
      name: "g",
      node: [{ opType: op, input: shapes.map((_, i) => `x${i}`), output: ["y"], attribute }],
      initializer: [],
      input: shapes.map((shape, i) => ({
        name: `x${i}`,
        type: { tensorType: { elemType: 1, shape: dims(shape) } },
      })),
      output: [{ name: "y", type: { tensorType: { elemType: 1 } } }],
    },
  }));
}

Deno.test("a causal Attention's mask is index arithmetic in the scores' kernel, not a queries × keys constant", async () => {
  // 1100 queries and keys: a constant mask would be 1.21M elements, past what the importer folds.
  const [b, h, t, d] = [1, 1, 1100, 4];
  const shape = [b, h, t, d];
  const model = node(
    "Attention",
    [shape, shape, shape],
    [{ name: "is_causal", type: 2, i: 1 }],
    23,
  );
  const input = (seed: number) => ({
    data: Float32Array.from({ length: b * h * t * d }, (_, i) => Math.sin(i * seed) * 2),
    shape,
    dtype: "f32" as const,
  });
  const inputs = { x0: input(0.37), x1: input(0.11), x2: input(0.53) };
  const shapes = { x0: shape, x1: shape, x2: shape };
  const graph = model.graph(shapes);
  for (const n of graph.nodes.filter((n) => n.op === "Constant")) {
    const size = graph.values[n.outputs[0]].shape.reduce((p, m) => p * m, 1);
    assert.ok(size <= t, `a constant of ${size} elements`);
  }
  using exe = await model.compile(shapes, { backend: "wasm", cache: false });
  // Each query's output: the softmax-weighted values of the keys up to it, in float64.
  const y = (await exe.run(inputs)).y.data;
  for (const i of [0, 1, 550, t - 1]) {
    const s = Array.from({ length: i + 1 }, (_, j) => {
      let dot = 0;
      for (let c = 0; c < d; c++) dot += inputs.x0.data[i * d + c] * inputs.x1.data[j * d + c];
      return dot / Math.sqrt(d);
    });
    const m = Math.max(...s), w = s.map((x) => Math.exp(x - m));
    const sum = w.reduce((p, x) => p + x, 0);
    for (let c = 0; c < d; c++) {
      const want = w.reduce((p, x, j) => p + x * inputs.x2.data[j * d + c], 0) / sum;
      assert.ok(Math.abs(Number(y[i * d + c]) - want) < 1e-4, `query ${i} channel ${c}`);
    }
  }
  model.dispose();
});

Deno.test("the language-model ops refuse what they cannot run with a KilnError that says how to fix it", () => {
  const cases: [string, () => OnnxModel, RegExp][] = [
    [
      "Attention",
      () => node("Attention", [[1, 4, 8], [1, 4, 8], [1, 4, 8]], [], 23),
      /q_num_heads/,
    ],
    [
      "Attention",
      () => node("Attention", [[1, 3, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8]], [], 23),
      /3 query heads over 2 key heads/,
    ],
    [
      "RotaryEmbedding",
      () =>
        node("RotaryEmbedding", [[1, 2, 4, 8], [1, 4, 2], [1, 4, 2]], [
          { name: "rotary_embedding_dim", type: 2, i: 3 },
        ], 23),
      /rotary_embedding_dim 3/,
    ],
    [
      "TensorScatter",
      () => node("TensorScatter", [[2, 3, 8, 4], [2, 3, 9, 4]], [], 24),
      /an update \[2, 3, 9, 4\] into a cache \[2, 3, 8, 4\]/,
    ],
  ];
  for (const [op, make, what] of cases) {
    assert.throws(() => make().graph(), (e: unknown) => {
      assert.ok(e instanceof KilnError, `${op}: ${e}`);
      assert.match(e.message, what);
      assert.match(e.message, /Fix:/);
      return true;
    });
  }
});
