/**
 * W1–W6 on the CPU: kiln's wasm backend (the baseline of each group, so `deno bench` prints the
 * peers' ratios to it) and kiln's reference interpreter where it finishes in reasonable time,
 * against TensorFlow.js (cpu, wasm), ONNX Runtime Web (wasm) and jax-js (wasm). Time is from the
 * call until the result is a host typed array; every library's result is checked against float64
 * before it is timed.
 *
 * Run: `deno task bench` (or `deno bench -A bench/cpu_bench.ts`).
 *
 * @module
 */
import { compile } from "../jit/compile.ts";
import { jaxRunner, ortRunner, tfjsRunner } from "./peers.ts";
import { cpuWorkloads, type PeerRun, type Workload } from "./workloads.ts";

const TOLERANCE = 1e-3;

async function checked(w: Workload, name: string, run: PeerRun): Promise<PeerRun | undefined> {
  const err = w.check(await run());
  if (!(err <= TOLERANCE)) {
    console.error(`${w.id}: ${name} is off by ${err}; not timed`);
    return undefined;
  }
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

const slowForReference = new Set(["W1-16M", "W2-1024", "W3-softmax", "W4-layernorm"]);

// `bench:report` measures one library per process and says which; plain `deno bench` runs all.
const only = Deno.env.get("KILN_BENCH_ONLY");
const wanted = (library: string) => !only || only === library;
const workloads = cpuWorkloads();

// jax-js first: its worker pool starts at its first dispatch and fails once other peers loaded.
const jax = new Map<string, PeerRun | undefined>();
for (const w of workloads) {
  if (!wanted("jax-js wasm")) break;
  jax.set(
    w.id,
    await jaxRunner(w).then((r) => (r ? checked(w, "jax-js", r) : undefined)).catch((e) => {
      console.error(`${w.id}: jax-js failed: ${(e as Error).message}`);
      return undefined;
    }),
  );
}

for (const w of workloads) {
  const make: [string, () => Promise<PeerRun | undefined>][] = [
    ["kiln wasm", () => checked(w, "kiln wasm", kiln(w, "wasm"))],
    [
      "kiln reference",
      async () => (slowForReference.has(w.id)
        ? undefined
        : await checked(w, "kiln reference", kiln(w, "reference"))),
    ],
    ["tfjs cpu", async () => checked(w, "tfjs cpu", await tfjsRunner(w, "cpu"))],
    ["tfjs wasm", async () => checked(w, "tfjs wasm", await tfjsRunner(w, "wasm"))],
    ["onnxruntime-web wasm", async () => checked(w, "onnxruntime-web", await ortRunner(w))],
    ["jax-js wasm", () => Promise.resolve(jax.get(w.id))],
  ];
  for (const [name, create] of make) {
    if (!wanted(name)) continue;
    const run = await create();
    if (!run) continue;
    Deno.bench(`${w.id} ${name}`, { group: w.id, baseline: name === "kiln wasm" }, async () => {
      await run();
    });
  }
}
