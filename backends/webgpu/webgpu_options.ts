/**
 * The options of the WebGPU backend (`webgpu_backend.ts`): the device it asks for, the
 * implementation it runs on, and the kernel forms it may choose, each with its default.
 *
 * @module
 */
import type { GpuName } from "./gpu_choice.ts";

/** Options of a `WebGpuBackend`. */
export interface WebGpuOptions {
  /** Most bytes the buffer pool keeps (default: half of 8 × the largest storage binding, ≤ 2 GiB). */
  readonly poolCapBytes?: number;
  /** Adapter power preference. */
  readonly powerPreference?: "low-power" | "high-performance";
  /**
   * The WebGPU implementation: a `GPU` entry point, `"navigator"` (`navigator.gpu`: Deno's own,
   * wgpu) or `"dawn"` (Dawn, the `webgpu` npm package, loaded by `dawnGpu`: its readback takes
   * 0.035 ms on the H200 where Deno's takes 11) or `"auto"`: Dawn on a hardware adapter where
   * the package loads, else Deno's (see `gpu_choice.ts`). Default: `KILN_GPU` from the
   * environment, else `"auto"`. On Node pass `"dawn"` or the package's `create([])`: a `GPU`
   * given that is not `navigator.gpu` is taken as Dawn's (its pipelines and readbacks made as
   * Dawn's are best made).
   */
  readonly gpu?: GPU | GpuName;
  /**
   * Dawn's flags where `gpu` is `"dawn"` (see `DawnOptions.flags`). Default: `KILN_DAWN_FLAGS`
   * from the environment, split at spaces (`backend=opengles` on a machine with only EGL,
   * which also wants `EGL_PLATFORM=surfaceless` where there is no display).
   */
  readonly dawnFlags?: readonly string[];
  /**
   * After a compile longer than about 3 s on an NVIDIA GPU, make a second device
   * and release it (about 0.1 s): the driver lets the clock fall to its floor 3.5 s after the
   * device was made, which left the first 20-40 runs after such a compile 3× slower
   * (`clock_wake.ts`). Default: on, unless `KILN_CLOCK_WAKE=0`.
   */
  readonly clockWake?: boolean;
  /**
   * Adapter feature level. Default: `"core"`, then `"compatibility"` where no core adapter
   * exists (Dawn's software adapters, SwiftShader and llvmpipe through EGL, offer only that).
   */
  readonly featureLevel?: "core" | "compatibility";
  /**
   * Time every kernel on the device with timestamp queries (where the device has
   * `timestamp-query`), read through `Executable.deviceTimes()`. Off by default: the queries
   * ride along in each run's one readback, but they cost a little.
   */
  readonly profile?: boolean;
  /**
   * Run attention groups (scores → softmax → values) as one flash kernel (`shaders/wgsl/flash.ts`,
   * the scores never reach device memory): true wherever one applies; false only for groups whose
   * scores do not fit the largest storage binding. Default: also where it was measured faster than
   * the three kernels it replaces (heads over 32, 128 keys or more, 256 workgroups or more:
   * `flashPays`), except on a software adapter, whose shader compiler takes 25-45 s for a flash
   * kernel of 64 rows.
   */
  readonly flashAttention?: boolean;
  /**
   * Split the K of a matmul (or convolution) whose output tiles are too few to fill the GPU
   * among up to four slices of each workgroup, summed through workgroup memory. Default: on,
   * except on a software adapter, whose shader compiler took 7-50 s for each such kernel. On the
   * H200 it took ResNet-18's kernels from 4.99 to 2.22 ms a run.
   */
  readonly splitK?: boolean;
  /**
   * Least multiply-adds of a convolution whose patches are stored as a matrix before its
   * product (im2col), which then tiles as a plain matmul with the batch folded into its rows,
   * instead of gathering them element by element as its tiles fill. Default 2^24; `Infinity`:
   * never.
   */
  readonly storedPatches?: number;
  /**
   * Least elements of attention's keys, read through a transposing view, that are stored by head
   * before the attention kernels read them (`DeviceProfile.storedKeys`); default 2^16, Infinity
   * never.
   */
  readonly storedKeys?: number;
  /**
   * Sum the K of a product of few outputs and a deep K (by a shared weight, or a convolution
   * whose patches are stored) in parts, each part's tiles a kernel of their own, added up by a
   * second kernel with the epilogue: the parts multiply the workgroups that fill the GPU.
   * Default on; `KILN_SPLIT_SUMS=0` in the environment turns it off. On the H200 it took
   * ResNet-50 at batch 8 from 9.6-10.0 to 8.7-8.9 ms and ViT-B/16 from 4.6-5.6 to 4.1-5.2
   * (`bench/REPORT-gpu.md`, "Session 46").
   */
  readonly splitSums?: boolean;
  /**
   * Take a DynamicQuantizeLinear's range in the kernel that computes its input, two words it
   * updates by atomics as it stores (`KernelOutput.combine`), instead of two kernels of row
   * ranges and their finish. Default on; `KILN_COMBINED_RANGES=0` in the environment turns it
   * off. On the H200 it took BERT-base int8 from 243 to 171 kernels and its device time from
   * 2.92 to 2.32 ms (`bench/REPORT-quant.md`, session 83).
   */
  readonly combinedRanges?: boolean;
  /**
   * Take the largest storage binding to be this many bytes where the device allows more, as a
   * device with that limit would (to check that a program fits one). Kernels with larger buffers
   * run elsewhere, attention groups among them as flash kernels where one applies.
   */
  readonly maxStorageBufferBytes?: number;
  /**
   * Let cost-driven policies place work on a software adapter (llvmpipe, lavapipe, SwiftShader,
   * WARP, or any `isFallbackAdapter`). Default: `KILN_ALLOW_SOFTWARE_GPU=1` in the environment,
   * else `false` — such an adapter is then used only when the webgpu backend is named.
   */
  readonly allowSoftware?: boolean;
  /**
   * Run f16 matmuls on the GPU's matrix units (tensor cores) through subgroup matrices where the
   * device has them (Dawn on NVIDIA, with its `allow_unsafe_apis` toggle, which kiln then asks
   * for: the feature is experimental; kiln's own kernels are its only user).
   * Default: `KILN_MATRIX_UNITS=0` in the environment turns it off, else on.
   */
  readonly matrixUnits?: boolean;
  /**
   * Combine row reductions (norms, softmax, one-row products) by subgroup shuffles where the
   * device has `subgroups` of one size, instead of workgroup memory and barriers alone.
   * Default: `KILN_SUBGROUPS=0` in the environment turns it off, else on.
   */
  readonly subgroups?: boolean;
  /**
   * Sum block products of A rounded to 8 bits (MatMulNBits of `accuracy_level` 4), and quantized
   * products over bytes (a u8 activation by i8 weights: MatMulInteger, QDQ and QLinear products),
   * in integers with WGSL's `dot4I8Packed` where the implementation has
   * `packed_4x8_integer_dot_product`; off, those sum the same integers in exact f32 chunks.
   * On the H200 BERT-base int8's first run over bytes took 514-544 ms against 683-768 in chunks
   * (12 kernels fewer: a deep K needs no chunks in i32) and the runs after it were as fast or
   * faster (`bench/REPORT-quant.md`, session 65); session 63's slow
   * first runs over bytes were the GPU's clock, which the clock wake now raises
   * ({@linkcode WebGpuOptions.clockWake}). Default: `KILN_PACKED_DOTS=0` in the environment turns
   * it off, else on.
   */
  readonly packedDots?: boolean;
}

/** The keys of {@linkcode WebGpuOptions}: a misspelt one is refused (`checkOptions`). */
export const WEBGPU_OPTIONS: readonly (keyof WebGpuOptions)[] = [
  "poolCapBytes",
  "powerPreference",
  "gpu",
  "dawnFlags",
  "clockWake",
  "featureLevel",
  "profile",
  "flashAttention",
  "splitK",
  "storedPatches",
  "storedKeys",
  "splitSums",
  "combinedRanges",
  "maxStorageBufferBytes",
  "allowSoftware",
  "matrixUnits",
  "subgroups",
  "packedDots",
];
