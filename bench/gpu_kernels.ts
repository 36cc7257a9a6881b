/**
 * Device time of kiln's WebGPU kernels against the hardware's limits (the GPU kernels issue):
 * matmuls from 1024 to 8192 and of a transformer layer at 128 tokens, softmax and layer norm over
 * 16384×4096, attention (B8 H16 T1024 D64), ResNet-50's convolutions at batch 8 (their patches
 * stored first and, beside, gathered as the tiles fill, and with a deep K summed in parts), W1
 * over 64M elements, each with `precision: "f32"` and, where the device grants `shader-f16`,
 * `"f16"` (on the matrix units where the device has them, and then the tiled kernel's f16 beside), with a hand-written vec4 copy kernel of the same run as the bandwidth
 * yardstick. Every result is checked at sampled points against float64 before it is timed.
 *
 * Timing: a profiled executable (timestamp queries around each kernel) runs its kernels back to
 * back in one submission (at least 10 repetitions and 30 ms) on inputs already on the device, and
 * the last repetition's kernel times are summed; the median of 5 such runs is reported, after
 * about 300 ms of the same work brought the GPU to its working clock.
 *
 *   deno run -A --config deno.json bench/gpu_kernels.ts [--only ID,ID] [--f32 | --half] [--batch N] [--out FILE.json]
 *
 * `--only` keeps the kernels whose ids start with one of its prefixes; `--f32` leaves out the f16
 * precisions, `--half` all but `"f16"`; `--batch` sets the convolutions' batch (8). Each row also
 * gives its slowest kernel's time (a product's, beside the casts around it).
 *
 * @module
 */
import { compile, type Precision, setMemoryBudget } from "../mod.ts";
import { WebGpuBackend } from "../backends/webgpu/webgpu_backend.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { uniform } from "../jit/support/random.ts";
import { fromF16Array, toF16Array } from "../jit/ir/dtype.ts";
import { f64, w1 as workloadW1 } from "./workloads.ts";
import { PassTimer, timingDawnFlags } from "./timed.ts";
import { decodeAttention, gemv4, type Kernel } from "./decode_kernels.ts";
import { linearInt8 } from "./quant_kernels.ts";

const arg = (name: string) => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Deno.args[i + 1] : undefined;
};

/** `x` as f16 inputs hold it where `half` (so a float64 expectation sees what the GPU does). */
function halfValues(x: Float32Array, half: boolean): Float32Array {
  return half ? fromF16Array(toF16Array(x)) : x;
}

/**
 * The m×k by k×n product (square: `matmul-N`, else `linear-MxKxN`, a transformer layer's shape):
 * `nn` of two f32 inputs; `nt` and `tn` of f16 inputs, B (as a Linear layer's [N, K] weight) or
 * A given transposed, which reach the product as transposing views (f32 inputs are transposed by
 * the kernel that casts them).
 */
function matmul(n: number, form: "nn" | "nt" | "tn" = "nn", m = n, k = n): Kernel {
  const b = new GraphBuilder();
  const half = form !== "nn";
  const input = (name: string, rows: number, cols: number, flip: boolean) => {
    const x = b.input(name, flip ? [cols, rows] : [rows, cols], half ? "f16" : "f32");
    return flip ? b.op("Transpose", [x], { perm: [1, 0] }) : x;
  };
  const product = b.op("MatMul", [
    input("a", m, k, form === "tn"),
    input("b", k, n, form === "nt"),
  ]);
  b.output("y", half ? b.op("Cast", [product], { to: "f32" }) : product);
  // f16 inputs are the f16 values of these (so the float64 expectation sees what the GPU does).
  const a = halfValues(uniform(m * k, 2), half), w = halfValues(uniform(k * n, 3), half);
  const at = (r: number, j: number) => form === "tn" ? a[j * m + r] : a[r * k + j];
  const wt = (j: number, c: number) => form === "nt" ? w[c * k + j] : w[j * n + c];
  const square = m === n && k === n;
  return {
    id: `${square ? `matmul-${n}` : `linear-${m}x${k}x${n}`}${half ? `-${form}` : ""}`,
    graph: b.build(),
    inputs: {
      a: { data: a, shape: form === "tn" ? [k, m] : [m, k] },
      b: { data: w, shape: form === "nt" ? [n, k] : [k, n] },
    },
    expect: (i) => {
      const r = Math.floor(i / n), c = i % n;
      let s = 0;
      for (let j = 0; j < k; j++) s += at(r, j) * wt(j, c);
      return s;
    },
    size: m * n,
    flops: 2 * m * n * k,
    ...(half ? { halfInputs: true } : {}),
  };
}

const ROWS = 16384, COLS = 4096;

function softmax(): Kernel {
  const b = new GraphBuilder();
  b.output("y", b.op("Softmax", [b.input("x", [ROWS, COLS])], { axis: -1 }));
  const x = uniform(ROWS * COLS, 4, -4, 4);
  return {
    id: "softmax-16384x4096",
    graph: b.build(),
    inputs: { x: { data: x, shape: [ROWS, COLS] } },
    expect: (i) => {
      const r = Math.floor(i / COLS), row = x.subarray(r * COLS, (r + 1) * COLS);
      const m = Math.max(...row);
      let s = 0;
      for (const v of row) s += Math.exp(v - m);
      return Math.exp(x[i] - m) / s;
    },
    size: ROWS * COLS,
    bytes: 8 * ROWS * COLS,
  };
}

function layerNorm(): Kernel {
  const b = new GraphBuilder();
  const g = uniform(COLS, 5, 0.5, 1.5), beta = uniform(COLS, 6);
  const y = b.op("LayerNormalization", [
    b.input("x", [ROWS, COLS]),
    b.param("g", [COLS], "f32", g),
    b.param("beta", [COLS], "f32", beta),
  ], { axis: -1, epsilon: 1e-5 });
  b.output("y", y);
  const x = uniform(ROWS * COLS, 7, -3, 3);
  return {
    id: "layernorm-16384x4096",
    graph: b.build(),
    inputs: { x: { data: x, shape: [ROWS, COLS] } },
    expect: (i) => {
      const r = Math.floor(i / COLS), row = x.subarray(r * COLS, (r + 1) * COLS);
      let mean = 0, v = 0;
      for (const t of row) mean += t / COLS;
      for (const t of row) v += (t - mean) ** 2 / COLS;
      return (x[i] - mean) / Math.sqrt(v + 1e-5) * g[i % COLS] + beta[i % COLS];
    },
    size: ROWS * COLS,
    bytes: 8 * ROWS * COLS,
  };
}

/** f32's largest finite value (`torch.finfo(torch.float32).max`). */
const F32_MAX = 3.4028234663852886e38;

/** How an attention benchmark masks and scales its scores, as exporters write them. */
type AttentionForm =
  /** softmax((Q·Kᵀ)·s)·V. */
  | "plain"
  /** softmax((Q·s)·Kᵀ)·V: the scale on the queries. */
  | "scaled-q"
  /** An added [T, T] mask of 0 and −∞ (key after query), as PyTorch exports `is_causal`. */
  | "causal"
  /** An added [B, 1, 1, T] padding mask: batch b's last 64·b keys −∞. */
  | "padding"
  /**
   * The same keys masked by f32's most negative finite value, as HF transformers' exports write
   * `(1 − mask) · finfo.min`: no tile can be skipped as exactly −∞.
   */
  | "padding-min";

/**
 * Attention over [B, H, T, D] in `form`; its flops counted whole (4·B·H·T²·D) whatever the mask
 * hides. `half`: f16 inputs (their f16 values in the expectation) and the output cast to f32, as
 * an f16 model's attention meets them (on the matrix units where the device has them).
 */
function attention(
  B = 8,
  H = 16,
  T = 1024,
  D = 64,
  form: AttentionForm = "plain",
  half = false,
): Kernel {
  const b = new GraphBuilder();
  const shape = [B, H, T, D];
  const dtype = half ? "f16" : "f32";
  const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, shape, dtype));
  const scale = 1 / Math.sqrt(D);
  const kt = b.op("Transpose", [k], { perm: [0, 1, 3, 2] });
  const scaled = form === "scaled-q"
    ? b.op("MatMul", [b.op("Mul", [q, b.constant(scale, [], dtype)]), kt])
    : b.op("Mul", [b.op("MatMul", [q, kt]), b.constant(scale, [], dtype)]);
  const maskShape = form === "causal" ? [T, T] : [B, 1, 1, T];
  const padding = form === "padding" || form === "padding-min";
  const masked = form === "causal" || padding;
  const scores = masked ? b.op("Add", [scaled, b.input("mask", maskShape, dtype)]) : scaled;
  const context = b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]);
  b.output("y", half ? b.op("Cast", [context], { to: "f32" }) : context);
  const data = [8, 9, 10].map((s) => halfValues(uniform(B * H * T * D, s), half));
  const inputs = Object.fromEntries(["q", "k", "v"].map((n, i) => [n, { data: data[i], shape }]));
  // Whether batch `n`'s query `t` sees key `j`.
  const sees = (n: number, t: number, j: number) =>
    form === "causal" ? j <= t : padding ? j < T - 64 * n : true;
  // Built only where used: at T8192 a causal mask is 256 MB.
  if (masked) {
    const rows = form === "causal" ? T : B;
    const mask = new Float32Array(rows * T).map((_, i) =>
      form === "causal"
        ? (sees(0, Math.floor(i / T), i % T) ? 0 : -Infinity)
        : (sees(Math.floor(i / T), 0, i % T) ? 0 : form === "padding" ? -Infinity : -F32_MAX)
    );
    inputs.mask = { data: mask, shape: maskShape };
  }
  return {
    id: `attention-${form === "plain" ? "" : `${form}-`}B${B}H${H}T${T}D${D}${half ? "-f16" : ""}`,
    graph: b.build(),
    inputs,
    expect: (i) => {
      const e = i % D, row = Math.floor(i / D), t = row % T, bh = Math.floor(row / T);
      const [Q, K, V] = data, base = bh * T * D, n = Math.floor(bh / H);
      const s = new Float64Array(T);
      for (let j = 0; j < T; j++) {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += Q[base + t * D + d] * K[base + j * D + d];
        s[j] = sees(n, t, j)
          ? dot * scale
          : form === "padding-min"
          ? dot * scale - F32_MAX
          : -Infinity;
      }
      const m = Math.max(...s);
      let sum = 0, out = 0;
      for (let j = 0; j < T; j++) {
        const w = Math.exp(s[j] - m);
        sum += w;
        out += w * V[base + j * D + e];
      }
      return out / sum;
    },
    size: B * H * T * D,
    flops: 4 * B * H * T * T * D,
    half: false,
    ...(half ? { halfInputs: true } : {}),
  };
}

/**
 * A convolution of `x` [N, C, H, W] by `w` [M, C, KH, KW] (padding `pad`, stride `stride`) as
 * ResNet-50 has them: its FLOPs are the product's (2·N·M·OH·OW·C·KH·KW).
 */
function conv(x: number[], w: number[], pad: number, stride = 1): Kernel {
  const [N, C, H, W] = x, [M, , KH, KW] = w;
  const OH = Math.floor((H + 2 * pad - KH) / stride) + 1;
  const OW = Math.floor((W + 2 * pad - KW) / stride) + 1;
  const b = new GraphBuilder();
  b.output(
    "y",
    b.op("Conv", [b.input("x", x), b.input("w", w)], {
      pads: [pad, pad, pad, pad],
      strides: [stride, stride],
    }),
  );
  const X = uniform(N * C * H * W, 31), Wt = uniform(M * C * KH * KW, 32);
  return {
    id: `conv-${x.join("x")}-${M}k${KH}s${stride}`,
    graph: b.build(),
    inputs: { x: { data: X, shape: x }, w: { data: Wt, shape: w } },
    expect: (i) => {
      const ow = i % OW, oh = Math.floor(i / OW) % OH;
      const m = Math.floor(i / (OW * OH)) % M, n = Math.floor(i / (OW * OH * M));
      let s = 0;
      for (let c = 0; c < C; c++) {
        for (let kh = 0; kh < KH; kh++) {
          for (let kw = 0; kw < KW; kw++) {
            const ih = oh * stride + kh - pad, iw = ow * stride + kw - pad;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            s += X[((n * C + c) * H + ih) * W + iw] * Wt[((m * C + c) * KH + kh) * KW + kw];
          }
        }
      }
      return s;
    },
    size: N * M * OH * OW,
    flops: 2 * N * M * OH * OW * C * KH * KW,
  };
}

/** W1 of the CPU workloads over `n` elements. */
function w1(n: number): Kernel {
  const w = workloadW1(n);
  const x = w.inputs.x.data;
  return {
    id: w.id,
    graph: w.graph,
    inputs: { x: { data: x, shape: [n] } },
    expect: (i) => f64.w1(x[i]),
    size: n,
    bytes: 8 * n,
  };
}

const dawnFlags = timingDawnFlags;
/** The device's kernels, attention as three kernels where they fit (the flash kernel's baseline). */
const profiled = new WebGpuBackend({ profile: true, flashAttention: false, dawnFlags });
/** The same device's kernels with attention as one flash kernel wherever one applies. */
const flash = new WebGpuBackend({ profile: true, flashAttention: true, dawnFlags });
/** The same device's kernels with every convolution's patches gathered as its tiles fill. */
const gathered = new WebGpuBackend({ profile: true, storedPatches: Infinity, dawnFlags });
/** The same device's kernels with a deep K of few outputs summed in parts. */
const split = new WebGpuBackend({ profile: true, splitSums: true, dawnFlags });
/** The same device's block products of A rounded to 8 bits summed in f32 (no packed byte dots). */
const floatSums = new WebGpuBackend({ profile: true, packedDots: false, dawnFlags });
/**
 * The same device's kernels without its matrix units (f16 matmuls on the tiled kernel, products
 * over bytes on dot4I8Packed tiles).
 */
const tiled = new WebGpuBackend({
  profile: true,
  flashAttention: false,
  matrixUnits: false,
  dawnFlags,
});
await profiled.prepare();
await flash.prepare();
await tiled.prepare();
await gathered.prepare();
await split.prepare();
const matrixUnits = profiled.capabilities().matrixUnits ?? false;
const device = profiled.device;
if (!device || !profiled.capabilities().timestampQuery) {
  throw new Error("this benchmark needs a WebGPU device with timestamp-query");
}
const f16 = device.features.has("shader-f16") && !Deno.args.includes("--f32");

/** Median device ms of the hand-written vec4 copy of `n` f32s: the bandwidth yardstick. */
async function copyMs(n: number): Promise<number> {
  const gpu = device!;
  const module = gpu.createShaderModule({
    code: `@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i < ${n / 4}u) { dst[i] = src[i]; }
}`,
  });
  const pipeline = gpu.createComputePipeline({ layout: "auto", compute: { module } });
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
  const src = gpu.createBuffer({ size: n * 4, usage }),
    dst = gpu.createBuffer({ size: n * 4, usage });
  const bind = gpu.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: src } }, { binding: 1, resource: { buffer: dst } }],
  });
  const groups = n / 4 / 256, y = Math.ceil(groups / 65535);
  const timer = new PassTimer(gpu);
  const times: number[] = [];
  for (let run = 0; run < 6; run++) {
    const enc = gpu.createCommandEncoder();
    // The first submission (untimed) warms the GPU to its working clock.
    const reps = run === 0 ? 300 : 10;
    for (let r = 0; r < reps; r++) {
      const pass = enc.beginComputePass(r === reps - 1 ? { timestampWrites: timer.writes } : {});
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, bind);
      pass.dispatchWorkgroups(Math.ceil(groups / y), y);
      pass.end();
    }
    const ms = await timer.submit(enc);
    if (run) times.push(ms);
  }
  for (const b of [src, dst]) b.destroy();
  timer.destroy();
  return median(times);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}

interface Row {
  id: string;
  precision: Precision;
  ms: number;
  kernels: number;
  error: number;
  tflops?: number;
  tbps?: number;
  /** The slowest kernel's device time (of the median run), ms. */
  slowest: number;
}

async function measure(k: Kernel, precision: Precision, backend = profiled): Promise<Row> {
  using exe = await compile(k.graph, { backend, cache: false, precision });
  const host = (v: Kernel["inputs"][string]) =>
    k.halfInputs
      ? { ...v, data: toF16Array(v.data), dtype: "f16" as const }
      : { ...v, dtype: "f32" as const };
  const inputs = Object.fromEntries(Object.entries(k.inputs).map(([n, v]) => [n, host(v)]));
  const out = (await exe.run(inputs)).y.data as Float32Array;
  let error = 0;
  for (let s = 0; s < 64; s++) {
    const i = Math.floor((s * 2654435761) % k.size);
    error = Math.max(error, Math.abs(out[i] - k.expect(i)) / Math.max(1, Math.abs(k.expect(i))));
  }
  // Inputs stay on the device and outputs too (disposed unread), so consecutive runs leave the
  // GPU idle only for the ~11 ms of the timestamps' readback: with host inputs and outputs the
  // transfers left it idle for long enough that its clock dropped (1980 → 345 MHz on the H200)
  // and the kernels' times followed. A first estimate sizes a warm-up of back-to-back
  // repetitions in one submission; each timed run repeats the kernels for at least 30 ms.
  const upload = new GraphBuilder();
  for (const [n, v] of Object.entries(k.inputs)) {
    upload.output(n, upload.op("ToDevice", [upload.input(n, v.shape, inputs[n].dtype)]));
  }
  // Under the same precision and on the backend under test (a device tensor feeds only its own
  // device), so the device tensors have the dtype the executable stores.
  using uploader = await compile(upload.build(), { backend, cache: false, precision });
  const resident = await uploader.runOnDevice(inputs);
  const sums: number[] = [];
  const slowest: number[] = [];
  const sum = () => exe.deviceTimes().reduce((s, t) => s + t.ms, 0);
  const timedRun = async (repeat: number) => {
    for (const t of Object.values(await exe.runOnDevice(resident, { repeat }))) t.dispose();
  };
  await timedRun(10);
  const estimate = Math.max(sum(), 1e-3);
  const warm = Number(arg("--warm") ?? 300);
  for (let left = warm; left > 0; left -= 1000) {
    await timedRun(Math.min(20000, Math.ceil(Math.min(left, 1000) / estimate)));
  }
  const repeat = Math.min(1000, Math.max(10, Math.ceil(30 / estimate)));
  let kernels = 0;
  for (let i = 0; i < 5; i++) {
    await timedRun(repeat);
    kernels = exe.deviceTimes().length;
    sums.push(sum());
    slowest.push(Math.max(...exe.deviceTimes().map((t) => t.ms)));
  }
  for (const t of Object.values(resident)) t.dispose();
  const ms = median(sums);
  return {
    id: k.id,
    precision,
    ms,
    kernels,
    error,
    slowest: median(slowest),
    tflops: k.flops ? k.flops / ms / 1e9 : undefined,
    tbps: k.bytes ? k.bytes / ms / 1e9 : undefined,
  };
}

const batch = Number(arg("--batch") ?? 8);
const all: (() => Kernel)[] = [
  () => w1(1 << 26),
  // A 0.5B decoder's token-step products by 4-bit weights (Qwen2.5-0.5B's shapes).
  () => gemv4(896, 1152),
  () => gemv4(896, 4864 * 2),
  () => gemv4(4864, 896),
  () => gemv4(896, 151936),
  () => gemv4(896, 1152, "normed"),
  () => gemv4(896, 151936, "normed"),
  // The same products of A rounded to 8 bits: in packed byte dots where WGSL has them.
  () => gemv4(896, 1152, "int8"),
  () => gemv4(896, 4864 * 2, "int8"),
  () => gemv4(4864, 896, "int8"),
  () => gemv4(896, 151936, "int8"),
  () => gemv4(896, 151936, "int8", { symmetric: true }),
  () => matmul(1024),
  () => matmul(2048),
  () => matmul(4096),
  () => matmul(8192),
  () => matmul(4096, "nt"),
  () => matmul(4096, "tn"),
  // BERT-base's and ViT-B/16's products at 128 tokens: Q, K and V joined, attention out, MLP.
  ...[[768, 2304], [768, 768], [768, 3072], [3072, 768]].map(([k, n]) => () =>
    matmul(n, "nn", 128, k)
  ),
  // The same products dynamically quantized (BERT-base int8, as `quantize_dynamic` writes it).
  ...[[768, 2304], [768, 768], [768, 3072], [3072, 768]].map(([k, n]) => () =>
    linearInt8(128, k, n)
  ),
  // And at 1024 tokens, whose tiles fill the GPU (on its matrix units where it multiplies bytes).
  ...[[768, 3072], [3072, 768]].map(([k, n]) => () => linearInt8(1024, k, n)),
  () => linearInt8(4096, 4096, 4096),
  // ResNet-50's convolutions (batch 8, or `--batch`): the stem, each stage's 3×3, a 1×1 of
  // stage 4 and of stage 5, two strided 1×1.
  ...[1, 2, 3, 4, 5].map((stage) => {
    const c = 16 * 2 ** stage, size = 7 * 2 ** (5 - stage);
    return stage === 1
      ? () => conv([batch, 3, 224, 224], [64, 3, 7, 7], 3, 2)
      : () => conv([batch, c, size, size], [c, c, 3, 3], 1);
  }),
  () => conv([batch, 1024, 14, 14], [256, 1024, 1, 1], 0),
  () => conv([batch, 2048, 7, 7], [512, 2048, 1, 1], 0),
  // The strided 1×1 convolutions that enter stages 3 and 5.
  () => conv([batch, 256, 56, 56], [512, 256, 1, 1], 0, 2),
  () => conv([batch, 1024, 14, 14], [2048, 1024, 1, 1], 0, 2),
  softmax,
  layerNorm,
  () => attention(),
  () => attention(8, 16, 128, 64),
  // BERT-base's heads at 128 tokens, batch 1.
  () => attention(1, 12, 128, 64),
  () => attention(1, 12, 128, 64, "padding"),
  // BERT-base's heads in f16 and short batched ones: the matrix attention kernel (at 256 keys,
  // where the flash kernel pays, the flash kernel keeps them: `MATRIX_KEYS`).
  () => attention(1, 12, 128, 64, "plain", true),
  () => attention(1, 12, 128, 64, "padding", true),
  () => attention(8, 16, 128, 64, "plain", true),
  // ViT-B/16's heads: 197 queries, no multiple of the matrix kernel's 16 rows.
  () => attention(1, 12, 197, 64, "plain", true),
  () => attention(8, 16, 256, 64, "plain", true),
  () => attention(8, 16, 256, 64),
  () => attention(8, 16, 512, 64),
  () => attention(1, 16, 4096, 64),
  () => attention(8, 16, 1024, 64, "scaled-q"),
  () => attention(8, 16, 1024, 64, "padding"),
  () => attention(8, 16, 1024, 64, "padding-min"),
  () => attention(8, 16, 1024, 64, "causal"),
  () => attention(1, 16, 4096, 64, "causal"),
  () => decodeAttention(),
  // Scores of 4.3 GB, past the H200's 2 GB binding: only the flash kernel runs it (on both
  // backends). The graph holds them, past the default budget of 2 GiB a tensor (raised below).
  () => attention(1, 16, 8192, 64),
];
// The scores of the longest attention are a graph tensor of 4 GiB, though they never exist.
setMemoryBudget({ maxTensorBytes: 2 ** 33 });
const only = arg("--only")?.split(",");
const rows: Row[] = [];
const copy = await copyMs(1 << 26);
// Which implementation: where Dawn cannot load (a package missing from an offline cache) the
// backend takes Deno's WebGPU, whose kernels and limits differ.
console.log(`${profiled.capabilities().name}, matrix units: ${matrixUnits ? "yes" : "no"}`);
console.log(
  `copy 64M (vec4, hand-written): ${copy.toFixed(4)} ms, ${(2 ** 29 / copy / 1e9).toFixed(2)} TB/s`,
);
for (const make of all) {
  const k = make();
  if (only && !only.some((o) => k.id.startsWith(o))) continue;
  const variants: [Precision, WebGpuBackend, string][] = [
    ...(k.halfInputs ? ["f16"] : f16 && k.half !== false ? ["f32", "f16-storage", "f16"] : ["f32"])
      .map((
        p,
      ): [Precision, WebGpuBackend, string] => [p as Precision, profiled, ""]),
    ...(k.id.startsWith("attention")
      ? [[k.halfInputs ? "f16" : "f32", flash, " flash"] as [Precision, WebGpuBackend, string]]
      : []),
    ...(k.id.endsWith("-int8")
      ? [["f32", floatSums, " f32 sums"] as [Precision, WebGpuBackend, string]]
      : []),
    ...(k.id.startsWith("conv")
      ? [
        ["f32", gathered, " gathered"] as [Precision, WebGpuBackend, string],
        ["f32", split, " split"] as [Precision, WebGpuBackend, string],
      ]
      : []),
    // Where f16 matmuls run on the matrix units, the tiled kernel's f16 beside them; where
    // products over bytes do, their dot4I8Packed tiles.
    ...(f16 && matrixUnits && /^(matmul|linear)/.test(k.id) && !k.id.endsWith("-int8")
      ? [["f16", tiled, " tiled"] as [Precision, WebGpuBackend, string]]
      : []),
    ...(matrixUnits && k.id.endsWith("-int8")
      ? [["f32", tiled, " dots"] as [Precision, WebGpuBackend, string]]
      : []),
  ];
  for (const [precision, backend, label] of variants) {
    if (Deno.args.includes("--half") && precision !== "f16") continue;
    try {
      const r = { ...await measure(k, precision, backend), id: k.id + label };
      rows.push(r);
      const share = (tbps: number) => `${(100 * tbps / (2 ** 29 / copy / 1e9)).toFixed(0)}%`;
      // A product after a kernel of its own (A's rounding): its bytes over its own time too.
      const product = r.kernels > 1 && r.tbps
        ? `; slowest kernel ${r.slowest.toFixed(4)} ms, ${share(r.tbps * r.ms / r.slowest)}`
        : "";
      const rate = r.tflops
        ? `${r.tflops.toFixed(1)} TFLOP/s`
        : `${r.tbps!.toFixed(2)} TB/s, ${share(r.tbps!)} of the copy${product}`;
      const alone = r.kernels > 1 && r.tflops
        ? `; slowest kernel ${r.slowest.toFixed(4)} ms, ${
          (r.tflops * r.ms / r.slowest).toFixed(1)
        } TFLOP/s alone`
        : "";
      console.log(
        `${r.id} ${precision}: ${r.ms.toFixed(4)} ms in ${r.kernels} kernel(s), ${rate}, ` +
          `max rel error ${r.error.toExponential(1)}${alone}`,
      );
    } catch (e) {
      console.log(`${k.id}${label} ${precision}: failed: ${(e as Error).message}`);
    }
  }
}
const out = arg("--out");
if (out) {
  Deno.writeTextFileSync(
    out,
    JSON.stringify({ device: profiled.capabilities(), copyMs: copy, rows }, null, 2),
  );
}
