import assert from "node:assert/strict";
import { runCase } from "./conformance.ts";
import { OnnxModel } from "./model.ts";

/**
 * ONNX's own node cases of Attention, RMSNormalization and RotaryEmbedding at opset 23 (written
 * by ONNX 1.23.1's case generators on the GPU machine: `onnx/backend/test/case/node/attention.py`
 * and its neighbours, expected values from its reference), run as the conformance runner runs
 * its suite. Their `_expanded` forms (the ops' function bodies) pass too and are not kept here.
 */
const CASES = new URL("./testdata/onnx23/", import.meta.url).pathname;

/**
 * bfloat16 outputs one bfloat16 step (2^-8, relative) from the reference's, whose every op rounds
 * to bfloat16 where kiln computes in f32 and rounds the outputs (the expanded graphs land on the
 * same values); ONNX's tolerance, rtol 1e-3, is under one step.
 */
const BF16 = [
  "test_attention_3d_causal_bf16",
  "test_attention_4d_attn_mask_causal_bf16",
  "test_attention_4d_causal_bf16",
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
  Deno.test(`ONNX's opset-23 cases of Attention, RMSNormalization, RotaryEmbedding on ${backend}`, async () => {
    assert.equal(cases.length, 96);
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
  const at = (file: string) => new URL(`./testdata/${file}`, import.meta.url);
  const model = await OnnxModel.load(at("llm_opset23.onnx"));
  const x = new Float32Array((await Deno.readFile(at("llm_opset23.in.x.float32.bin"))).buffer);
  const want = new Float32Array((await Deno.readFile(at("llm_opset23.out.y.float32.bin"))).buffer);
  const scale = Math.max(...want.map(Math.abs));
  for (const backend of ["reference", "wasm", "webgpu"]) {
    using exe = await model.compile({ x: [2, 12, 64] }, { backend, cache: false });
    const ops = exe.plan!.kernels.flatMap((k) => k.ops).join(" ");
    assert.doesNotMatch(ops, /Attention|RMSNormalization/, `${backend}: lowered`);
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
