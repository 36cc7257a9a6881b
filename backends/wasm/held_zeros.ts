/**
 * Which values a wasm program's arena holds as bytes: block products' and unpackings' zero
 * points, one byte a block as the model holds them, where every kernel reading them reads them so
 * (`zeroBytes` in `shaders/wasm/block_common.ts`). The arena holds every other value a word an
 * element. A value one kernel reads as bytes and another as words (a tied embedding's zero
 * points, gathered by one kernel and multiplied by another) stays words, and the kernels that
 * would have read bytes are generated again without the mark.
 *
 * @module
 */
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import { zeroBytes } from "../../shaders/wasm/block_common.ts";

/** A program's values held as bytes, and the kernels to generate again reading words. */
export interface ZeroHoldings {
  /** Values held as bytes. */
  readonly held: ReadonlySet<number>;
  /** Indices of kernels whose byte reads another kernel's word reads overrule. */
  readonly strip: ReadonlySet<number>;
}

/** The zero points `kernels` may hold as bytes (see the module's note). */
export function zeroHoldings(kernels: readonly KernelIR[]): ZeroHoldings {
  const words = new Set<number>(), readers = new Map<number, number[]>();
  kernels.forEach((k, i) => {
    const bytes = zeroBytes(k) ? zerosInput(k) : undefined;
    k.inputs.forEach(({ value }, j) => {
      if (j === bytes) readers.set(value, [...readers.get(value) ?? [], i]);
      else words.add(value);
    });
  });
  const held = new Set<number>(), strip = new Set<number>();
  for (const [value, reading] of readers) {
    if (!words.has(value)) held.add(value);
    else reading.forEach((i) => strip.add(i));
  }
  return { held, strip };
}

/** `kernel` reading its zero points as words (its `packed` mark on them dropped). */
export function readingWords(kernel: KernelIR): KernelIR {
  const zeros = zerosInput(kernel);
  const inputs = kernel.inputs.map((b, j) => {
    if (j !== zeros) return b;
    const { packed: _, ...words } = b;
    return words;
  });
  return { ...kernel, inputs };
}

/** The input index of `kernel`'s zero points, where it is a block product or unpacking. */
function zerosInput(kernel: KernelIR): number | undefined {
  return (kernel.blockProduct ?? kernel.blockUnpack)?.zeros;
}
