/**
 * What classes of a model's WebGPU kernels cost a warm run, measured before building the fusion
 * that would take them away: whole runs interleaved with runs that leave out each class's
 * dispatches (their values wrong), all in one process so that every variant sees the same GPU
 * clock. On the H200 separate processes differ by more than such classes cost, and one process's
 * clock moves within seconds (`bench/REPORT-quant.md`, session 65: BERT-base int8's 132
 * quantization kernels took 0.9 ms of a 4 ms run, found this way with a switch in the backend).
 *
 *   deno run -A --config deno.json bench/kernel_classes.ts MODEL.onnx NAME=REGEX [NAME=REGEX ...]
 *     [--also OTHER.onnx] [--rounds 5] [--runs 40]
 *
 * A class is every kernel whose line `PATTERN OP,OP,...` (its pattern, then the op types fused
 * into it, as `kiln explain --json` gives them) matches REGEX, e.g.
 * `finish='^reduce .*DynamicQuantizeLinear'`; a last variant leaves out every class named.
 * `--also` compiles a second model on the same device (a quantized model's f32 form) and times
 * its whole runs among the variants. Prints, per variant, the median of `--runs` runs of each
 * round and the kernels it leaves out. Dawn (`KILN_GPU=navigator`: Deno's WebGPU), kernel cache
 * off; inputs as `bench/first_runs.ts` makes them.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { type Executable, explain, OnnxModel, type TensorMap, WebGpuBackend } from "../mod.ts";
import { machineDawnGpu } from "../backends/webgpu/dawn.ts";
import { madeInputs } from "./model_inputs.ts";
import { median, wallTimes } from "./timed.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  allowPositionals: true,
  options: {
    also: { type: "string" },
    rounds: { type: "string", default: "5" },
    runs: { type: "string", default: "40" },
  },
});
const [path, ...specs] = positionals;
if (!path || specs.length === 0 || specs.some((s) => !s.includes("="))) {
  console.error("usage: kernel_classes.ts MODEL.onnx NAME=REGEX [NAME=REGEX ...] [--also M.onnx]");
  Deno.exit(2);
}
const classes = specs.map((s) => {
  const at = s.indexOf("=");
  return { name: s.slice(0, at), pattern: new RegExp(s.slice(at + 1)) };
});

/** Pipelines (by label: the kernel's name) whose dispatches the next runs leave out. */
let leftOut: ReadonlySet<string> = new Set();
const backend = new WebGpuBackend({ gpu: await skippingGpu((label) => leftOut.has(label)) });
const first = await compiled(path);
const also = values.also ? await compiled(values.also) : undefined;

const kernels = (await explain(first.executable)).kernels;
const variants = classes.map(({ name, pattern }) => ({
  name,
  names: new Set(kernels.filter((k) => pattern.test(line(k))).map((k) => k.name)),
}));
if (variants.length > 1) {
  variants.push({ name: "all", names: new Set(variants.flatMap((v) => [...v.names])) });
}
const results = new Map<string, number[]>();
const timedRuns = (c: Compiled) => wallTimes(() => c.executable.run(c.inputs), Number(values.runs));
// Warm: the first runs after a compile may find the clock at its floor.
for (const start = performance.now(); performance.now() - start < 2000;) {
  await first.executable.run(first.inputs);
}
for (let round = 0; round < Number(values.rounds); round++) {
  for (const v of [{ name: "whole", names: new Set<string>() }, ...variants]) {
    leftOut = v.names;
    await first.executable.run(first.inputs);
    results.set(v.name, [...(results.get(v.name) ?? []), median(await timedRuns(first))]);
  }
  leftOut = new Set();
  if (also) results.set("also", [...(results.get("also") ?? []), median(await timedRuns(also))]);
}
const model = path.split("/").pop();
for (const [name, ms] of results) {
  const count = variants.find((v) => v.name === name)?.names.size;
  console.log(
    `${model} ${name}${count === undefined ? "" : ` (${count} kernels left out)`}: ${
      ms.map((m) => m.toFixed(2)).join(" ")
    } ms, median ${median(ms).toFixed(2)}`,
  );
}
first.executable.dispose();
also?.executable.dispose();
backend.dispose();

interface Compiled {
  readonly executable: Executable;
  readonly inputs: TensorMap;
}

/** `file` compiled on the backend, with inputs made for it. */
async function compiled(file: string): Promise<Compiled> {
  const m = await OnnxModel.load(file);
  const inputs = await madeInputs(m.inputs, { id: () => 1n, float: Math.sin });
  return await m.compileFor(inputs, { backend, cache: false });
}

/** A kernel's class line: its pattern, then the op types fused into it. */
function line(k: { readonly pattern: string; readonly ops: readonly string[] }): string {
  return `${k.pattern} ${k.ops.join(",")}`;
}

/**
 * The GPU the backend asks for its device, whose compute passes skip a dispatch wherever `skip`
 * says so of the pipeline set last (its label). Each object is patched as it is made: the
 * implementation's classes may not take new methods.
 */
async function skippingGpu(skip: (label: string) => boolean): Promise<GPU> {
  const flags = Deno.env.get("KILN_DAWN_FLAGS")?.split(/\s+/).filter(Boolean);
  const gpu = Deno.env.get("KILN_GPU") === "navigator"
    ? navigator.gpu
    : await machineDawnGpu(flags, Deno.env.get("KILN_MATRIX_UNITS") !== "0");
  const requestAdapter = gpu.requestAdapter.bind(gpu);
  return Object.assign(gpu, {
    requestAdapter: async (options?: GPURequestAdapterOptions) => {
      const adapter = await requestAdapter(options);
      if (!adapter) return adapter;
      const requestDevice = adapter.requestDevice.bind(adapter);
      return Object.assign(adapter, {
        requestDevice: async (descriptor?: GPUDeviceDescriptor) =>
          skippingDevice(await requestDevice(descriptor), skip),
      });
    },
  });
}

/** `device`, its command encoders' compute passes skipping dispatches as `skip` says. */
function skippingDevice(device: GPUDevice, skip: (label: string) => boolean): GPUDevice {
  const createCommandEncoder = device.createCommandEncoder.bind(device);
  return Object.assign(device, {
    createCommandEncoder: (descriptor?: GPUCommandEncoderDescriptor) => {
      const encoder = createCommandEncoder(descriptor);
      const beginComputePass = encoder.beginComputePass.bind(encoder);
      return Object.assign(encoder, {
        beginComputePass: (passDescriptor?: GPUComputePassDescriptor) => {
          const pass = beginComputePass(passDescriptor);
          const setPipeline = pass.setPipeline.bind(pass);
          const dispatch = pass.dispatchWorkgroups.bind(pass);
          let label = "";
          return Object.assign(pass, {
            setPipeline: (pipeline: GPUComputePipeline) => {
              label = pipeline.label;
              setPipeline(pipeline);
            },
            dispatchWorkgroups: (x: number, y?: number, z?: number) => {
              if (!skip(label)) dispatch(x, y, z);
            },
          });
        },
      });
    },
  });
}
