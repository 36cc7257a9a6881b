/**
 * GPU memory: a pool of buffers in size buckets (powers of two, quarter steps past 1 MiB) with
 * separate free lists per usage,
 * under a byte cap (programs' resident weights aside: they live as long as their program, and
 * evicting the working set because they pass the cap only rebuilds it). Buffers go back to the pool only when the submit that used them is done
 * (the caller releases after its one await); when the cap is exceeded, free buffers are destroyed
 * oldest first, and an allocation that fails for lack of memory evicts everything free and
 * retries once before giving a clear error.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";

/** Counters of a {@linkcode BufferPool}. */
export interface PoolStats {
  /** Bytes of every live GPU buffer the pool created. */
  allocatedBytes: number;
  /** Bytes handed out and not yet released. */
  inUseBytes: number;
  /** Bytes of free buffers kept for reuse. */
  pooledBytes: number;
  /** Highest `allocatedBytes` seen. */
  peakBytes: number;
  /** Acquisitions served from the pool. */
  reuses: number;
  /** Buffers created. */
  allocations: number;
  /** Free buffers destroyed to stay under the cap. */
  evictions: number;
  /**
   * Bytes of buffers acquired as resident (a program's weights and constants, held while it
   * lives): part of `allocatedBytes` and `inUseBytes`, but not held to the cap.
   */
  residentBytes: number;
}

/** Requests up to this many bytes take power-of-two buckets; larger ones quarter steps. */
const FINE_FROM = 1 << 20;

/**
 * The bucket size for a request: a power of two, at least 256 bytes, and past 1 MiB the next of
 * 2^k · {1, 1.25, 1.5, 1.75}. Large transients rounded to powers of two had taken up to twice
 * their bytes (a 35 MB unpacked weight in a 64 MB buffer); the same sizes recur layer after
 * layer, so the finer steps cost little reuse.
 */
export function bucketSize(bytes: number): number {
  const power = Math.max(256, 2 ** Math.ceil(Math.log2(Math.max(bytes, 1))));
  if (power <= FINE_FROM) return power;
  const quarter = power / 8;
  return Math.ceil(bytes / quarter) * quarter;
}

/** Counters of a pool that holds nothing and has done nothing yet. */
export function emptyPoolStats(): PoolStats {
  return {
    allocatedBytes: 0,
    inUseBytes: 0,
    pooledBytes: 0,
    peakBytes: 0,
    reuses: 0,
    allocations: 0,
    evictions: 0,
    residentBytes: 0,
  };
}

/** A bounded, size-bucketed pool of GPU buffers. */
export class BufferPool {
  #device: GPUDevice;
  #cap: number;
  #free = new Map<string, GPUBuffer[]>();
  #sizes = new Map<GPUBuffer, number>();
  #resident = new Set<GPUBuffer>();
  #stats: PoolStats = emptyPoolStats();

  /**
   * A pool on `device` holding at most `capBytes` (in use plus pooled, resident buffers aside,
   * when it can).
   */
  constructor(device: GPUDevice, capBytes: number) {
    this.#device = device;
    this.#cap = capBytes;
  }

  /** A copy of the counters. */
  stats(): PoolStats {
    return { ...this.#stats };
  }

  /**
   * A pooled buffer of at least `bytes` with `usage` (exactly that, 4-byte aligned, where
   * `resident`), at once, or `undefined` when none is free.
   */
  reuse(bytes: number, usage: number, resident = false): GPUBuffer | undefined {
    const size = this.#sizeOf(bytes, resident);
    const reuse = this.#free.get(`${size}:${usage}`)?.pop();
    if (reuse) {
      this.#stats.reuses++;
      this.#stats.pooledBytes -= size;
      this.#stats.inUseBytes += size;
    }
    return reuse;
  }

  /**
   * A buffer of at least `bytes` with `usage`. A `resident` one (a program's weights, held for the
   * program's life) is not held to the cap: counting it there made a model whose weights pass
   * the cap evict every free buffer at each release and create them again for the next run
   * (a 0.5B decoder's 2 GB of weights against a 1 GiB cap: every decode step re-created its
   * buffers, and on Dawn each creation waits for an error scope, stalling steps for seconds).
   */
  async acquire(bytes: number, usage: number, resident = false): Promise<GPUBuffer> {
    const reuse = this.reuse(bytes, usage, resident);
    if (reuse) return this.#held(reuse, resident);
    const size = this.#sizeOf(bytes, resident);
    this.#trim(size);
    let buffer = await this.#create(size, usage);
    if (!buffer) {
      this.#trim(Infinity);
      buffer = await this.#create(size, usage);
    }
    if (!buffer) {
      throw new KilnError(
        `The GPU is out of memory allocating ${size} bytes (${this.#stats.inUseBytes} bytes in use)`,
        {
          code: "backend",
          fix: "run smaller inputs, lower the pool cap of other work, or use the wasm backend",
        },
      );
    }
    this.#sizes.set(buffer, size);
    this.#stats.allocations++;
    this.#stats.allocatedBytes += size;
    this.#stats.inUseBytes += size;
    this.#stats.peakBytes = Math.max(this.#stats.peakBytes, this.#stats.allocatedBytes);
    return this.#held(buffer, resident);
  }

  /** `buffer`, recorded as resident where it is. */
  #held(buffer: GPUBuffer, resident: boolean): GPUBuffer {
    if (resident) {
      this.#resident.add(buffer);
      this.#stats.residentBytes += this.#sizes.get(buffer)!;
    }
    return buffer;
  }

  /** Returns buffers whose GPU work is complete. */
  release(buffers: Iterable<GPUBuffer>): void {
    for (const b of buffers) {
      const size = this.#sizes.get(b);
      if (size === undefined) continue;
      if (this.#resident.delete(b)) this.#stats.residentBytes -= size;
      const key = `${size}:${b.usage}`;
      const free = this.#free.get(key);
      // Appended in place: a copy of the list per release made a run's releases quadratic in the
      // buffers a bucket holds.
      if (free) free.push(b);
      else this.#free.set(key, [b]);
      this.#stats.inUseBytes -= size;
      this.#stats.pooledBytes += size;
    }
    this.#trim(0);
  }

  /** Destroys every buffer. */
  dispose(): void {
    for (const b of this.#sizes.keys()) b.destroy();
    this.#sizes.clear();
    this.#free.clear();
    this.#resident.clear();
    Object.assign(this.#stats, {
      allocatedBytes: 0,
      inUseBytes: 0,
      pooledBytes: 0,
      residentBytes: 0,
    });
  }

  /** The bucket a request of `bytes` takes. */
  #sizeOf(bytes: number, resident = false): number {
    // A resident buffer (a weight) is held for its program's life and sized by its data, not
    // a bucket: weights of every size rounded up to powers of two took 1.8-2x their bytes (a
    // 0.5B decoder's 2.2 MB packed projections in 4 MB buffers). A bucket past the device's
    // largest buffer would fail where the exact size fits.
    const exact = Math.ceil(bytes / 4) * 4;
    const bucket = bucketSize(bytes);
    return resident || bucket > this.#device.limits.maxBufferSize ? exact : bucket;
  }

  /** Evicts free buffers until `incoming` more bytes fit under the cap. */
  #trim(incoming: number): void {
    for (const [key, list] of this.#free) {
      while (
        list.length &&
        this.#stats.allocatedBytes - this.#stats.residentBytes +
              (incoming === Infinity ? this.#cap : incoming) > this.#cap
      ) {
        const b = list.shift()!;
        const size = this.#sizes.get(b)!;
        b.destroy();
        this.#sizes.delete(b);
        this.#stats.allocatedBytes -= size;
        this.#stats.pooledBytes -= size;
        this.#stats.evictions++;
      }
      if (!list.length) this.#free.delete(key);
    }
  }

  async #create(size: number, usage: number): Promise<GPUBuffer | undefined> {
    this.#device.pushErrorScope("out-of-memory");
    const buffer = this.#device.createBuffer({ size, usage });
    const error = await this.#device.popErrorScope();
    if (error) {
      buffer.destroy();
      return undefined;
    }
    return buffer;
  }
}
