/**
 * The `kiln` command line — the main job. `kiln run [MODEL.onnx]` compiles and runs a model (the
 * built-in demo MLP when none is given) and summarizes its outputs and timings; `--save DIR`
 * writes each output as raw little-endian data plus `outputs.json`. `kiln explain` shows the
 * fusion and placement plan, `kiln bench` times compile, first run and steady runs per backend,
 * and `kiln info` lists backends, device profiles and the kernel cache.
 *
 * @module
 */
import { execFileSync } from "node:child_process";
import process from "node:process";
import { parseArgs } from "node:util";
import { demoMlp } from "./demo_mlp.ts";
import { allocate, type BoundaryDType, byteSize, type TensorData } from "../jit/ir/dtype.ts";
import {
  compile,
  type CompileOptions,
  defaultBackends,
  type Precision,
  WasmBackend,
} from "../mod.ts";
import { KilnError } from "../jit/support/errors.ts";
import type { Executable, TensorMap } from "../jit/runtime/executable.ts";
import { explain } from "../jit/runtime/explain.ts";
import { watOf } from "./wat.ts";
import type { Graph } from "../jit/ir/graph.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { defaultKernelCache } from "../jit/runtime/kernel_cache.ts";
import { envVar } from "../jit/support/env.ts";
import { rng } from "../jit/support/random.ts";
import { type Shape, sizeOf } from "../jit/ir/shape.ts";
import { VERSION } from "../jit/support/version.ts";
import { OnnxModel } from "../onnx/model.ts";
import { checkBudget, memoryBudget } from "../jit/runtime/budget.ts";
import {
  checkWritableDir,
  checkWritableFile,
  readInputFile,
  saveOutputs,
  writeTextFile,
} from "./files.ts";
import { info } from "./info.ts";
import { generateCommand } from "./generate.ts";
import { HELP } from "./help.ts";
import { progressDisplay, softwareGpu } from "./progress.ts";
import { optionError, pairs, parseShape, readbackNote, runCount, useGpu } from "./args.ts";
import { type OutputSummary, seededNote, summarize } from "./summary.ts";

export type { OutputSummary };

interface Loaded {
  name: string;
  inputs: TensorMap;
  sources: Record<string, string>;
  /**
   * The executable for `inputs` and what to feed it: as `OnnxModel.run` compiles, specialised on
   * the values of inputs that decide a shape (which it then holds, so they are not fed).
   */
  compile(options: CompileOptions): Promise<{ exe: Executable; feeds: TensorMap }>;
  graph(): Graph;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs: number[]): number =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.9))];
const round = (x: number): number => Math.round(x * 1000) / 1000;

/**
 * A run's output arrays by name, for the next run of the same feeds to fill (`into`): a fresh
 * array for each large output costs its pages' first touch, 7-24 ms for GPT-2's 25 MB of logits
 * on the H200's host where the copy itself took 4.6 (`bench/readback_floor.ts --bytes`).
 */
function arraysOf(outputs: TensorMap): Record<string, TensorData> {
  return Object.fromEntries(Object.entries(outputs).map(([k, v]) => [k, v.data]));
}

/** A raw little-endian file's bytes as `dtype` elements (copied into a fresh array). */
function fromBytes(bytes: Uint8Array, dtype: BoundaryDType): TensorData {
  const data = allocate(dtype, bytes.byteLength / byteSize(dtype));
  new Uint8Array(data.buffer).set(bytes);
  return data;
}

function randomData(dtype: BoundaryDType, n: number, seed: number): TensorData {
  const next = rng(seed);
  const data = allocate(dtype, n);
  for (let i = 0; i < n; i++) {
    if (data instanceof BigInt64Array) data[i] = BigInt(Math.floor(next() * 10));
    else if (dtype === "bool") data[i] = next() < 0.5 ? 1 : 0;
    else if (dtype === "f32" || dtype === "f64") data[i] = next() * 2 - 1;
    else if (dtype === "f16") data[i] = 0x3c00;
    else data[i] = Math.floor(next() * 10);
  }
  return data;
}

async function load(
  positionals: readonly string[],
  inputFlags: string[] | undefined,
  shapeFlags: string[] | undefined,
): Promise<Loaded> {
  const [modelPath, extra] = positionals;
  // `x=in.bin` after the model read as a second model once, silently: inputs were then random.
  if (extra !== undefined) {
    throw new KilnError(`One model is read, and "${extra}" is not a flag`, {
      code: "usage",
      fix: extra.includes("=")
        ? `give inputs as --input ${extra} (and shapes as --shape NAME=AxB)`
        : "pass one MODEL.onnx; flags start with --",
    });
  }
  if (!modelPath) {
    if (inputFlags?.length || shapeFlags?.length) {
      throw new KilnError("--input and --shape need a model", {
        code: "usage",
        fix: "pass MODEL.onnx before the flags",
      });
    }
    const demo = demoMlp();
    return {
      name: "demo-mlp",
      inputs: demo.inputs,
      sources: { x: "seeded random" },
      compile: async (o) => ({ exe: await compile(demo.graph, o), feeds: demo.inputs }),
      graph: () => demo.graph,
    };
  }
  const model = await OnnxModel.load(modelPath);
  const files = pairs(inputFlags, "--input");
  const shapes = pairs(shapeFlags, "--shape");
  for (const name of [...files.keys(), ...shapes.keys()]) {
    if (!model.inputs.some((i) => i.name === name)) {
      throw new KilnError(`The model has no input "${name}"`, {
        code: "bad-input",
        fix: `use one of: ${model.inputs.map((i) => i.name).join(", ")}`,
      });
    }
  }
  const inputs: TensorMap = {};
  const sources: Record<string, string> = {};
  for (const [index, info] of model.inputs.entries()) {
    if (info.dtype === "string") {
      throw new KilnError(`Input "${info.name}" is a tensor of strings`, {
        code: "unsupported",
        fix: "kiln run feeds numbers; run string models from code with OnnxModel.runValues",
      });
    }
    const file = files.get(info.name);
    let shape: Shape | undefined;
    if (shapes.has(info.name)) shape = parseShape(shapes.get(info.name)!, info.name);
    else if (info.dims.every((d) => typeof d === "number")) shape = info.dims as number[];
    // Refused before a byte is read or a random value drawn.
    if (shape) checkBudget(shape, info.dtype, `input "${info.name}"`);
    const bytes = file
      ? await readInputFile(file, {
        bytes: shape && sizeOf(shape) * byteSize(info.dtype),
        maxBytes: memoryBudget().maxTensorBytes,
      })
      : undefined;
    if (!shape) {
      const symbolic = info.dims.filter((d) => typeof d === "string");
      const known = info.dims.reduce<number>((p, d) => (typeof d === "number" ? p * d : p), 1);
      const count = bytes ? bytes.byteLength / byteSize(info.dtype) : undefined;
      if (symbolic.length !== 1 || count === undefined || count % known !== 0) {
        throw new KilnError(
          `Input "${info.name}" has symbolic dimensions [${info.dims.join(", ")}]`,
          {
            code: "bad-input",
            fix: `pass --shape ${info.name}=${
              info.dims.map((d) => (typeof d === "string" ? "N" : d)).join("x")
            }`,
          },
        );
      }
      shape = info.dims.map((d) => (typeof d === "string" ? count / known : d));
      checkBudget(shape, info.dtype, `input "${info.name}"`);
    }
    inputs[info.name] = {
      data: bytes
        ? fromBytes(bytes, info.dtype)
        : randomData(info.dtype, sizeOf(shape), 1000 + index),
      shape,
      dtype: info.dtype,
    };
    sources[info.name] = file ?? "seeded random";
  }
  const shapeMap = Object.fromEntries(Object.entries(inputs).map(([k, v]) => [k, v.shape]));
  return {
    name: modelPath,
    inputs,
    sources,
    compile: async (o) => {
      const { executable, inputs: feeds } = await model.compileFor(inputs, o);
      return { exe: executable, feeds };
    },
    graph: () => model.graph(shapeMap),
  };
}

/** The plan drawn by Graphviz (`dot -Tsvg`), or a typed error naming what to install. */
function renderSvg(dot: string): string {
  try {
    return execFileSync("dot", ["-Tsvg"], { input: dot, encoding: "utf8", timeout: 60_000 });
  } catch (e) {
    const missing = (e as { code?: string }).code === "ENOENT";
    throw new KilnError(
      missing
        ? "--svg needs Graphviz's dot, which is not installed"
        : `Graphviz's dot failed: ${(e as Error).message}`,
      {
        code: "unsupported",
        fix: missing
          ? "install Graphviz (apt install graphviz, brew install graphviz), or write --dot FILE"
          : "write --dot FILE and render it yourself",
        cause: e,
      },
    );
  }
}

function compileOptions(
  backend: string | undefined,
  precision?: string,
  narrowF64 = false,
): CompileOptions {
  // compile() checks the precision: an unknown one, or one the backend cannot store, is a
  // KilnError with a Fix.
  const p = {
    ...(precision === undefined ? {} : { precision: precision as Precision }),
    narrowF64,
  };
  return !backend || backend === "auto" ? p : { backend, ...p };
}

function cacheReport() {
  const s = defaultKernelCache().stats();
  return {
    hits: s.hits,
    misses: s.misses,
    diskHits: s.diskHits,
    // Time spent generating kernel code (the whole compile is timings.compileMs).
    codegenMs: round(s.compileMs),
    dir: defaultKernelCache().dir,
  };
}

async function run(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      backend: { type: "string", default: "auto" },
      precision: { type: "string" },
      "narrow-f64": { type: "boolean", default: false },
      runs: { type: "string", default: "5" },
      json: { type: "boolean", default: false },
      explain: { type: "boolean", default: false },
      input: { type: "string", multiple: true },
      shape: { type: "string", multiple: true },
      save: { type: "string" },
      quiet: { type: "boolean", default: false },
    },
    allowPositionals: true,
  });
  const runs = runCount("run", values.runs, 10);
  if (values.save) await checkWritableDir(values.save, "--save");
  const loaded = await load(positionals, values.input, values.shape);
  // The probe acquires a named GPU, which the compile then finds ready: its time is the
  // compile's, as it is under auto (left out, Dawn's compile of BERT-base read 85 ms short).
  const probing = performance.now();
  const eager = await softwareGpu(values.backend);
  const acquireMs = performance.now() - probing;
  const shown = progressDisplay(values.quiet || values.json, { eager });
  const { exe, feeds } = await loaded.compile({
    ...compileOptions(values.backend, values.precision, values["narrow-f64"]),
    onProgress: shown.report,
  }).catch((e) => {
    shown.finish();
    throw e;
  });
  const times: number[] = [];
  let outputs: TensorMap = {};
  // The runs are shown too: a driver may build its pipelines at the first dispatch (llvmpipe
  // took 5.4 s in vit_tiny's first run after a 0.4 s compile).
  for (let i = 0; i < runs; i++) {
    shown.report?.({ phase: "run", done: i, total: runs });
    const t0 = performance.now();
    outputs = await exe.run(feeds, i === 0 ? {} : { into: arraysOf(outputs) });
    times.push(performance.now() - t0);
  }
  shown.finish();
  const summaries = Object.fromEntries(Object.entries(outputs).map(([k, v]) => [k, summarize(v)]));
  if (values.save) {
    for (const [name, path] of await saveOutputs(values.save, outputs)) summaries[name].file = path;
  }
  const plan = await explain(exe);
  const report = {
    model: loaded.name,
    backend: exe.backend.id,
    inputs: Object.fromEntries(
      Object.entries(loaded.inputs).map((
        [k, v],
      ) => [k, { shape: v.shape, dtype: v.dtype, source: loaded.sources[k] }]),
    ),
    outputs: summaries,
    timings: {
      compileMs: round(exe.compileMs + acquireMs),
      runMs: round(times[0]),
      medianRunMs: round(median(times)),
      runs,
    },
    kernels: plan.kernels.map((k) => ({ name: k.name, backend: k.backend, ops: k.ops })),
    cache: cacheReport(),
    ...(values.explain ? { explain: plan.text() } : {}),
  };
  const seeded = seededNote(outputs, loaded.sources);
  if (seeded) console.error(seeded);
  if (values.json) {
    console.log(JSON.stringify(report));
    return 0;
  }
  console.log(`model    ${report.model} on ${report.backend}`);
  for (const [name, s] of Object.entries(summaries)) {
    console.log(
      `output   ${name}: ${s.dtype}[${s.shape.join(", ")}] min ${s.min.toPrecision(4)} max ${
        s.max.toPrecision(4)
      } mean ${s.mean.toPrecision(4)}`,
    );
    console.log(
      `         head ${s.head.map((v) => v.toPrecision(4)).join(" ")}${
        s.file ? `  → ${s.file}` : ""
      }`,
    );
  }
  console.log(
    `compile  ${report.timings.compileMs} ms, ${report.kernels.length} kernel(s); cache ${report.cache.hits} hits, ${report.cache.misses} generated, ${report.cache.diskHits} from disk`,
  );
  console.log(
    `run      first ${report.timings.runMs} ms, median ${report.timings.medianRunMs} ms over ${runs}`,
  );
  const gpu = plan.kernels.some((k) => k.backend === "webgpu")
    ? defaultBackends().get("webgpu")
    : undefined;
  const note = gpu && readbackNote(gpu.capabilities());
  if (note) console.log(note);
  if (values.explain) console.log(plan.text());
  return 0;
}

async function explainCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      backend: { type: "string", default: "auto" },
      json: { type: "boolean", default: false },
      dot: { type: "string" },
      svg: { type: "string" },
      shape: { type: "string", multiple: true },
      wat: { type: "boolean", default: false },
    },
    allowPositionals: true,
  });
  if (values.dot) await checkWritableFile(values.dot, "--dot");
  if (values.svg) await checkWritableFile(values.svg, "--svg");
  const loaded = await load(positionals, undefined, values.shape);
  const { exe } = await loaded.compile(compileOptions(values.backend));
  if (values.wat) {
    console.log(await watOf(exe));
    return 0;
  }
  const e = await explain(exe);
  if (values.dot) await writeTextFile(values.dot, e.dot(), "--dot");
  if (values.svg) await writeTextFile(values.svg, renderSvg(e.dot()), "--svg");
  if (values.json) {
    const { text: _text, dot: _dot, ...data } = e;
    console.log(JSON.stringify({ model: loaded.name, ...data }));
  } else {
    console.log(e.text());
  }
  return 0;
}

async function bench(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      backends: { type: "string" },
      backend: { type: "string" },
      precision: { type: "string" },
      "narrow-f64": { type: "boolean", default: false },
      runs: { type: "string", default: "20" },
      warmup: { type: "string", default: "3" },
      threads: { type: "string" },
      json: { type: "boolean", default: false },
      input: { type: "string", multiple: true },
      shape: { type: "string", multiple: true },
    },
    allowPositionals: true,
  });
  const runs = runCount("bench", values.runs, 20);
  const warmup = values.warmup === "0" ? 0 : runCount("bench", values.warmup, 3, "--warmup");
  const threads = values.threads === undefined
    ? undefined
    : runCount("bench", values.threads, 4, "--threads");
  const listed = values.backends ?? values.backend;
  const ids = listed
    ? listed.split(",")
    : defaultBackends().list().filter((b) => b.codegen).map((b) => b.id);
  for (const id of ids) defaultBackends().get(id);
  const loaded = await load(positionals, values.input, values.shape);
  const tty = !values.json && process.stderr.isTTY === true;
  const total = ids.length * (runs + warmup + 1);
  let done = 0;
  const began = performance.now();
  // A progress bar with an ETA from the pace so far (onnxruntime's perf_test prints progress).
  const progress = (label: string) => {
    if (!tty) return;
    const width = 30, filled = Math.round((done / total) * width);
    const left = ((performance.now() - began) / Math.max(1, done)) * (total - done) / 1000;
    process.stderr.write(
      `\r[${"#".repeat(filled)}${".".repeat(width - filled)}] ${done}/${total} ${label}, ETA ${
        left.toFixed(0)
      } s   `,
    );
  };
  const rows = [];
  // The last backend's outputs, for a note on what seeded inputs gave.
  let latest: Record<string, HostTensor> | undefined;
  for (const id of ids) {
    const t0 = performance.now();
    // --threads sizes the wasm backend's pool (default: one thread per core).
    const backend = threads !== undefined && id === "wasm" ? new WasmBackend({ threads }) : id;
    const { exe, feeds } = await loaded.compile({
      ...compileOptions(undefined, values.precision, values["narrow-f64"]),
      backend,
      cache: false,
    });
    const compileMs = performance.now() - t0;
    const t1 = performance.now();
    // Later runs reuse the arrays of the run before (`into`), as a caller's loop would.
    let last = await exe.run(feeds);
    const firstMs = performance.now() - t1;
    done++;
    progress(id);
    for (let i = 0; i < warmup; i++) {
      last = await exe.run(feeds, { into: arraysOf(last) });
      done++;
      progress(id);
    }
    const times: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t = performance.now();
      last = await exe.run(feeds, { into: arraysOf(last) });
      times.push(performance.now() - t);
      done++;
      progress(id);
    }
    latest = last;
    rows.push({
      backend: id,
      compileMs: round(compileMs),
      firstRunMs: round(firstMs),
      medianMs: round(median(times)),
      p90Ms: round(p90(times)),
      runs,
      warmup,
      ...(threads !== undefined && id === "wasm" ? { threads } : {}),
    });
  }
  if (tty) process.stderr.write("\r" + " ".repeat(70) + "\r");
  const seeded = latest && seededNote(latest, loaded.sources);
  if (seeded) console.error(seeded);
  if (values.json) {
    console.log(JSON.stringify({ model: loaded.name, inputs: loaded.sources, results: rows }));
    return 0;
  }
  const head = ["backend", "compile ms", "first run ms", "median ms", "p90 ms"];
  const table = [
    head,
    ...rows.map((r) => [r.backend, r.compileMs, r.firstRunMs, r.medianMs, r.p90Ms].map(String)),
  ];
  const widths = head.map((_, c) => Math.max(...table.map((r) => r[c].length)));
  console.log(`${loaded.name}, ${runs} runs per backend after ${warmup} warm-up run(s)`);
  for (const r of table) {
    console.log(
      r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join("  "),
    );
  }
  return 0;
}

/** Runs the CLI with `args`; returns the exit code. Errors print their message and `Fix:` hint. */
export async function main(args: string[]): Promise<number> {
  const [command = "help", ...rest] = args;
  // Every command answers --help; --version stands alone or after any command.
  if (command === "--version" || command === "-V" || rest.includes("--version")) {
    console.log(`kiln ${VERSION}`);
    return 0;
  }
  if (rest.includes("--help") || rest.includes("-h")) {
    console.log(HELP);
    return 0;
  }
  try {
    useGpu(rest);
    switch (command) {
      case "run":
        return await run(rest);
      case "explain":
        return await explainCommand(rest);
      case "bench":
        return await bench(rest);
      case "info":
        return await info(rest);
      case "generate":
        return await generateCommand(rest);
      case "help":
      case "--help":
      case "-h":
        console.log(HELP);
        return 0;
      default:
        console.error(
          `kiln: unknown command "${command}". Fix: use one of run, explain, bench, info, generate, help\n\n${HELP}`,
        );
        return 2;
    }
  } catch (e) {
    // Usage errors exit 2, as a shell tool's do; failures of the work itself exit 1.
    if (e instanceof KilnError) {
      console.error(`kiln: ${e.message}`);
      return e.code === "usage" ? 2 : 1;
    }
    if ((e as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")) {
      console.error(optionError(e as { code?: string }, command));
      return 2;
    }
    // Not a failure kiln reports on purpose: still one line with a fix, the stack on request.
    console.error(
      `kiln: unexpected ${(e as Error)?.name ?? "error"}: ${(e as Error)?.message ?? e}. Fix: ${
        envVar("KILN_DEBUG") ? "" : "rerun with KILN_DEBUG=1 for the stack trace and "
      }report it with the command line`,
    );
    if (envVar("KILN_DEBUG")) console.error((e as Error)?.stack);
    return 70;
  }
}

if (import.meta.main) {
  const code = await main(Deno.args);
  Deno.exit(code);
}
