/**
 * The CPU workloads (W1–W6, matmuls of 2048 and 4096, the shared reference models) on kiln's
 * wasm backend (the baseline of each group, so `deno bench` prints the peers' ratios to it) and
 * kiln's reference interpreter where it finishes in reasonable time, against TensorFlow.js (cpu,
 * wasm), ONNX Runtime Web (wasm) and jax-js (wasm). Time is from the call until the result is a
 * host typed array; every library's result is checked before it is timed (float64 or ONNX
 * Runtime's recorded outputs). Each library's first run — setup and compile included — goes to
 * stderr as `first-run <workload> <library> <ms>` lines, and each benchmark's median per call as a
 * `median` line (`bench/timed.ts`), which `bench:report` tabulates (`KILN_BENCH_FIRST_ONLY=1` stops
 * after the first runs, for its first runs from a warm kernel cache).
 *
 * Run: `deno task bench:peers` (or `deno bench -A --config bench/deno.json bench/cpu_bench.ts`).
 *
 * @module
 */
import { compile } from "../mod.ts";
import { jaxRunner, ortRunner, tfjsRunner } from "./peers.ts";
import { timed } from "./timed.ts";
import { cpuWorkloads, modelWorkloads, type PeerRun, type Workload } from "./workloads.ts";

const TOLERANCE = 1e-3;

/** Creates a library's runner and runs it once: times that first run, then checks its result. */
async function firstRun(
  w: Workload,
  library: string,
  create: () => Promise<PeerRun | undefined>,
): Promise<PeerRun | undefined> {
  const start = performance.now();
  const run = await create().catch((e) => {
    console.error(`${w.id}: ${library} failed: ${(e as Error).message}`);
    return undefined;
  });
  if (!run) return undefined;
  const out = await run();
  const ms = performance.now() - start;
  const err = w.check(out);
  if (!(err <= TOLERANCE)) {
    console.error(`${w.id}: ${library} is off by ${err}; not timed`);
    return undefined;
  }
  console.error(`first-run\t${w.id}\t${library}\t${ms}`);
  return run;
}

function kiln(w: Workload, backend: string): PeerRun {
  const inputs = Object.fromEntries(
    Object.entries(w.inputs).map(([k, v]) => [k, { ...v, dtype: "f32" as const }]),
  );
  let exe: Awaited<ReturnType<typeof compile>> | undefined;
  return async () => {
    exe ??= await compile(w.graph, { backend });
    return (await exe.run(inputs)).y.data as Float32Array;
  };
}

const tooSlow: Record<string, Set<string>> = {
  "kiln reference": new Set([
    "W1-16M",
    "W2-1024",
    "W2-2048",
    "W2-4096",
    "W3-softmax",
    "W4-layernorm",
  ]),
  "tfjs cpu": new Set(["W2-2048", "W2-4096"]),
};

// `bench:report` measures one library per process and says which; plain `deno bench` runs all.
const only = Deno.env.get("KILN_BENCH_ONLY");
const workloads = [...cpuWorkloads(), ...await modelWorkloads()];
const libraries: [string, (w: Workload) => Promise<PeerRun | undefined>][] = [
  // jax-js first: its worker pool starts at its first dispatch and fails once other peers loaded.
  ["jax-js wasm", jaxRunner],
  ["kiln wasm", (w) => Promise.resolve(kiln(w, "wasm"))],
  ["kiln reference", (w) => Promise.resolve(kiln(w, "reference"))],
  ["tfjs cpu", (w) => tfjsRunner(w, "cpu")],
  ["tfjs wasm", (w) => tfjsRunner(w, "wasm")],
  ["onnxruntime-web wasm", ortRunner],
];

const runs = new Map<string, PeerRun>();
for (const [library, create] of libraries) {
  if (only && only !== library) continue;
  for (const w of workloads) {
    if (tooSlow[library]?.has(w.id)) continue;
    const run = await firstRun(w, library, () => create(w));
    if (run) runs.set(`${w.id} ${library}`, run);
  }
}
// `bench:report` measures first runs from a warm kernel cache alone.
const measure = !Deno.env.get("KILN_BENCH_FIRST_ONLY");
for (const w of measure ? workloads : []) {
  for (const [library] of libraries) {
    const run = runs.get(`${w.id} ${library}`);
    if (!run) continue;
    Deno.bench(
      `${w.id} ${library}`,
      { group: w.id, baseline: library === "kiln wasm", n: w.n, warmup: w.n && 1 },
      timed(w.id, library, run),
    );
  }
}
