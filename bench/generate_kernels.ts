/**
 * A generation's decode step kernel by kernel: two generations on a profiling backend, then the
 * warm decode step's last run (`Generation.executables`, `deviceTimes()`), beside the time a
 * token took. Kernels are grouped by kind, iteration space and outputs (a layer's products
 * together), largest first; kernels of the same group are one line.
 *
 *   deno run -A bench/generate_kernels.ts MODEL.onnx [--backend wasm|webgpu] [--threads N]
 *     [--prompt 128] [--new 32] [--vocab 151936] [--top 24] [--ops] [--prefill]
 *
 * `--ops`: each group's line names the ops fused into its first kernel. `--prefill`: the warm
 * prefill's kernels instead of the decode step's.
 * The gap between a token's time and its kernels' sum is the host's share: feeds, the caches'
 * copies (wasm), encoding and readback (webgpu). On WebGPU a profiled run times each kernel in a
 * pass of its own and reads the times back, so the GPU idles between runs and its clock drops
 * (the H200 through Dawn: 36 tokens/s profiled against 260 not): there the kernels' times rank
 * them, they do not add up to a step. Dawn's timestamps are not rounded to 65.5 µs
 * (`timingDawnFlags`; set KILN_DAWN_FLAGS, e.g. `backend=opengles` on a machine without Vulkan).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { generate, OnnxModel, WasmBackend, WebGpuBackend } from "../mod.ts";
import { seededPrompt } from "./prompt.ts";
import { timingDawnFlags } from "./timed.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: {
    backend: { type: "string", default: "wasm" },
    threads: { type: "string" },
    prompt: { type: "string", default: "128" },
    new: { type: "string", default: "32" },
    vocab: { type: "string", default: "151936" },
    top: { type: "string", default: "24" },
    ops: { type: "boolean", default: false },
    prefill: { type: "boolean", default: false },
  },
  allowPositionals: true,
});
const path = positionals[0];
if (!path) throw new Error("usage: bench/generate_kernels.ts MODEL.onnx [--backend wasm|webgpu]");
const prompt = seededPrompt(Number(values.prompt), Number(values.vocab));
const threads = values.threads === undefined ? {} : { threads: Number(values.threads) };
const backend = values.backend === "webgpu"
  ? new WebGpuBackend({ profile: true, dawnFlags: timingDawnFlags })
  : new WasmBackend({ profile: true, ...threads });
const model = await OnnxModel.load(path);
let last;
for (let i = 0; i < 2; i++) {
  last = generate(model, prompt, { maxNewTokens: Number(values.new), backend, cache: false });
  await last.collect();
}
const stats = last!.stats!;
const profiled = values.prefill ? last!.executables[0] : last!.executables.at(-1)!;
const times = profiled.deviceTimes();
const kernels = new Map(profiled.plan?.kernels.map((k) => [k.name, k]));
const groups = new Map<string, { count: number; ms: number; ops: string }>();
for (const t of times) {
  // Kernels the plan does not list (a backend's own, as WebGPU's attention) go by name alone.
  const k = kernels.get(t.kernel), kind = t.kernel.replace(/_\d+$/, "");
  const key = k
    ? `${kind} [${k.space.join("x")}] ${k.outputs.length} out${k.blockProduct ? ", packed" : ""}`
    : kind;
  const ops = [...new Set(k?.ops.map((o) => o.replace(/^node "[^"]*" \(|\)$/g, "")))];
  const g = groups.get(key) ?? { count: 0, ms: 0, ops: ops.join(",") };
  groups.set(key, { ...g, count: g.count + 1, ms: g.ms + t.ms });
}
const sum = times.reduce((s, t) => s + t.ms, 0);
const token = stats.decodeMs / Math.max(1, stats.newTokens - 1);
console.log(
  `${values.backend}: ${stats.decodeTokensPerSecond.toFixed(1)} tokens/s warm, ${
    token.toFixed(2)
  } ms a token, prefill ${stats.prefillMs.toFixed(1)} ms; the ${
    values.prefill ? "prefill" : "step"
  }'s ${times.length} kernels ${sum.toFixed(2)} ms`,
);
const top = [...groups].sort((a, b) => b[1].ms - a[1].ms).slice(0, Number(values.top));
for (const [key, g] of top) {
  const ops = values.ops ? `: ${g.ops.slice(0, 100)}` : "";
  console.log(`${g.ms.toFixed(3).padStart(8)} ms ${g.count}× ${key}${ops}`);
}
model.dispose();
backend.dispose();
