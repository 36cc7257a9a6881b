/**
 * Kernels bound by their index arithmetic, as kiln generates them, beside a hand-written floor of
 * the same work and a copy of the same bytes: the f16 patch kernels of ResNet-50's convolutions
 * at batch 8 (stored K-major for the matrix units) and its 3×3 max pool. Device time from
 * timestamp queries around 50 back-to-back dispatches in one pass, after 1.5 s of warm-up
 * passes; the median of seven rounds, µs. Needs `shader-f16` and `timestamp-query` (the H200):
 *
 *   source .device/env.sh && deno run -A --config deno.json bench/index_kernels.ts
 *
 * (the root config, as `bench/gpu_kernels.ts` runs: it loads Dawn's package).
 *
 * Session 67's table in `bench/REPORT-gpu.md` came from its scratch form, with kiln's kernels also
 * generated as they were before (coordinates divided as i32s: the patch kernels took twice as long).
 *
 * @module
 */
import { fuse } from "../jit/passes/fuse.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { dispatchSize, generateWgsl, kernelLayout } from "../shaders/wgsl/codegen.ts";
import { sizeOf } from "../jit/ir/shape.ts";
import type { KernelIR } from "../jit/ir/kernel_ir.ts";
import { machineDawnGpu } from "../backends/webgpu/dawn.ts";
import { PassTimer, timingDawnFlags } from "./timed.ts";

/** A kernel to time: its WGSL, its dispatch and the byte sizes of its bindings in order. */
interface Probe {
  readonly name: string;
  readonly code: string;
  readonly dispatch: readonly [number, number, number];
  readonly buffers: readonly number[];
}

const OPTIONS = { maxInvocations: 256, half: true };

/** A hand-written kernel's dispatch: a thread a point, 256 a workgroup, as kiln's are. */
function grid(threads: number): [number, number, number] {
  return dispatchSize({ kind: "points", workgroup: 256, width: 1, vectors: new Set() }, threads);
}

/** kiln's kernel for `k` as the WebGPU backend generates it. */
function generated(name: string, k: KernelIR): Probe {
  const kept = k.space.filter((_, i) => !k.reduced.includes(i));
  const bytes = (b: { shape: readonly number[]; dtype: string }) =>
    sizeOf(b.shape) * (b.dtype === "f16" ? 2 : 4);
  return {
    name: `${name}, kiln`,
    code: generateWgsl(k, OPTIONS),
    dispatch: dispatchSize(kernelLayout(k, OPTIONS), sizeOf(kept)),
    buffers: [...k.inputs, ...k.outputs].map(bytes),
  };
}

/** The f16 patches of a k×k convolution of `c` channels of h×h (stride `s`, padding `p`). */
function patches(c: number, h: number, k: number, s: number, p: number): Probe[] {
  const b = new GraphBuilder();
  const [x, w] = [b.input("x", [8, c, h, h], "f16"), b.input("w", [64, c, k, k], "f16")];
  b.output("y", b.op("Conv", [x, w], { pads: [p, p, p, p], strides: [s, s] }));
  const [kernel] = fuse(b.build(), { patchesFrom: 1, halfPatches: true }).kernels;
  const name = `f16 patches, ${c} ch. ${h}×${h}, ${k}×${k} stride ${s}`;
  return [generated(name, kernel), handPatches(name, { c, h, k, s, p })];
}

/**
 * The same patches by hand: four consecutive pixels of one tap a thread, u32 arithmetic, the
 * pixels stepped rather than divided again.
 */
function handPatches(
  name: string,
  { c, h, k, s, p }: { c: number; h: number; k: number; s: number; p: number },
): Probe {
  const o = Math.floor((h + 2 * p - k) / s) + 1, pixels = o * o, depth = c * k * k;
  const quads = (8 * depth * pixels) / 4;
  const code = `enable f16;
@group(0) @binding(0) var<storage, read> in0: array<f16>;
@group(0) @binding(1) var<storage, read_write> out0: array<vec4<f16>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = gid.x + gid.y * nwg.x * 256u;
  if (t >= ${quads}u) { return; }
  let r = (t * 4u) / ${pixels}u;
  let d = r % ${depth}u;
  let base = (r / ${depth}u) * ${c * h * h}u + (d / ${k * k}u) * ${h * h}u;
  let kh = (d / ${k}u) % ${k}u;
  let kw = d % ${k}u;
  var oh = ((t * 4u) % ${pixels}u) / ${o}u;
  var ow = ((t * 4u) % ${pixels}u) % ${o}u;
  var v: vec4<f32>;
  for (var i = 0u; i < 4u; i++) {
    let ih = oh * ${s}u + kh - ${p}u;
    let iw = ow * ${s}u + kw - ${p}u;
    let ok = ih < ${h}u && iw < ${h}u;
    v[i] = select(0.0, f32(in0[select(0u, base + ih * ${h}u + iw, ok)]), ok);
    ow += 1u;
    if (ow == ${o}u) { ow = 0u; oh += 1u; }
  }
  out0[t] = vec4<f16>(v);
}`;
  return {
    name: `${name}, by hand`,
    code,
    dispatch: grid(quads),
    buffers: [8 * c * h * h * 2, 8 * depth * pixels * 2],
  };
}

/** ResNet-50's max pool (3×3, stride 2, padding 1) of 64 channels of 112×112 at batch 8. */
function maxPool(dtype: "f16" | "f32"): Probe {
  const b = new GraphBuilder();
  const x = b.input("x", [8, 64, 112, 112], dtype);
  const attrs = { kernel_shape: [3, 3], pads: [1, 1, 1, 1], strides: [2, 2] };
  b.output("y", b.op("MaxPool", [x], attrs));
  return generated(`${dtype} 3×3 max pool, 64 ch. 112×112`, fuse(b.build()).kernels[0]);
}

/** A copy of `bytes` (16 bytes a thread): the bandwidth the patch kernels write at. */
function copy(bytes: number): Probe {
  const quads = bytes / 16;
  return {
    name: `copy of ${(bytes / 2 ** 20).toFixed(1)} MiB`,
    code: `@group(0) @binding(0) var<storage, read> in0: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out0: array<vec4<u32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = gid.x + gid.y * nwg.x * 256u;
  if (t < ${quads}u) { out0[t] = in0[t]; }
}`,
    dispatch: grid(quads),
    buffers: [bytes, bytes],
  };
}

const probes = [
  ...patches(64, 56, 3, 1, 1),
  ...patches(128, 56, 3, 2, 1),
  ...patches(256, 14, 3, 1, 1),
  ...patches(3, 224, 7, 2, 3),
  maxPool("f16"),
  maxPool("f32"),
  copy(8 * 576 * 3136 * 2),
];
const gpu = await machineDawnGpu(timingDawnFlags, false);
const adapter = await gpu.requestAdapter();
if (!adapter?.features.has("shader-f16") || !adapter.features.has("timestamp-query")) {
  throw new Error("this probe needs a WebGPU adapter with shader-f16 and timestamp-query");
}
const device = await adapter.requestDevice({
  requiredFeatures: ["timestamp-query", "shader-f16"],
  requiredLimits: { maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize },
});
const timer = new PassTimer(device);
const ready = probes.map((probe) => {
  const module = device.createShaderModule({ code: probe.code });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module } });
  const entries = probe.buffers.map((bytes, binding) => {
    const size = Math.max(16, Math.ceil(bytes / 16) * 16);
    return {
      binding,
      resource: { buffer: device.createBuffer({ size, usage: GPUBufferUsage.STORAGE }) },
    };
  });
  const bind = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
  return { probe, pipeline, bind };
});

/** Device ms of one dispatch of `r`, over `reps` in one timestamped pass. */
async function time(r: typeof ready[number], reps: number): Promise<number> {
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass({ timestampWrites: timer.writes });
  pass.setPipeline(r.pipeline);
  pass.setBindGroup(0, r.bind);
  for (let i = 0; i < reps; i++) pass.dispatchWorkgroups(...r.probe.dispatch);
  pass.end();
  return await timer.submit(encoder) / reps;
}

for (const start = performance.now(); performance.now() - start < 1500;) {
  for (const r of ready) await time(r, 20);
}
const rounds = ready.map(() => [] as number[]);
for (let round = 0; round < 7; round++) {
  for (const [i, r] of ready.entries()) rounds[i].push(await time(r, 50));
}
console.log("| kernel (batch 8) | device time |\n| --- | ---: |");
for (const [i, r] of ready.entries()) {
  const median = rounds[i].sort((a, b) => a - b)[3];
  console.log(`| ${r.probe.name} | ${(median * 1000).toFixed(1)} µs |`);
}
device.destroy();
