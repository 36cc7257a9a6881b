/**
 * Generation speed: prefill and decode tokens per second of `kiln.generate` on one decoder, per
 * backend, for a process's first generation (compiles included) and a warm one after it, with a
 * seeded random prompt, and the model's load time (`loadMs`). One JSON line per backend:
 *
 *   deno run -A bench/generate.ts MODEL.onnx [--backends webgpu,wasm] [--prompt 128] [--new 128]
 *     [--threads N]
 *
 * Run each backend in a process of its own for numbers that do not share a warm-up
 * (bench/generate_device.sh does, on the GPU machine). On webgpu the line also gives the device
 * memory: the pool's peak and its resident (weights') bytes, beside the model file's bytes, for
 * the issue's bound of 1.5× the packed weights plus the KV cache; on every backend the process's
 * resident bytes after both generations (`rssMB`: wasm's memory holds the weights). `--threads`
 * runs wasm on that many threads instead of the backend's own choice.
 */
import { parseArgs } from "node:util";
import { defaultBackends, generate, OnnxModel, WasmBackend, WebGpuBackend } from "../mod.ts";
import { seededPrompt } from "./prompt.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: {
    backends: { type: "string", default: "webgpu" },
    prompt: { type: "string", default: "128" },
    new: { type: "string", default: "128" },
    vocab: { type: "string", default: "1000" },
    threads: { type: "string" },
  },
  allowPositionals: true,
});
const path = positionals[0];
if (!path) throw new Error("usage: bench/generate.ts MODEL.onnx [--backends ...]");
const prompt = seededPrompt(Number(values.prompt), Number(values.vocab));
const loading = performance.now();
const model = await OnnxModel.load(path);
const loadMs = Math.round(performance.now() - loading);
for (const backend of values.backends.split(",")) {
  const runs = [];
  const runner = backend === "wasm" && values.threads
    ? new WasmBackend({ threads: Number(values.threads) })
    : backend;
  for (let i = 0; i < 2; i++) {
    const g = generate(model, prompt, { maxNewTokens: Number(values.new), backend: runner });
    const ids = await g.collect();
    runs.push({ ids: ids.slice(0, 8), ...g.stats });
  }
  const gpu = backend === "webgpu" ? defaultBackends().get("webgpu") : undefined;
  const pool = gpu instanceof WebGpuBackend ? gpu.poolStats() : undefined;
  const mb = (bytes: number) => +(bytes / 1e6).toFixed(1);
  const memory = {
    ...(pool && { peakMB: mb(pool.peakBytes), residentMB: mb(pool.residentBytes) }),
    fileMB: mb((await Deno.stat(path)).size),
    rssMB: mb(Deno.memoryUsage().rss),
  };
  console.log(
    JSON.stringify({ model: path, backend, loadMs, first: runs[0], warm: runs[1], memory }),
  );
  if (runner instanceof WasmBackend) runner.dispose();
}
model.dispose();
