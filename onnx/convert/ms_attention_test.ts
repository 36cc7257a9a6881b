import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { failingCases } from "../../tools/conformance/conformance.ts";
import { testModel, valueInfo } from "../testdata.ts";
import "../../mod.ts";

/**
 * One-node models of ONNX Runtime's com.microsoft attention ops (`bench/export_ms_cases.ts`):
 * Attention plain, with a raw 0/1 mask, key lengths, causal with a mask, an attention bias and
 * scale, qkv_hidden_sizes, and causal after a past (its present too); MultiHeadAttention with
 * bias and a key padding mask, plain, and causal after a past;
 * EmbedLayerNormalization with segments and a mask (its token counts and sum), and words only;
 * GroupQueryAttention's first prompts (padded, packed QKV, a local window with softcap) and
 * decoding steps after a past with rotary embedding (halves, and interleaved pairs of part of
 * each head), a batch of sequences of different lengths decoding together, two new tokens after
 * a past, a valid past shorter than its buffer, a present as long as its past (zeros after the new
 * entry, as ONNX Runtime writes a present of its own); RotaryEmbedding of 3-D input with position ids, of 4-D with an offset, interleaved.
 * Expected outputs ONNX Runtime Web 1.30's (wasm).
 */
const CASES = new URL("../testdata/onnx_ms_attention/", import.meta.url).pathname;

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: ONNX Runtime's attention contrib ops match ONNX Runtime Web`, async () => {
    assert.deepEqual(await failingCases(CASES, backend, 24), []);
  });
}

Deno.test("Attention with a KV cache, an odd mask, or GQA with fewer total tokens than new ones is refused with a Fix", async () => {
  const attention = (inputs: string[], shapes: number[][], op = "Attention") =>
    testModel({
      node: [{
        opType: op,
        domain: "com.microsoft",
        input: inputs,
        output: ["y"],
        attribute: [
          { name: "num_heads", type: 2, i: 2 },
          ...(op === "Attention" ? [] : [{ name: "kv_num_heads", type: 2, i: 1 }]),
        ],
      }],
      initializer: [],
      input: inputs.filter((n) => n).map((n, i) =>
        valueInfo(n, ["mask", "seqlens", "total"].includes(n) ? 6 : 1, shapes[i])
      ),
      output: [valueInfo("y", 1)],
    }, { microsoft: true });
  const feed = (shapes: Record<string, number[]>) =>
    Object.fromEntries(
      Object.entries(shapes).map(([n, shape]) => [n, {
        data: ["mask", "seqlens", "total"].includes(n)
          ? new Int32Array(shape.reduce((a, b) => a * b, 1))
          : new Float32Array(shape.reduce((a, b) => a * b, 1)),
        shape,
        dtype: ["mask", "seqlens", "total"].includes(n) ? "i32" as const : "f32" as const,
      }]),
    );
  const cases: [string[], Record<string, number[]>, RegExp, string?][] = [
    [
      ["x", "w", "", "", "past", "", "seqlens"],
      { x: [1, 2, 4], w: [4, 12], past: [2, 1, 2, 1, 2], seqlens: [1] },
      /shared past buffer/,
    ],
    [["x", "w", "", "mask"], { x: [1, 2, 4], w: [4, 12], mask: [3] }, /attention mask of \[3\]/],
    [
      ["q", "k", "v", "pk", "pv", "seqlens", "total"],
      {
        q: [2, 2, 8],
        k: [2, 2, 4],
        v: [2, 2, 4],
        pk: [2, 1, 3, 4],
        pv: [2, 1, 3, 4],
        seqlens: [2],
        total: [],
      },
      /2 new tokens after 3, batch 2, total 0/,
      "GroupQueryAttention",
    ],
  ];
  for (const [inputs, shapes, pattern, op] of cases) {
    const m = attention(inputs, Object.values(shapes), op);
    await assert.rejects(
      () => m.run(feed(shapes)),
      (e) => e instanceof KilnError && pattern.test(e.message) && /Fix:/.test(String(e)),
    );
    m.dispose();
  }
});

Deno.test("GroupQueryAttention with its past and present in one buffer keeps the past's later entries", async () => {
  const names = ["q", "k", "v", "past_key", "past_value", "seqlens", "total"];
  const shapes = [[1, 1, 32], [1, 1, 16], [1, 1, 16], [1, 2, 5, 8], [1, 2, 5, 8], [1], []];
  const model = (shared: number) =>
    testModel({
      node: [{
        opType: "GroupQueryAttention",
        domain: "com.microsoft",
        input: names,
        output: ["y", "present_key", "present_value"],
        attribute: [
          { name: "num_heads", type: 2, i: 4 },
          { name: "kv_num_heads", type: 2, i: 2 },
          { name: "past_present_share_buffer", type: 2, i: shared },
        ],
      }],
      initializer: [],
      input: names.map((n, i) => valueInfo(n, n === "seqlens" || n === "total" ? 6 : 1, shapes[i])),
      output: ["y", "present_key", "present_value"].map((n) => valueInfo(n, 1)),
    }, { microsoft: true });
  const feeds = Object.fromEntries(names.map((n, i) => {
    const size = shapes[i].reduce((a, b) => a * b, 1);
    if (n === "seqlens" || n === "total") {
      return [n, { data: Int32Array.of(n === "total" ? 5 : 2), shape: shapes[i], dtype: "i32" }];
    }
    return [n, {
      data: Float32Array.from({ length: size }, (_, j) => 1 + j + 100 * i),
      shape: shapes[i],
      dtype: "f32",
    }];
  }));
  const past = feeds.past_key.data as Float32Array, k = feeds.k.data as Float32Array;
  for (const backend of ["reference", "wasm"]) {
    const [own, shared] = await Promise.all([0, 1].map(async (flag) => {
      const { executable, inputs } = await model(flag).compileFor(feeds, { backend, cache: false });
      return await executable.run(inputs);
    }));
    assert.deepEqual(shared.y.data, own.y.data, `${backend}: the same attention`);
    const keys = [own, shared].map((r) => Array.from(r.present_key.data as Float32Array));
    for (let g = 0; g < 2; g++) {
      for (let slot = 0; slot < 5; slot++) {
        const at = (g * 5 + slot) * 8, row = (o: number[]) => o.slice(at, at + 8);
        const want = slot < 2
          ? Array.from(past.slice(at, at + 8))
          : slot === 2
          ? Array.from(k.slice(g * 8, g * 8 + 8))
          : undefined;
        assert.deepEqual(row(keys[0]), want ?? new Array(8).fill(0), `${backend} own ${g} ${slot}`);
        assert.deepEqual(
          row(keys[1]),
          want ?? Array.from(past.slice(at, at + 8)),
          `${backend} shared ${g} ${slot}`,
        );
      }
    }
  }
});
