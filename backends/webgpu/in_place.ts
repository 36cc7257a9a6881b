/**
 * A GPU program's outputs stored over donated inputs (`KernelIR.inPlace`, honored where the
 * kernel's layout reads the input from the output's binding: `shaders/wgsl/in_place.ts`). Each
 * such output has one buffer a run, its home, which holds the input's data when the kernel runs:
 * the argument's own buffer where the run may take it (a donated device tensor, or an upload made
 * for this run alone), else a buffer of the output's into which each repetition first copies the
 * input. Fed back as the next repetition's input (a decode step's present as the next past), the
 * home already holds it.
 *
 * @module
 */
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import { aliasedInputs } from "../../shaders/wgsl/in_place.ts";
import type { KernelLayout } from "../../shaders/wgsl/codegen.ts";
import { GpuStorage } from "./gpu_storage.ts";

/** An output value stored over an input value by kernel `kernel`, `bytes` long. */
export interface StoredOver {
  readonly kernel: number;
  readonly output: number;
  readonly input: number;
  readonly bytes: number;
}

/** Per kernel, the inputs it reads from the output stored over them (input → output index). */
export function kernelAliases(
  kernels: readonly KernelIR[],
  layouts: readonly (KernelLayout | undefined)[],
): Map<number, number>[] {
  return kernels.map((k, i) => {
    const layout = layouts[i];
    return layout && !k.opaque ? aliasedInputs(k, layout) : new Map<number, number>();
  });
}

/** The pairs of `aliases` as values, each `bytes` of its input's type long. */
export function storedOver(
  kernels: readonly KernelIR[],
  aliases: readonly ReadonlyMap<number, number>[],
  bytes: (t: KernelIR["inputs"][number]) => number,
): StoredOver[] {
  return kernels.flatMap((k, kernel) =>
    [...aliases[kernel]].map(([input, output]) => ({
      kernel,
      output: k.outputs[output].value,
      input: k.inputs[input].value,
      bytes: bytes(k.inputs[input]),
    }))
  );
}

/** What a run has bound when it looks for homes (see {@linkcode takenHomes}). */
export interface RunBound {
  /** The run's arguments. */
  readonly args: readonly (RefTensor | DeviceTensor)[];
  /** The argument index of each bound value. */
  readonly argument: ReadonlyMap<number, number>;
  /** The values bound resident (params): a host one's buffer is the program's own. */
  readonly resident: ReadonlySet<number>;
  /** Each bound value's buffer. */
  readonly given: ReadonlyMap<number, GPUBuffer>;
  /** The pooled buffers this run took (its uploads); one taken over joins them. */
  readonly acquired: GPUBuffer[];
  /** Repetitions: each reads the arguments as given, so a repeated run's homes are copies. */
  readonly repeat: number;
}

/**
 * The homes a run takes from its arguments (output value → buffer): a donated device tensor's
 * buffer (the storage hands it over, and it returns to the pool with the run's others unless an
 * output keeps it) or the run's own upload, where no other bound value shares the buffer. Pairs
 * left out store into a buffer of the output's (`copies` fills it).
 */
export function takenHomes(pairs: readonly StoredOver[], run: RunBound): Map<number, GPUBuffer> {
  const homes = new Map<number, GPUBuffer>();
  if (pairs.length === 0 || run.repeat > 1) return homes;
  // Only an argument's buffer can be another's: constants and params given on the host are
  // uploaded into buffers of the program's, so only the rest are counted (a decode step binds
  // some 300 buffers, nearly all its weights).
  const uses = new Map<GPUBuffer, number>();
  for (const [value, at] of run.argument) {
    const b = run.given.get(value);
    if (b && (!run.resident.has(value) || run.args[at] instanceof DeviceTensor)) {
      uses.set(b, (uses.get(b) ?? 0) + 1);
    }
  }
  const uploaded = new Set(run.acquired);
  for (const p of pairs) {
    const buffer = run.given.get(p.input);
    const at = run.argument.get(p.input);
    if (!buffer || at === undefined || uses.get(buffer) !== 1) continue;
    const arg = run.args[at];
    if (arg instanceof DeviceTensor) {
      const storage = arg.storage();
      if (!(storage instanceof GpuStorage)) continue;
      run.acquired.push(storage.takeOver());
    } else if (!uploaded.has(buffer)) continue;
    homes.set(p.output, buffer);
  }
  return homes;
}

/**
 * Encodes, before a repetition over `buffers` (value → buffer), each wanted pair's copy of its
 * input into its output's buffer where the two differ.
 */
export function copies(
  encoder: GPUCommandEncoder,
  pairs: readonly StoredOver[],
  buffers: ReadonlyMap<number, GPUBuffer>,
  wanted: readonly boolean[],
): void {
  for (const p of pairs) {
    const from = buffers.get(p.input), to = buffers.get(p.output);
    if (wanted[p.kernel] && from && to && from !== to) {
      encoder.copyBufferToBuffer(from, 0, to, 0, p.bytes);
    }
  }
}
