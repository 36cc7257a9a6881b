/**
 * Memory planning: liveness-based reuse of intermediate buffers within one executable. Each
 * intermediate lives from the kernel that writes it to the last kernel that reads it; buffers are
 * assigned to free slots by byte size (see `slotFor`), so two intermediates share a slot when
 * their lifetimes do not overlap. Graph inputs, params, constants and outputs are not planned (the
 * caller owns them, or they are handed back).
 *
 * @module
 */
import { byteSize } from "../ir/dtype.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import { sizeOf } from "../ir/shape.ts";

/** Where each intermediate lives. */
export interface MemoryPlan {
  /** Byte size of each slot. */
  readonly slots: readonly number[];
  /** Slot of each planned value (graph value id → slot index). */
  readonly assignment: ReadonlyMap<number, number>;
  /** Where in its slot a value starts, in bytes, where not at 0 (combined outputs share one). */
  readonly offsets: ReadonlyMap<number, number>;
  /** Bytes of all slots together (what the plan allocates). */
  readonly plannedBytes: number;
  /** Bytes the intermediates would take without reuse. */
  readonly naiveBytes: number;
}

/**
 * Plans the intermediates of `kernels` (values in `external` are not planned). `until[i]`, where
 * given, is the last kernel that may still run while kernel `i` reads its inputs (kernels a
 * backend runs together, row share by row share: see the wasm backend's chains); a value read
 * there keeps its slot until then. Combined outputs (`KernelOutput.combine`), cleared as a run
 * starts, share a few slots of their own, `stride` bytes apart (a device's binding offset
 * alignment), a kernel's in one that holds none of the words it reads (WebGPU refuses a buffer
 * bound read-only and writable in one dispatch): a run clears each slot at once, where a clear a
 * word had cost BERT-base int8 0.4 ms a run on an H200.
 */
export function planMemory(
  kernels: readonly KernelIR[],
  external: ReadonlySet<number>,
  until: readonly number[] = [],
  stride = 4,
): MemoryPlan {
  const last = new Map<number, number>();
  kernels.forEach((k, i) => k.inputs.forEach((b) => last.set(b.value, until[i] ?? i)));
  const held: number[][] = [];
  kernels.forEach((k, j) => {
    if ((until[j] ?? j) !== j) { for (const b of k.inputs) (held[until[j]] ??= []).push(b.value); }
  });
  const slots: number[] = [];
  const free: number[] = [];
  const assignment = new Map<number, number>();
  // Combined outputs: the word slot of each color, each value's color, its place in its slot.
  const words: number[] = [],
    colors = new Map<number, number>(),
    offsets = new Map<number, number>();
  let naiveBytes = 0;
  kernels.forEach((k, i) => {
    const read = new Set(k.inputs.map((b) => colors.get(b.value)));
    let color = 0;
    while (read.has(color)) color++;
    for (const o of k.outputs) {
      if (external.has(o.value)) continue;
      const bytes = sizeOf(o.shape) * byteSize(o.dtype);
      naiveBytes += bytes;
      if (!o.combine) {
        assignment.set(o.value, slotFor(bytes, slots, free));
        continue;
      }
      const slot = words[color] ??= slots.push(0) - 1;
      offsets.set(o.value, slots[slot]);
      slots[slot] += Math.max(stride, bytes);
      colors.set(o.value, color);
      assignment.set(o.value, slot);
    }
    // Values whose last read ends here free their slots for later kernels: this kernel's
    // inputs, then those read by the kernels running with it.
    for (const v of [...k.inputs.map((b) => b.value), ...(held[i] ?? [])]) {
      const slot = assignment.get(v);
      if (slot === undefined || last.get(v) !== i || colors.has(v)) continue;
      if (!free.includes(slot)) free.push(slot);
    }
  });
  const plannedBytes = slots.reduce((a, b) => a + b, 0);
  return { slots, assignment, offsets, plannedBytes, naiveBytes };
}

/**
 * A slot for a value of `bytes` among the `free` ones (taken from that list), else a new one: the
 * smallest that holds it at no more than twice its size, else the largest smaller one grown to
 * it. A small value in a large slot held it from the large values that came next: a 24-layer
 * decoder's prompt, whose products unpack each layer's weight into a transient buffer (4-35 MB,
 * each read once by the next kernel), planned four 35 MB slots and seven 17 MB ones, the small
 * activations sitting in the large ones.
 */
function slotFor(bytes: number, slots: number[], free: number[]): number {
  const fits = free.filter((s) => slots[s] >= bytes && slots[s] <= 2 * bytes + SMALL_WASTE);
  const grows = free.filter((s) => slots[s] < bytes);
  const pick = fits.sort((a, b) => slots[a] - slots[b])[0] ??
    grows.sort((a, b) => slots[b] - slots[a])[0];
  if (pick === undefined) return slots.push(bytes) - 1;
  free.splice(free.indexOf(pick), 1);
  slots[pick] = Math.max(slots[pick], bytes);
  return pick;
}

/** Bytes a slot may waste on a value whatever its size (small values share small slots freely). */
const SMALL_WASTE = 64 * 1024;
