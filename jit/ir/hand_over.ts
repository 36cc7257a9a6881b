/**
 * Data whose makers gave it up to the graphs built from it: a graph keeps it as its param or
 * Constant without the copy that guards a caller's data from the caller's later writes, and the
 * copies graphs made of their callers' data are marked alike. A graph never writes its data, so
 * the graphs a compile's passes rebuild from it keep the same arrays (a 0.5B decoder's compile
 * copied its weights at each of three rewrites: 7.6 s of its 2-core first prefill).
 *
 * @module
 */
import type { TensorData } from "./dtype.ts";

const handedOver = new WeakSet<TensorData>();

/**
 * Marks `data` as given up by its maker (the importer's decoded initializers and made tables, a
 * decomposition's constants): a graph keeps it without a copy. A 4-bit decoder's 550 MB of
 * weights took 1.5 s to copy at its import.
 */
export function handOver<T extends TensorData>(data: T): T {
  handedOver.add(data);
  return data;
}

/** Whether `data` was handed over (see {@linkcode handOver}). */
export function isHandedOver(data: TensorData): boolean {
  return handedOver.has(data);
}
