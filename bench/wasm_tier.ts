/**
 * Does the wasm backend's optimizing tier pay? Each workload (the shared models, a 512 matmul, a
 * softmax and a GELU over 1024 × 1024) compiled on one thread twice: as kiln emits its modules,
 * and with `optimizingTier` at each Binaryen level asked for, run until every module is swapped
 * for Binaryen's; then the programs' runs timed in turns (median of `--runs`, after 30 warm runs
 * each). Prints one JSON object; `bench/REPORT-tier.md` holds the numbers.
 *
 *   deno run -A --config deno.json bench/wasm_tier.ts [--levels 1,2,3] [--runs 40] [--models DIR]
 *
 * @module
 */
import { compile, type Executable, GraphBuilder, WasmBackend } from "../mod.ts";
import type { Graph } from "../jit/ir/graph.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { counterValues } from "../jit/runtime/counters.ts";
import { importOnnx } from "../onnx/import/import.ts";
import { interleavedTimes } from "./timed.ts";

const existsSync = (path: string) => {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
};
const arg = (name: string) => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Deno.args[i + 1] : undefined;
};
const levels = (arg("--levels") ?? "1,2,3").split(",").map(Number);
const runs = Number(arg("--runs") ?? 40);
const modelDir = arg("--models") ?? new URL("../../shared/models/", import.meta.url).pathname;

type Workload = { name: string; graph: Graph; inputs: Record<string, HostTensor> };

function workloads(): Workload[] {
  const out: Workload[] = [];
  for (const name of ["lenet", "mlp", "transformer_block", "vit_tiny", "shufflenet_v2_x0_5"]) {
    // A copy of the shared models may leave the largest out (the GPU machine's carry limit).
    if (!existsSync(`${modelDir}/${name}.onnx`)) continue;
    const graph = importOnnx(Deno.readFileSync(`${modelDir}/${name}.onnx`));
    const input = graph.inputs[0];
    const data = new Float32Array(Deno.readFileSync(`${modelDir}/${name}.in.x.float32.bin`).buffer);
    const shape = graph.values[input.value].shape;
    out.push({ name, graph, inputs: { [input.name]: { data, shape, dtype: "f32" } } });
  }
  const filled = (shape: number[]) => ({
    data: new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(0.5),
    shape,
    dtype: "f32" as const,
  });
  const one = (name: string, op: string, shapes: number[][], attrs = {}) => {
    const b = new GraphBuilder();
    b.output("y", b.op(op, shapes.map((s, i) => b.input(`x${i}`, s)), attrs));
    const inputs = Object.fromEntries(shapes.map((s, i) => [`x${i}`, filled(s)]));
    out.push({ name, graph: b.build(), inputs });
  };
  one("matmul512", "MatMul", [[512, 512], [512, 512]]);
  one("softmax1024", "Softmax", [[1024, 1024]], { axis: -1 });
  one("gelu1M", "Gelu", [[1024, 1024]]);
  return out;
}

/** Median ms of `runs` runs of each program in turns, after 30 warm runs each. */
async function timed(programs: Executable[], inputs: Record<string, HostTensor>) {
  for (const p of programs) for (let i = 0; i < 30; i++) await p.run(inputs);
  const times = await interleavedTimes(programs.map((p) => () => p.run(inputs)), runs);
  return times.map((t) => +t.sort((a, b) => a - b)[t.length >> 1].toFixed(4));
}

// The tier says on stderr when it stops (Binaryen not reachable, say): the bench stops with it.
let stopped: string | undefined;
const warn = console.warn;
console.warn = (...a: unknown[]) => {
  stopped ??= String(a[0]);
  warn(...a);
};

const rows = [];
for (const w of workloads()) {
  const plain = await compile(w.graph, { backend: new WasmBackend({ threads: 1 }), cache: false });
  const tiered: Executable[] = [];
  const swapMs: number[] = [];
  for (const level of levels) {
    const backend = new WasmBackend({ threads: 1, optimizingTier: { after: 1, level } });
    const exe = await compile(w.graph, { backend, cache: false });
    const kernels = exe.plan?.kernels.filter((k) => !k.opaque).length ?? 0;
    const before = counterValues().kiln_wasm_tier_swaps_total, start = performance.now();
    while (counterValues().kiln_wasm_tier_swaps_total - before < kernels) {
      await exe.run(w.inputs);
      await new Promise((r) => setTimeout(r, 5));
      if (stopped) throw new Error(stopped);
      if (performance.now() - start > 120_000) throw new Error(`${w.name}: tier never finished`);
    }
    swapMs.push(Math.round(performance.now() - start));
    tiered.push(exe);
  }
  const [base, ...opt] = await timed([plain, ...tiered], w.inputs);
  rows.push({
    workload: w.name,
    kiln: base,
    ...Object.fromEntries(levels.map((l, i) => [`O${l}`, opt[i]])),
    ...Object.fromEntries(levels.map((l, i) => [`O${l} ÷ kiln`, +(opt[i] / base).toFixed(3)])),
    swapMs: Object.fromEntries(levels.map((l, i) => [`O${l}`, swapMs[i]])),
  });
  for (const p of [plain, ...tiered]) p.dispose();
}
console.log(JSON.stringify({ date: new Date().toISOString(), runs, rows }, null, 1));
