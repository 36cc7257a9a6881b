/**
 * Winograd's F(2×2, 3×3) against the direct convolution on wasm, in one process with the runs
 * interleaved: ResNet's 3×3 convolutions of stride 1 (each with a bias and a Relu, batch 1, 32 to
 * 512 channels) or, given a model, the whole model. Direct: `WasmBackend({ winogradChannels:
 * Infinity })`; Winograd: every such convolution of at least `--channels` channels (default: the
 * backend's own choice, 128; the table of convolutions takes 32) and tiles of `--tile` outputs a
 * side (default: the backend's).
 *
 *   deno run -A --config deno.json bench/winograd_convs.ts [MODEL.onnx] [--runs 30] [--threads N]
 *     [--channels N] [--tile 2|4]
 *
 * Prints each form's median and Winograd ÷ direct. Inputs are seeded random (a model's: zeros).
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  compile,
  type Executable,
  type Graph,
  GraphBuilder,
  OnnxModel,
  type TensorMap,
  WasmBackend,
} from "../mod.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { madeInputs } from "./model_inputs.ts";
import { uniform } from "../jit/support/random.ts";
import { interleavedTimes, median } from "./timed.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: {
    runs: { type: "string", default: "30" },
    threads: { type: "string" },
    channels: { type: "string" },
    tile: { type: "string" },
  },
  allowPositionals: true,
});
const runs = Number(values.runs);
const threads = values.threads === undefined ? undefined : Number(values.threads);
const forms = {
  direct: new WasmBackend({ threads, winogradChannels: Infinity }),
  winograd: new WasmBackend({
    threads,
    winogradChannels: Number(values.channels ?? (positionals[0] ? 128 : 32)),
    winogradTile: values.tile === undefined ? undefined : Number(values.tile) as 2 | 4,
  }),
};

/** A 3×3 conv of `c` channels over c×h×h, its bias and a Relu. */
function conv(c: number, h: number): Graph {
  const b = new GraphBuilder();
  const x = b.input("x", [1, c, h, h]);
  const w = b.param("w", [c, c, 3, 3], "f32", uniform(c * c * 9, 1, -0.05, 0.05));
  const bias = b.param("b", [c], "f32", uniform(c, 2));
  b.output("y", b.op("Relu", [b.op("Conv", [x, w, bias], { pads: [1, 1, 1, 1] })]));
  return b.build();
}

/** Each executable's median over `runs` interleaved runs on `feeds`. */
async function timed(executables: Executable[], feeds: TensorMap): Promise<number[]> {
  for (const e of executables) for (let i = 0; i < 3; i++) await e.run(feeds);
  const times = await interleavedTimes(executables.map((e) => () => e.run(feeds)), runs);
  executables.forEach((e) => e.dispose());
  return times.map(median);
}

const report = (label: string, [direct, winograd]: number[]) =>
  console.log(
    `${label}: direct ${direct.toFixed(2)} ms, winograd ${winograd.toFixed(2)} ms, ` +
      `${(winograd / direct).toFixed(2)}x`,
  );
if (positionals[0]) {
  const model = await OnnxModel.load(positionals[0]);
  const inputs = await madeInputs(model.inputs);
  const compiled = await Promise.all(
    Object.values(forms).map((backend) => model.compileFor(inputs, { backend, cache: false })),
  );
  const executables = compiled.map((c) => c.executable);
  report(positionals[0], await timed(executables, compiled[0].inputs));
} else {
  for (const [c, h] of [[32, 112], [64, 56], [128, 28], [256, 14], [512, 7]]) {
    const x: HostTensor = { data: uniform(c * h * h, 3), shape: [1, c, h, h], dtype: "f32" };
    const graph = conv(c, h);
    const executables = await Promise.all(
      Object.values(forms).map((backend) => compile(graph, { backend, cache: false })),
    );
    report(`${c} channels at ${h}x${h}`, await timed(executables, { x }));
  }
}
