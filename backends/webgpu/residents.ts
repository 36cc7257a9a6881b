/**
 * Resident uploads shared by the programs of one device: a param's data (a model's weight) is
 * uploaded once however many executables read it — a generation's prefill and decode step, a
 * model compiled for several shapes — and freed when the last of them is disposed. Keyed by the
 * bytes the data views (its buffer, offset, length and element type), which graphs never
 * change; the importer decodes an initializer once for every import of its model, so its graphs
 * hold the same bytes, though a graph's view of a constant may be another array over them (a
 * Reshape's, `jit/passes/constant_views.ts`). Unshared, a 4-bit decoder's weights went up twice
 * (prefill, then the first decode step: its slowest) and took twice the memory; shared by the
 * array alone, a prefill's reshaped views of the packed words and scales went up again (the
 * 2-layer test decoder: 167 KB resident where 114 KB are its weights).
 *
 * @module
 */
import type { TensorData } from "../../jit/ir/dtype.ts";
import type { Packing } from "../../jit/ir/kernel_ir.ts";
import type { BufferPool } from "./buffer_pool.ts";

/** The resident uploads of one device, shared by its programs. */
export class Residents {
  #pool: BufferPool;
  /** Uploads by the memory their data views, then by the view's place and element type. */
  #entries = new Map<ArrayBufferLike, Map<string, { buffer: Promise<GPUBuffer>; users: number }>>();

  /** Shared uploads whose buffers go back to `pool`. */
  constructor(pool: BufferPool) {
    this.#pool = pool;
  }

  /**
   * `data`'s buffer, uploaded by `upload` where no program holds it yet; one more user. `packed`:
   * its elements four or eight to a word (an 8-bit constant), an upload apart from its words.
   */
  use(data: TensorData, upload: () => Promise<GPUBuffer>, packed?: Packing): Promise<GPUBuffer> {
    const views = this.#entries.get(data.buffer) ?? new Map();
    this.#entries.set(data.buffer, views);
    const key = viewKey(data, packed), entry = views.get(key);
    if (entry) {
      entry.users++;
      return entry.buffer;
    }
    const buffer = upload();
    views.set(key, { buffer, users: 1 });
    // A failed upload (out of memory) must not stay shared for every later program.
    buffer.catch(() => this.#forget(data, packed));
    return buffer;
  }

  /** One user of `data`'s buffer (held as `packed` says) fewer: the last one's release frees it. */
  release(data: TensorData, packed?: Packing): void {
    const entry = this.#entries.get(data.buffer)?.get(viewKey(data, packed));
    if (!entry || --entry.users > 0) return;
    this.#forget(data, packed);
    entry.buffer.then((b) => this.#pool.release([b]), () => {});
  }

  /** Drops `data`'s entry (and its memory's map, once empty). */
  #forget(data: TensorData, packed: Packing | undefined): void {
    const views = this.#entries.get(data.buffer);
    views?.delete(viewKey(data, packed));
    if (views?.size === 0) this.#entries.delete(data.buffer);
  }
}

/** Where `data` lies in its memory, what its elements are and how they are held. */
function viewKey(data: TensorData, packed: Packing | undefined): string {
  return `${data.constructor.name} ${data.byteOffset} ${data.byteLength} ${packed ?? "words"}`;
}
