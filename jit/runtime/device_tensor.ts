/**
 * {@linkcode DeviceTensor}: a tensor that stays in a backend's device memory between runs. A run
 * can leave its outputs on the device (`Executable.runOnDevice`) and take device tensors as
 * inputs, so chained executables and repeated runs move no data through the host; `read` and
 * `write` transfer the whole tensor or a range of its elements when the host needs them.
 *
 * @module
 */
import {
  boundaryData,
  type BoundaryDType,
  DTYPES,
  matchesDType,
  type TensorData,
} from "../ir/dtype.ts";
import { count } from "./counters.ts";
import { checkBudget } from "./budget.ts";
import { checkOptions, KilnError } from "../support/errors.ts";
import { acceptInput, checkHostTensor, type HostTensor } from "../ir/host_tensor.ts";
import { type Shape, sizeOf } from "../ir/shape.ts";

/** The backend's side of a device tensor: its memory and transfers. */
export interface DeviceStorage {
  /** Id of the backend whose device holds it. */
  readonly backend: string;
  /**
   * Elements `[offset, offset + length)`, copied to the host: into `into` (returned) where it is
   * an array of the storage's dtype and length, else into a fresh array.
   */
  read(offset: number, length: number, into?: TensorData): Promise<TensorData>;
  /** Overwrites elements from `offset` with `data` (of the storage's dtype), in queue order. */
  write(data: TensorData, offset: number): void;
  /** Gives the memory back to the backend. */
  release(): void;
  /**
   * Reads ranges of several storages of this backend (this one among them) in one submission
   * and one wait, where the backend can batch them.
   */
  readMany?(parts: readonly StorageRange[]): Promise<TensorData[]>;
}

/** A range of one storage's elements, as a batched read takes them. */
export interface StorageRange {
  /** The storage. */
  readonly storage: DeviceStorage;
  /** First element. */
  readonly offset: number;
  /** Number of elements. */
  readonly length: number;
  /** The caller's array to read them into, as `DeviceStorage.read` takes it. */
  readonly into?: TensorData;
}

/** A range of a tensor's elements in row-major order. */
export interface ElementRange {
  /** First element (default 0). */
  readonly offset?: number;
  /** Number of elements (default: to the end). */
  readonly length?: number;
}

/** A backend that can allocate device tensors (a `Backend` with device memory is one). */
export interface Allocator {
  /** The backend's id. */
  readonly id: string;
  /** A zero-filled tensor of `shape` and `dtype` in the backend's device memory. */
  allocate?(shape: Shape, dtype: BoundaryDType): Promise<DeviceTensor>;
}

/** The checks of the runs that made a device tensor, still being read (see `deferChecks`). */
const PENDING = new WeakMap<DeviceTensor, Promise<void>>();

/**
 * Marks `t` as made by a run whose checks (int64 range, index bounds) `pending` settles: reading
 * `t` fails with a check's error where one fails, and so do the outputs of runs that take `t`
 * (see {@linkcode pendingChecks}). A run on the device then returns its outputs before its checks
 * are read back: waiting for them made each decode step of a generation wait until the device
 * had finished it, so no step ever started ahead of the one before.
 */
export function deferChecks(t: DeviceTensor, pending: Promise<void> | undefined): void {
  if (pending) PENDING.set(t, pending);
}

/** The checks `t` still waits on (see {@linkcode deferChecks}), if any. */
export function pendingChecks(t: DeviceTensor): Promise<void> | undefined {
  return PENDING.get(t);
}

/** `read` once `pending` (where given) settles without a check failing. */
function checked<T>(read: Promise<T>, pending: readonly (Promise<void> | undefined)[]): Promise<T> {
  const waits = pending.filter((p) => p !== undefined);
  return waits.length ? Promise.all([read, ...waits]).then(([r]) => r as T) : read;
}

/** A tensor resident in device memory. */
export class DeviceTensor {
  /** Shape. */
  readonly shape: Shape;
  /** Element type as the graph declares it (`i64` is held as 32-bit words, like every run). */
  readonly dtype: BoundaryDType;
  #storage?: DeviceStorage;

  /** Wraps a backend's storage; backends create these, callers get them from runs. */
  constructor(storage: DeviceStorage, shape: Shape, dtype: BoundaryDType) {
    this.#storage = storage;
    this.shape = shape;
    this.dtype = dtype;
  }

  /** Id of the backend whose device holds the data. */
  get backend(): string {
    return this.storage().backend;
  }

  /** Whether `dispose()` was called. */
  get disposed(): boolean {
    return this.#storage === undefined;
  }

  /** Number of elements. */
  get size(): number {
    return sizeOf(this.shape);
  }

  /** The backend's storage (for the backend that runs on it); throws once disposed. */
  storage(): DeviceStorage {
    if (!this.#storage) {
      throw new KilnError("This device tensor was disposed", {
        code: "disposed",
        fix: "keep the tensor until its last use, or run again to get a new one",
      });
    }
    return this.#storage;
  }

  /**
   * Copies the tensor (or `range` of its elements, as a 1-D tensor) to the host, into `into`
   * (a typed array of its dtype, at least as long) where given. Reads are ordered after every run
   * already started on the same device; a bad range or buffer throws at once. Where a check of
   * the run that made the tensor failed (or of a run it was computed from: an int64 value past
   * the 32 bits WebGPU holds it in), the read rejects with that check's typed error.
   */
  read(
    range: ElementRange = {},
    options: { readonly into?: TensorData } = {},
  ): Promise<HostTensor> {
    const [offset, length] = this.#range(range, "read");
    const whole = offset === 0 && length === this.size;
    const into = options.into;
    if (into && (!matchesDType(into, this.dtype) || into.length < length)) {
      throw new KilnError(
        `read into: expected a ${this.dtype} typed array of at least ${length} elements`,
        {
          code: "bad-input",
          fix: `pass a ${this.dtype} typed array of ${length} elements or more`,
        },
      );
    }
    // The storage reads straight into the caller's array (a fresh one's first touch cost more
    // than the copy: `bench/readback_floor.ts --bytes`), unless the dtype needs converting.
    const target = into && into.length > length ? into.subarray(0, length) : into;
    const reading = this.storage().read(offset, length, target);
    return checked(reading, [PENDING.get(this)]).then((read) => {
      const t = this.#delivered(read, whole ? this.shape : [length]);
      if (into && t.data !== target) (into as Float32Array).set(t.data as Float32Array);
      return into ? { ...t, data: into } : t;
    });
  }

  /**
   * Overwrites elements from `offset` (default 0) with `data`, of this tensor's dtype. Runs
   * started later see the new values; the caller's array is not kept.
   */
  write(data: TensorData | HostTensor, offset = 0): void {
    // Neither an array nor a tensor had failed inside (`null.shape`) as a TypeError.
    const t = ArrayBuffer.isView(data)
      ? { data, shape: [data.length], dtype: this.dtype }
      : checkHostTensor(data, "DeviceTensor.write");
    const n = sizeOf(t.shape);
    const [start] = this.#range({ offset, length: n }, "write");
    const accepted = acceptInput(t, { shape: [n], dtype: this.dtype }, "device tensor write");
    this.storage().write(accepted.data, start);
    count("kiln_transfers_total");
    count("kiln_bytes_uploaded_total", accepted.data.byteLength);
  }

  /**
   * A zero-filled tensor of `shape` and `dtype` in `backend`'s device memory, to `write` into
   * and pass to runs; refused with a Fix on a backend without device memory.
   */
  static async allocate(
    backend: Allocator,
    shape: readonly number[],
    dtype: BoundaryDType = "f32",
  ): Promise<DeviceTensor> {
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new KilnError(`A device tensor's shape must be whole numbers ≥ 0, got [${shape}]`, {
        code: "bad-input",
        fix: "pass a shape such as [2, 3]",
      });
    }
    if (dtype !== "i64" && dtype !== "bf16" && !DTYPES.includes(dtype)) {
      throw new KilnError(`Unknown dtype "${dtype}" for a device tensor`, {
        code: "bad-input",
        fix: `use one of ${[...DTYPES, "i64", "bf16"].join(", ")}`,
      });
    }
    if (!backend.allocate) {
      throw new KilnError(`Backend "${backend.id}" has no device memory to allocate in`, {
        code: "unsupported",
        fix: "allocate on the webgpu backend, or keep the tensor on the host",
      });
    }
    checkBudget(shape, dtype, "device tensor");
    return await backend.allocate(shape, dtype);
  }

  /**
   * Copies several device tensors (or `ranges` of them) to the host together: where they share
   * a backend that batches reads (WebGPU), in one submission and one wait instead of one each.
   */
  static readAll(
    tensors: readonly DeviceTensor[],
    ranges: readonly ElementRange[] = [],
  ): Promise<HostTensor[]> {
    const parts = tensors.map((t, i) => {
      const [offset, length] = t.#range(ranges[i] ?? {}, "read");
      return { storage: t.storage(), offset, length, whole: offset === 0 && length === t.size };
    });
    const first = parts[0]?.storage;
    const batched = first?.readMany !== undefined &&
      parts.every((p) => p.storage.backend === first.backend);
    const reads = batched
      ? first.readMany!(parts)
      : Promise.all(parts.map((p) => p.storage.read(p.offset, p.length)));
    return checked(reads, tensors.map((t) => PENDING.get(t))).then((all) =>
      all.map((read, i) =>
        tensors[i].#delivered(read, parts[i].whole ? tensors[i].shape : [parts[i].length])
      )
    );
  }

  /** Gives the device memory back; later uses throw. */
  dispose(): void {
    this.#storage?.release();
    this.#storage = undefined;
  }

  /** Disposes at the end of a `using` block. */
  [Symbol.dispose](): void {
    this.dispose();
  }

  /** Words read back as this tensor's host data of `shape`, the download counted. */
  #delivered(read: TensorData, shape: Shape): HostTensor {
    count("kiln_transfers_total");
    count("kiln_bytes_downloaded_total", read.byteLength);
    return { data: boundaryData(read, this.dtype), shape, dtype: this.dtype };
  }

  #range(range: ElementRange, what: string): [number, number] {
    checkOptions(range, ["offset", "length"], `DeviceTensor.${what}`);
    const offset = range.offset ?? 0;
    const length = range.length ?? this.size - offset;
    if (
      !Number.isInteger(offset) || !Number.isInteger(length) || offset < 0 || length < 0 ||
      offset + length > this.size
    ) {
      throw new KilnError(
        `Cannot ${what} elements [${offset}, ${offset + length}) of a tensor of ${this.size}`,
        {
          code: "bad-input",
          fix: `use a whole-number offset and length within [0, ${this.size}]`,
        },
      );
    }
    return [offset, length];
  }
}

/** A device tensor given as input `name`: live, of the declared shape and dtype. */
export function acceptDevice(
  t: DeviceTensor,
  spec: { readonly shape: Shape; readonly dtype: BoundaryDType },
  name: string,
): DeviceTensor {
  if (t.disposed) {
    throw new KilnError(`input "${name}": the device tensor was disposed`, {
      code: "disposed",
      fix: "pass a live device tensor (dispose it only after its last run)",
    });
  }
  if (t.dtype !== spec.dtype || t.shape.join() !== spec.shape.join()) {
    throw new KilnError(
      `input "${name}": expected ${spec.dtype}[${spec.shape}], got a device tensor ${t.dtype}[${t.shape}]`,
      {
        code: "bad-input",
        fix: "pass a device tensor of the declared shape and dtype",
      },
    );
  }
  return t;
}
