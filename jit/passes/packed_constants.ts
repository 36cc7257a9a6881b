/**
 * 8-bit constants marked for storage four to a word (eight where they are 4-bit zero points). The
 * generated backends widen 8-bit values to a 32-bit word each (WGSL has no 8-bit type), so a
 * quantized model's i8 and u8 weights took as much device memory as their f32 form, and a byte
 * product's tile read four words for one of packed bytes. A constant is written by no kernel, so a
 * backend may hold it as it lies in memory, four to a word, and unpack on read (WebGPU does; wasm
 * and the reference ignore the mark). Marked on every read, or on none: a custom kernel's code
 * (opaque), an attention group's fused kernel and the graph's outputs take words, so a constant
 * any of them reads stays unmarked everywhere.
 *
 * With `intermediates` (every backend that may run the plan holds them so: WebGPU alone), an 8-bit
 * value an elementwise kernel stores as its space lies (a DynamicQuantizeLinear's quantized
 * activation) is marked too, at its store and every read: the kernel writes four lanes a word.
 * BERT-base int8's quantizing passes wrote each byte as a word and its products read them so.
 *
 * @module
 */
import type { HostTensor } from "../ir/host_tensor.ts";
import type { Expr, KernelIR, Packing } from "../ir/kernel_ir.ts";
import type { FusionResult } from "./fuse_options.ts";

/**
 * `fusion` with every read of its 8-bit constants marked `packed`, and with `intermediates` the
 * stores and reads of its 8-bit values that elementwise kernels store whole (see the module's note).
 */
export function packedConstants(
  fusion: FusionResult,
  outputs: readonly number[],
  { intermediates = false } = {},
): FusionResult {
  const words = new Set(outputs);
  for (const k of fusion.kernels) {
    const whole = k.opaque || k.placement || k.group !== undefined;
    if (whole) { for (const b of k.inputs) words.add(b.value); }
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
  const nibbles = nibbleValues(fusion);
  const stored = intermediates ? storedWhole(fusion.kernels, words) : new Set<number>();
  const packing = (v: number): Packing => nibbles.has(v) ? "nibbles" : "bytes";
  const marks = (v: number) => packable(v) || stored.has(v);
  const marked = (k: KernelIR): KernelIR =>
    [...k.inputs, ...k.outputs].some((b) => marks(b.value))
      ? {
        ...k,
        inputs: k.inputs.map((b) => marks(b.value) ? { ...b, packed: packing(b.value) } : b),
        outputs: k.outputs.map((o) => stored.has(o.value) ? { ...o, packed: "bytes" } : o),
      }
      : k;
  return { ...fusion, kernels: fusion.kernels.map(marked) };
}

/**
 * The 8-bit values (none of `words`) that an elementwise kernel stores at its own coordinates,
 * its last axis a multiple of 4 long, each of its stores so: a generator writes its points four at
 * a time (WebGPU's vec4 points), four bytes of one word.
 */
function storedWhole(kernels: readonly KernelIR[], words: ReadonlySet<number>): Set<number> {
  const out = new Set<number>();
  for (const k of kernels) {
    const plain = k.pattern === "elementwise" && !k.reductions.length && !k.reduced.length &&
      !k.opaque && !k.placement && !k.blockUnpack && k.group === undefined;
    const last = k.space.at(-1) ?? 0;
    const whole = (o: KernelIR["outputs"][number]) =>
      o.level === "full" && !o.combine && o.steps.length === 0 && o.shape.join() === k.space.join();
    if (!plain || last === 0 || last % 4 !== 0 || !k.outputs.every(whole)) continue;
    for (const o of k.outputs) {
      if ((o.dtype === "u8" || o.dtype === "i8") && !words.has(o.value)) out.add(o.value);
    }
  }
  return out;
}

/**
 * The u8 constants whose every value is below 16 (a 4-bit MatMulNBits' zero points, which the
 * model holds two to a byte) and that no contraction takes as an operand: held eight to a word,
 * as the model holds them, half the bytes of four to a word (the hand-written vocabulary product of
 * `bench/gemv_bytes.ts` read them 1.5 µs faster of 28 on the H200; kiln's, bound elsewhere then,
 * no faster: session 82). An operand of an integer product stays bytes: byte tiles take its words
 * as four of them.
 */
function nibbleValues(fusion: FusionResult): Set<number> {
  const operands = new Set(fusion.kernels.flatMap(operandValues));
  const small = (v: number) => {
    const t = fusion.constants.get(v);
    return t?.dtype === "u8" && (t.data as Uint8Array).every((x) => x < 16);
  };
  return new Set([...fusion.constants.keys()].filter((v) => !operands.has(v) && small(v)));
}

/** The values `k`'s reductions multiply as they are loaded (through Casts): its operands. */
function operandValues(k: KernelIR): number[] {
  const loaded = (e: Expr): number[] =>
    e.kind === "load"
      ? [k.inputs[e.input].value]
      : e.kind === "alu" && e.op === "Cast"
      ? loaded(e.args[0])
      : [];
  return k.reductions.flatMap((r) =>
    r.expr.kind === "alu" && r.expr.op === "Mul" ? r.expr.args.flatMap(loaded) : []
  );
}
