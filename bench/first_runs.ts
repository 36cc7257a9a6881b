/**
 * A model's runs from its compile, each one's wall time: what a harness that times a few runs
 * after a compile sees, where a warm median hides it. On the H200 the GPU's clock decides the
 * first runs of some models (`REPORT-quant.md`, session 63): `--idle MS` runs once (the weights'
 * uploads), idles, then times; `--warm MS` runs for that long first. Logs `nvidia-smi`'s SM clock
 * beside the runs where `--clocks FILE` is given and the tool is there.
 *
 *   deno run -A --config deno.json bench/first_runs.ts MODEL.onnx [--runs N] [--idle MS]
 *     [--warm MS] [--clocks FILE] [--backend webgpu|wasm] [--threads N]
 *
 * On wasm the runs show the thread tuner's runs alone (ResNet-50 b1 on the 16-core host: the
 * fourth, and before session 85 the 38th, each ten runs' worth).
 *
 * Inputs are ones (ids) and sin(i) (floats); WebGPU through Dawn (`KILN_GPU=navigator` for Deno's),
 * kernel cache off.
 */
import { OnnxModel, WasmBackend, WebGpuBackend } from "../mod.ts";
import { madeInputs } from "./model_inputs.ts";
import { median, wallTimes } from "./timed.ts";

const args = [...Deno.args];
const option = (name: string, fallback: string) => {
  const at = args.indexOf(name);
  return at >= 0 ? args.splice(at, 2)[1] : fallback;
};
const runs = Number(option("--runs", "40")), idle = Number(option("--idle", "0"));
const warm = Number(option("--warm", "0")), clocks = option("--clocks", "");
const backendId = option("--backend", "webgpu"), threads = option("--threads", "");
const [path] = args;
const model = await OnnxModel.load(path);
const inputs = await madeInputs(model.inputs, { id: () => 1n, float: Math.sin });
const smi = clocks ? startClocks(clocks) : undefined;
const backend = backendId === "wasm"
  ? new WasmBackend(threads ? { threads: Number(threads) } : {})
  : new WebGpuBackend({
    gpu: Deno.env.get("KILN_GPU") === "navigator" ? "navigator" : "dawn",
  });
const compiled = performance.now();
const { executable, inputs: feeds } = await model.compileFor(inputs, { backend, cache: false });
const compileMs = performance.now() - compiled;
if (idle) {
  await executable.run(feeds);
  await new Promise((r) => setTimeout(r, idle));
}
for (const start = performance.now(); performance.now() - start < warm;) {
  await executable.run(feeds);
}
const walls = await wallTimes(() => executable.run(feeds), runs);
smi?.kill();
console.log(
  `${path.split("/").pop()} on ${backend.id}: compile ${compileMs.toFixed(0)} ms, median ${
    median(walls).toFixed(2)
  } ms; runs ${walls.map((w) => w.toFixed(1)).join(" ")}`,
);
executable.dispose();
backend.dispose();

/** `nvidia-smi` writing the SM clock every 10 ms to `file` (nothing where it is missing). */
function startClocks(file: string): Deno.ChildProcess | undefined {
  try {
    return new Deno.Command("nvidia-smi", {
      args: ["--query-gpu=timestamp,clocks.sm", "--format=csv,noheader", "-lms", "10", "-f", file],
      stdout: "null",
      stderr: "null",
    }).spawn();
  } catch {
    return undefined;
  }
}
