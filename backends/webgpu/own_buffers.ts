/**
 * Buffers a program keeps across its runs: one per binding for its host arguments, and one per
 * small intermediate. Pipelined runs (a generation's next step submitted before its token is
 * read) then bind the same buffers and find their bind groups, where pooled buffers came back in
 * an order that varied with the runs' timing (11 bind groups made a decode step against 2, a
 * 2-layer decoder). Sharing them is safe because a queue runs submissions in order: a run writes
 * them after the runs before it have read them. Large intermediates stay pooled, shared with the
 * device's other programs.
 *
 * A large argument is written through a mapped upload buffer of the binding's own, which the run
 * copies from: Dawn stages a `writeBuffer` past its 4 MiB ring in a fresh allocation each time,
 * and first touching that memory took ResNet-50's 4.8 MB input at batch 8 about 2 ms a run on the
 * H200's host, in series with the GPU.
 *
 * @module
 */
import type { BufferPool } from "./buffer_pool.ts";
import { STORAGE } from "./gpu_storage.ts";

/** Intermediates of at most this many bytes get a buffer of the program's own. */
export const SMALL_BYTES = 256 * 1024;

/** Arguments of at least this many bytes are written through an upload buffer of their own. */
export const STAGED_BYTES = 1 << 20;

const MAP_WRITE = 0x02;
const UPLOAD = MAP_WRITE | 0x04; // MAP_WRITE | COPY_SRC

/** A binding's upload buffer: mapped for the next write, or written and awaiting its run. */
interface Upload {
  readonly buffer: GPUBuffer;
  mapped: boolean;
  /** Where the run copies it, and how many bytes, once written. */
  copy?: { readonly to: GPUBuffer; readonly bytes: number };
}

/** One program's own buffers (see the module's description). */
export class OwnBuffers {
  #device: GPUDevice;
  #pool: BufferPool;
  #buffers = new Map<number, GPUBuffer>();
  #small = new Map<string, GPUBuffer>();
  /** Bindings a run has written and not yet submitted: a run meanwhile takes pooled buffers. */
  #writing = new Set<number>();
  /** Large arguments' upload buffers, by binding. */
  #uploads = new Map<number, Upload>();

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
    if (own && own.size >= bytes) return Promise.resolve(this.#written(i, own, stored));
    if (own) this.#pool.release([own]);
    this.#buffers.delete(i);
    const now = this.#pool.reuse(bytes, STORAGE);
    if (now) return Promise.resolve(this.#kept(i, now, stored));
    // The caller may change its array once `run` returns: copied before the buffer is awaited.
    const copy = stored === data ? new Uint8Array(copyOf(stored)) : stored;
    return this.#pool.acquire(bytes, STORAGE, false).then((b) => this.#kept(i, b, copy));
  }

  /** Encodes the copies out of the upload buffers that `bindings` were written through. */
  encodeUploads(encoder: GPUCommandEncoder, bindings: readonly number[]): void {
    for (const i of bindings) {
      const upload = this.#uploads.get(i);
      if (upload?.copy) {
        encoder.copyBufferToBuffer(upload.buffer, 0, upload.copy.to, 0, upload.copy.bytes);
      }
    }
  }

  /** The run that wrote `bindings` has submitted (or failed): their upload buffers map again. */
  submitted(bindings: readonly number[]): void {
    for (const i of bindings) {
      this.#writing.delete(i);
      const upload = this.#uploads.get(i);
      if (upload?.copy) this.#remap(i, upload);
    }
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
    for (const upload of this.#uploads.values()) upload.buffer.destroy();
    this.#uploads.clear();
  }

  #kept(i: number, buffer: GPUBuffer, stored: ArrayBufferView): GPUBuffer {
    this.#buffers.set(i, buffer);
    return this.#written(i, buffer, stored);
  }

  #written(i: number, buffer: GPUBuffer, stored: ArrayBufferView): GPUBuffer {
    if (stored.byteLength && !this.#staged(i, buffer, stored)) {
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

  /**
   * Copies `stored` into binding `i`'s upload buffer where it is mapped (the run then copies it
   * into `buffer`); `false` where the argument is small or the buffer is still in use.
   */
  #staged(i: number, buffer: GPUBuffer, stored: ArrayBufferView): boolean {
    const bytes = stored.byteLength;
    if (bytes < STAGED_BYTES || bytes % 4 !== 0) return false;
    let upload = this.#uploads.get(i);
    if (upload && upload.buffer.size !== bytes && upload.mapped) {
      upload.buffer.destroy();
      upload = undefined;
    }
    if (!upload) {
      const made = this.#device.createBuffer({
        size: bytes,
        usage: UPLOAD,
        mappedAtCreation: true,
      });
      this.#uploads.set(i, upload = { buffer: made, mapped: true });
    }
    if (!upload.mapped || upload.buffer.size !== bytes) return false;
    const range = upload.buffer.getMappedRange(0, bytes);
    new Uint8Array(range).set(new Uint8Array(stored.buffer, stored.byteOffset, bytes));
    upload.buffer.unmap();
    upload.mapped = false;
    upload.copy = { to: buffer, bytes };
    return true;
  }

  /** Maps `upload` again once the queue is done with it (dropped if the device fails it). */
  #remap(i: number, upload: Upload): void {
    upload.copy = undefined;
    upload.buffer.mapAsync(MAP_WRITE).then(
      () => upload.mapped = true,
      () => this.#uploads.get(i) === upload && this.#uploads.delete(i),
    );
  }
}

/** The bytes of `view`, copied. */
function copyOf(view: ArrayBufferView): ArrayBuffer {
  return (view.buffer as ArrayBuffer).slice(view.byteOffset, view.byteOffset + view.byteLength);
}
