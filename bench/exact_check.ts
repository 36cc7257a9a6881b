/**
 * The exact precision, checked and timed: random graphs (`jit/testing/random_graph.ts`, every
 * other one with special values among its inputs) and the shared models compiled with
 * `precision: "exact"` on the reference and on each backend named, their outputs compared to the
 * bit (a mismatch at an element whose reference value or any input is subnormal is counted
 * apart: WGSL lets a GPU flush subnormals); then each shared model's median run time in the exact
 * precision and in f32 on each backend (5 runs after one).
 *
 *   deno run -A --config deno.json bench/exact_check.ts [--graphs 500] [--seed 0]
 *     [--backends wasm,webgpu] [--models DIR] [--json FILE]
 *
 * @module
 */
import { compile } from "../mod.ts";
import type { Graph } from "../jit/ir/graph.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { randomGraph, withSpecials } from "../jit/testing/random_graph.ts";
import { importOnnx } from "../onnx/import/import.ts";

const arg = (name: string) => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Deno.args[i + 1] : undefined;
};
const graphs = Number(arg("--graphs") ?? 500);
const seed = Number(arg("--seed") ?? 0);
const backends = (arg("--backends") ?? "wasm,webgpu").split(",");
const modelDir = arg("--models") ?? new URL("../../shared/models/", import.meta.url).pathname;
const MODELS = ["lenet", "mlp", "transformer_block", "vit_tiny", "shufflenet_v2_x0_5"];

const subnormal = (x: number) => x !== 0 && Math.abs(x) < 2 ** -126;

/** Outputs of `graph` on `backend` in `precision`, and the median time of 5 runs after one. */
async function outputs(
  graph: Graph,
  inputs: Record<string, HostTensor>,
  backend: string,
  precision: "exact" | "f32",
  runs = 0,
): Promise<{ out: Record<string, Float32Array>; ms: number }> {
  await using exe = await compile(graph, { backend, precision, cache: false });
  const result = await exe.run(inputs);
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await exe.run(inputs);
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  const out = Object.fromEntries(
    Object.entries(result).map(([k, t]) => [k, Float32Array.from(t.data as Float32Array)]),
  );
  return { out, ms: times[times.length >> 1] ?? NaN };
}

/** Elements of `got` whose bits differ from `want`'s: all, and those near a subnormal. */
function differing(
  want: Record<string, Float32Array>,
  got: Record<string, Float32Array>,
  inputs: Record<string, HostTensor>,
): { all: number; subnormal: number } {
  const anySubnormal = Object.values(inputs).some((t) =>
    Array.from(t.data as Float32Array).some(subnormal)
  );
  let all = 0, near = 0;
  for (const [name, w] of Object.entries(want)) {
    const wb = new Uint32Array(w.buffer), gb = new Uint32Array(got[name].buffer);
    for (let i = 0; i < wb.length; i++) {
      if (wb[i] === gb[i]) continue;
      all++;
      if (anySubnormal || subnormal(w[i])) near++;
    }
  }
  return { all, subnormal: near };
}

const tally = Object.fromEntries(
  backends.map((b) => [b, { graphs: 0, differing: 0, onlySubnormal: 0, errors: [] as string[] }]),
);
for (let s = seed; s < seed + graphs; s++) {
  const c = randomGraph(s);
  const inputs = s % 2 ? withSpecials(c.inputs) : c.inputs;
  const want = (await outputs(c.graph, inputs, "reference", "exact")).out;
  for (const b of backends) {
    const t = tally[b];
    t.graphs++;
    try {
      const d = differing(want, (await outputs(c.graph, inputs, b, "exact")).out, inputs);
      if (d.all > 0 && d.all === d.subnormal) t.onlySubnormal++;
      else if (d.all > 0) t.differing++;
    } catch (e) {
      t.errors.push(`seed ${s}: ${(e as Error).message.slice(0, 160)}`);
    }
  }
}

const models = [];
for (const name of MODELS) {
  // A copy of the shared models may leave the largest out (the GPU machine's carry limit).
  if (!(await Deno.stat(`${modelDir}/${name}.onnx`).catch(() => undefined))) continue;
  const graph = importOnnx(await Deno.readFile(`${modelDir}/${name}.onnx`));
  const input = graph.inputs[0];
  const data = new Float32Array(
    (await Deno.readFile(`${modelDir}/${name}.in.x.float32.bin`)).buffer,
  );
  const inputs = { [input.name]: { data, shape: graph.values[input.value].shape, dtype: "f32" } };
  const want = (await outputs(graph, inputs as Record<string, HostTensor>, "reference", "exact"))
    .out;
  const row: Record<string, unknown> = { model: name };
  for (const b of backends) {
    const exact = await outputs(graph, inputs as Record<string, HostTensor>, b, "exact", 5);
    const f32 = await outputs(graph, inputs as Record<string, HostTensor>, b, "f32", 5);
    row[b] = {
      differing: differing(want, exact.out, inputs as Record<string, HostTensor>).all,
      exactMs: +exact.ms.toFixed(3),
      f32Ms: +f32.ms.toFixed(3),
      cost: +(exact.ms / f32.ms).toFixed(2),
    };
  }
  models.push(row);
}

const report = { date: new Date().toISOString(), graphs, seed, backends: tally, models };
console.log(JSON.stringify(report, null, 1));
const json = arg("--json");
if (json) await Deno.writeTextFile(json, JSON.stringify(report, null, 1) + "\n");
