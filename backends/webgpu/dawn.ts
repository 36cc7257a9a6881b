/**
 * Dawn's WebGPU (Chromium's implementation, the `webgpu` npm package) as a `GPU` entry point for
 * Deno and Node: `new WebGpuBackend({ gpu: "dawn" })`, `KILN_GPU=dawn`, or `--gpu dawn`.
 *
 * Why a second implementation in Deno: Deno's own (wgpu) sleeps 10 ms inside every `mapAsync`
 * before it looks at whether the map is done (`ext/webgpu/buffer.rs`; `bench/readback_floor.ts`),
 * so no run that returns its result to the host takes less than about 11 ms, whatever the GPU
 * did. Dawn returns a 4 KB readback in 0.035 ms on the H200 (median of 30, Deno 2.9.6, webgpu
 * 0.6.2) and 0.17 ms on llvmpipe, so a small model's run is its own time on the GPU.
 *
 * @module
 */
import { KilnError } from "../../jit/errors.ts";

/** The `webgpu` package's version kiln loads (Node: whatever the project installed). */
export const DAWN_VERSION = "0.6.2";

/** Options of {@linkcode dawnGpu}. */
export interface DawnOptions {
  /**
   * Dawn's flags, as the package's `create()` takes them: `backend=vulkan|opengles|…`,
   * `enable-dawn-features=…`. Default: none (Dawn picks the platform's backend).
   */
  readonly flags?: readonly string[];
}

/** The `webgpu` package's exports kiln uses. */
interface DawnModule {
  create(flags: string[]): GPU;
}

/** Whether this is Deno. */
const isDeno = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";

/**
 * Dawn's `GPU` entry point, loaded from the `webgpu` package (`npm:webgpu@0.6.2` under Deno, the
 * installed `webgpu` under Node). Throws a {@linkcode KilnError} where the package cannot load.
 */
export async function dawnGpu(options: DawnOptions = {}): Promise<GPU> {
  // A computed specifier: `deno pack` must not make the 51 MB package a dependency of kiln's.
  const specifier = isDeno ? `npm:webgpu@${DAWN_VERSION}` : "webgpu";
  let dawn: DawnModule;
  try {
    dawn = await import(specifier) as DawnModule;
  } catch (e) {
    throw new KilnError(`Dawn (the webgpu package) could not be loaded: ${String(e)}`, {
      code: "backend",
      fix: isDeno
        ? `allow Deno to fetch npm:webgpu@${DAWN_VERSION} (or have it in DENO_DIR), or leave out gpu: "dawn" to use Deno's WebGPU`
        : `npm install webgpu@${DAWN_VERSION}`,
    });
  }
  return dawn.create([...(options.flags ?? [])]);
}
