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
import { envVar } from "../../jit/support/env.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { hostFs } from "../../jit/support/host_fs.ts";
import { optionalPackage } from "../../jit/support/packages.ts";

/** The `webgpu` package's version kiln loads (Node: whatever the project installed). */
export const DAWN_VERSION = "0.6.2";

/** Options of {@linkcode dawnGpu}. */
export interface DawnOptions {
  /**
   * Dawn's flags, as the package's `create()` takes them: `backend=vulkan|opengles|…`,
   * `enable-dawn-features=…`. Default: none (Dawn picks the platform's backend).
   */
  readonly flags?: readonly string[];
  /**
   * Ask for Dawn's `allow_unsafe_apis` toggle, which its experimental features (subgroup
   * matrices) need. Default false.
   */
  readonly unsafeApis?: boolean;
}

/** The `webgpu` package's exports kiln uses. */
interface DawnModule {
  create(flags: string[]): GPU;
}

/**
 * Dawn's `GPU` entry point, loaded from the `webgpu` package (`npm:webgpu@0.6.2` under Deno, the
 * installed `webgpu` under Node). Throws a {@linkcode KilnError} where the package cannot load.
 */
export async function dawnGpu(options: DawnOptions = {}): Promise<GPU> {
  // Through optionalPackage: `deno pack` must not make the 51 MB package a dependency of kiln's.
  const dawn = await optionalPackage<DawnModule>(
    "webgpu",
    DAWN_VERSION,
    (e, deno) =>
      new KilnError(`Dawn (the webgpu package) could not be loaded: ${String(e)}`, {
        code: "backend",
        fix: deno
          ? `allow Deno to fetch npm:webgpu@${DAWN_VERSION} (or have it in DENO_DIR), or leave out gpu: "dawn" to use Deno's WebGPU`
          : `npm install webgpu@${DAWN_VERSION}`,
      }),
  );
  return dawn.create(
    withToggles(options.flags ?? [], options.unsafeApis ? ["allow_unsafe_apis"] : []),
  );
}

/**
 * Dawn with `flags` where given, else with those this machine needs: its platform's backend
 * where a Vulkan loader is found, else GL (through EGL, made headless first).
 */
export async function machineDawnGpu(
  flags: readonly string[] | undefined,
  unsafeApis: boolean,
): Promise<GPU> {
  if (flags) return await dawnGpu({ flags, unsafeApis });
  // Before Dawn starts its threads: setting the environment while they read it aborted the
  // process. EGL without a display needs it for the GL backend.
  headlessEgl();
  return await dawnGpu({ flags: await vulkanLoader() ? [] : ["backend=opengles"], unsafeApis });
}

/**
 * Dawn toggles kiln always asks for. `vulkan_enable_f16_on_nvidia`: Dawn's Vulkan backend lists
 * no `shader-f16` on NVIDIA GPUs unless asked (a conformance investigation of Dawn's, not a
 * missing Vulkan feature: the H200's driver has them all), so f16 models there were refused or
 * widened; kiln's f16 kernels are checked against f32 on that GPU (`bench/full_models_device.sh`).
 */
const TOGGLES = ["vulkan_enable_f16_on_nvidia"];

/** `flags` with kiln's {@linkcode TOGGLES} and `more` added to their `enable-dawn-features` entry. */
export function withToggles(flags: readonly string[], more: readonly string[] = []): string[] {
  const key = "enable-dawn-features=";
  const at = flags.findIndex((f) => f.startsWith(key));
  const given = at < 0 ? [] : flags[at].slice(key.length).split(",").filter(Boolean);
  const entry = key + [...new Set([...given, ...TOGGLES, ...more])].join(",");
  return at < 0 ? [...flags, entry] : flags.map((f, i) => (i === at ? entry : f));
}

/**
 * Dawn's adapter through its GL backend, for where its platform backend found none (no Vulkan
 * driver, as on a CPU-only VM): Mesa's llvmpipe then runs the kernels, so a named webgpu backend
 * works on any machine (auto leaves a software adapter out). `null` where GL has none either.
 */
export async function dawnGlAdapter(): Promise<GPUAdapter | null> {
  const gl = await dawnGpu({ flags: ["backend=opengles"] });
  // Dawn's GL backend offers only a compatibility-level adapter.
  for (const featureLevel of ["core", "compatibility"]) {
    const options = { featureLevel } as GPURequestAdapterOptions;
    const adapter = await gl.requestAdapter(options).catch(() => null);
    if (adapter) return adapter;
  }
  return null;
}

/**
 * Sets `EGL_PLATFORM=surfaceless` where no display exists and it is unset: EGL needs it for the
 * GL fallback. Call before Dawn starts its threads: setting the environment while they read it
 * aborted the process.
 */
export function headlessEgl(): void {
  if (envVar("DISPLAY") || envVar("WAYLAND_DISPLAY") || envVar("EGL_PLATFORM") !== undefined) {
    return;
  }
  const g = globalThis as {
    Deno?: { env: { set(k: string, v: string): void } };
    process?: { env: Record<string, string | undefined> };
  };
  try {
    if (g.Deno) g.Deno.env.set("EGL_PLATFORM", "surfaceless");
    else if (g.process) g.process.env.EGL_PLATFORM = "surfaceless";
  } catch {
    // Without the permission the GL fallback finds no display: no adapter, a typed error.
  }
}

/**
 * Whether a Vulkan loader can be found (Linux: `libvulkan.so.1` in the loader's cache or on
 * `LD_LIBRARY_PATH`; other systems: assumed). Without one Dawn's default backend finds no
 * adapter, and a second Dawn instance made for GL after that first one crashed the process at
 * times: the GL backend is then asked for from the start.
 */
export async function vulkanLoader(): Promise<boolean> {
  const g = globalThis as { Deno?: { build: { os: string } }; process?: { platform?: string } };
  const os = g.Deno?.build.os ?? g.process?.platform;
  if (os !== "linux") return true;
  const fs = await hostFs();
  if (!fs) return true;
  const cache = await fs.readFile("/etc/ld.so.cache").catch(() => undefined);
  if (cache && new TextDecoder("latin1").decode(cache).includes("libvulkan.so.1")) return true;
  for (const dir of (envVar("LD_LIBRARY_PATH") ?? "").split(":").filter(Boolean)) {
    if (await fs.stat(`${dir}/libvulkan.so.1`).then(() => true, () => false)) return true;
  }
  return false;
}
