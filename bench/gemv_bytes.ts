/**
 * Hand-written designs of the decode step's 4-bit product over A already rounded to bytes (as a
 * producer that wrote A's blocks packed would leave it): how close to the copy bandwidth the
 * vocabulary's product can come once no workgroup stages or packs A (`bench/REPORT-generate.md`,
 * session 80). Each lane takes a block of a row (A's block in its registers: its even and odd
 * words, its scale), `r` rows a group of 32 lanes summed with `dot4I8Packed`, the groups' sums
 * combined by a butterfly of shuffles. The variants: rows a group `r`, workgroup size `wg`, zero
 * points none (the model builder's symmetric default), an f32 table (what kiln's import makes) or
 * the model's packed nibbles, and a persistent grid (`grid` workgroups looping over the rows).
 * Timed as `gemv_designs.ts` times, beside a vec4 copy and a read of the same bytes timed the
 * same way, and checked against integer sums on the CPU.
 *
 *   deno run -A --config deno.json bench/gemv_bytes.ts [896x151936]
 *
 * @module
 */
import { dawnGpu } from "../backends/webgpu/dawn.ts";
import { median, timingDawnFlags } from "./timed.ts";
import { gemv4 } from "./decode_kernels.ts";
import { WebGpuBackend } from "../backends/webgpu/webgpu_backend.ts";
import { compile } from "../jit/compile.ts";
import { dispatchSize, generateWgsl, kernelLayout } from "../shaders/wgsl/codegen.ts";

const STORAGE = 0x80 | 0x08 | 0x04, STAGING = 0x01 | 0x08;

/** Every how many outputs one is checked against the host's sums. */
const SAMPLE = 61;

/** Dispatches timed a pass each between timestamps, in one submission. */
const STAMPED = 100;

/** One design: rows a group, workgroup size, zero points, persistent grid (0: one-shot). */
interface Design {
  r: number;
  wg: number;
  zp: "none" | "table" | "nibbles" | "bytes";
  grid: number;
  /**
   * A as f32 values already rounded (what kiln's rounding kernel stores), each lane packing its
   * block in registers (the largest magnitude, the scale, the rounding, the bytes), rather than
   * packed words.
   */
  apack?: boolean;
  /**
   * `kiln`: the kernel kiln generates for the product (`shaders/wgsl/block_product_int8.ts`),
   * zero points as kiln holds them (`nibbles`, eight to a word) or `none`.
   */
  form?: "kiln";
}

/** The product's operands on the host and on the device. */
interface Operands {
  k: number;
  n: number;
  buffers: GPUBuffer[];
  want: Float32Array;
  /** The sums without zero points (8 for every block). */
  symmetric: Float32Array;
  /** Bytes a design reads, by its zero points. */
  bytes: Record<Design["zp"], number>;
}

const flags = (Deno.env.get("LAB_FLAGS") ?? "").split(" ").filter(Boolean);
const gpu = await dawnGpu({ flags: [...flags, ...timingDawnFlags ?? []] });
const adapter = await gpu.requestAdapter();
if (!adapter?.features.has("subgroups")) throw new Error("needs an adapter with subgroups");
const stamps = adapter.features.has("timestamp-query");
const device = await adapter.requestDevice({
  requiredFeatures: [
    "subgroups" as GPUFeatureName,
    ...(stamps ? ["timestamp-query"] : []),
  ] as GPUFeatureName[],
  requiredLimits: {
    maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
    maxBufferSize: adapter.limits.maxBufferSize,
    maxStorageBuffersPerShaderStage: 8,
  },
});

/** The design's WGSL for K × N (K a multiple of 32). */
function wgsl(k: number, n: number, d: Design): string {
  const blocks = k / 32, groups = d.wg / 32, zrow = Math.ceil(blocks / 2);
  const zeroType = d.zp === "table" ? "f32" : "u32";
  const L = [`enable subgroups;
@group(0) @binding(0) var<storage, read> AQ: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> AS: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> S: array<f32>;
@group(0) @binding(4) var<storage, read> Z: array<${zeroType}>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
@group(0) @binding(6) var<storage, read> AF: array<vec4<f32>>;
const M = 0x0F0F0F0Fu;
const ONES = 0x01010101u;
fn bsum(w: vec4<u32>, e: vec4<u32>, o: vec4<u32>) -> i32 {
  return dot4I8Packed(w.x & M, e.x) + dot4I8Packed((w.x >> 4u) & M, o.x)
    + dot4I8Packed(w.y & M, e.y) + dot4I8Packed((w.y >> 4u) & M, o.y)
    + dot4I8Packed(w.z & M, e.z) + dot4I8Packed((w.z >> 4u) & M, o.z)
    + dot4I8Packed(w.w & M, e.w) + dot4I8Packed((w.w >> 4u) & M, o.w);
}
fn zero(row: u32, b: u32) -> i32 {
  ${zeroCode(d, blocks, zrow)}
}
@compute @workgroup_size(${d.wg})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let lane = lid.x % 32u;
  let g = lid.x / 32u;
  // Phony reads keep A's two forms bound, so every design takes the same bind group.
  _ = AQ[0]; _ = AS[0]; _ = AF[0];`];
  const steps = Math.ceil(n / (d.r * groups));
  const body = (indent: string) => {
    const out: string[] = [];
    for (let r = 0; r < d.r; r++) {
      out.push(`var part${r} = 0.0; let rw${r} = min(row0 + ${r}u, ${n - 1}u);`);
    }
    out.push(`for (var b = lane; b < ${blocks}u; b += 32u) {`);
    if (!(d.grid && blocks <= 32)) out.push(...(d.apack ? packedBlock("b") : aBlock("b")));
    for (let r = 0; r < d.r; r++) out.push(`  let w${r} = W[rw${r} * ${blocks}u + b];`);
    for (let r = 0; r < d.r; r++) {
      out.push(
        `  part${r} += S[rw${r} * ${blocks}u + b] * as_ * ` +
          `f32(bsum(w${r}, e, o) - zero(rw${r}, b) * qsum);`,
      );
    }
    out.push("}", ...butterfly(d.r));
    out.push(`let at = row0 + lane / ${32 / d.r}u;`);
    out.push(`if (lane % ${32 / d.r}u == 0u && at < ${n}u) { Y[at] = acc; }`);
    return out.map((x) => indent + x);
  };
  if (d.grid) {
    // A's one block a lane stays in registers across the steps.
    const at = `min(lane, ${blocks - 1}u)`;
    if (blocks <= 32) L.push(...(d.apack ? packedBlock(at) : aBlock(at)));
    L.push(`  for (var step = wid.x; step < ${steps}u; step += ${d.grid}u) {`);
    L.push(`    let row0 = (step * ${groups}u + g) * ${d.r}u;`);
    L.push(...body("    "), "  }");
  } else {
    L.push(`  let row0 = ((wid.x + wid.y * nwg.x) * ${groups}u + g) * ${d.r}u;`);
    L.push(...body("  "));
  }
  L.push("}");
  return L.join("\n");
}

/**
 * kiln's own kernel for the product over A packed by its producer (the one-row level-4 product
 * `bench/decode_kernels.ts` builds), as the H200 takes it (subgroups of 32, packed byte dots):
 * its code, its workgroups, and which of the operands' buffers each binding takes (−1 the output;
 * inputs the benchmark has no use for bind a spare buffer).
 */
async function kilnKernel(k: number, n: number, symmetric: boolean) {
  // The operands' nibbles lie in rows of whole bytes; kiln's run on across rows.
  if (!symmetric && (k / 32) % 2) throw new Error(`kiln's zero points: ${k / 32} blocks a row`);
  const backend = new WebGpuBackend({ gpu: "dawn", dawnFlags: timingDawnFlags });
  const exe = await compile(gemv4(k, n, "int8", { symmetric }).graph, { backend, cache: false });
  const kernel = exe.plan!.kernels.find((x) => x.blockProduct?.packedA);
  const tag = kernel?.blockProduct;
  if (!kernel || !tag?.packedA) throw new Error("kiln made no product over packed A");
  const h200 = { maxInvocations: 1024, subgroupSize: 32, packedDots: true };
  const code = generateWgsl(kernel, { ...h200, workgroupBytes: 32768, bindings: 8 });
  // The operands' buffers: AQ, AS, W, S, f32 zeros, nibbles, AF, byte zeros; then the spare.
  const role = new Map([
    [tag.packedA.words, 0],
    [tag.packedA.scales, 1],
    [tag.words, 2],
    [tag.scales, 3],
  ]);
  // Its zero points as it holds them: eight to a word (the model's nibbles), or bytes.
  if (tag.zeros !== undefined) {
    role.set(tag.zeros, kernel.inputs[tag.zeros].packed === "nibbles" ? 5 : 7);
  }
  const order = [...kernel.inputs.map((_, i) => role.get(i) ?? 8), -1];
  const [x, y] = dispatchSize(kernelLayout(kernel, h200), n);
  exe.dispose();
  backend.dispose();
  return { code, order, groups: x * y };
}

/** Lines loading A's block `b` (a u32 expression): its even and odd words, scale and sum. */
function aBlock(b: string): string[] {
  return [
    `  let e = AQ[2u * ${b}];`,
    `  let o = AQ[2u * ${b} + 1u];`,
    `  let as_ = AS[${b}];`,
    "  let qsum = dot4I8Packed(e.x, ONES) + dot4I8Packed(e.y, ONES) + dot4I8Packed(e.z, ONES)" +
    " + dot4I8Packed(e.w, ONES) + dot4I8Packed(o.x, ONES) + dot4I8Packed(o.y, ONES)" +
    " + dot4I8Packed(o.z, ONES) + dot4I8Packed(o.w, ONES);",
  ];
}

/**
 * Lines packing A's block `b` (a u32 expression) from its rounded f32 values in registers, as
 * `shaders/wgsl/block_product_int8.ts` packs a staged block, then its sum.
 */
function packedBlock(b: string): string[] {
  const L = [`  var largest = 0.0;`];
  for (let j = 0; j < 8; j++) L.push(`  let f${j} = AF[${b} * 8u + ${j}u];`);
  for (let j = 0; j < 8; j++) {
    L.push(
      `  largest = max(largest, max(max(abs(f${j}.x), abs(f${j}.y)), max(abs(f${j}.z), abs(f${j}.w))));`,
    );
  }
  L.push("  let as_ = largest / 127.0;", "  let inv = select(0.0, 1.0 / as_, as_ != 0.0);");
  const pack = (t: number, i: 0 | 1) => {
    const lo = `vec4<i32>(round(f${2 * t} * inv))`, hi = `vec4<i32>(round(f${2 * t + 1} * inv))`;
    return i === 0
      ? `pack4xI8(vec4<i32>(${lo}.x, ${lo}.z, ${hi}.x, ${hi}.z))`
      : `pack4xI8(vec4<i32>(${lo}.y, ${lo}.w, ${hi}.y, ${hi}.w))`;
  };
  L.push(`  let e = vec4<u32>(${[0, 1, 2, 3].map((t) => pack(t, 0)).join(", ")});`);
  L.push(`  let o = vec4<u32>(${[0, 1, 2, 3].map((t) => pack(t, 1)).join(", ")});`);
  L.push(aBlock(b).at(-1)!);
  return L;
}

/** The body of `zero(row, b)`: block b of the row's zero point. */
function zeroCode(d: Design, blocks: number, zrow: number): string {
  // A phony read keeps the table bound, so every design takes the same bind group.
  if (d.zp === "none") return "_ = Z[0];\n  return 8;";
  if (d.zp === "table") return `return i32(Z[row * ${blocks}u + b]);`;
  if (d.zp === "bytes") {
    return `let cell = row * ${blocks}u + b;
  return i32(extractBits(Z[cell / 4u], (cell % 4u) * 8u, 8u));`;
  }
  // The model's nibbles: rows of ceil(blocks / 2) bytes, block b in byte b / 2, low half first.
  return `let byte = row * ${zrow}u + b / 2u;
  return i32((Z[byte / 4u] >> ((byte % 4u) * 8u + (b % 2u) * 4u)) & 15u);`;
}

/** Sums each of the group's `r` parts over 32 lanes (session 57's butterfly) into `acc`. */
function butterfly(r: number): string[] {
  const out: string[] = [];
  let parts = [...Array(r).keys()].map((i) => `part${i}`), d = 16;
  for (; parts.length > 1; d >>= 1) {
    const half = parts.length / 2, upper = `(lane & ${d}u) != 0u`;
    parts = parts.slice(0, half).map((low, j) => {
      const high = parts[j + half];
      out.push(`let k${d}_${j} = select(${low}, ${high}, ${upper});`);
      out.push(`let g${d}_${j} = select(${high}, ${low}, ${upper});`);
      out.push(`let s${d}_${j} = k${d}_${j} + subgroupShuffleXor(g${d}_${j}, ${d}u);`);
      return `s${d}_${j}`;
    });
  }
  out.push(`var acc = ${parts[0]};`);
  for (; d >= 1; d >>= 1) out.push(`acc += subgroupShuffleXor(acc, ${d}u);`);
  return out;
}

/** A seeded generator of u32s. */
function words(count: number, seed: number): Uint32Array<ArrayBuffer> {
  const out = new Uint32Array(count);
  let s = seed >>> 0;
  for (let i = 0; i < count; i++) out[i] = s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
  return out;
}

/** A storage buffer holding `data`. */
function buffer(data: ArrayBufferView<ArrayBuffer>): GPUBuffer {
  const b = device.createBuffer({ size: Math.max(16, data.byteLength), usage: STORAGE });
  device.queue.writeBuffer(b, 0, data);
  return b;
}

/** Random operands of K × N, A's blocks packed as `block_product_int8.ts` packs them. */
function operands(k: number, n: number): Operands {
  const blocks = k / 32, zrow = Math.ceil(blocks / 2);
  const w = words(n * blocks * 4, 1), raw = words(k, 2), zr = words(n * blocks, 3);
  // Each block holds 127, so that packing its rounded values again gives back the same bytes.
  const a = Int8Array.from(raw, (x, i) => (i % 32 ? (x % 255) - 127 : 127));
  const as = Float32Array.from({ length: blocks }, (_, b) => 0.001 * (1 + (b % 7)));
  const s = Float32Array.from(words(n * blocks, 4), (x) => 0.01 + (x % 1000) * 2e-5);
  const z = Uint8Array.from(zr, (x) => x % 16);
  const aq = new Uint32Array(blocks * 8);
  for (let b = 0; b < blocks; b++) {
    for (let t = 0; t < 4; t++) {
      // Word t of the block holds values 8t … 8t + 7: the even ones in one word, the odd in another.
      const v = (i: number) => a[b * 32 + 8 * t + i] & 255;
      aq[b * 8 + t] = v(0) | v(2) << 8 | v(4) << 16 | v(6) << 24;
      aq[b * 8 + 4 + t] = v(1) | v(3) << 8 | v(5) << 16 | v(7) << 24;
    }
  }
  const nibbles = new Uint8Array(Math.ceil(n * zrow / 4) * 4);
  z.forEach((x, i) => {
    const row = Math.floor(i / blocks), b = i % blocks;
    nibbles[row * zrow + (b >> 1)] |= x << ((b & 1) * 4);
  });
  const want = new Float32Array(n), symmetric = new Float32Array(n);
  // Sampled outputs (every SAMPLE-th) are checked: the whole vocabulary took the host a minute.
  for (let j = 0; j < n; j += SAMPLE) {
    for (let i = 0; i < k; i++) {
      const cell = j * blocks + (i >> 5);
      const q = (w[j * blocks * 4 + (i >> 3)] >>> ((i & 7) * 4)) & 15;
      want[j] += a[i] * as[i >> 5] * (q - z[cell]) * s[cell];
      symmetric[j] += a[i] * as[i >> 5] * (q - 8) * s[cell];
    }
  }
  const table = Float32Array.from(z);
  const base = w.byteLength + s.byteLength + aq.byteLength + as.byteLength + 4 * n;
  const bytes = {
    none: base,
    table: base + table.byteLength,
    nibbles: base + n * zrow,
    bytes: base + n * blocks,
  };
  const buffers = [aq, as, w, s].map((x) => buffer(x));
  buffers.push(buffer(table), buffer(new Uint32Array(nibbles.buffer)));
  buffers.push(buffer(Float32Array.from(a, (x, i) => x * as[i >> 5])));
  const byteZeros = new Uint8Array(Math.ceil(z.length / 4) * 4);
  byteZeros.set(z);
  buffers.push(buffer(new Uint32Array(byteZeros.buffer)));
  return { k, n, buffers, want, symmetric, bytes };
}

/** Least ms a dispatch over ≥ 60 ms of back-to-back dispatches (best of three), and one result. */
async function timed(
  pipeline: GPUComputePipeline,
  group: GPUBindGroup,
  grid: [number, number],
  out?: GPUBuffer,
): Promise<{ ms: number; got?: Float32Array }> {
  const run = async (repeat: number, read: boolean) => {
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    for (let i = 0; i < repeat; i++) pass.dispatchWorkgroups(...grid);
    pass.end();
    const staging = read && out
      ? device.createBuffer({ size: out.size, usage: STAGING })
      : undefined;
    if (staging) enc.copyBufferToBuffer(out!, 0, staging, 0, out!.size);
    const t0 = performance.now();
    device.queue.submit([enc.finish()]);
    await device.queue.onSubmittedWorkDone();
    const ms = performance.now() - t0;
    if (!staging) return { ms };
    await staging.mapAsync(GPUMapMode.READ);
    const got = new Float32Array(staging.getMappedRange().slice(0));
    staging.destroy();
    return { ms, got };
  };
  const { got } = await run(1, true);
  const est = (await run(20, false)).ms / 20;
  const repeat = Math.max(20, Math.min(4000, Math.ceil(60 / Math.max(est, 1e-3))));
  const times = [];
  for (let i = 0; i < 3; i++) times.push((await run(repeat, false)).ms / repeat);
  return { ms: Math.min(...times), got };
}

/**
 * Median device ms of a dispatch timed alone between its pass's timestamps (as kiln's profiled
 * runs time each kernel, `bench/gpu_kernels.ts`), `STAMPED` passes in one submission; NaN
 * without `timestamp-query`.
 */
async function stamped(
  pipeline: GPUComputePipeline,
  group: GPUBindGroup,
  grid: [number, number],
): Promise<number> {
  if (!stamps) return NaN;
  const querySet = device.createQuerySet({ type: "timestamp", count: 2 * STAMPED });
  const resolve = device.createBuffer({ size: 16 * STAMPED, usage: 0x200 | 0x04 });
  const read = device.createBuffer({ size: 16 * STAMPED, usage: STAGING });
  const enc = device.createCommandEncoder();
  for (let i = 0; i < STAMPED; i++) {
    const timestampWrites = {
      querySet,
      beginningOfPassWriteIndex: 2 * i,
      endOfPassWriteIndex: 2 * i + 1,
    };
    const pass = enc.beginComputePass({ timestampWrites });
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(...grid);
    pass.end();
  }
  enc.resolveQuerySet(querySet, 0, 2 * STAMPED, resolve, 0);
  enc.copyBufferToBuffer(resolve, 0, read, 0, 16 * STAMPED);
  device.queue.submit([enc.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const t = new BigUint64Array(read.getMappedRange().slice(0));
  read.unmap();
  [querySet, resolve, read].forEach((x) => x.destroy());
  return median([...Array(STAMPED).keys()].map((i) => Number(t[2 * i + 1] - t[2 * i]) / 1e6));
}

/**
 * A pipeline of `code` and its bind group over `buffers` (binding i the i-th); throws Dawn's
 * validation error where the code does not compile.
 */
async function bound(
  code: string,
  buffers: GPUBuffer[],
): Promise<[GPUComputePipeline, GPUBindGroup]> {
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ code });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module } });
  const entries = buffers.map((buffer, binding) => ({ binding, resource: { buffer } }));
  const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
  const error = await device.popErrorScope();
  if (error) throw new Error(`${error.message}\n${code}`);
  return [pipeline, group];
}

/** Workgroups as a dispatch's x and y. */
function grid2(count: number): [number, number] {
  return count > 65535 ? [65535, Math.ceil(count / 65535)] : [count, 1];
}

/** The yardsticks' TB/s, back to back and each dispatch alone between its pass's timestamps. */
interface Yardsticks {
  copy: number;
  read: number;
  copyAlone: number;
  readAlone: number;
}

/**
 * TB/s of a vec4 copy of `bytes` (read and written) and of a read of them, timed as the designs:
 * back to back, and alone (a design's alone time holds its launch and its last wave, which a copy
 * timed back to back does not; the copy alone holds them too).
 */
async function yardsticks(bytes: number): Promise<Yardsticks> {
  const quads = Math.floor(bytes / 16 / 256) * 256;
  const src = device.createBuffer({ size: quads * 16, usage: STORAGE });
  const dst = device.createBuffer({ size: quads * 16, usage: STORAGE });
  const copy = await bound(
    `@group(0) @binding(0) var<storage, read> X: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> Y: array<vec4<u32>>;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3<u32>,
    @builtin(num_workgroups) n: vec3<u32>) { let i = g.x + g.y * n.x * 256u; Y[i] = X[i]; }`,
    [src, dst],
  );
  // Each thread reads 8 quads a grid apart and stores one word only when they cancel (never).
  const read = await bound(
    `@group(0) @binding(0) var<storage, read> X: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> Y: array<vec4<u32>>;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3<u32>,
    @builtin(num_workgroups) n: vec3<u32>) {
  let i = g.x + g.y * n.x * 256u; var x = vec4<u32>(0u);
  for (var j = 0u; j < 8u; j++) { x ^= X[i + j * ${quads / 8}u]; }
  if (all(x == vec4<u32>(0x9E3779B9u))) { Y[i] = x; } }`,
    [src, dst],
  );
  const c = await timed(...copy, grid2(quads / 256));
  const r = await timed(...read, grid2(quads / 8 / 256));
  const ca = await stamped(...copy, grid2(quads / 256));
  const ra = await stamped(...read, grid2(quads / 8 / 256));
  src.destroy();
  dst.destroy();
  const tbps = (bytes: number, ms: number) => bytes / ms / 1e9;
  return {
    copy: tbps(2 * quads * 16, c.ms),
    read: tbps(quads * 16, r.ms),
    copyAlone: tbps(2 * quads * 16, ca),
    readAlone: tbps(quads * 16, ra),
  };
}

/** Times each design on K × N, printing µs, TB/s, the share of the copy and the error. */
async function sweep(k: number, n: number, designs: Design[]): Promise<void> {
  const ops = operands(k, n);
  // The first yardstick brings the GPU to its working clock; the second is the one kept.
  await yardsticks(ops.bytes.table);
  const { copy, read, copyAlone, readAlone } = await yardsticks(ops.bytes.table);
  console.log(
    `${k}x${n}: copy ${copy.toFixed(2)} TB/s, read ${read.toFixed(2)} TB/s; alone: copy ` +
      `${copyAlone.toFixed(2)}, read ${readAlone.toFixed(2)}`,
  );
  const out = device.createBuffer({ size: n * 4, usage: STORAGE });
  const spare = device.createBuffer({ size: 16, usage: STORAGE });
  // kiln's kernels, compiled only where a design times them (each compile opens a device).
  const kiln = new Map<boolean, Awaited<ReturnType<typeof kilnKernel>>>();
  for (const d of designs) {
    const zb = ops.buffers[{ table: 4, nibbles: 5, none: 5, bytes: 7 }[d.zp]];
    const symmetric = d.zp === "none";
    if (d.form === "kiln" && !kiln.has(symmetric)) {
      kiln.set(symmetric, await kilnKernel(k, n, symmetric));
    }
    const mine = kiln.get(symmetric);
    const [pipeline, group] = mine && d.form === "kiln"
      ? await bound(
        mine.code,
        mine.order.map((i) => i < 0 ? out : [...ops.buffers, spare][i]),
      )
      : await bound(wgsl(k, n, d), [
        ...ops.buffers.slice(0, 4),
        zb,
        out,
        ops.buffers[6],
      ]);
    const groups = mine && d.form === "kiln" ? mine.groups : Math.ceil(n / (d.r * (d.wg / 32)));
    const { ms, got } = await timed(pipeline, group, grid2(d.grid || groups), out);
    const alone = await stamped(pipeline, group, grid2(d.grid || groups));
    let err = 0;
    const want = d.zp === "none" ? ops.symmetric : ops.want;
    for (let j = 0; j < n; j += SAMPLE) {
      err = Math.max(err, Math.abs(got![j] - want[j]) / (1e-3 + Math.abs(want[j])));
    }
    const tbps = ops.bytes[d.zp] / ms / 1e9;
    console.log(
      `  r${d.r} wg${d.wg} zp-${d.zp}${d.grid ? ` grid${d.grid}` : ""}${d.apack ? " apack" : ""}${
        d.form ? ` ${d.form}` : ""
      }: ` +
        `${(ms * 1000).toFixed(1)}` +
        ` us ${tbps.toFixed(2)} TB/s ${(100 * tbps / copy).toFixed(0)}% of the copy` +
        ` err ${err.toExponential(1)}; alone ${(alone * 1000).toFixed(1)} us ` +
        `${(100 * ops.bytes[d.zp] / alone / 1e9 / copy).toFixed(0)}%` +
        ` (${(100 * ops.bytes[d.zp] / alone / 1e9 / copyAlone).toFixed(0)}% of the copy alone)`,
    );
  }
  out.destroy();
  spare.destroy();
  ops.buffers.forEach((b) => b.destroy());
}

const designs: Design[] = [];
for (const zp of ["table", "nibbles", "none"] as const) {
  for (const wg of [64, 256]) designs.push({ r: 8, wg, zp, grid: 0 });
}
designs.push({ r: 8, wg: 256, zp: "table", grid: 0, apack: true });
designs.push({ r: 16, wg: 256, zp: "table", grid: 0, apack: true });
designs.push({ r: 8, wg: 256, zp: "table", grid: 1056 });
designs.push({ r: 8, wg: 256, zp: "bytes", grid: 0 });
for (const zp of ["nibbles", "none"] as const) {
  designs.push({ r: 8, wg: 256, zp, grid: 0, form: "kiln" });
}
// `--kiln`: kiln's kernels and the hand-written ones with its zero points only.
if (Deno.args.includes("--kiln")) {
  const mine = designs.filter((d) => d.form === "kiln" || (!d.form && !d.grid && !d.apack));
  designs.splice(0, designs.length, ...mine.filter((d) => d.wg === 256 && d.zp !== "table"));
}
const only = Deno.args.find((a) => !a.startsWith("--"));
for (const [k, n] of [[896, 151936], [896, 9728], [4864, 896]]) {
  if (only && !`${k}x${n}`.startsWith(only)) continue;
  await sweep(k, n, designs);
}
device.destroy();
