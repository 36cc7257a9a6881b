/**
 * Resident uploads shared by the programs of one device: a param's data (a model's weight) is
 * uploaded once however many executables read it — a generation's prefill and decode step, a
 * model compiled for several shapes — and freed when the last of them is disposed. Keyed by the
 * data itself, which graphs never change; the importer decodes an initializer once for every
 * import of its model, so its graphs hold the same data. Unshared, a 4-bit decoder's weights
 * went up twice (prefill, then the first decode step: its slowest) and took twice the memory.
 *
 * @module
 */
import type { TensorData } from "../../jit/ir/dtype.ts";
import type { BufferPool } from "./buffer_pool.ts";

/** The resident uploads of one device, shared by its programs. */
export class Residents {
  #pool: BufferPool;
  #entries = new Map<TensorData, { buffer: Promise<GPUBuffer>; users: number }>();

  /** Shared uploads whose buffers go back to `pool`. */
  constructor(pool: BufferPool) {
    this.#pool = pool;
  }

  /** `data`'s buffer, uploaded by `upload` where no program holds it yet; one more user. */
  use(data: TensorData, upload: () => Promise<GPUBuffer>): Promise<GPUBuffer> {
    const entry = this.#entries.get(data);
    if (entry) {
      entry.users++;
      return entry.buffer;
    }
    const buffer = upload();
    this.#entries.set(data, { buffer, users: 1 });
    // A failed upload (out of memory) must not stay shared for every later program.
    buffer.catch(() => this.#entries.delete(data));
    return buffer;
  }

  /** One user of `data`'s buffer fewer: the last one's release frees it. */
  release(data: TensorData): void {
    const entry = this.#entries.get(data);
    if (!entry || --entry.users > 0) return;
    this.#entries.delete(data);
    entry.buffer.then((b) => this.#pool.release([b]), () => {});
  }
}
