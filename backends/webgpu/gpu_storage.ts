/**
 * Device tensors on WebGPU: a pool buffer of 32-bit words that outlives the run that produced it.
 * Writes go through the queue (ordered before any later submit); reads copy the range into a
 * staging buffer and await one map.
 *
 * @module
 */
import type { DeviceStorage } from "../../jit/device_tensor.ts";
import type { DType, TensorData } from "../../jit/dtype.ts";
import { fromWords, toWords } from "../words.ts";
import type { GpuContext } from "./gpu_program.ts";

/** `GPUBufferUsage` STORAGE | COPY_DST | COPY_SRC, numeric (Node's `webgpu` has no globals). */
export const STORAGE = 0x80 | 0x08 | 0x04;
/** `GPUBufferUsage` MAP_READ | COPY_DST. */
export const STAGING = 0x01 | 0x08;
/** `GPUMapMode.READ`. */
export const MAP_READ = 0x01;

/** A device tensor's words in one pool buffer. */
export class GpuStorage implements DeviceStorage {
  /** Always `"webgpu"`. */
  readonly backend: string = "webgpu";
  /** The buffer (owned until `release`). */
  readonly buffer: GPUBuffer;
  /** Dtype of the elements the words hold. */
  readonly dtype: DType;
  #ctx: GpuContext;

  /** Takes ownership of `buffer`, which holds words of `dtype` and came from `ctx.pool`. */
  constructor(ctx: GpuContext, buffer: GPUBuffer, dtype: DType) {
    this.#ctx = ctx;
    this.buffer = buffer;
    this.dtype = dtype;
  }

  /** Whether this storage lives on `ctx`'s device (so a program there can bind it). */
  on(ctx: GpuContext): boolean {
    return ctx.device === this.#ctx.device;
  }

  /** Copies elements `[offset, offset + length)` to the host through one map. */
  async read(offset: number, length: number): Promise<TensorData> {
    this.#ctx.check();
    const { device, pool } = this.#ctx;
    const staging = await pool.acquire(Math.max(4, length * 4), STAGING);
    try {
      const encoder = device.createCommandEncoder();
      if (length) encoder.copyBufferToBuffer(this.buffer, offset * 4, staging, 0, length * 4);
      device.queue.submit([encoder.finish()]);
      await staging.mapAsync(MAP_READ);
      const data = fromWords(staging.getMappedRange(), 0, length, this.dtype);
      staging.unmap();
      return data;
    } finally {
      pool.release([staging]);
    }
  }

  /** Writes `data` from element `offset`, ordered before every later submit. */
  write(data: TensorData, offset: number): void {
    this.#ctx.check();
    const words = toWords(data, this.dtype);
    if (words.byteLength) {
      this.#ctx.device.queue.writeBuffer(
        this.buffer,
        offset * 4,
        words as Float32Array<ArrayBuffer>,
      );
    }
  }

  /** Returns the buffer to the pool (queue order keeps pending work on it valid). */
  release(): void {
    this.#ctx.pool.release([this.buffer]);
  }
}
