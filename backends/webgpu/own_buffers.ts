/**
 * Buffers a program keeps across its runs: one per binding for its host arguments, and one per
 * small intermediate. Pipelined runs (a generation's next step submitted before its token is
 * read) then bind the same buffers and find their bind groups, where pooled buffers came back in
 * an order that varied with the runs' timing (11 bind groups made a decode step against 2, a
 * 2-layer decoder). Sharing them is safe because a queue runs submissions in order: a run writes
 * them after the runs before it have read them. Large intermediates stay pooled, shared with the
 * device's other programs.
 *
 * @module
 */
import type { BufferPool } from "./buffer_pool.ts";
import { STORAGE } from "./gpu_storage.ts";

/** Intermediates of at most this many bytes get a buffer of the program's own. */
export const SMALL_BYTES = 256 * 1024;

/** One program's own buffers (see the module's description). */
export class OwnBuffers {
  #device: GPUDevice;
  #pool: BufferPool;
  #buffers = new Map<number, GPUBuffer>();
  #small = new Map<string, GPUBuffer>();
  /** Bindings a run has written and not yet submitted: a run meanwhile takes pooled buffers. */
  #writing = new Set<number>();

  /** Buffers of `device`, taken from and given back to `pool`. */
  constructor(device: GPUDevice, pool: BufferPool) {
    this.#device = device;
    this.#pool = pool;
  }

  /**
   * Binding `i`'s buffer with `stored` written into it (the stored form of the caller's `data`),
   * noted in the run's `writing`; `undefined` where another run has written it and not yet
   * submitted.
   */
  write(
    i: number,
    stored: ArrayBufferView,
    data: ArrayBufferView,
    writing: number[],
  ): Promise<GPUBuffer> | undefined {
    if (this.#writing.has(i)) return undefined;
    this.#writing.add(i);
    writing.push(i);
    const bytes = Math.max(4, stored.byteLength);
    const own = this.#buffers.get(i);
    if (own && own.size >= bytes) return Promise.resolve(this.#written(own, stored));
    if (own) this.#pool.release([own]);
    this.#buffers.delete(i);
    const now = this.#pool.reuse(bytes, STORAGE);
    if (now) return Promise.resolve(this.#kept(i, now, stored));
    // The caller may change its array once `run` returns: copied before the buffer is awaited.
    const copy = stored === data ? new Uint8Array(copyOf(stored)) : stored;
    return this.#pool.acquire(bytes, STORAGE, false).then((b) => this.#kept(i, b, copy));
  }

  /** The run that wrote `bindings` has submitted (or failed). */
  submitted(bindings: readonly number[]): void {
    for (const i of bindings) this.#writing.delete(i);
  }

  /** The program's own buffer `key`, where it has one already. */
  smallNow(key: string): GPUBuffer | undefined {
    return this.#small.get(key);
  }

  /** The program's own buffer `key` of `bytes` (at most {@linkcode SMALL_BYTES}). */
  async small(key: string, bytes: number): Promise<GPUBuffer> {
    let buffer = this.#small.get(key);
    if (!buffer) this.#small.set(key, buffer = await this.#pool.acquire(bytes, STORAGE, false));
    return buffer;
  }

  /** Gives every buffer back to the pool. */
  dispose(): void {
    this.#pool.release([...this.#buffers.values(), ...this.#small.values()]);
    this.#buffers.clear();
    this.#small.clear();
  }

  #kept(i: number, buffer: GPUBuffer, stored: ArrayBufferView): GPUBuffer {
    this.#buffers.set(i, buffer);
    return this.#written(buffer, stored);
  }

  #written(buffer: GPUBuffer, stored: ArrayBufferView): GPUBuffer {
    if (stored.byteLength) {
      this.#device.queue.writeBuffer(
        buffer,
        0,
        stored.buffer as ArrayBuffer,
        stored.byteOffset,
        stored.byteLength,
      );
    }
    return buffer;
  }
}

/** The bytes of `view`, copied. */
function copyOf(view: ArrayBufferView): ArrayBuffer {
  return (view.buffer as ArrayBuffer).slice(view.byteOffset, view.byteOffset + view.byteLength);
}
