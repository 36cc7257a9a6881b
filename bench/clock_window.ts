/**
 * The GPU's clock window through Dawn (`backends/webgpu/clock_wake.ts`): a fixed kernel (1024
 * workgroups of 256 threads, 20000 dependent multiply-adds each: 0.22 ms on a fresh H200) timed
 * fresh, after `--idle` ms of nothing, and after the raise named by `--wake`: `device` (a second
 * device made and released, what the webgpu backend does after a long compile), `adapter` (a
 * second adapter only) or `none`. Run `nvidia-smi --query-gpu=timestamp,clocks.sm --format=csv
 * -lms 50` beside it to see the clock itself.
 *
 *   deno run -A --config deno.json bench/clock_window.ts [--wake device|adapter|none] [--idle 6000]
 *
 * @module
 */
import { parseArgs } from "node:util";
import { dawnGpu } from "../backends/webgpu/dawn.ts";
import { raiseClock } from "../backends/webgpu/clock_wake.ts";
import { median } from "./timed.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    wake: { type: "string", default: "device" },
    idle: { type: "string", default: "6000" },
  },
});
const options: GPURequestAdapterOptions = { powerPreference: "high-performance" };
const gpu = await dawnGpu();
const adapter = await gpu.requestAdapter(options);
if (!adapter) throw new Error("no adapter");
const device = await adapter.requestDevice();
const buffer = device.createBuffer({ size: 1 << 20, usage: GPUBufferUsage.STORAGE });
const code = `@group(0) @binding(0) var<storage, read_write> b: array<f32>;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3u) {
  var x = f32(g.x);
  for (var i = 0u; i < 20000u; i++) { x = fma(x, 0.9999, 0.0001); }
  b[g.x % 262144u] = x;
}`;
// One pipeline of one binding: the kernel's own layout.
const compute = { module: device.createShaderModule({ code }), entryPoint: "main" };
const pipeline = device.createComputePipeline({ layout: "auto", compute });
const entries = [{ binding: 0, resource: { buffer } }];
const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });

/** `n` runs of the kernel, each submitted and waited for: their times in ms. */
async function times(n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(1024);
    pass.end();
    device.queue.submit([encoder.finish()]);
    await device.queue.onSubmittedWorkDone();
    out.push(performance.now() - start);
  }
  return out;
}

const show = (label: string, ms: number[]) =>
  console.log(
    `${label}: median ${median(ms).toFixed(2)} ms (${ms.map((t) => t.toFixed(2)).join(" ")})`,
  );
show("fresh", await times(8));
await new Promise((r) => setTimeout(r, Number(values.idle)));
show(`after ${values.idle} ms idle`, await times(5));
const start = performance.now();
if (values.wake === "device") await raiseClock(gpu, options);
else if (values.wake === "adapter") await gpu.requestAdapter(options);
console.log(`wake ${values.wake}: ${(performance.now() - start).toFixed(1)} ms`);
show("after it", await times(10));
device.destroy();
