/**
 * What bounds W1 64M in f16 on a GPU: kiln's generated f32 and f16 W1 kernels beside
 * hand-written copies and W1s of the same data, each timed alone (device time from timestamp
 * queries around 100 back-to-back dispatches in one pass; two warm-up passes, then the median of
 * seven). It needs `shader-f16` and `timestamp-query` (the GPU machine's H200 has both):
 *
 *   deno run -A --config bench/deno.json bench/gpu_f16_floor.ts
 *
 * Rows (times go to `bench/REPORT-gpu.md`):
 * - copies of 64M f32 (16 bytes a thread) and of 64M f16 (8 and 16 bytes a thread);
 * - W1 by hand: f32, f16 computed natively (`vec4<f16>` arithmetic, 8 or 16 bytes a thread), and
 *   f16 computed as kiln's f16 is (f32 arithmetic rounded to f16 after each op, as vec4s);
 * - kiln's own W1 kernels (`generateWgsl`), and its f16 kernel without the IEEE guard of its one
 *   division, which is what the guards cost.
 *
 * @module
 */
import { toF16Bits } from "../jit/ir/dtype.ts";
import { applyPrecision } from "../jit/passes/precision.ts";
import { legalize } from "../jit/passes/legalize.ts";
import { fuse } from "../jit/passes/fuse.ts";
import { generateWgsl } from "../shaders/wgsl/codegen.ts";
import { WebGpuBackend } from "../backends/webgpu/webgpu_backend.ts";
import { PassTimer } from "./timed.ts";
import { w1 } from "./workloads.ts";

const N = 64 << 20;
const adapter = await navigator.gpu.requestAdapter();
if (!adapter?.features.has("shader-f16") || !adapter.features.has("timestamp-query")) {
  throw new Error("this probe needs a WebGPU adapter with shader-f16 and timestamp-query");
}
const device = await adapter.requestDevice({
  requiredFeatures: ["timestamp-query", "shader-f16"],
  requiredLimits: {
    maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
    maxBufferSize: adapter.limits.maxBufferSize,
  },
});
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
const buffer = (bytes: number) => device.createBuffer({ size: bytes, usage });
const f32 = { a: buffer(N * 4), b: buffer(N * 4) };
const f16 = { a: buffer(N * 2), b: buffer(N * 2) };
{
  // Values in [-4, 4], the f16 copy rounded from the f32 one (both exact in f16).
  const chunk = 1 << 20;
  const x = new Float32Array(chunk).map((_, i) => Math.round(Math.sin(i) * 1024) / 256);
  const h = Uint16Array.from(x, toF16Bits);
  for (let o = 0; o < N; o += chunk) {
    device.queue.writeBuffer(f32.a, o * 4, x);
    device.queue.writeBuffer(f16.a, o * 2, h);
  }
}

/** W1, `relu(x·1.5 + 0.5)·sigmoid(x) − x²/8`, over `x` of WGSL type `t`. */
const w1Of = (x: string, t: string) =>
  `(max(${x} * ${t}(1.5) + ${t}(0.5), ${t}(0.0)) * (${t}(1.0) / (${t}(1.0) + exp(-${x}))) - ${x} * ${x} / ${t}(8.0))`;
const bindings = (t: string) =>
  `@group(0) @binding(0) var<storage, read> in0: array<${t}>;
@group(0) @binding(1) var<storage, read_write> out0: array<${t}>;`;
/** A kernel of `count` threads, 256 a workgroup, doing `body` at index `i`. */
const kernel = (head: string, count: number, body: string) =>
  `${head}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i < ${count}u) { ${body} }
}`;
// Eight halves from a vec4<u32> and back.
const unpack8 = (
  w: string,
) => [
  `vec4<f16>(bitcast<vec2<f16>>(${w}.x), bitcast<vec2<f16>>(${w}.y))`,
  `vec4<f16>(bitcast<vec2<f16>>(${w}.z), bitcast<vec2<f16>>(${w}.w))`,
];
const pack8 = (lo: string, hi: string) =>
  `vec4<u32>(bitcast<u32>(${lo}.xy), bitcast<u32>(${lo}.zw), bitcast<u32>(${hi}.xy), bitcast<u32>(${hi}.zw))`;
// kiln's f16 semantics by hand: f32 arithmetic, rounded to f16 after each op.
const emulated = `fn r(x: vec4<f32>) -> vec4<f32> { return vec4<f32>(vec4<f16>(x)); }
fn w1h(x: vec4<f32>) -> vec4<f32> {
  let m = r(r(x * 1.5) + 0.5);
  let s = r(vec4<f32>(1.0) / r(1.0 + r(exp(-x))));
  return r(r(max(m, vec4<f32>(0.0)) * s) - r(r(x * x) * 0.125));
}`;

/** kiln's generated W1 kernel under `precision` (f16 stored as 16 bits). */
function kilnW1(precision: "f32" | "f16"): string {
  const graph = applyPrecision(w1(N).graph, precision).graph;
  const [k] = fuse(legalize(graph, new WebGpuBackend())).kernels;
  return generateWgsl(k, { maxInvocations: 256, half: true });
}
const kilnHalf = kilnW1("f16");
const unguarded = kilnHalf.replace(
  /fn k_hdiv\(a: f32, b: f32\) -> f32 \{[^}]*\}[^}]*\}/,
  "fn k_hdiv(a: f32, b: f32) -> f32 { return a / b; }",
);
if (unguarded === kilnHalf) throw new Error("kiln's f16 W1 has no k_hdiv to unguard");

interface Probe {
  readonly name: string;
  readonly code: string;
  /** Threads (each moves one array element of the bindings). */
  readonly threads: number;
  readonly half: boolean;
}
const probes: Probe[] = [
  {
    name: "copy f32, vec4<f32>",
    code: kernel(bindings("vec4<f32>"), N / 4, "out0[i] = in0[i];"),
    threads: N / 4,
    half: false,
  },
  {
    name: "copy f16, vec4<f16> (8 bytes a thread)",
    code: kernel(`enable f16;\n${bindings("vec4<f16>")}`, N / 4, "out0[i] = in0[i];"),
    threads: N / 4,
    half: true,
  },
  {
    name: "copy f16, vec4<u32> (16 bytes a thread)",
    code: kernel(bindings("vec4<u32>"), N / 8, "out0[i] = in0[i];"),
    threads: N / 8,
    half: true,
  },
  {
    name: "W1 f32 by hand",
    code: kernel(
      bindings("vec4<f32>"),
      N / 4,
      `let x = in0[i]; out0[i] = ${w1Of("x", "vec4<f32>")};`,
    ),
    threads: N / 4,
    half: false,
  },
  {
    name: "W1 f16 by hand, native f16 arithmetic, 8 bytes a thread",
    code: kernel(
      `enable f16;\n${bindings("vec4<f16>")}`,
      N / 4,
      `let x = in0[i]; out0[i] = ${w1Of("x", "vec4<f16>")};`,
    ),
    threads: N / 4,
    half: true,
  },
  {
    name: "W1 f16 by hand, native f16 arithmetic, 16 bytes a thread",
    code: kernel(
      `enable f16;\n${bindings("vec4<u32>")}\nfn w1n(x: vec4<f16>) -> vec4<f16> { return ${
        w1Of("x", "vec4<f16>")
      }; }`,
      N / 8,
      `let w = in0[i]; out0[i] = ${pack8(`w1n(${unpack8("w")[0]})`, `w1n(${unpack8("w")[1]})`)};`,
    ),
    threads: N / 8,
    half: true,
  },
  {
    name: "W1 f16 by hand, kiln's rounding after each op, vec4s",
    code: kernel(
      `enable f16;\n${bindings("vec4<f16>")}\n${emulated}`,
      N / 4,
      "out0[i] = vec4<f16>(w1h(vec4<f32>(in0[i])));",
    ),
    threads: N / 4,
    half: true,
  },
  { name: "W1 f32, kiln's kernel", code: kilnW1("f32"), threads: N / 4, half: false },
  { name: "W1 f16, kiln's kernel", code: kilnHalf, threads: N / 4, half: true },
  {
    name: "W1 f16, kiln's kernel without its division's IEEE guard",
    code: unguarded,
    threads: N / 4,
    half: true,
  },
];

const timer = new PassTimer(device);

/** Median device ms of one dispatch of `probe` (see the module doc). */
async function time(probe: Probe): Promise<number> {
  const module = device.createShaderModule({ code: probe.code });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module } });
  const { a, b } = probe.half ? f16 : f32;
  const bind = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: a } }, { binding: 1, resource: { buffer: b } }],
  });
  const groups = probe.threads / 256, x = 32768, y = Math.ceil(groups / x);
  const times: number[] = [];
  for (let run = 0; run < 9; run++) {
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass({ timestampWrites: timer.writes });
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bind);
    for (let i = 0; i < 100; i++) pass.dispatchWorkgroups(x, y);
    pass.end();
    const ms = await timer.submit(encoder) / 100;
    if (run >= 2) times.push(ms);
  }
  return times.sort((p, q) => p - q)[3];
}

const rows: [string, number][] = [];
for (const p of probes) rows.push([p.name, await time(p)]);
const kilnF32 = rows.find(([n]) => n === "W1 f32, kiln's kernel")![1];
console.log(`${adapter.info.vendor} ${adapter.info.device || adapter.info.architecture}`);
console.log("| kernel (64M elements) | device time | ÷ kiln's f32 W1 |");
console.log("| --- | ---: | ---: |");
for (const [name, ms] of rows) {
  console.log(`| ${name} | ${ms.toFixed(4)} ms | ${(ms / kilnF32).toFixed(3)} |`);
}
