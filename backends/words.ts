/**
 * Host data ↔ 32-bit words, the element storage of the generated backends (WebGPU buffers and
 * the WebAssembly arena): narrow dtypes are widened on the way in and narrowed on the way out.
 * f64 (the arena only: WGSL has none) keeps its 64-bit elements.
 *
 * @module
 */
import {
  type DType,
  fromF16Array,
  matchesDType,
  type TensorData,
  toF16Array,
} from "../jit/ir/dtype.ts";
import type { Packing } from "../jit/ir/kernel_ir.ts";
import { KilnError } from "../jit/support/errors.ts";

/** `data` (of `dtype`) as 32-bit words ready for `writeBuffer`. */
export function toWords(
  data: TensorData,
  dtype: DType,
): Float64Array | Float32Array | Int32Array | Uint32Array {
  switch (dtype) {
    case "f64":
      return data as Float64Array;
    case "f32":
      return data as Float32Array;
    case "f16":
      return fromF16Array(data as Uint16Array);
    case "i32":
      return data as Int32Array;
    case "u32":
      return data as Uint32Array;
    case "i16":
    case "i8":
    case "u16":
    case "u8":
    case "bool": {
      const words = narrowWords(dtype, new ArrayBuffer(data.length * 4), 0, data.length);
      words.set(data as Int8Array);
      return words;
    }
    case "i64":
      throw lowered();
  }
}

/** Integer dtypes narrower than a word: widened on the way in, i8 and i16 sign-extended. */
type Narrow = "i8" | "i16" | "u8" | "u16" | "bool";
const NARROW: ReadonlySet<DType> = new Set<Narrow>(["i8", "i16", "u8", "u16", "bool"]);

/** `n` words at byte `at` of `buffer` that a narrow dtype widens into (i32 where it is signed). */
function narrowWords(
  dtype: Narrow,
  buffer: ArrayBufferLike,
  at: number,
  n: number,
): Int32Array | Uint32Array {
  return dtype === "i8" || dtype === "i16"
    ? new Int32Array(buffer, at, n)
    : new Uint32Array(buffer, at, n);
}

/** An i64 reaching a device: each compile lowers it first (see `jit/passes/int64.ts`). */
function lowered(): KilnError {
  return new KilnError("An i64 tensor reached a device; kiln lowers int64 before it runs", {
    code: "internal",
    fix: "report this with the graph; compile() lowers i64 values to f64 or i32",
  });
}

/**
 * A copy in a fresh (never shared) buffer, or in `into` (the caller's own array of this type):
 * callers own what they get.
 */
function copy<T extends Float64Array | Float32Array | Int32Array | Uint32Array>(
  Type: { new (n: number): T; new (b: ArrayBufferLike, o: number, n: number): T },
  buffer: ArrayBufferLike,
  offset: number,
  n: number,
  into?: TensorData,
): T {
  const out = (into as T | undefined) ?? new Type(n);
  out.set(new Type(buffer, offset, n));
  return out;
}

/**
 * `n` elements of `dtype` from 32-bit words at `offset` bytes of `buffer` (copied): where the
 * words are the elements, into `into` if given (an array of `dtype` with room for them).
 */
export function fromWords(
  buffer: ArrayBufferLike,
  offset: number,
  n: number,
  dtype: DType,
  into?: TensorData,
): TensorData {
  switch (dtype) {
    case "f64":
      return copy(Float64Array, buffer, offset, n, into);
    case "f32":
      return copy(Float32Array, buffer, offset, n, into);
    case "f16":
      return toF16Array(new Float32Array(buffer, offset, n));
    case "i32":
      return copy(Int32Array, buffer, offset, n, into);
    case "i16":
      return Int16Array.from(new Int32Array(buffer, offset, n));
    case "u16":
      return Uint16Array.from(new Uint32Array(buffer, offset, n));
    case "i8":
      return Int8Array.from(new Int32Array(buffer, offset, n));
    case "u32":
      return copy(Uint32Array, buffer, offset, n, into);
    case "u8":
    case "bool":
      return Uint8Array.from(new Uint32Array(buffer, offset, n));
    case "i64":
      throw lowered();
  }
}

/**
 * `n` elements of `dtype` from 32-bit words at `offset` bytes of `buffer` written into `target`,
 * the caller's array for them (see `RunOptions.into`), which is returned; or, where `target` is
 * not an array of `dtype` with room for them, a fresh copy (the executable then copies it over).
 * A large output read into a fresh array pays its pages' first touch: 25 MB took 7-24 ms on the
 * H200's host where the copy alone took 4.6 (`bench/readback_floor.ts --bytes`).
 */
export function wordsInto(
  target: TensorData | undefined,
  buffer: ArrayBufferLike,
  offset: number,
  n: number,
  dtype: DType,
): TensorData {
  if (!target || !matchesDType(target, dtype) || target.length < n) {
    return fromWords(buffer, offset, n, dtype);
  }
  // Narrow types come back converted, then go in.
  const got = fromWords(buffer, offset, n, dtype, target);
  if (got !== target) (target as Float32Array).set(got as Float32Array);
  return target;
}

/**
 * Writes `data` (of `dtype`) as words at byte `at` of `buffer`, or 8-bit data as its bytes where
 * `bytes` says; returns the bytes written.
 */
export function writeWords(
  buffer: ArrayBufferLike,
  at: number,
  data: TensorData,
  dtype: DType,
  bytes = false,
): number {
  if (bytes) {
    new Uint8Array(buffer, at, data.length).set(data as Uint8Array);
    return data.length;
  }
  // Narrow integers widen straight into their place: through a fresh array of words first, each
  // page was touched twice (a BERT-base int8's 85M weights: 1.4 s of its first wasm run on the
  // 2-core VM in `toWords` alone; a typed set of 20M bytes into touched memory takes 5 ms).
  if (NARROW.has(dtype) && at % 4 === 0) {
    narrowWords(dtype as Narrow, buffer, at, data.length).set(data as Int8Array);
    return data.length * 4;
  }
  const words = toWords(data, dtype);
  new Uint8Array(buffer, at, words.byteLength).set(
    new Uint8Array(words.buffer, words.byteOffset, words.byteLength),
  );
  return words.byteLength;
}

/**
 * Element storage on a device that may hold f16 natively (WebGPU with `shader-f16`): there f16
 * tensors take 2 bytes an element, everything else a 32-bit word.
 */
export interface Storage {
  /** Whether f16 elements are stored as 16 bits. */
  readonly half: boolean;
}

/** Bytes an element of `dtype` takes in `storage`. */
export function elementBytes(dtype: DType, storage: Storage): 2 | 4 | 8 {
  if (dtype === "f64") return 8;
  return storage.half && dtype === "f16" ? 2 : 4;
}

/** Bytes a tensor of `n` elements of `dtype` takes in `storage`, rounded up to whole words. */
export function storedBytes(n: number, dtype: DType, storage: Storage): number {
  return Math.ceil((n * elementBytes(dtype, storage)) / 4) * 4;
}

/** `data` as `storage` holds it, a whole number of words long (for `writeBuffer`). */
export function toStored(data: TensorData, dtype: DType, storage: Storage): ArrayBufferView {
  if (elementBytes(dtype, storage) !== 2) return toWords(data, dtype);
  const bits = data as Uint16Array;
  if (bits.length % 2 === 0) return bits;
  const padded = new Uint16Array(bits.length + 1);
  padded.set(bits);
  return padded;
}

/**
 * 8-bit `data` held as a packed constant (see `KernelBuffer.packed`): as it lies in memory, four
 * elements to a word, or eight (`nibbles`: element i in bits 4·(i mod 8) of word ⌊i / 8⌋, every
 * element below 16), padded with zeros to a whole number of words.
 */
export function packedBytes(data: TensorData, packing: Packing = "bytes"): Uint8Array {
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const length = packedLength(bytes.length, packing);
  if (packing === "nibbles") {
    const out = new Uint8Array(length);
    for (let i = 0; i < bytes.length; i++) out[i >> 1] |= (bytes[i] & 15) << ((i & 1) * 4);
    return out;
  }
  if (bytes.length === length) return bytes;
  const padded = new Uint8Array(length);
  padded.set(bytes);
  return padded;
}

/** Bytes `n` 8-bit elements take packed (four or eight to a word): whole words, at least one. */
export function packedLength(n: number, packing: Packing = "bytes"): number {
  const per = packing === "nibbles" ? 8 : 4;
  return Math.max(4, Math.ceil(n / per) * 4);
}

/**
 * `n` elements of `dtype` as `storage` holds them at `offset` bytes of `buffer`: copied, or where
 * the caller hands `buffer` over (`owned`) and the words are the elements (f32, i32, u32), a view;
 * where the caller's array `into` is given, elements held in words are written into it as
 * {@linkcode wordsInto} does (16-bit ones come back copied, for the executable to copy over).
 */
export function fromStored(
  buffer: ArrayBufferLike,
  offset: number,
  n: number,
  dtype: DType,
  storage: Storage,
  { owned = false, into }: { readonly owned?: boolean; readonly into?: TensorData } = {},
): TensorData {
  if (into && elementBytes(dtype, storage) !== 2) return wordsInto(into, buffer, offset, n, dtype);
  if (owned && dtype === "f32") return new Float32Array(buffer, offset, n);
  if (owned && dtype === "i32") return new Int32Array(buffer, offset, n);
  if (owned && dtype === "u32") return new Uint32Array(buffer, offset, n);
  if (elementBytes(dtype, storage) !== 2) return fromWords(buffer, offset, n, dtype);
  return new Uint16Array(buffer, offset, n).slice();
}

/**
 * The whole words holding elements `[offset, offset + length)` of `dtype` in `storage`: byte
 * `start` and `end` (copies move whole words), and `skip`, the bytes from `start` to the first
 * element.
 */
export function storedRange(
  offset: number,
  length: number,
  dtype: DType,
  storage: Storage,
): { start: number; end: number; skip: number } {
  const size = elementBytes(dtype, storage);
  const start = Math.floor((offset * size) / 4) * 4;
  const end = Math.ceil(((offset + length) * size) / 4) * 4;
  return { start, end, skip: offset * size - start };
}
