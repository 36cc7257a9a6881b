/**
 * What a WebGPU device is, as kiln's placement and code generation see it: its profile (limits,
 * features, whether it is a software implementation, its matrix units and subgroup sizes), and
 * how many storage buffers one kernel may bind on it.
 *
 * @module
 */
import type { DeviceProfile } from "../../jit/runtime/backend.ts";

/**
 * Storage buffers one kernel may bind: the per-stage limit, below the bind group's binding indices
 * (uniforms take a few), and at most {@linkcode MAX_KERNEL_BINDINGS}. wgpu on an H200 allows a
 * million per stage but 1000 indices a group: a Concat of 5000 inputs fused into a kernel of 1000
 * bindings that failed to build, and at 992 its 15 kernels took 14.7 s to build.
 */
export function storageBindings(limits: GPUSupportedLimits): number {
  return Math.min(
    limits.maxStorageBuffersPerShaderStage,
    limits.maxBindingsPerBindGroup - 8,
    MAX_KERNEL_BINDINGS,
  );
}

/** Most storage buffers a kernel binds whatever the device allows: a driver compiles each one. */
export const MAX_KERNEL_BINDINGS = 64;

/** Adapter descriptions of software implementations of WebGPU. */
const SOFTWARE_ADAPTER = /llvmpipe|lavapipe|swiftshader|softpipe|microsoft basic render|software/i;

/** Whether `adapter` is a software implementation. */
export function isSoftwareAdapter(adapter: GPUAdapter): boolean {
  const info = adapter.info as GPUAdapterInfo & { isFallbackAdapter?: boolean };
  return info.isFallbackAdapter === true ||
    SOFTWARE_ADAPTER.test(`${info.vendor} ${info.architecture} ${info.device} ${info.description}`);
}

/** What the profile needs to know beside the adapter and device. */
export interface ProfileOptions {
  /** Whether the implementation is Dawn (part of the name: verdicts never cross implementations). */
  readonly dawn: boolean;
  /** Whether a software adapter is let run work (`allowSoftware`, `KILN_ALLOW_SOFTWARE_GPU`). */
  readonly allowSoftware: boolean;
  /** A cap on the bytes of one storage binding below the device's. */
  readonly maxStorageBufferBytes?: number;
  /** The measured readback latency, where one was measured. */
  readonly readbackMs?: number;
  /** Least multiply-adds of a conv whose patches are stored (`WebGpuOptions.storedPatches`). */
  readonly storedPatches?: number;
  /** Least elements of keys stored by head (`WebGpuOptions.storedKeys`). */
  readonly storedKeys?: number;
  /** Whether products of few outputs sum K in parts (`WebGpuOptions.splitSums`). */
  readonly splitSums?: boolean;
  /** Whether kernels combine ranges as they store (`WebGpuOptions.combinedRanges`). */
  readonly combinedRanges?: boolean;
  /** Whether WGSL has packed byte dot products here and they are used (`WebGpuOptions.packedDots`). */
  readonly packedDots?: boolean;
}

/**
 * Least multiply-adds of a conv whose patches WebGPU stores before its product (see
 * `DeviceProfile.storedPatches`; fusion's rule, `storedPatches` in `fuse_contractions.ts`, adds
 * when it pays). H200 through Dawn (2026-11-29), old and new tree alternating, medians of 20 runs
 * a process: ResNet-50 at batch 1 4.18-4.26 -> 3.32-3.37 ms, at batch 8 12.5-12.8 -> 11.0 ms;
 * ViT-B/16 (its patch embedding) 5.64-5.96 -> 6.05-6.08. No shared model has a convolution this
 * large; below it a dispatch and a pass over the patches weigh more.
 */
export const PATCHES_FROM = 2 ** 24;

/**
 * Least elements of attention's keys, read through a transposing view, stored by head first
 * (`DeviceProfile.storedKeys`): BERT-base's 12 heads × 64 × 128 tokens (98,304) gained, models of
 * a dozen tokens lost the copy's dispatch (device time on the H200, `.device/scratch/s49g.sh`).
 */
export const KEYS_FROM = 2 ** 16;

/** The profile of `device` on `adapter` (zeros and `false` before they are acquired). */
export function webgpuProfile(
  adapter: GPUAdapter | undefined,
  d: GPUDevice | undefined,
  o: ProfileOptions,
): DeviceProfile {
  const info = adapter?.info;
  return {
    // The implementation is part of the name, so that placement verdicts and calibrations,
    // keyed by the profile, are never carried from one implementation to the other.
    name: info
      ? `${info.vendor || "unknown vendor"} ${info.architecture || ""} ${info.description || ""}${
        o.dawn ? " (Dawn)" : ""
      }`.replace(/\s+/g, " ").trim()
      : "WebGPU (not acquired)",
    f16: d?.features.has("shader-f16") ?? false,
    // WGSL has no f64: f64 graphs run here only narrowed to f32 (compile's narrowF64).
    f64: false,
    subgroups: d?.features.has("subgroups") ?? false,
    simd: false,
    threads: 0,
    // Its block products compute an elementwise A as they stage it (`shaders/wgsl/block_product.ts`).
    blockPrologues: true,
    // Its points store over a donated input only where a Where does not keep it (`in_place.ts`).
    keptStores: true,
    // Its kernels combine a range's words by atomics (`shaders/wgsl/combined.ts`).
    combinedRanges: o.combinedRanges ?? true,
    // Its vec4 points write 8-bit values four to a word (`storeLanes`).
    packedIntermediates: true,
    storedPatches: o.storedPatches ?? PATCHES_FROM,
    splitSums: o.splitSums ?? false,
    // Its attention kernels read keys a thread each (see `DeviceProfile.storedKeys`).
    storedKeys: o.storedKeys ?? KEYS_FROM,
    // Quantized products over bytes tile in `dot4I8Packed` words (`shaders/wgsl/byte_tiles.ts`).
    // Its block products read A packed by its producer, or round it (`block_product_int8.ts`).
    ...(o.packedDots &&
      { integerDot: "bytes" as const, byteDot: true, packedRows: true, roundingProducts: true }),
    maxWorkgroupSize: d?.limits.maxComputeInvocationsPerWorkgroup ?? 0,
    maxStorageBufferBytes: Math.min(
      d?.limits.maxStorageBufferBindingSize ?? 0,
      o.maxStorageBufferBytes ?? Infinity,
    ),
    maxBindings: d ? storageBindings(d.limits) : 0,
    timestampQuery: d?.features.has("timestamp-query") ?? false,
    software: adapter !== undefined && isSoftwareAdapter(adapter) && !o.allowSoftware,
    ...(o.readbackMs === undefined ? {} : { readbackMs: o.readbackMs }),
    bf16: false,
    ...subgroupSizes(info),
    matrixUnits: matrixUnitsUsable(adapter, d),
    ...(info ? { deviceId: [info.vendor, info.architecture, info.device].join(":") } : {}),
  };
}

/** The WebGPU feature of subgroup matrices (Dawn's, with its `allow_unsafe_apis` toggle). */
export const MATRIX_FEATURE = "chromium-experimental-subgroup-matrix" as GPUFeatureName;

/** A subgroup-matrix configuration, as Dawn's adapter info lists them. */
interface MatrixConfig {
  readonly M: number;
  readonly N: number;
  readonly K: number;
  readonly componentType: unknown;
  readonly resultComponentType: unknown;
}

/**
 * Whether kiln's matrix kernels (`shaders/wgsl/matrix_matmul.ts`) can run on `device`: it has
 * subgroup matrices with a 16×16×16 f16 → f32 configuration, `shader-f16`, and subgroups of
 * exactly 32 (the kernels count a workgroup's subgroups in 32s).
 */
export function matrixUnitsUsable(
  adapter: GPUAdapter | undefined,
  d: GPUDevice | undefined,
): boolean {
  return d?.features.has("shader-f16") === true &&
    hasMatrixConfig(adapter, d, { K: 16, componentType: "f16", resultComponentType: "f32" });
}

/**
 * Whether the matrix kernels can run quantized products over bytes on `device`: subgroup
 * matrices with a 16×16×32 i8 → i32 configuration and subgroups of exactly 32.
 */
export function byteMatricesUsable(
  adapter: GPUAdapter | undefined,
  d: GPUDevice | undefined,
): boolean {
  return hasMatrixConfig(adapter, d, { K: 32, componentType: "i8", resultComponentType: "i32" });
}

/** Whether `device` has subgroup matrices, subgroups of 32 and a 16×16×`K` `want` configuration. */
function hasMatrixConfig(
  adapter: GPUAdapter | undefined,
  d: GPUDevice | undefined,
  want: { K: number; componentType: string; resultComponentType: string },
): boolean {
  if (!adapter || !d?.features.has(MATRIX_FEATURE)) return false;
  const info = adapter.info as GPUAdapterInfo & { subgroupMatrixConfigs?: readonly MatrixConfig[] };
  const sizes = subgroupSizes(info).subgroupSizes;
  return sizes?.[0] === 32 && sizes[1] === 32 &&
    (info.subgroupMatrixConfigs ?? []).some((c) =>
      c.M === 16 && c.N === 16 && c.K === want.K &&
      String(c.componentType) === want.componentType &&
      String(c.resultComponentType) === want.resultComponentType
    );
}

/**
 * The subgroup size row kernels may shuffle within on `device`: where it has `subgroups` and its
 * adapter reports one size (least and largest agree: NVIDIA's 32), a power of two; else
 * `undefined` (a size that may vary between pipelines cannot be compiled in).
 */
export function shuffleSize(
  adapter: GPUAdapter | undefined,
  d: GPUDevice | undefined,
): number | undefined {
  if (!adapter || !d?.features.has("subgroups")) return undefined;
  const sizes = subgroupSizes(adapter.info).subgroupSizes;
  const size = sizes?.[0];
  return size && size === sizes[1] && size >= 4 && (size & (size - 1)) === 0 ? size : undefined;
}

/** The adapter's subgroup sizes, where its info reports them (newer WebGPU implementations). */
function subgroupSizes(info: GPUAdapterInfo | undefined): { subgroupSizes?: [number, number] } {
  const sizes = info as { subgroupMinSize?: number; subgroupMaxSize?: number } | undefined;
  const [min, max] = [sizes?.subgroupMinSize, sizes?.subgroupMaxSize];
  return min && max ? { subgroupSizes: [min, max] } : {};
}
