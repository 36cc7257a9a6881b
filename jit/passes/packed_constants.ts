/**
 * 8-bit constants marked for storage four to a word. The generated backends widen 8-bit values to
 * a 32-bit word each (WGSL has no 8-bit type), so a quantized model's i8 and u8 weights took as
 * much device memory as their f32 form, and a byte product's tile read four words for one of
 * packed bytes. A constant is written by no kernel, so a backend may hold it as it lies in memory,
 * four to a word, and unpack on read (WebGPU does; wasm and the reference ignore the mark). Marked
 * on every read, or on none: a custom kernel's code (opaque), an attention group's fused kernel
 * and the graph's outputs take words, so a constant any of them reads stays unmarked everywhere.
 *
 * @module
 */
import type { HostTensor } from "../ir/host_tensor.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import type { FusionResult } from "./fuse_options.ts";

/** `fusion` with every read of its 8-bit constants marked `packed` (see the module's note). */
export function packedConstants(fusion: FusionResult, outputs: readonly number[]): FusionResult {
  const words = new Set(outputs);
  for (const k of fusion.kernels) {
    if (k.opaque || k.group !== undefined) { for (const b of k.inputs) words.add(b.value); }
  }
  // Two constants may view the same bytes (a Reshape's view): a backend shares one upload of
  // them, so the bytes a word reader takes stay words for every reader.
  const memories = new Map<ArrayBufferLike, number>();
  const viewOf = ({ data }: HostTensor) => {
    if (!memories.has(data.buffer)) memories.set(data.buffer, memories.size);
    return `${memories.get(data.buffer)} ${data.byteOffset} ${data.byteLength}`;
  };
  const wordViews = new Set(
    [...words].flatMap((v) => {
      const t = fusion.constants.get(v);
      return t ? [viewOf(t)] : [];
    }),
  );
  const packable = (v: number) => {
    const t = fusion.constants.get(v);
    return t !== undefined && (t.dtype === "i8" || t.dtype === "u8") && !words.has(v) &&
      !wordViews.has(viewOf(t));
  };
  const marked = (k: KernelIR): KernelIR =>
    k.inputs.some((b) => packable(b.value))
      ? { ...k, inputs: k.inputs.map((b) => packable(b.value) ? { ...b, packed: true } : b) }
      : k;
  return { ...fusion, kernels: fusion.kernels.map(marked) };
}
