/**
 * Per-step times of several generations in one process: the prefill, the median and slowest
 * decode step of each, and every step's time, so a stall or a warming GPU shows where averages
 * hide it. Compare two trees in one call to the GPU machine (its clock state differs from call
 * to call):
 *
 *   deno run -A bench/generate_steps.ts MODEL.onnx [--backend webgpu] [--runs 3] [--new 64]
 *     [--prompt 128] [--vocab 1000]
 *
 * @module
 */
import { parseArgs } from "node:util";
import { generate, OnnxModel } from "../mod.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: {
    backend: { type: "string", default: "webgpu" },
    runs: { type: "string", default: "3" },
    new: { type: "string", default: "64" },
    prompt: { type: "string", default: "128" },
    vocab: { type: "string", default: "1000" },
  },
  allowPositionals: true,
});
const path = positionals[0];
if (!path) throw new Error("usage: bench/generate_steps.ts MODEL.onnx [--backend ...]");
const model = await OnnxModel.load(path);
const vocab = Number(values.vocab);
const prompt = Array.from({ length: Number(values.prompt) }, (_, i) => (i * 37) % vocab);
for (let run = 0; run < Number(values.runs); run++) {
  const steps: number[] = [];
  const options = {
    maxNewTokens: Number(values.new),
    backend: values.backend,
    cache: false as const,
  };
  let t = performance.now();
  for await (const _ of generate(model, prompt, options)) {
    const now = performance.now();
    steps.push(now - t);
    t = now;
  }
  const decode = steps.slice(1).sort((a, b) => a - b);
  console.log(JSON.stringify({
    run,
    backend: values.backend,
    prefillMs: steps[0],
    medianStepMs: decode[decode.length >> 1],
    slowestStepMs: decode.at(-1),
    stepsMs: steps.map((s) => Math.round(s * 100) / 100),
  }));
}
