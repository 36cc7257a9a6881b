/**
 * Host data ↔ 32-bit words, the element storage of the generated backends (WebGPU buffers and
 * the WebAssembly arena): narrow dtypes are widened on the way in and narrowed on the way out.
 *
 * @module
 */
import { type DType, fromF16Bits, type TensorData, toF16Bits } from "../jit/dtype.ts";

/** `data` (of `dtype`) as 32-bit words ready for `writeBuffer`. */
export function toWords(data: TensorData, dtype: DType): Float32Array | Int32Array | Uint32Array {
  switch (dtype) {
    case "f32":
      return data as Float32Array;
    case "f16":
      return Float32Array.from(data as Uint16Array, fromF16Bits);
    case "i32":
      return data as Int32Array;
    case "i8":
      return Int32Array.from(data as Int8Array);
    case "u32":
      return data as Uint32Array;
    case "u8":
    case "bool":
      return Uint32Array.from(data as Uint8Array);
  }
}

/** A copy in a fresh (never shared) buffer: callers own what they get. */
function copy<T extends Float32Array | Int32Array | Uint32Array>(
  Type: { new (n: number): T; new (b: ArrayBufferLike, o: number, n: number): T },
  buffer: ArrayBufferLike,
  offset: number,
  n: number,
): T {
  const out = new Type(n);
  out.set(new Type(buffer, offset, n));
  return out;
}

/** `n` elements of `dtype` from 32-bit words at `offset` bytes of `buffer` (copied). */
export function fromWords(
  buffer: ArrayBufferLike,
  offset: number,
  n: number,
  dtype: DType,
): TensorData {
  switch (dtype) {
    case "f32":
      return copy(Float32Array, buffer, offset, n);
    case "f16":
      return Uint16Array.from(new Float32Array(buffer, offset, n), (v) => toF16Bits(v));
    case "i32":
      return copy(Int32Array, buffer, offset, n);
    case "i8":
      return Int8Array.from(new Int32Array(buffer, offset, n));
    case "u32":
      return copy(Uint32Array, buffer, offset, n);
    case "u8":
    case "bool":
      return Uint8Array.from(new Uint32Array(buffer, offset, n));
  }
}
