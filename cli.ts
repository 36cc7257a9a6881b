/**
 * The `kiln` command line: `kiln info` shows backends and their device profiles; `kiln run`
 * compiles and runs a model (the built-in demo MLP when none is given) and prints a summary of
 * its outputs and timings, or one JSON object with `--json`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { demoMlp } from "./examples/demo_mlp.ts";
import { compile, defaultBackends } from "./jit/compile.ts";
import { explain } from "./jit/explain.ts";
import { defaultKernelCache } from "./jit/kernel_cache.ts";
import { KilnError } from "./jit/errors.ts";
import type { HostTensor } from "./jit/host_tensor.ts";
import { opNames } from "./jit/ops/mod.ts";
import { VERSION } from "./jit/version.ts";

const HELP = `kiln ${VERSION}: a JIT codegen runtime for tensor compute graphs

Usage:
  kiln info [--json]                     backends, device profiles, versions
  kiln run [--backend ID] [--runs N] [--json]
                                         run the built-in demo MLP and summarize its outputs
  kiln explain [--backend ID] [--json] [--dot FILE]
                                         the fusion and placement plan of the demo MLP
  kiln help                              this text
`;

/** Summary statistics of one output. */
export interface OutputSummary {
  /** Shape. */
  shape: readonly number[];
  /** Boundary dtype. */
  dtype: string;
  /** Smallest value. */
  min: number;
  /** Largest value. */
  max: number;
  /** Mean value. */
  mean: number;
  /** The first few values. */
  head: number[];
}

function summarize(t: HostTensor): OutputSummary {
  const values = Array.from(t.data as ArrayLike<number | bigint>, Number);
  const sum = values.reduce((a, b) => a + b, 0);
  return {
    shape: t.shape,
    dtype: t.dtype,
    min: Math.min(...values),
    max: Math.max(...values),
    mean: values.length ? sum / values.length : NaN,
    head: values.slice(0, 6),
  };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const round = (x: number): number => Math.round(x * 1000) / 1000;

async function run(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      backend: { type: "string", default: "reference" },
      runs: { type: "string", default: "5" },
      json: { type: "boolean", default: false },
    },
    allowPositionals: true,
  });
  if (positionals.length) {
    throw new KilnError(`kiln run: model files are not supported yet (got ${positionals[0]})`, {
      code: "unsupported",
      fix: "run without a model to use the built-in demo; ONNX import is being added",
    });
  }
  const runs = Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1) {
    throw new KilnError(`kiln run: --runs must be a positive integer, got ${values.runs}`, {
      code: "bad-input",
      fix: "pass e.g. --runs 10",
    });
  }
  const model = demoMlp();
  const exe = await compile(model.graph, { backend: values.backend });
  const times: number[] = [];
  let outputs: Record<string, HostTensor> = {};
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    outputs = await exe.run(model.inputs);
    times.push(performance.now() - t0);
  }
  const report = {
    model: "demo-mlp",
    backend: exe.backend.id,
    outputs: Object.fromEntries(Object.entries(outputs).map(([k, v]) => [k, summarize(v)])),
    timings: {
      compileMs: round(exe.compileMs),
      runMs: round(times[0]),
      medianRunMs: round(median(times)),
      runs,
    },
    kernels: exe.plan?.kernels.length ?? exe.graph.nodes.length,
    cache: cacheReport(),
  };
  exe.dispose();
  if (values.json) {
    console.log(JSON.stringify(report));
    return 0;
  }
  console.log(`model    ${report.model} on ${report.backend}`);
  for (const [name, s] of Object.entries(report.outputs)) {
    console.log(
      `output   ${name}: ${s.dtype}[${s.shape.join(", ")}] min ${s.min.toPrecision(4)} max ${
        s.max.toPrecision(4)
      } mean ${s.mean.toPrecision(4)}`,
    );
    console.log(`         head ${s.head.map((v) => v.toPrecision(4)).join(" ")}`);
  }
  console.log(
    `compile  ${report.timings.compileMs} ms, ${report.kernels} kernel(s); cache ${report.cache.hits} hits, ${report.cache.misses} generated, ${report.cache.diskHits} from disk`,
  );
  console.log(
    `run      first ${report.timings.runMs} ms, median ${report.timings.medianRunMs} ms over ${runs}`,
  );
  return 0;
}

function cacheReport() {
  const s = defaultKernelCache().stats();
  return {
    hits: s.hits,
    misses: s.misses,
    diskHits: s.diskHits,
    compileMs: round(s.compileMs),
    dir: defaultKernelCache().dir,
  };
}

async function explainCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      backend: { type: "string", default: "reference" },
      json: { type: "boolean", default: false },
      dot: { type: "string" },
    },
  });
  const e = await explain(demoMlp().graph, { backend: values.backend });
  if (values.dot) await Deno.writeTextFile(values.dot, e.dot());
  if (values.json) {
    const { text: _text, dot: _dot, ...data } = e;
    console.log(JSON.stringify({ model: "demo-mlp", ...data }));
  } else {
    console.log(e.text());
  }
  return 0;
}

function info(args: string[]): number {
  const { values } = parseArgs({ args, options: { json: { type: "boolean", default: false } } });
  const backends = defaultBackends().list().map((b) => ({
    id: b.id,
    kind: b.kind,
    version: b.version,
    capabilities: b.capabilities(),
  }));
  const report = {
    kiln: VERSION,
    runtime: runtimeName(),
    ops: opNames().length,
    backends,
    cache: cacheReport(),
  };
  if (values.json) {
    console.log(JSON.stringify(report));
    return 0;
  }
  console.log(`kiln ${report.kiln} on ${report.runtime}, ${report.ops} ops`);
  for (const b of backends) {
    const c = b.capabilities;
    console.log(
      `backend  ${b.id} (${b.kind}, v${b.version}): ${c.name}; threads ${c.threads}, simd ${c.simd}, f16 ${c.f16}`,
    );
  }
  return 0;
}

function runtimeName(): string {
  const g = globalThis as { Deno?: { version: { deno: string } }; process?: { version: string } };
  return g.Deno
    ? `Deno ${g.Deno.version.deno}`
    : g.process
    ? `Node ${g.process.version}`
    : "unknown runtime";
}

/** Runs the CLI with `args`; returns the exit code. Errors print their message and `Fix:` hint. */
export async function main(args: string[]): Promise<number> {
  const [command = "help", ...rest] = args;
  try {
    switch (command) {
      case "run":
        return await run(rest);
      case "info":
        return info(rest);
      case "explain":
        return await explainCommand(rest);
      case "help":
      case "--help":
      case "-h":
        console.log(HELP);
        return 0;
      default:
        console.error(
          `kiln: unknown command "${command}". Fix: use one of run, explain, info, help\n\n${HELP}`,
        );
        return 2;
    }
  } catch (e) {
    if (e instanceof KilnError || (e as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")) {
      console.error(`kiln: ${(e as Error).message}`);
      return 1;
    }
    throw e;
  }
}

if (import.meta.main) {
  const code = await main(Deno.args);
  Deno.exit(code);
}
