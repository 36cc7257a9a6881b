import assert from "node:assert/strict";
import { KilnError } from "../jit/errors.ts";
import { failingCases } from "./conformance.ts";
import { OnnxModel } from "./model.ts";
import { encodeModel } from "./proto.ts";
import "../mod.ts";

/**
 * One-node models of ONNX Runtime's com.microsoft attention ops (`bench/export_ms_cases.ts`):
 * Attention plain, with a raw 0/1 mask, key lengths, causal with a mask, an attention bias and
 * scale, and qkv_hidden_sizes; MultiHeadAttention with bias and a key padding mask, and plain;
 * EmbedLayerNormalization with segments and a mask (its token counts and sum), and words only.
 * Expected outputs ONNX Runtime Web 1.30's (wasm).
 */
const CASES = new URL("./testdata/onnx_ms_attention/", import.meta.url).pathname;

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: ONNX Runtime's attention contrib ops match ONNX Runtime Web`, async () => {
    assert.deepEqual(await failingCases(CASES, backend, 10), []);
  });
}

Deno.test("Attention with a KV cache or an odd mask is refused with a Fix", async () => {
  const attention = (inputs: string[], shapes: number[][]) =>
    OnnxModel.fromBytes(encodeModel({
      irVersion: 8,
      opsetImport: [{ domain: "", version: 17 }, { domain: "com.microsoft", version: 1 }],
      graph: {
        name: "g",
        node: [{
          opType: "Attention",
          domain: "com.microsoft",
          input: inputs,
          output: ["y"],
          attribute: [{ name: "num_heads", type: 2, i: 2 }],
        }],
        initializer: [],
        input: inputs.filter((n) => n).map((n, i) => ({
          name: n,
          type: {
            tensorType: {
              elemType: n === "mask" ? 6 : 1,
              shape: { dim: shapes[i].map((d) => ({ dimValue: d })) },
            },
          },
        })),
        output: [{ name: "y", type: { tensorType: { elemType: 1 } } }],
      },
    }));
  const feed = (shapes: Record<string, number[]>) =>
    Object.fromEntries(
      Object.entries(shapes).map(([n, shape]) => [n, {
        data: n === "mask"
          ? new Int32Array(shape.reduce((a, b) => a * b))
          : new Float32Array(shape.reduce((a, b) => a * b)),
        shape,
        dtype: n === "mask" ? "i32" as const : "f32" as const,
      }]),
    );
  const cases: [string[], Record<string, number[]>, RegExp][] = [
    [["x", "w", "", "", "past"], { x: [1, 2, 4], w: [4, 12], past: [2, 1, 2, 1, 2] }, /past state/],
    [["x", "w", "", "mask"], { x: [1, 2, 4], w: [4, 12], mask: [3] }, /attention mask of \[3\]/],
  ];
  for (const [inputs, shapes, pattern] of cases) {
    const m = attention(inputs, Object.values(shapes));
    await assert.rejects(
      () => m.run(feed(shapes)),
      (e) => e instanceof KilnError && pattern.test(e.message) && /Fix:/.test(String(e)),
    );
    m.dispose();
  }
});
