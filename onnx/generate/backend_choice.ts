/**
 * Where a generation runs when its caller names no backend. A generation is two executables
 * (prefill and the decode step) handing their caches to each other at every token, so both run on
 * one backend, chosen once: a hardware GPU where the machine has one (Dawn where it loads, see
 * `backends/webgpu/gpu_choice.ts`), else the fastest CPU backend. The scheduler's `auto` policy
 * had placed each executable on its own, compiling it for every backend and measuring each: on an
 * H100 machine a 0.5B-shaped decoder's first prefill took 49 s and its decode ran at 60-67
 * tokens/s, where the GPU alone prefilled in 4-5 s and decoded at 300-470.
 *
 * @module
 */
import { registeredBackends } from "../../jit/compile.ts";
import type { CompileOptions } from "../../jit/compile_options.ts";
import type { Backend } from "../../jit/runtime/backend.ts";

/**
 * The backends a generation with `options` tries, in order: the first that compiles its steps
 * runs them all. Empty where the caller decides (a backend or a policy named, or fusion off): the
 * options then go to the compiler as they are.
 */
export async function generationBackends(options: CompileOptions): Promise<readonly Backend[]> {
  if (options.backend !== undefined || options.policy !== undefined || options.fuse === false) {
    return [];
  }
  const all = (options.registry ?? registeredBackends()).list().filter((b) => !b.deviceLost);
  const gpus = await Promise.all(all.filter((b) => b.kind === "gpu").map(hardware));
  const cpus = all.filter((b) => b.kind !== "gpu");
  // Compiled CPU code before the interpreter, which runs only what nothing else can.
  const ranked = [
    ...cpus.filter((b) => !b.capabilities().interpreter),
    ...cpus.filter((b) => b.capabilities().interpreter),
  ];
  return [...gpus.filter((b) => b !== undefined), ...ranked];
}

/**
 * `gpu` where it prepares on a hardware device; undefined where it fails to or its device is
 * software (exact but slow: a generation there is slower than on the CPU, and only a caller who
 * names the backend runs on it).
 */
async function hardware(gpu: Backend): Promise<Backend | undefined> {
  try {
    await gpu.prepare();
  } catch {
    return undefined;
  }
  return gpu.deviceLost || gpu.capabilities().software ? undefined : gpu;
}
