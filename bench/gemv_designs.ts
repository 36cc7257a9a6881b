/**
 * The design space of a one-row 4-bit block product (blocks of 32, f32 scale and zero tables), as
 * hand-written WGSL through Dawn: the sweep that chose `shaders/wgsl/block_product.ts`'s design.
 * Each variant is timed as repeated dependent dispatches in one pass (as a decode step runs them,
 * at least 60 ms a timing, best of three) and checked against the CPU. The variants: rows (outputs)
 * a thread group computes together `r`, threads a row `t`, workgroup size `wg`, the nibbles
 * converted by `i2f` or by the exponent trick (`magic`), A read from memory, staged whole
 * (`ashared`) or a chunk at a time with padding (`pad`), the tables as one vec2 (`st2`).
 *
 *   deno run -A --config deno.json bench/gemv_designs.ts [896x151936] [--persistent | --cvt]
 *
 * `LAB_FLAGS` passes Dawn's flags (`backend=opengles` on a machine without Vulkan).
 *
 * @module
 */
import { dawnGpu } from "../backends/webgpu/dawn.ts";
const STORAGE = 0x80 | 0x08 | 0x04, STAGING = 0x01 | 0x08;
const gpu = await dawnGpu({ flags: (Deno.env.get("LAB_FLAGS") ?? "").split(" ").filter(Boolean) });
const adapter = await gpu.requestAdapter() ??
  await gpu.requestAdapter({ featureLevel: "compatibility" } as GPURequestAdapterOptions);
if (!adapter) throw new Error("no adapter");
const sub = adapter.features.has("subgroups");
const device = await adapter.requestDevice({
  requiredFeatures: sub ? ["subgroups" as GPUFeatureName] : [],
  requiredLimits: {
    maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
    maxComputeWorkgroupSizeX: 256,
    maxComputeInvocationsPerWorkgroup: 256,
    maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
    maxBufferSize: adapter.limits.maxBufferSize,
  },
});

interface V {
  r: number;
  t: number;
  wg: number;
  /**
   * Nibbles to f32: `i2f` converts, `magic` ORs them into 2^23's mantissa and subtracts 2^23,
   * `fold` subtracts 2^23 plus the zero point at once (no Σa term), `mask` as `fold` but leaves
   * each nibble in place (A staged over 16^i; pad only), `none` reads the words and
   * converts nothing (wrong sums: the access pattern's own ceiling).
   */
  cvt: "i2f" | "magic" | "fold" | "mask" | "none";
  ash: boolean;
  pad?: boolean;
  st2?: boolean;
  /** Persistent: this many workgroups, each staging A once and looping over its row groups. */
  grid?: number;
  /** Zero points packed 8 to a u32 word (the model's nibbles) rather than one f32 a block. */
  zp?: boolean;
  /** Persistent with blocks ≤ t: the next row group's words loaded before this one's sums combine. */
  pipe?: boolean;
}

function wgsl(k: number, n: number, v: V): string {
  const blocks = k / 32, groups = v.wg / v.t;
  const L: string[] = [];
  if (sub) L.push("enable subgroups;");
  L.push(`@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> W: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> S: array<f32>;
@group(0) @binding(3) var<storage, read> Z: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;`);
  if (v.ash) L.push(`var<workgroup> sa: array<vec4<f32>, ${k / 4}>;`);
  if (v.pad) L.push(`var<workgroup> sp: array<vec4<f32>, ${v.t * 9}>;`);
  if (v.st2) L.push(`@group(0) @binding(5) var<storage, read> SZ: array<vec2<f32>>;`);
  if (!sub || v.t > 32) L.push(`var<workgroup> sh: array<f32, ${v.wg}>;`);
  const nib = (w: string, s: number) => nibbles(v, w, s);
  L.push(`@compute @workgroup_size(${v.wg})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let lane = lid.x % ${v.t}u;
  let group = (wid.x + wid.y * nwg.x) * ${groups}u + lid.x / ${v.t}u;
  let row0 = group * ${v.r}u;`);
  if (v.ash) {
    L.push(`  for (var i = lid.x; i < ${k / 4}u; i += ${v.wg}u) { sa[i] = A[i]; }
  workgroupBarrier();`);
  }
  const a = (i: string) => (v.ash ? `sa[${i}]` : `A[${i}]`);
  for (let r = 0; r < v.r; r++) {
    L.push(`  var acc${r} = 0.0; let rw${r} = min(row0 + ${r}u, ${n - 1}u) * ${blocks}u;`);
  }
  if (v.pad) {
    L.push(`  for (var c = 0u; c < ${blocks}u; c += ${v.t}u) {
    workgroupBarrier();
    for (var i = lid.x; i < ${
      v.t * 8
    }u; i += ${v.wg}u) { let q = c * 8u + i; sp[(i / 8u) * 9u + i % 8u] = select(vec4<f32>(0.0), A[min(q, ${
      k / 4 - 1
    }u)]${v.cvt === "mask" ? " * vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625)" : ""}, q < ${
      k / 4
    }u); }
    workgroupBarrier();
    let b = c + lane;
    if (b < ${blocks}u) {`);
    for (let j = 0; j < 8; j++) L.push(`    let a${j} = sp[lane * 9u + ${j}u];`);
  } else {
    L.push(`  for (var b = lane; b < ${blocks}u; b += ${v.t}u) {`);
    for (let j = 0; j < 8; j++) L.push(`    let a${j} = ${a(`b * 8u + ${j}u`)};`);
  }
  L.push(`    let asum = dot((a0 + a1) + (a2 + a3) + (a4 + a5) + (a6 + a7), vec4<f32>(1.0));`);
  for (let r = 0; r < v.r; r++) L.push(`    let w${r} = W[rw${r} + b];`);
  for (let r = 0; r < v.r; r++) {
    const terms = [];
    for (let j = 0; j < 8; j++) {
      terms.push(`dot(${nib(`w${r}.${"xyzw"[j >> 1]}`, (j & 1) * 16)}, a${j})`);
    }
    const [sc, zc] = v.st2
      ? [`SZ[rw${r} + b].x`, `SZ[rw${r} + b].y`]
      : [`S[rw${r} + b]`, `Z[rw${r} + b]`];
    const sum = (ts: string[]) => `(${ts.slice(0, 4).join(" + ")}) + (${ts.slice(4).join(" + ")})`;
    if (v.cvt === "none") {
      L.push(`    acc${r} += ${sc} * ${zc} * f32(w${r}.x ^ w${r}.y ^ w${r}.z ^ w${r}.w) * asum;`);
    } else if (v.cvt === "mask") {
      // Value i of four at bit 4i stays there: 2^23 + q·16^i, less 2^23 + z·16^i, times A's
      // element over 16^i (staged so): one mask-or, subtraction and fma a value, a shift a word.
      L.push(`    let c${r} = vec4<f32>(8388608.0) + ${zc} * vec4<f32>(1.0, 16.0, 256.0, 4096.0);`);
      const masked = [...Array(8).keys()].map((j) => {
        const word = `w${r}.${"xyzw"[j >> 1]}`, half = j & 1 ? `(${word} >> 16u)` : word;
        return `dot(bitcast<vec4<f32>>((vec4<u32>(${half}) & vec4<u32>(0xfu, 0xf0u, 0xf00u, 0xf000u)) | vec4<u32>(0x4b000000u)) - c${r}, a${j})`;
      });
      L.push(`    acc${r} += ${sc} * (${sum(masked)});`);
    } else if (v.cvt === "fold") {
      L.push(`    let c${r} = vec4<f32>(8388608.0 + ${zc});`);
      const folded = [...Array(8).keys()].map((j) =>
        `dot(${nibbles(v, `w${r}.${"xyzw"[j >> 1]}`, (j & 1) * 16, true)} - c${r}, a${j})`
      );
      L.push(`    acc${r} += ${sc} * (${sum(folded)});`);
    } else {
      L.push(`    acc${r} += ${sc} * (${sum(terms)} - ${zc} * asum);`);
    }
  }
  L.push(v.pad ? "  } }" : "  }");
  for (let r = 0; r < v.r; r++) {
    L.push(...combined(v, `acc${r}`, "  "));
    L.push(`  if (lane == 0u && row0 + ${r}u < ${n}u) { Y[row0 + ${r}u] = acc${r}; }`);
  }
  L.push("}");
  return L.join("\n");
}

/**
 * A nibble-to-f32 conversion of word `w`'s values from bit `s` (see `V.cvt`); `raw`, the magic
 * form without its subtraction of 2^23.
 */
function nibbles(v: V, w: string, s: number, raw = false): string {
  const shifts = `vec4<u32>(${s}u, ${s + 4}u, ${s + 8}u, ${s + 12}u)`;
  const values = `((vec4<u32>(${w}) >> ${shifts}) & vec4<u32>(15u))`;
  const magic = `bitcast<vec4<f32>>(${values} | vec4<u32>(0x4b000000u))`;
  if (raw) return magic;
  return v.cvt === "i2f" || v.cvt === "none"
    ? `vec4<f32>${values}`
    : `(${magic} - vec4<f32>(8388608.0))`;
}

/**
 * Lines summing `acc` over a thread group's `v.t` lanes into its lane 0: subgroup shuffles where
 * the adapter has them, else the workgroup array `sh` (every thread of the workgroup there).
 */
function combined(v: V, acc: string, indent: string): string[] {
  const L: string[] = [];
  if (sub && v.t <= 32) {
    for (let s = v.t >> 1; s >= 1; s >>= 1) L.push(`${acc} += subgroupShuffleDown(${acc}, ${s}u);`);
  } else {
    L.push(`sh[lid.x] = ${acc}; workgroupBarrier();`);
    for (let s = v.t >> 1; s >= 1; s >>= 1) {
      L.push(`if (lane < ${s}u) { sh[lid.x] += sh[lid.x + ${s}u]; } workgroupBarrier();`);
    }
    L.push(`${acc} = sh[lid.x]; workgroupBarrier();`);
  }
  return L.map((line) => indent + line);
}

/**
 * The persistent design (`v.grid` workgroups): A staged whole once (a block's 8 vec4s padded to
 * 9), then each thread group of `v.t` lanes takes `v.r` rows a step, a block a lane, combining by
 * subgroup shuffles; with `v.pipe` the next step's words are in flight while a step combines.
 */
function persistentWgsl(k: number, n: number, v: V): string {
  const blocks = k / 32, groups = v.wg / v.t, steps = Math.ceil(n / (v.r * groups));
  const grid = Math.min(v.grid!, steps);
  const zero = (r: number) =>
    v.zp ? `f32((Z[(rw${r} + b) / 8u] >> (((rw${r} + b) % 8u) * 4u)) & 15u)` : `Z[rw${r} + b]`;
  const L = [`${sub ? "enable subgroups;" : ""}
@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> W: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> S: array<f32>;
@group(0) @binding(3) var<storage, read> Z: array<${v.zp ? "u32" : "f32"}>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;
var<workgroup> sp: array<vec4<f32>, ${blocks * 9}>;
${sub ? "" : `var<workgroup> sh: array<f32, ${v.wg}>;`}
@compute @workgroup_size(${v.wg})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  for (var i = lid.x; i < ${k / 4}u; i += ${v.wg}u) { sp[(i / 8u) * 9u + i % 8u] = A[i]; }
  workgroupBarrier();
  let lane = lid.x % ${v.t}u;
  let g = lid.x / ${v.t}u;`];
  const loads = (step: string, into: string) => {
    for (let r = 0; r < v.r; r++) {
      L.push(
        `    ${into}${r} = W[min((${step} * ${groups}u + g) * ${v.r}u + ${r}u, ${
          n - 1
        }u) * ${blocks}u + min(lane, ${blocks - 1}u)];`,
      );
    }
  };
  if (v.pipe) {
    for (let r = 0; r < v.r; r++) L.push(`  var nw${r}: vec4<u32>;`);
    loads("wid.x", "nw");
  }
  L.push(`  for (var step = wid.x; step < ${steps}u; step += ${grid}u) {
    let row0 = (step * ${groups}u + g) * ${v.r}u;`);
  for (let r = 0; r < v.r; r++) {
    L.push(`    var acc${r} = 0.0; let rw${r} = min(row0 + ${r}u, ${n - 1}u) * ${blocks}u;`);
  }
  if (v.pipe) {
    for (let r = 0; r < v.r; r++) L.push(`    let cw${r} = nw${r};`);
    L.push(`    {`);
    loads(`(step + ${grid}u)`, "nw");
    L.push(`    }`);
  }
  L.push(`    for (var b = lane; b < ${blocks}u; b += ${v.t}u) {`);
  for (let j = 0; j < 8; j++) L.push(`      let a${j} = sp[b * 9u + ${j}u];`);
  L.push(`      let asum = dot((a0 + a1) + (a2 + a3) + (a4 + a5) + (a6 + a7), vec4<f32>(1.0));`);
  for (let r = 0; r < v.r; r++) L.push(`      let w${r} = ${v.pipe ? `cw${r}` : `W[rw${r} + b]`};`);
  for (let r = 0; r < v.r; r++) {
    const terms = [];
    for (let j = 0; j < 8; j++) {
      terms.push(`dot(${nibbles(v, `w${r}.${"xyzw"[j >> 1]}`, (j & 1) * 16)}, a${j})`);
    }
    L.push(
      `      acc${r} += S[rw${r} + b] * ((${terms.slice(0, 4).join(" + ")}) + (${
        terms.slice(4).join(" + ")
      }) - ${zero(r)} * asum);`,
    );
  }
  L.push("    }");
  for (let r = 0; r < v.r; r++) L.push(...combined(v, `acc${r}`, "    "));
  for (let r = 0; r < v.r; r++) {
    L.push(`    if (lane == 0u && row0 + ${r}u < ${n}u) { Y[row0 + ${r}u] = acc${r}; }`);
  }
  L.push("  }", "}");
  return L.join("\n");
}

function rand(n: number, seed: number, lo: number, hi: number) {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (s * 1664525 + 1013904223) >>> 0;
    out[i] = lo + (hi - lo) * (s / 2 ** 32);
  }
  return out;
}

async function shape(k: number, n: number, variants: V[]) {
  const blocks = k / 32;
  const w = new Uint32Array(n * blocks * 4);
  let s = 12345;
  for (let i = 0; i < w.length; i++) {
    s = (s * 1664525 + 1013904223) >>> 0;
    w[i] = s;
  }
  const sc = rand(n * blocks, 3, 0.01, 0.03),
    z = rand(n * blocks, 4, 0, 16).map(Math.floor),
    a = rand(k, 5, -1, 1);
  const want = new Float32Array(n);
  for (let j = 0; j < n; j++) {
    let sum = 0;
    for (let i = 0; i < k; i++) {
      const cell = j * blocks + (i >> 5);
      const q = (w[j * blocks * 4 + (i >> 3)] >>> ((i & 7) * 4)) & 15;
      sum += a[i] * (q - z[cell]) * sc[cell];
    }
    want[j] = sum;
  }
  const buf = (data: Float32Array<ArrayBuffer> | Uint32Array<ArrayBuffer>) => {
    const b = device.createBuffer({ size: Math.max(16, data.byteLength), usage: STORAGE });
    device.queue.writeBuffer(b, 0, data);
    return b;
  };
  const sz = new Float32Array(2 * n * blocks);
  for (let i = 0; i < n * blocks; i++) {
    sz[2 * i] = sc[i];
    sz[2 * i + 1] = z[i];
  }
  const zp = new Uint32Array(Math.ceil(n * blocks / 8));
  z.forEach((x, i) => zp[i >> 3] |= x << ((i & 7) * 4));
  const bufs = [buf(a), buf(w), buf(sc), buf(z)];
  const zpb = buf(zp);
  const szb = buf(sz);
  const y = device.createBuffer({ size: n * 4, usage: STORAGE });
  const staging = device.createBuffer({ size: n * 4, usage: STAGING });
  const bytes = w.byteLength + sc.byteLength * 2 + a.byteLength + n * 4;
  for (const v of variants) {
    if (v.ash && k > 4096) continue;
    if (v.grid && (v.t > 32 || (v.pipe && blocks > v.t))) continue;
    const code = v.grid ? persistentWgsl(k, n, v) : wgsl(k, n, v);
    const module = device.createShaderModule({ code });
    const pipeline = device.createComputePipeline({
      layout: "auto",
      compute: { module, entryPoint: "main" },
    });
    const group = device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: (v.st2 ? [0, 1, 4, 5] : [0, 1, 2, 3, 4]).map((binding) => ({
        binding,
        resource: { buffer: binding === 3 && v.zp ? zpb : [...bufs, y, szb][binding] },
      })),
    });
    const wgs = Math.min(v.grid ?? Infinity, Math.ceil(n / (v.r * (v.wg / v.t))));
    const [gx, gy] = wgs > 65535 ? [65535, Math.ceil(wgs / 65535)] : [wgs, 1];
    const run = async (repeat: number, read: boolean) => {
      const enc = device.createCommandEncoder();
      const pass = enc.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      for (let i = 0; i < repeat; i++) pass.dispatchWorkgroups(gx, gy);
      pass.end();
      if (read) enc.copyBufferToBuffer(y, 0, staging, 0, n * 4);
      const t0 = performance.now();
      device.queue.submit([enc.finish()]);
      if (read) {
        await staging.mapAsync(GPUMapMode.READ);
        const got = new Float32Array(staging.getMappedRange().slice(0));
        staging.unmap();
        return { ms: performance.now() - t0, got };
      }
      await device.queue.onSubmittedWorkDone();
      return { ms: performance.now() - t0, got: undefined };
    };
    const { got } = await run(1, true);
    let err = 0;
    for (let j = 0; j < n; j++) {
      err = Math.max(err, Math.abs(got![j] - want[j]) / (1e-3 + Math.abs(want[j])));
    }
    const est = (await run(20, false)).ms / 20;
    const repeat = Math.max(20, Math.min(4000, Math.ceil(60 / Math.max(est, 1e-3))));
    const times = [];
    for (let i = 0; i < 3; i++) times.push((await run(repeat, false)).ms / repeat);
    const ms = Math.min(...times);
    const flags = `${v.ash ? " ashared" : ""}${v.pad ? " pad" : ""}${v.st2 ? " st2" : ""}${
      v.grid ? ` grid${v.grid}` : ""
    }${v.zp ? " zp" : ""}${v.pipe ? " pipe" : ""}`;
    const read = bytes - (v.zp ? z.byteLength - zp.byteLength : 0);
    console.log(
      `${k}x${n} r${v.r} t${v.t} wg${v.wg} ${v.cvt}${flags}: ${(ms * 1000).toFixed(1)} us ${
        (read / ms / 1e9).toFixed(2)
      } TB/s err ${err.toExponential(1)}`,
    );
  }
}

const persistentOnly = Deno.args.includes("--persistent");
const cvtOnly = Deno.args.includes("--cvt");
// With --persistent, the kept design (r8 t32 pad) as the baseline and the persistent ones.
const variants: V[] = persistentOnly
  ? [{ r: 8, t: 32, wg: 256, cvt: "i2f", ash: false, pad: true }]
  : [];
// With --cvt, the conversions side by side on the kept design's neighbours.
for (const t of cvtOnly ? [32, 16] : []) {
  for (const r of [2, 4, 8]) {
    for (const cvt of ["i2f", "fold", "mask", "none"] as const) {
      variants.push({ r, t, wg: 256, cvt, ash: false, pad: true });
      if (cvt === "mask") variants.push({ r, t, wg: 128, cvt, ash: false, pad: true });
    }
  }
}
for (const t of persistentOnly || cvtOnly ? [] : [64, 32, 16]) {
  for (const r of [1, 2, 4, 8]) {
    variants.push({ r, t, wg: 256, cvt: "i2f", ash: false });
    variants.push({ r, t, wg: 256, cvt: "i2f", ash: false, pad: true });
    variants.push({ r, t, wg: 256, cvt: "magic", ash: false, pad: true });
    variants.push({ r, t, wg: 256, cvt: "i2f", ash: false, pad: true, st2: true });
  }
}
for (const r of persistentOnly || cvtOnly ? [] : [1, 2, 4]) {
  variants.push({ r, t: 128, wg: 256, cvt: "i2f", ash: false, pad: true }, {
    r,
    t: 32,
    wg: 128,
    cvt: "i2f",
    ash: false,
    pad: true,
  });
}
// The persistent design: grids of 1-16 workgroups per SM of an H200 (132), rows a group 2-8.
for (const grid of persistentOnly ? [264, 528, 1056, 2112] : []) {
  for (const r of [2, 4, 8]) {
    for (const zp of [false, true]) {
      variants.push({ r, t: 32, wg: 256, cvt: "i2f", ash: false, grid, zp });
      variants.push({ r, t: 32, wg: 256, cvt: "i2f", ash: false, grid, zp, pipe: true });
    }
  }
}
const only = Deno.args.find((a) => !a.startsWith("--"));
for (const [k, n] of [[896, 151936], [896, 9728], [4864, 896], [896, 1152], [896, 896]]) {
  if (only && !`${k}x${n}`.startsWith(only)) continue;
  await shape(k, n, variants);
}
device.destroy();
