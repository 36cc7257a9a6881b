/**
 * The device's cost of one small dispatch through Dawn: 300 dispatches of a one-line kernel
 * (b = a + 1 over 1024 floats) in one compute pass, submitted once, timed to the readback of
 * their last output and divided by their count. Each row varies one thing a generation's decode
 * step has: dependent dispatches (each reads the previous one's output, so Dawn puts a barrier
 * between them) or independent ones, 1, 16 or 256 workgroups each, and `--pipelines N`
 * alternating among N pipelines (a real step switches pipeline at nearly every dispatch).
 *
 *   deno run -A --config deno.json bench/dispatch_floor.ts [--pipelines 8] [--flags "backend=opengles"]
 *
 * @module
 */
import { parseArgs } from "node:util";
import { dawnGpu } from "../backends/webgpu/dawn.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: { pipelines: { type: "string", default: "1" }, flags: { type: "string", default: "" } },
});
const COUNT = 300, LENGTH = 1024, REPEATS = 4;
const STORAGE = 0x80 | 0x08 | 0x04, STAGING = 0x01 | 0x08;

const gpu = await dawnGpu({ flags: values.flags.split(" ").filter(Boolean) });
// Dawn's GL backend (software adapters) offers only a compatibility adapter.
const adapter = await gpu.requestAdapter() ??
  await gpu.requestAdapter({ featureLevel: "compatibility" } as GPURequestAdapterOptions);
if (!adapter) throw new Error("Dawn offers no adapter here");
const device = await adapter.requestDevice();

const layout = device.createBindGroupLayout({
  entries: [
    { binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: "read-only-storage" } },
    { binding: 1, visibility: GPUShaderStage.COMPUTE, buffer: { type: "storage" } },
  ],
});
/** Pipelines of the same kernel with a different constant each: one layout for all. */
const pipelines = Array.from(
  { length: Number(values.pipelines) },
  (_, i) =>
    device.createComputePipeline({
      layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: {
        module: device.createShaderModule({
          code: `@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < ${LENGTH}u) { b[g.x] = a[g.x] + ${i + 1}.0; }
}`,
        }),
        entryPoint: "main",
      },
    }),
);
const buffer = () => device.createBuffer({ size: LENGTH * 4, usage: STORAGE });
const chain = Array.from({ length: COUNT + 1 }, buffer);
const source = buffer();
const group = (a: GPUBuffer, b: GPUBuffer) =>
  device.createBindGroup({
    layout,
    entries: [{ binding: 0, resource: { buffer: a } }, { binding: 1, resource: { buffer: b } }],
  });
const groups = {
  dependent: chain.slice(0, COUNT).map((a, i) => group(a, chain[i + 1])),
  independent: chain.slice(1).map((b) => group(source, b)),
};
const staging = device.createBuffer({ size: 4, usage: STAGING });

/** Microseconds a dispatch of `kind` with `workgroups` workgroups takes, submitted together. */
async function perDispatch(kind: keyof typeof groups, workgroups: number): Promise<number> {
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  for (let r = 0; r < REPEATS; r++) {
    groups[kind].forEach((g, i) => {
      pass.setPipeline(pipelines[i % pipelines.length]);
      pass.setBindGroup(0, g);
      pass.dispatchWorkgroups(workgroups);
    });
  }
  pass.end();
  encoder.copyBufferToBuffer(chain[COUNT], 0, staging, 0, 4);
  const began = performance.now();
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  staging.unmap();
  return (performance.now() - began) * 1000 / (REPEATS * COUNT);
}

// The first round warms the GPU's clock; the later ones are the measurement.
for (let round = 0; round < 3; round++) {
  const row: Record<string, number> = {};
  for (const kind of ["dependent", "independent"] as const) {
    for (const workgroups of [1, 16, 256]) {
      row[`${kind}, ${workgroups} workgroups`] = +(await perDispatch(kind, workgroups)).toFixed(2);
    }
  }
  console.log(JSON.stringify({ round, pipelines: pipelines.length, microsecondsADispatch: row }));
}
device.destroy();
