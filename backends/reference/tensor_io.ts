/**
 * How reference kernels see tensor data: {@linkcode read} gives every dtype as plain numbers
 * (f16 decoded), {@linkcode writer} collects numbers and stores them in the output dtype. Kernels
 * therefore compute in float64 JavaScript numbers and round once, on store, like an f32 device.
 *
 * @module
 */
import {
  allocate,
  type DType,
  fromF16Array,
  type TensorData,
  toF16Array,
} from "../../jit/ir/dtype.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";

/** Numbers without copying, except f16, which is decoded. */
export function read(t: RefTensor): ArrayLike<number> {
  if (t.dtype === "f16") return fromF16Array(t.data as Uint16Array);
  return t.data as Exclude<TensorData, BigInt64Array>;
}

/** An output buffer: write numbers into `out`, then `finish()` gives the dtype's typed array. */
export interface Writer {
  /** Number-valued staging (the output array itself, except for f16). */
  readonly out: { [i: number]: number; length: number };
  /** The finished output data. */
  finish(): TensorData;
}

/** `values` as output data of `dtype` (see {@linkcode writer}). */
export function written(dtype: DType, values: ArrayLike<number>): TensorData {
  const w = writer(dtype, values.length);
  for (let i = 0; i < values.length; i++) w.out[i] = values[i];
  return w.finish();
}

/** A writer for `n` elements of `dtype`. Bool stores any non-zero number (NaN too) as 1. */
export function writer(dtype: DType, n: number): Writer {
  if (dtype === "f16") {
    const out = new Float64Array(n);
    return { out, finish: () => toF16Array(out) };
  }
  if (dtype === "bool") {
    const out = new Float64Array(n);
    return { out, finish: () => Uint8Array.from(out, (v) => (v !== 0 ? 1 : 0)) };
  }
  const out = allocate(dtype, n) as Exclude<TensorData, BigInt64Array>;
  return { out, finish: () => out };
}
