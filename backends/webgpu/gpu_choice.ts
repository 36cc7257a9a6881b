/**
 * Which WebGPU implementation the `webgpu` backend runs on. Named (`gpu: "dawn"` or
 * `"navigator"`, `KILN_GPU`, `--gpu`), it is that one. Unnamed (`"auto"`), it is the faster one
 * the machine has: on a hardware adapter, Dawn from the `webgpu` package where it loads — its
 * readback takes microseconds where Deno's sleeps 10 ms, and on the H200 it ran ResNet-50,
 * BERT-base, GPT-2 small and ViT-B/16 in 0.16–0.27 of the time of Deno's WebGPU — else Deno's
 * own; a software adapter (CI's llvmpipe) or a machine with none loads nothing.
 *
 * @module
 */
import { envVar } from "../../jit/support/env.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { isSoftwareAdapter } from "./device_profile.ts";

/** A WebGPU implementation as the options name it. */
export type GpuName = "navigator" | "dawn" | "auto";

/** Whether `value` is a {@linkcode GpuName}. */
export function isGpuName(value: unknown): value is GpuName {
  return value === "navigator" || value === "dawn" || value === "auto";
}

/**
 * The WebGPU implementation `KILN_GPU` names (`dawn`, `navigator` or `auto`; unset: `auto`). Any
 * other value is refused: a misspelt choice must not quietly measure another implementation.
 */
export function gpuChoice(): GpuName {
  const v = envVar("KILN_GPU");
  if (!v) return "auto";
  if (isGpuName(v)) return v;
  throw new KilnError(`KILN_GPU=${v} names no WebGPU implementation`, {
    code: "backend",
    fix: "set KILN_GPU to dawn, navigator or auto, or unset it",
  });
}

/** What the automatic choice looks at. */
export interface GpuCandidates {
  /** Deno's `navigator.gpu`, where the runtime has one. */
  readonly navigator?: GPU;
  /** Loads Dawn (throws where the package cannot load). */
  readonly loadDawn: () => Promise<GPU>;
  /** Where the one line about fetching Dawn goes (stderr). */
  readonly log?: (line: string) => void;
}

/** A load slower than this fetched the package rather than reading it from the cache. */
const FETCHED_MS = 2000;

/** What {@linkcode fastestGpu} chose. */
export interface GpuChosen {
  /** The implementation. */
  readonly gpu: GPU;
  /** Whether it is Dawn. */
  readonly dawn: boolean;
  /**
   * The adapter the choice asked Deno's WebGPU for, where it kept Deno's: the backend takes it
   * rather than asking for a second one (with default options).
   */
  readonly adapter?: GPUAdapter;
}

/**
 * The faster implementation here (see the module's description): Dawn on a hardware adapter
 * where it loads, else Deno's; `dawn` says which was taken.
 */
export async function fastestGpu(c: GpuCandidates): Promise<GpuChosen> {
  const adapter = c.navigator ? await c.navigator.requestAdapter().catch(() => null) : null;
  if (c.navigator && (!adapter || isSoftwareAdapter(adapter))) {
    return adapter ? { gpu: c.navigator, dawn: false, adapter } : { gpu: c.navigator, dawn: false };
  }
  const began = performance.now();
  try {
    const gpu = await c.loadDawn();
    const ms = performance.now() - began;
    if (ms > FETCHED_MS) {
      (c.log ?? console.error)(
        `kiln: fetched Dawn (the webgpu package) for this machine's GPU in ${
          (ms / 1000).toFixed(1)
        } s; ` +
          'gpu: "navigator" (KILN_GPU=navigator, --gpu navigator) keeps Deno\'s WebGPU',
      );
    }
    return { gpu, dawn: true };
  } catch (e) {
    if (c.navigator) return { gpu: c.navigator, dawn: false, ...(adapter ? { adapter } : {}) };
    throw e;
  }
}
