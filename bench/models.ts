/**
 * The models benchmark (`deno task bench:models`): every model of `../shared/models/` and
 * `onnx/testdata/` on kiln (wasm, webgpu, auto) and ONNX Runtime Web (wasm with one thread per
 * core, webgpu), each library and model in its own process. Each process reports its first run
 * (load + compile + first result, kiln's kernel cache off; `kiln-warm`: kiln wasm with the cache
 * filled by a process before) and the median and p90 of ≥ 20 runs after 3 warm-ups (fewer, and
 * said so, where one run takes over a second), and checks the output against ONNX Runtime's
 * recorded one. Results go to `bench/models-MACHINE.json`; `--report` turns
 * every such file into `bench/REPORT-models.md` with a chart.
 *
 *   deno run -A bench/models.ts [--machine NAME] [--runners a,b] [--models a,b] [--out FILE]
 *     [--processes N]   (each cell the median over N processes; default 1)
 *     [--gpu dawn|navigator]   (kiln's WebGPU implementation, as KILN_GPU; default navigator)
 *   deno run -A bench/models.ts --report
 *   deno run -A bench/models.ts --placement FILE   (adds kiln auto's plan where FILE lacks it)
 *
 * @module
 */
import { spawnSync } from "node:child_process";
import { availableParallelism, cpus } from "node:os";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { type Executable, explain, KilnError, OnnxModel, type TensorMap } from "../mod.ts";
import { EXPORT_NAMES, MODEL_NAMES, namedModel } from "../onnx/testdata.ts";
import { median } from "./timed.ts";
import {
  type ModelResult,
  report,
  type Results,
  type Runner,
  RUNNERS,
  type WebGpuImpl,
} from "./models_report.ts";

const HERE = new URL(".", import.meta.url).pathname;
/** The model, its inputs and ONNX Runtime's recorded output `y`. */
async function load(name: string) {
  const m = await namedModel(name);
  return { bytes: m.bytes, inputs: m.inputs as TensorMap, y: m.y };
}

/** A function that runs the model once and returns `y`. */
type Run = () => Promise<ArrayLike<number>>;

/** A kiln runner's run, and the backends its plan put the kernels on (see `placementOf`). */
function kilnRunner(
  runner: Runner,
  bytes: Uint8Array,
  inputs: TensorMap,
): { run: Run; placement: () => Promise<string> } {
  const model = OnnxModel.fromBytes(bytes);
  const options = runner === "kiln-auto"
    ? { cache: false as const }
    : runner === "kiln-warm"
    ? { backend: "wasm" }
    : { backend: runner.slice(5), cache: false as const };
  const shapes = Object.fromEntries(Object.entries(inputs).map(([k, t]) => [k, t.shape]));
  return {
    run: async () => (await model.run(inputs, options)).y.data as Float32Array,
    placement: async () => placementOf(await model.compile(shapes, options)),
  };
}

/** Kernels a backend in `exe`'s plan, as `wasm 3` or `wasm 10 + webgpu 2`. */
async function placementOf(exe: Executable): Promise<string> {
  const counts = new Map<string, number>();
  for (const k of (await explain(exe)).kernels) {
    counts.set(k.backend, (counts.get(k.backend) ?? 0) + 1);
  }
  return [...counts].map(([b, n]) => `${b} ${n}`).join(" + ");
}

async function ortRunner(runner: Runner, bytes: Uint8Array, inputs: TensorMap): Promise<Run> {
  // Deno resolves the package's "node" entry, which has no WebGPU: that is its own entry.
  // deno-lint-ignore no-explicit-any
  const ort: any = runner === "ort-webgpu"
    ? await import("npm:onnxruntime-web@1.30.0/webgpu")
    : await import("npm:onnxruntime-web@1.30.0");
  // WebGPU's build spawns its wasm threads from blob URLs, which Deno cannot load: one thread
  // there (its kernels run on the GPU).
  ort.env.wasm.numThreads = runner === "ort-webgpu" ? 1 : navigator.hardwareConcurrency;
  const session = await ort.InferenceSession.create(bytes, {
    executionProviders: [runner === "ort-webgpu" ? "webgpu" : "wasm"],
  });
  const feeds = Object.fromEntries(
    Object.entries(inputs).map((
      [k, t],
    ) => [k, new ort.Tensor(t.dtype === "i64" ? "int64" : "float32", t.data, t.shape)]),
  );
  return async () => (await session.run(feeds)).y.data as Float32Array;
}

/** Child mode: one model on one runner, the result as JSON on stdout. */
async function one(name: string, runner: Runner, runs: number): Promise<ModelResult> {
  const { bytes, inputs, y } = await load(name);
  try {
    const t0 = performance.now();
    const kiln = runner.startsWith("kiln") ? kilnRunner(runner, bytes, inputs) : undefined;
    const run = kiln?.run ?? await ortRunner(runner, bytes, inputs);
    const out = await run();
    const firstMs = performance.now() - t0;
    const scale = Math.max(...Array.from(y, Math.abs));
    let err = 0;
    for (let i = 0; i < y.length; i++) err = Math.max(err, Math.abs(Number(out[i]) - y[i]));
    if (out.length !== y.length) err = Infinity;
    for (let i = 0; i < 3; i++) await run();
    const ms: number[] = [];
    const budget = performance.now() + 20_000;
    while (ms.length < runs && (ms.length < 5 || performance.now() < budget)) {
      const s = performance.now();
      await run();
      ms.push(performance.now() - s);
    }
    const sorted = [...ms].sort((a, b) => a - b);
    return {
      model: name,
      runner,
      firstMs,
      medianMs: median(ms),
      p90Ms: sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.9))],
      runs: ms.length,
      relError: err / scale,
      placement: await kiln?.placement(),
    };
  } catch (e) {
    const message = e instanceof KilnError ? e.message.split("\n")[0] : String(e).split("\n")[0];
    return { model: name, runner, error: message.slice(0, 200) };
  }
}

/**
 * Adds kiln auto's plan to the results in `file` that lack it (files from before results
 * carried it), compiled here as the runner compiles it.
 */
async function addPlacements(file: string): Promise<void> {
  const results: Results = JSON.parse(readFileSync(file, "utf8"));
  for (const [i, r] of results.results.entries()) {
    if (r.runner !== "kiln-auto" || r.error || r.placement) continue;
    const { bytes, inputs } = await load(r.model);
    const placement = await kilnRunner(r.runner, bytes, inputs).placement();
    results.results[i] = { ...r, placement };
    console.log(`${r.model.padEnd(20)} ${placement}`);
  }
  writeFileSync(file, JSON.stringify(results, null, 1) + "\n");
}

/** The GPU adapter's description, if any. */
async function gpuName(): Promise<string | undefined> {
  const adapter = await navigator.gpu?.requestAdapter();
  if (!adapter) return undefined;
  const info = adapter.info;
  return [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(" ");
}

/**
 * One model on one runner in a process of its own; `kiln-warm` in a second process, its kernel
 * cache (a fresh directory) filled by the first.
 */
function inProcess(model: string, runner: Runner, gpu: WebGpuImpl): ModelResult {
  const warm = runner === "kiln-warm";
  const cache = warm ? Deno.makeTempDirSync({ prefix: "kiln-warm-" }) : "off";
  // The GPU driver's shader cache starts empty too, as a new user's does (NVIDIA's and Mesa's
  // otherwise hand a later process the pipelines an earlier runner compiled).
  const shaders = Deno.makeTempDirSync({ prefix: "kiln-shaders-" });
  const spawn = () =>
    spawnSync(
      Deno.execPath(),
      ["run", "-A", new URL(import.meta.url).pathname, "--one", model, "--runner", runner],
      {
        encoding: "utf8",
        timeout: 300_000,
        env: {
          ...process.env,
          KILN_CACHE_DIR: cache,
          KILN_GPU: gpu,
          __GL_SHADER_DISK_CACHE_PATH: shaders,
          MESA_SHADER_CACHE_DIR: shaders,
        },
      },
    );
  if (warm) spawn();
  const child = spawn();
  for (const dir of warm ? [cache, shaders] : [shaders]) Deno.removeSync(dir, { recursive: true });
  const line = child.stdout?.split("\n").find((l) => l.startsWith("{"));
  return line ? JSON.parse(line) : {
    model,
    runner,
    error: `process ended without a result (${child.signal ?? child.status})`,
  };
}

/**
 * The median over processes of each process's figures (one failed process fails the cell):
 * sub-millisecond models vary 2–3× between processes on a small VM.
 */
export function acrossProcesses(rs: readonly ModelResult[]): ModelResult {
  const failed = rs.find((r) => r.error !== undefined);
  if (failed || rs.length === 1) return failed ?? rs[0];
  const mid = (f: (r: ModelResult) => number | undefined) => {
    const xs = rs.map(f).filter((x): x is number => x !== undefined).sort((a, b) => a - b);
    return xs[xs.length >> 1];
  };
  return {
    model: rs[0].model,
    runner: rs[0].runner,
    firstMs: mid((r) => r.firstMs),
    medianMs: mid((r) => r.medianMs),
    p90Ms: mid((r) => r.p90Ms),
    runs: rs.reduce((s, r) => s + (r.runs ?? 0), 0),
    relError: Math.max(...rs.map((r) => r.relError ?? 0)),
    // Processes whose plans differ (auto's trial timed apart) show each.
    placement: [...new Set(rs.map((r) => r.placement))].join(" / ") || undefined,
  };
}

async function measure(
  machine: string,
  runners: Runner[],
  models: string[],
  out: string,
  processes: number,
  gpu: WebGpuImpl,
) {
  const results: ModelResult[] = [];
  for (const model of models) {
    // Round by round, every runner once a round: this VM's speed moves in phases of a second
    // or more (a fixed loop ran 1.9 or 3.4 ms a call for seconds at a time, 2026-11-27), and a
    // runner's processes back to back would share a phase its peers' do not.
    const rounds = Array.from(
      { length: processes },
      () => runners.map((r) => inProcess(model, r, gpu)),
    );
    for (const [i, runner] of runners.entries()) {
      const r = acrossProcesses(rounds.map((round) => round[i]));
      results.push(r);
      console.log(
        `${model.padEnd(20)} ${runner.padEnd(12)} ${
          r.error ??
            `first ${r.firstMs!.toFixed(1)} ms, median ${
              r.medianMs!.toFixed(3)
            } ms (${r.runs} runs), err ${r.relError!.toExponential(1)}`
        }`,
      );
    }
  }
  const file: Results = {
    machine,
    cpu: cpus()[0]?.model ?? "unknown",
    cores: availableParallelism(),
    gpu: await gpuName(),
    webgpu: gpu,
    date: new Date().toISOString().slice(0, 10),
    results,
  };
  writeFileSync(out, JSON.stringify(file, null, 1) + "\n");
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      one: { type: "string" },
      runner: { type: "string" },
      runs: { type: "string", default: "20" },
      machine: { type: "string", default: `${availableParallelism()}-core` },
      runners: { type: "string", default: RUNNERS.join(",") },
      models: { type: "string", default: [...MODEL_NAMES, ...EXPORT_NAMES].join(",") },
      out: { type: "string" },
      report: { type: "boolean", default: false },
      processes: { type: "string", default: "1" },
      placement: { type: "string" },
      gpu: { type: "string", default: "navigator" },
    },
  });
  if (values.one) {
    console.log(
      JSON.stringify(await one(values.one, values.runner as Runner, Number(values.runs))),
    );
    Deno.exit(0);
  } else if (values.placement) {
    await addPlacements(values.placement);
  } else if (values.report) {
    rewriteReport();
  } else {
    const out = values.out ?? `${HERE}results/models-${values.machine}.json`;
    await measure(
      values.machine,
      values.runners.split(",") as Runner[],
      values.models.split(","),
      out,
      Math.max(1, Number(values.processes) || 1),
      values.gpu === "dawn" ? "dawn" : "navigator",
    );
    if (existsSync(out)) rewriteReport();
  }
}

/** `bench/REPORT-models.md` made anew from the results, its session sections kept. */
function rewriteReport(): void {
  const path = `${HERE}REPORT-models.md`;
  writeFileSync(path, report(existsSync(path) ? readFileSync(path, "utf8") : ""));
}
