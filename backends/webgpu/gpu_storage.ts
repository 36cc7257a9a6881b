/**
 * Device tensors on WebGPU: a pool buffer of 32-bit words (16-bit elements for f16 on devices
 * with `shader-f16`) that outlives the run that produced it.
 * Writes go through the queue (ordered before any later submit); reads copy the range into a
 * staging buffer and await one map.
 *
 * @module
 */
import type { Residents } from "./residents.ts";
import type { DeviceStorage, StorageRange } from "../../jit/runtime/device_tensor.ts";
import type { DType, TensorData } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { elementBytes, fromStored, storedBytes, storedRange, toStored } from "../words.ts";
import type { BufferPool } from "./buffer_pool.ts";
import type { WgslOptions } from "../../shaders/wgsl/codegen.ts";

/** What a GPU program runs on. */
export interface GpuContext {
  /** The device. */
  readonly device: GPUDevice;
  /** Its buffer pool. */
  readonly pool: BufferPool;
  /** Its resident uploads, shared by its programs. */
  readonly residents: Residents;
  /** What its generated kernels were generated for (their layouts follow from it). */
  readonly wgsl: WgslOptions;
  /** Whether to time each kernel with timestamp queries (the device has `timestamp-query`). */
  readonly timestamps?: boolean;
  /** Whether f16 tensors are stored as 16 bits (the device has `shader-f16`). */
  readonly half: boolean;
  /**
   * Whether a read mapping's range is a copy the implementation made (Deno's own WebGPU), which
   * a read may keep after `unmap` (see {@linkcode mapForRead}); Dawn's is the mapping itself.
   */
  readonly copiedRanges?: boolean;
  /** Throws when the device was lost (or replaced) since the program was built. */
  check(): void;
}

/** `GPUBufferUsage` STORAGE | COPY_DST | COPY_SRC, numeric (Node's `webgpu` has no globals). */
export const STORAGE = 0x80 | 0x08 | 0x04;
/** `GPUBufferUsage` MAP_READ | COPY_DST. */
export const STAGING = 0x01 | 0x08;
/** `GPUMapMode.READ`. */
export const MAP_READ = 0x01;

/** Reads in flight on each device: their maps wait for the work submitted before them. */
const pendingReads = new WeakMap<GPUDevice, number>();

/**
 * Whether a read is in flight on `device`: its queue then holds work ahead of anything submitted
 * now (a generation's step starts while the step before it reads back its token).
 */
export function readsPending(device: GPUDevice): boolean {
  return (pendingReads.get(device) ?? 0) > 0;
}

/**
 * Maps `staging` (of `ctx`'s device) for reading and returns its first `bytes` as an ArrayBuffer
 * the caller may keep after `unmap` (`owned`), or the mapped range itself, which `unmap` detaches.
 * Deno's `getMappedRange` of a read mapping is already a copy the runtime made (it keeps its values
 * after the buffer is mapped again with other data and destroyed), so where `ctx.copiedRanges`
 * says the range is one, `transfer()` takes it without a second copy: 64 MB cost one copy and one
 * fresh array of page faults (≈ 40 + 37 ms on the H200 host) before. Elsewhere (browsers, Dawn in
 * Node or in Deno) the range is the mapping itself: transferred, it still pointed at the staging
 * buffer's memory, and a generation's token read as the zeros of a later read through that buffer.
 */
export async function mapForRead(
  ctx: GpuContext,
  staging: GPUBuffer,
  bytes: number,
): Promise<{ range: ArrayBuffer; owned: boolean }> {
  const { device } = ctx;
  pendingReads.set(device, (pendingReads.get(device) ?? 0) + 1);
  try {
    await staging.mapAsync(MAP_READ, 0, bytes);
  } finally {
    pendingReads.set(device, pendingReads.get(device)! - 1);
  }
  const range = staging.getMappedRange(0, bytes);
  const transfer = (range as ArrayBuffer & { transfer?: () => ArrayBuffer }).transfer;
  if (!ctx.copiedRanges || typeof transfer !== "function") return { range, owned: false };
  try {
    return { range: transfer.call(range), owned: true };
  } catch {
    return { range, owned: false };
  }
}

/** A device tensor's words in one pool buffer. */
export class GpuStorage implements DeviceStorage {
  /** Always `"webgpu"`. */
  readonly backend: string = "webgpu";
  /** The buffer (owned until `release`). */
  readonly buffer: GPUBuffer;
  /** Dtype of the elements the words hold. */
  readonly dtype: DType;
  #ctx: GpuContext;
  /** Whether a run took the buffer (`takeOver`): it is no longer this storage's to use. */
  #taken = false;

  /** Takes ownership of `buffer`, which holds words of `dtype` and came from `ctx.pool`. */
  constructor(ctx: GpuContext, buffer: GPUBuffer, dtype: DType) {
    this.#ctx = ctx;
    this.buffer = buffer;
    this.dtype = dtype;
  }

  /**
   * Hands the buffer to a run that stores an output over it (a donated input: the run disposes
   * the tensor); from then on this storage neither reads, writes nor releases it.
   */
  takeOver(): GPUBuffer {
    this.#live();
    this.#taken = true;
    return this.buffer;
  }

  /** The buffer, for a run to bind; throws where an earlier run took it over. */
  bound(): GPUBuffer {
    this.#live();
    return this.buffer;
  }

  /** Throws where a run took the buffer (`takeOver`). */
  #live(): void {
    if (!this.#taken) return;
    throw new KilnError("This device tensor was donated to a run, which stored an output over it", {
      code: "bad-input",
      fix: "use the run's output instead, or leave the input out of the compile's donate list",
    });
  }

  /** Whether this storage lives on `ctx`'s device (so a program there can bind it). */
  on(ctx: GpuContext): boolean {
    return ctx.device === this.#ctx.device;
  }

  /** Copies elements `[offset, offset + length)` to the host through one map (into `into`). */
  async read(offset: number, length: number, into?: TensorData): Promise<TensorData> {
    return (await this.readMany([{ storage: this, offset, length, into }]))[0];
  }

  /** Writes `data` from element `offset`, ordered before every later submit. */
  write(data: TensorData, offset: number): void {
    this.#ctx.check();
    this.#live();
    const size = elementBytes(this.dtype, this.#ctx);
    if (size === 2 && (offset % 2 !== 0 || (data.length % 2 !== 0 && data.length > 0))) {
      throw new KilnError(
        `A write of ${data.length} f16 elements at element ${offset} is not whole 32-bit words`,
        {
          code: "bad-input",
          fix: "write an even number of f16 elements at an even offset (this device stores f16 " +
            "as 16 bits; queue writes move whole words)",
        },
      );
    }
    const words = toStored(data, this.dtype, this.#ctx);
    if (words.byteLength) {
      this.#ctx.device.queue.writeBuffer(
        this.buffer,
        offset * size,
        words as Float32Array<ArrayBuffer>,
      );
    }
  }

  /**
   * Reads ranges of several storages on this device through one staging buffer: one submit,
   * one map (each read alone costs a map, about 11 ms on Deno's WebGPU).
   */
  async readMany(parts: readonly StorageRange[]): Promise<TensorData[]> {
    this.#ctx.check();
    const { device, pool } = this.#ctx;
    const storages = parts.map((p) => p.storage);
    if (!storages.every((s) => s instanceof GpuStorage && s.on(this.#ctx))) {
      throw new KilnError("A batched read takes device tensors of one WebGPU device", {
        code: "bad-input",
        fix: "read tensors of other devices on their own (DeviceTensor.read)",
      });
    }
    let total = 0;
    const ranges = parts.map((p, i) => {
      const s = storages[i] as GpuStorage;
      s.#live();
      const r = storedRange(p.offset, p.length, s.dtype, this.#ctx);
      const at = total;
      total += Math.ceil((r.end - r.start) / 4) * 4;
      return { ...r, at, s };
    });
    // A pooled staging buffer (every steady-state read) is taken at once, so the copy is
    // submitted before this returns to its caller: a generation reads a step's token before it
    // submits the next step, and the read must not queue behind that step.
    const staging = pool.reuse(Math.max(4, total), STAGING) ??
      await pool.acquire(Math.max(4, total), STAGING);
    try {
      const encoder = device.createCommandEncoder();
      for (const r of ranges) {
        if (r.end > r.start) {
          encoder.copyBufferToBuffer(r.s.buffer, r.start, staging, r.at, r.end - r.start);
        }
      }
      device.queue.submit([encoder.finish()]);
      const { range, owned } = await mapForRead(this.#ctx, staging, Math.max(4, total));
      // One range's own copy is handed out as it is; ranges sharing one are copied out of it.
      const own = owned && parts.length === 1;
      const data = ranges.map((r, i) =>
        fromStored(range, r.at + r.skip, parts[i].length, r.s.dtype, this.#ctx, {
          owned: own,
          into: parts[i].into,
        })
      );
      staging.unmap();
      return data;
    } finally {
      pool.release([staging]);
    }
  }

  /** Returns the buffer to the pool (queue order keeps pending work on it valid). */
  release(): void {
    if (!this.#taken) this.#ctx.pool.release([this.buffer]);
  }
}

/** A zero-filled storage of `elements` elements of `dtype` on `ctx`'s device. */
export async function allocateStorage(
  ctx: GpuContext,
  elements: number,
  dtype: DType,
): Promise<GpuStorage> {
  ctx.check();
  const buffer = await ctx.pool.acquire(storedBytes(Math.max(1, elements), dtype, ctx), STORAGE);
  // A pooled buffer holds whatever its last user left: cleared in queue order, before any use.
  const encoder = ctx.device.createCommandEncoder();
  encoder.clearBuffer(buffer);
  ctx.device.queue.submit([encoder.finish()]);
  return new GpuStorage(ctx, buffer, dtype);
}
