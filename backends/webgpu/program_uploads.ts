/**
 * A GPU program's uploads: the host arguments of each run, and the params and constants it
 * holds resident (shared with the device's other programs through `Residents`), 8-bit constants
 * four bytes to a word where the kernels read them packed (`KernelBuffer.packed`).
 *
 * @module
 */
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import type { TensorData } from "../../jit/ir/dtype.ts";
import type { Packing } from "../../jit/ir/kernel_ir.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import { packedBytes, toStored } from "../words.ts";
import { type GpuContext, GpuStorage, STORAGE } from "./gpu_storage.ts";
import type { OwnBuffers } from "./own_buffers.ts";

/** How one tensor is uploaded for a run (see {@linkcode ProgramUploads.upload}). */
export interface UploadOptions {
  /** Held resident (a param or constant), uploaded once and shared. */
  readonly keep: boolean;
  /** The run's pooled buffers, to which a per-run upload's buffer is added. */
  readonly acquired: GPUBuffer[];
  /** A host argument's binding: where the program's own small buffers may take it. */
  readonly binding?: { i: number; held: { writing: number[] } };
  /** Its elements four or eight to a word (an 8-bit constant its kernels read packed). */
  readonly packed?: Packing;
}

/** The uploads of one program (see the module's description). */
export class ProgramUploads {
  #ctx: GpuContext;
  #own: OwnBuffers;
  /** Params and constants are uploaded once; concurrent first runs share the one upload. */
  #resident = new Map<TensorData, Promise<GPUBuffer>>();
  /** The resident uploads that are done: a run binds them without waiting. */
  #uploaded = new Map<TensorData, GPUBuffer>();
  /** The resident data uploaded packed, and how. */
  #packed = new Map<TensorData, Packing>();

  /** Uploads on `ctx`'s device, small arguments into the program's `own` buffers. */
  constructor(ctx: GpuContext, own: OwnBuffers) {
    this.#ctx = ctx;
    this.#own = own;
  }

  /** Lets go of the resident uploads (shared by the device's programs). */
  dispose(): void {
    for (const data of this.#resident.keys()) {
      this.#ctx.residents.release(data, this.#packed.get(data));
    }
    this.#resident.clear();
    this.#uploaded.clear();
  }

  /**
   * `t`'s buffer where a run has it without waiting: a device tensor of this device's, or a
   * resident upload that is done. A decode step binds hundreds of weights: each through an
   * awaited upload cost microtasks a binding, a step's host time where the step is host-bound.
   */
  now(t: RefTensor | DeviceTensor): GPUBuffer | undefined {
    if (!(t instanceof DeviceTensor)) return this.#uploaded.get(t.data);
    const storage = t.storage();
    return storage instanceof GpuStorage && storage.on(this.#ctx) ? storage.bound() : undefined;
  }

  /** `t`'s buffer: in place for a device tensor, else uploaded (once, where `keep`). */
  async upload(t: RefTensor | DeviceTensor, options: UploadOptions): Promise<GPUBuffer> {
    const { keep, acquired, binding, packed } = options;
    const ctx = this.#ctx;
    const { device, pool } = ctx;
    const resident = this.#resident;
    if (t instanceof DeviceTensor) {
      const own = this.now(t);
      if (own) return own;
      throw new KilnError(
        `A device tensor of ${t.storage().backend} cannot feed this WebGPU run`,
        {
          code: "bad-input",
          fix: "read() it to the host and pass the host tensor (or run both on one device)",
        },
      );
    }
    const hit = resident.get(t.data);
    if (hit) return hit;
    const storedOf = () => packed ? packedBytes(t.data, packed) : toStored(t.data, t.dtype, ctx);
    if (keep) {
      // Converted and written only where no program of the device holds it yet.
      if (packed) this.#packed.set(t.data, packed);
      const buffer = ctx.residents.use(t.data, () => {
        const stored = storedOf();
        return pool.acquire(Math.max(4, stored.byteLength), STORAGE, true).then((b) => {
          if (stored.byteLength) {
            device.queue.writeBuffer(b, 0, stored as Float32Array<ArrayBuffer>);
          }
          return b;
        });
      }, packed);
      resident.set(t.data, buffer);
      // A failed upload (out of memory) must not stay cached for every later run.
      buffer.then((b) => this.#uploaded.set(t.data, b), () => resident.delete(t.data));
      return await buffer;
    }
    const stored = storedOf();
    const bytes = Math.max(4, stored.byteLength);
    const own = binding && this.#own.write(binding.i, stored, t.data, binding.held.writing);
    if (own) return await own;
    const write = (buffer: GPUBuffer, w: typeof stored) => {
      if (w.byteLength) device.queue.writeBuffer(buffer, 0, w as Float32Array<ArrayBuffer>);
      acquired.push(buffer);
      return buffer;
    };
    // A run's arguments are read before `run` returns (`readsArgsOnCall`): the caller may change
    // its arrays right after. A pooled buffer (every steady-state run) takes them at once;
    // otherwise the buffer comes after an await, so a caller's array is copied first. The
    // executable used to copy every argument of every run (64 MB: ≈ 40 ms and a fresh array).
    const now = pool.reuse(bytes, STORAGE);
    if (now) return write(now, stored);
    // Words or bytes that are the caller's own memory are copied (packed bytes view it).
    const callers = stored === t.data || stored.buffer === t.data.buffer;
    const w = callers ? (stored as unknown as { slice(): typeof stored }).slice() : stored;
    return write(await pool.acquire(bytes, STORAGE, false), w);
  }
}
