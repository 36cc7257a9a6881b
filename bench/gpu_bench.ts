/**
 * GPU benchmarks for the device machine (`deno task bench:gpu`): kiln's webgpu backend against
 * TensorFlow.js (webgpu), ONNX Runtime Web (webgpu) and jax-js (webgpu) on larger sizes, end to
 * end (inputs from the host, result back on the host), plus a plain elementwise copy through
 * kiln as the bandwidth yardstick of the same run. kiln-webgpu is each group's baseline. kiln's
 * device time comes from timestamp queries (a profiled executable: the last of 10 back-to-back repetitions, median of 5 such runs) and goes to
 * stderr as `device-time <workload> <ms>` lines, which `bench/report.ts --gpu` tabulates.
 * Lessons: tfjs-webgpu needs WEBGPU_CPU_FORWARD=false or small ops never touch the GPU; ONNX
 * Runtime's WebGPU needs the `onnxruntime-web/webgpu` entry and `numThreads = 1`, and runs only
 * with `KILN_BENCH_ORT=1`: its whole package exceeds the 64 MiB a GPU run can carry, so
 * `bench/gpu_carry.sh` carries just the files that entry loads.
 *
 * @module
 */
import { WebGpuBackend } from "../backends/webgpu/webgpu_backend.ts";
import { compile } from "../mod.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { uniform } from "../jit/support/random.ts";
import { toOnnx } from "../onnx/export/export.ts";
import { tfjsRun } from "./tfjs_program.ts";
import { timed } from "./timed.ts";
import { cpuWorkloads, type PeerRun, w1, type Workload } from "./workloads.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

/** Not a literal, so the GPU run's module graph (and what must travel with it) leaves ORT out. */
const ORT_WEBGPU = ["npm:onnxruntime-web@1.30.0", "webgpu"].join("/");

function square(n: number): Workload {
  const b = new GraphBuilder();
  b.output("y", b.op("MatMul", [b.input("a", [n, n]), b.input("b", [n, n])]));
  const inputs = {
    a: { data: uniform(n * n, 2), shape: [n, n] },
    b: { data: uniform(n * n, 3), shape: [n, n] },
  };
  return {
    id: `W2-${n}`,
    graph: b.build(),
    inputs,
    check: (out) => {
      let s = 0;
      for (let k = 0; k < n; k++) s += inputs.a.data[k] * inputs.b.data[k * n];
      return Math.abs(out[0] - s);
    },
  };
}

function copy(n: number): Workload {
  const b = new GraphBuilder();
  b.output("y", b.op("Identity", [b.op("Neg", [b.op("Neg", [b.input("x", [n])])])]));
  const x = uniform(n, 1);
  return {
    id: `copy-${n >> 20}M`,
    graph: b.build(),
    inputs: { x: { data: x, shape: [n] } },
    check: (out) => Math.abs(out[7] - x[7]),
  };
}

const workloads = [
  ...cpuWorkloads().filter((w) =>
    ["W1-16M", "W3-softmax", "W4-layernorm", "W2-1024", "W5-mlp", "W6-tiny"].includes(w.id)
  ),
  square(2048),
  square(4096),
  copy(1 << 24),
  // 64M elements: long enough kernels for device times that do not hinge on launch overhead.
  w1(1 << 26),
  copy(1 << 26),
];

async function checked(w: Workload, name: string, run: PeerRun): Promise<PeerRun | undefined> {
  try {
    const err = w.check(await run());
    if (err <= 1e-2) return run;
    console.error(`${w.id}: ${name} is off by ${err}; not timed`);
  } catch (e) {
    console.error(`${w.id}: ${name} failed: ${(e as Error).message}`);
  }
  return undefined;
}

const profiled = new WebGpuBackend({ profile: true });

async function kiln(w: Workload): Promise<PeerRun> {
  const exe = await compile(w.graph, { backend: "webgpu" });
  const inputs = Object.fromEntries(
    Object.entries(w.inputs).map(([k, v]) => [k, { ...v, dtype: "f32" as const }]),
  );
  await profiled.prepare();
  if (profiled.capabilities().timestampQuery) {
    using timed = await compile(w.graph, { backend: profiled });
    // Timed as the last of 10 repetitions in one submission: between end-to-end runs the H200
    // drops its SM clock to 345 MHz (1980 MHz under load), and a matmul's device time follows
    // the clock (5.3 ms at full clock, 30.8 ms after three idle seconds, in one process).
    const sums: number[] = [];
    for (let i = 0; i < 6; i++) {
      await timed.run(inputs, { repeat: 10 });
      if (i) sums.push(timed.deviceTimes().reduce((s, t) => s + t.ms, 0));
    }
    sums.sort((a, b) => a - b);
    console.error(`device-time\t${w.id}\t${sums[2]}`);
  }
  return async () => (await exe.run(inputs)).y.data as Float32Array;
}

async function tfjsWebgpu(w: Workload): Promise<PeerRun> {
  const tf: Any = await import("npm:@tensorflow/tfjs-core@4.22.0");
  await import("npm:@tensorflow/tfjs-backend-webgpu@4.22.0");
  tf.env().set("WEBGPU_CPU_FORWARD", false);
  await tf.setBackend("webgpu");
  return tfjsRun(tf, w);
}

async function ortWebgpu(w: Workload): Promise<PeerRun | undefined> {
  // Seconds per 16M-element run here; at 64M its runs alone would outlast a GPU command.
  if (Object.values(w.inputs).some((t) => t.data.length > 1 << 24)) return undefined;
  const ort: Any = await import(ORT_WEBGPU);
  // Deno looks like Node to ORT, whose worker-thread pool then fails to start.
  ort.env.wasm.numThreads = 1;
  const session = await ort.InferenceSession.create(toOnnx(w.graph), {
    executionProviders: ["webgpu"],
  });
  const feeds = Object.fromEntries(
    Object.entries(w.inputs).map(([k, v]) => [k, new ort.Tensor("float32", v.data, v.shape)]),
  );
  return async () => (await (await session.run(feeds)).y.getData()) as Float32Array;
}

async function jaxWebgpu(w: Workload): Promise<PeerRun | undefined> {
  const jax: Any = await import("npm:@jax-js/jax@0.1.25");
  await jax.init();
  jax.defaultDevice("webgpu");
  const np = jax.numpy, nn = jax.nn;
  const f = ({
    W1: (x: Any) =>
      np.subtract(
        np.multiply(nn.relu(np.add(np.multiply(x.ref, 1.5), 0.5)), nn.sigmoid(x.ref)),
        np.divide(np.multiply(x.ref, x), 8),
      ),
    W2: (a: Any, b: Any) => np.matmul(a, b),
    W3: (x: Any) => nn.softmax(x, -1),
  } as Record<string, (...a: Any[]) => Any>)[w.id.slice(0, 2)];
  if (!f) return undefined;
  const jitted = jax.jit(f);
  const names = Object.keys(w.inputs);
  return async () =>
    await jitted(...names.map((k) => np.array(w.inputs[k].data).reshape(w.inputs[k].shape))).data();
}

// `bench/report.ts --gpu` measures one library per process and says which.
const only = Deno.env.get("KILN_BENCH_ONLY");

for (const w of workloads) {
  const heavy = w.id === "W2-2048" || w.id === "W2-4096" || w.id.startsWith("W1") ||
    w.id.startsWith("copy");
  const options = heavy ? { n: 5, warmup: 1 } : { n: 20, warmup: 2 };
  // Set up one library at a time (they share the device); a failure skips that library only.
  const setups: [string, () => Promise<PeerRun | undefined>][] = [
    ["kiln webgpu", async () => checked(w, "kiln webgpu", await kiln(w))],
    ["tfjs webgpu", async () => checked(w, "tfjs webgpu", await tfjsWebgpu(w))],
    ["onnxruntime-web webgpu", async () => {
      if (!Deno.env.get("KILN_BENCH_ORT")) {
        throw new Error(
          "skipped: set KILN_BENCH_ORT=1 (on the GPU machine, after bench/gpu_carry.sh)",
        );
      }
      const r = await ortWebgpu(w);
      return r ? checked(w, "ort webgpu", r) : undefined;
    }],
    ["jax-js webgpu", async () => {
      const r = await jaxWebgpu(w);
      return r ? checked(w, "jax-js webgpu", r) : undefined;
    }],
  ];
  const runners: [string, Promise<PeerRun | undefined>][] = [];
  for (const [name, setup] of setups) {
    if (only && only !== name) continue;
    runners.push([
      name,
      Promise.resolve(
        await setup().catch((
          e,
        ) => (console.error(`${w.id}: ${name} failed: ${(e as Error).message}`), undefined)),
      ),
    ]);
  }
  for (const [name, pending] of runners) {
    const run = await pending;
    if (!run) continue;
    Deno.bench(
      `${w.id} ${name}`,
      { group: w.id, baseline: name === "kiln webgpu", ...options },
      timed(w.id, name, run),
    );
  }
}
