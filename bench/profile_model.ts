/**
 * The kernels of one model on WebGPU by device time (timestamp queries), slowest first, with the
 * ops fused into each and their shapes: where a model's time goes. `--wasm`: on the wasm backend
 * instead (each kernel's call timed, all threads).
 *
 *   deno run -A --no-config bench/profile_model.ts MODEL.onnx [NAME=FILE.bin ...] [--top N] [--auto] [--wasm]
 *     [--runs N] [--threads N]
 *
 * Inputs not given are zeros. Runs on Dawn (`KILN_GPU` to choose), kernel cache off; `--auto`
 * compiles under the auto policy instead (placement as `kiln run` without --backend takes it),
 * and prints the run's timing split over ten runs; `--precision f16` compiles under that policy;
 * `--threads N` sizes the wasm backend's threads (default: as `kiln run` takes them).
 */
import { OnnxModel, type Precision, WasmBackend, WebGpuBackend } from "../mod.ts";
import { madeInputs } from "./model_inputs.ts";
import { timingDawnFlags } from "./timed.ts";

const args = [...Deno.args];
const flag = (name: string) => {
  const at = args.indexOf(name);
  return at >= 0 && args.splice(at, 1).length > 0;
};
const auto = flag("--auto"), wasm = flag("--wasm");
const precisionAt = args.indexOf("--precision");
const precision = precisionAt >= 0 ? args.splice(precisionAt, 2)[1] as Precision : "f32";
const topAt = args.indexOf("--top");
const top = topAt >= 0 ? Number(args.splice(topAt, 2)[1]) : 15;
const runsAt = args.indexOf("--runs");
const runs = runsAt >= 0 ? Number(args.splice(runsAt, 2)[1]) : 1;
const threadsAt = args.indexOf("--threads");
const threads = threadsAt >= 0 ? Number(args.splice(threadsAt, 2)[1]) : undefined;
const [path, ...given] = args;
const model = await OnnxModel.load(path);
const files = Object.fromEntries(given.map((g) => g.split("=") as [string, string]));
const inputs = await madeInputs(model.inputs, { files });
const gpu = wasm ? new WasmBackend({ profile: true, threads }) : new WebGpuBackend({
  gpu: Deno.env.get("KILN_GPU") === "navigator" ? "navigator" : "dawn",
  profile: true,
  dawnFlags: timingDawnFlags,
});
const { executable, inputs: feeds } = await model.compileFor(
  inputs,
  auto ? { cache: false, precision } : { backend: gpu, cache: false, precision },
);
if (auto) {
  console.log(`auto placement: ${executable.plan?.schedule.reason}`);
  for (let i = 0; i < 10; i++) {
    const h = executable.run(feeds);
    await h;
    const t = await h.timing();
    console.log(
      `run ${i}: wall ${t.wallMs.toFixed(2)} host ${t.hostMs.toFixed(2)} wait ${
        t.waitMs.toFixed(2)
      } output ${t.outputMs.toFixed(2)}`,
    );
  }
  Deno.exit(0);
}
// Warm: a GPU left idle through the compile clocks down (the H200 to ~400 MHz) and takes about
// a second of work to come back; timed cold, every kernel read 3x its warm time.
for (let i = 0, t = performance.now(); i < 3 || performance.now() - t < 1500; i++) {
  await executable.run(feeds);
}
// `--runs N`: each kernel's median over N profiled runs (a wasm program's thread tuner runs some
// of its early runs on one thread: one run's times may be such a run's).
const samples = new Map<string, number[]>();
let wall = 0, split = { hostMs: 0, waitMs: 0, outputMs: 0 };
for (let r = 0; r < runs; r++) {
  const t0 = performance.now();
  const handle = executable.run(feeds);
  await handle;
  wall = performance.now() - t0;
  split = await handle.timing();
  for (const t of executable.deviceTimes()) {
    samples.set(t.kernel, [...samples.get(t.kernel) ?? [], t.ms]);
  }
}
const median = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1];
const times = [...samples].map(([kernel, ms]) => ({ kernel, ms: median(ms) }));
const kernels = new Map(executable.plan!.kernels.map((k) => [k.name, k]));
const total = times.reduce((s, t) => s + t.ms, 0);
console.log(
  `${path}: ${times.length} kernels, device ${total.toFixed(3)} ms${
    runs > 1 ? ` (medians of ${runs} runs)` : ""
  }, wall ${wall.toFixed(3)} ms ` +
    `(host ${split.hostMs.toFixed(3)}, wait ${split.waitMs.toFixed(3)}, output ${
      split.outputMs.toFixed(3)
    })`,
);
for (const t of times.sort((a, b) => b.ms - a.ms).slice(0, top)) {
  // A fused attention group's kernel stands for several of the plan's (named by its group).
  const k = kernels.get(t.kernel);
  const ops = k
    ? [...new Set(k.ops.map((o) => o.replace(/^node "[^"]*" \(|\)$/g, "")))].join(",")
    : "(a fused group)";
  console.log(
    `${t.ms.toFixed(3).padStart(8)} ms  ${t.kernel.padEnd(22)} ${(k?.pattern ?? "").padEnd(10)} ` +
      `space [${k?.space ?? ""}] reduced [${k?.reduced ?? ""}] ops ${ops.slice(0, 80)}`,
  );
}
gpu.dispose();
