/**
 * Element types. Inside kiln every value has one of {@linkcode DType}; `f64` is computed in f64
 * where the backend has it (reference, wasm) and narrowed to f32 only where the caller allows it
 * (WGSL has no f64). int64 data at the boundary (graph inputs, parameters, constants from ONNX) is
 * narrowed to `i32` with a range check, because no backend we target has 64-bit integer arithmetic
 * worth using; an `i64` value inside a graph is made by a Cast (the ONNX importer casts where
 * int64 arithmetic can leave the 32-bit range), and each compile lowers it to what the backend
 * computes (`jit/passes/int64.ts`: f64, exact to 2^53, or i32 with checks). `f16` is a storage
 * type: its bits live in a `Uint16Array` (Node 20 has no `Float16Array`) and arithmetic happens in
 * wider floats. The narrow integers (`i16`, `u16`, `i8`, `u8`) are computed in 32 bits and wrap to
 * their width after every op, as a store would.
 *
 * @module
 */
import { KilnError, shown } from "../support/errors.ts";

/** Element types a value inside a kiln graph can have. */
export type DType =
  | "f64"
  | "f32"
  | "f16"
  | "i64"
  | "i32"
  | "u32"
  | "i16"
  | "u16"
  | "i8"
  | "u8"
  | "bool";

/**
 * Element types accepted at a graph's boundary: {@linkcode DType} (`i64` held as `i32` inside)
 * and `bf16` (bfloat16, its bits in a `Uint16Array`; held as `f32` inside, exactly, and rounded
 * to the nearest bfloat16 where it leaves).
 */
export type BoundaryDType = DType | "i64" | "bf16";

/** The typed array that stores each {@linkcode DType}. */
export interface TypedArrayFor {
  /** 64-bit float. */
  f64: Float64Array;
  /** 32-bit float. */
  f32: Float32Array;
  /** 16-bit float, stored as raw bits. */
  f16: Uint16Array;
  /** 32-bit signed integer. */
  i32: Int32Array;
  /** 32-bit unsigned integer. */
  u32: Uint32Array;
  /** 16-bit signed integer. */
  i16: Int16Array;
  /** 16-bit unsigned integer (the same array kind as f16's bits: the dtype tells them apart). */
  u16: Uint16Array;
  /** 8-bit signed integer. */
  i8: Int8Array;
  /** 8-bit unsigned integer. */
  u8: Uint8Array;
  /** Boolean, one byte per element holding 0 or 1. */
  bool: Uint8Array;
  /** 64-bit signed integer. */
  i64: BigInt64Array;
  /** bfloat16 as raw bits (boundary only). */
  bf16: Uint16Array;
}

/** Any typed array kiln stores tensor data in. */
export type TensorData =
  | Float64Array
  | Float32Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | Int16Array
  | Int8Array
  | Uint8Array
  | BigInt64Array;

/** Every internal dtype, in a stable order. */
export const DTYPES: readonly DType[] = [
  "f32",
  "f16",
  "f64",
  "i32",
  "u32",
  "i16",
  "u16",
  "i8",
  "u8",
  "bool",
  "i64",
];

const BYTES: Record<BoundaryDType, number> = {
  f64: 8,
  f32: 4,
  f16: 2,
  i32: 4,
  u32: 4,
  i16: 2,
  u16: 2,
  i8: 1,
  u8: 1,
  bool: 1,
  i64: 8,
  bf16: 2,
};

/** The dtype kiln holds a boundary dtype in: `i64` as `i32`, `bf16` as `f32`, others as they are. */
export function internalDType(dtype: BoundaryDType): DType {
  return dtype === "i64" ? "i32" : dtype === "bf16" ? "f32" : dtype;
}

/** Bytes per element of `dtype`. */
export function byteSize(dtype: BoundaryDType): number {
  // An unknown name had given undefined, and sizes computed from it NaN.
  return isDType(dtype) ? BYTES[dtype] : unknownDType(dtype);
}

/** Whether `dtype` is a floating-point type. */
export function isFloat(dtype: DType): boolean {
  return dtype === "f32" || dtype === "f16" || dtype === "f64";
}

const RANGES: Partial<Record<DType, readonly [number, number]>> = {
  i64: [-(2 ** 63), 2 ** 63],
  i32: [-2147483648, 2147483647],
  u32: [0, 4294967295],
  i16: [-32768, 32767],
  u16: [0, 65535],
  i8: [-128, 127],
  u8: [0, 255],
};

/** The values integer `dtype` holds, `[lowest, highest]` (undefined for floats and bool). */
export function intRange(dtype: DType): readonly [number, number] | undefined {
  return RANGES[dtype];
}

/** Whether `dtype` is an integer type (bool excluded). */
export function isInt(dtype: DType): boolean {
  return intRange(dtype) !== undefined;
}

/** Whether `s` names a boundary dtype. */
export function isDType(s: unknown): s is BoundaryDType {
  // Own keys only: "toString" is in every object.
  return typeof s === "string" && Object.hasOwn(BYTES, s);
}

/** The error of a dtype name kiln does not have. */
function unknownDType(dtype: unknown): never {
  throw new KilnError(`Unknown dtype ${shown(dtype)}`, {
    code: "bad-input",
    fix: `use one of ${Object.keys(BYTES).join(", ")}`,
  });
}

/** Allocates a zeroed typed array of `length` elements for `dtype`. */
export function allocate<D extends BoundaryDType>(dtype: D, length: number): TypedArrayFor[D] {
  switch (dtype) {
    case "f64":
      return new Float64Array(length) as TypedArrayFor[D];
    case "f32":
      return new Float32Array(length) as TypedArrayFor[D];
    case "f16":
    case "bf16":
      return new Uint16Array(length) as TypedArrayFor[D];
    case "i32":
      return new Int32Array(length) as TypedArrayFor[D];
    case "u32":
      return new Uint32Array(length) as TypedArrayFor[D];
    case "i16":
      return new Int16Array(length) as TypedArrayFor[D];
    case "u16":
      return new Uint16Array(length) as TypedArrayFor[D];
    case "i8":
      return new Int8Array(length) as TypedArrayFor[D];
    case "u8":
    case "bool":
      return new Uint8Array(length) as TypedArrayFor[D];
    case "i64":
      return new BigInt64Array(length) as TypedArrayFor[D];
  }
  throw new KilnError(`Unknown dtype "${dtype}"`, {
    code: "bad-attribute",
    fix: `use one of ${Object.keys(BYTES).join(", ")}`,
  });
}

/** `values` stored as `dtype` (f16 rounded to its bits, bool as 0/1, integers truncated). */
export function fromNumbers(dtype: DType, values: ArrayLike<number>): TensorData {
  switch (dtype) {
    case "f16":
      return toF16Array(values);
    case "bool":
      return Uint8Array.from(values, (v) => +(v !== 0));
    case "i64":
      return BigInt64Array.from(values, toBigInt);
    default: {
      const out = allocate(dtype, values.length) as Exclude<TensorData, BigInt64Array>;
      out.set(values);
      return out;
    }
  }
}

/** The range of each integer dtype, inclusive. */
const INTEGER_RANGE: Partial<Record<DType, readonly [number, number]>> = {
  i32: [-(2 ** 31), 2 ** 31 - 1],
  u32: [0, 2 ** 32 - 1],
  i16: [-(2 ** 15), 2 ** 15 - 1],
  u16: [0, 2 ** 16 - 1],
  i8: [-128, 127],
  u8: [0, 255],
};

/**
 * {@linkcode fromNumbers} for values a caller wrote: a value an integer `dtype` cannot hold (out
 * of range, NaN, infinite) is a typed error naming it, where a typed array would wrap it silently
 * (`3e10` as i32 is -64771072). Fractions still truncate toward zero, as a cast does.
 */
export function exactNumbers(dtype: DType, values: ArrayLike<number>, what: string): TensorData {
  const range = INTEGER_RANGE[dtype];
  for (let i = 0; range && i < values.length; i++) {
    const v = Math.trunc(values[i]);
    if (v >= range[0] && v <= range[1]) continue;
    throw new KilnError(
      `${what}: element ${i} is ${values[i]}, which ${dtype} cannot hold ([${range[0]}, ${
        range[1]
      }])`,
      {
        code: "out-of-range",
        fix: "pass values in the dtype's range, or a wider dtype (f32, f64)",
      },
    );
  }
  return fromNumbers(dtype, values);
}

/** Whether `data` is the typed array kind that stores `dtype`. */
export function matchesDType(data: TensorData, dtype: BoundaryDType): boolean {
  switch (dtype) {
    case "f64":
      return data instanceof Float64Array;
    case "f32":
      return data instanceof Float32Array;
    case "f16":
    case "bf16":
      return data instanceof Uint16Array;
    case "i32":
      return data instanceof Int32Array;
    case "u32":
      return data instanceof Uint32Array;
    case "i16":
      return data instanceof Int16Array;
    case "u16":
      return data instanceof Uint16Array;
    case "i8":
      return data instanceof Int8Array;
    case "u8":
    case "bool":
      return data instanceof Uint8Array;
    case "i64":
      return data instanceof BigInt64Array;
  }
}

/** The dtype a typed array most naturally holds (`Uint8Array` → `u8`, `Uint16Array` → `f16`). */
export function dtypeOfData(data: TensorData): BoundaryDType {
  if (data instanceof Float32Array) return "f32";
  if (data instanceof Float64Array) return "f64";
  if (data instanceof Uint16Array) return "f16";
  if (data instanceof Int32Array) return "i32";
  if (data instanceof Uint32Array) return "u32";
  if (data instanceof Int16Array) return "i16";
  if (data instanceof Int8Array) return "i8";
  if (data instanceof Uint8Array) return "u8";
  return "i64";
}

const I32_MIN = -2147483648;
const I32_MAX = 2147483647;

/**
 * Narrows boundary `i64` data to the `i32` kiln computes with.
 * Throws when a value does not fit, naming the first offending element.
 */
export function narrowI64(data: BigInt64Array, what: string): Int32Array {
  const out = new Int32Array(data.length);
  for (let i = 0; i < data.length; i++) {
    const v = data[i];
    if (v < I32_MIN || v > I32_MAX) {
      throw new KilnError(
        `${what}: element ${i} is ${v}, which does not fit in i32 (kiln holds i64 as i32 inside)`,
        { code: "out-of-range", fix: "pass values in [-2^31, 2^31) or use f32 data" },
      );
    }
    out[i] = Number(v);
  }
  return out;
}

/**
 * Widens data kiln holds int64 in (i32, or f64 where a compile lowered int64 to it) to boundary
 * `i64`: toward zero, NaN as 0, beyond int64's range its nearest end.
 */
export function widenToI64(data: Exclude<TensorData, BigInt64Array>): BigInt64Array {
  if (data instanceof Int32Array && LITTLE_ENDIAN) return fromHalves(data);
  return BigInt64Array.from(data as ArrayLike<number>, toBigInt);
}

/** Whether this engine stores a number's lowest byte first (every engine kiln runs on does). */
export const LITTLE_ENDIAN: boolean = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * i32s as i64s, each written as its two 32-bit halves (the high one its sign): a BigInt made for
 * each value took a millisecond a token of a generation's i64 feeds (its mask and the slots of
 * its cache's capacity) on a 2-core machine.
 */
function fromHalves(data: Int32Array): BigInt64Array {
  const out = new BigInt64Array(data.length), halves = new Int32Array(out.buffer);
  for (let i = 0; i < data.length; i++) {
    halves[2 * i] = data[i];
    halves[2 * i + 1] = data[i] >> 31;
  }
  return out;
}

/** `v` as an int64 (see {@linkcode widenToI64}). */
function toBigInt(v: number): bigint {
  if (Number.isNaN(v)) return 0n;
  if (v >= 2 ** 63) return 2n ** 63n - 1n;
  return v <= -(2 ** 63) ? -(2n ** 63n) : BigInt(Math.trunc(v));
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/**
 * `value` as bfloat16 bits: its f32 rounded to nearest even in the top 16 bits. Every NaN is the
 * one quiet NaN 0x7fc0: a NaN's sign depends on the machine that made it (x86's 0 / 0 is
 * negative, JavaScript's NaN positive), and outputs must not differ by backend.
 */
export function toBf16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0];
  if (Number.isNaN(value)) return 0x7fc0;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

/** bfloat16 bits as a number (exact: every bfloat16 is an f32). */
export function fromBf16Bits(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0];
}

/** Boundary `bf16` bits as the `f32` data kiln computes with (exactly). */
export function widenBf16(bits: Uint16Array): Float32Array {
  return Float32Array.from(bits, fromBf16Bits);
}

/** `f32` data as boundary `bf16` bits, each value rounded to the nearest bfloat16. */
export function narrowToBf16(data: ArrayLike<number>): Uint16Array {
  return Uint16Array.from(data, toBf16Bits);
}

/**
 * Boundary data of `dtype` as kiln holds it (`internalDType`): i64 narrowed with a range check
 * (`what` names it in the error), bf16 bits widened to f32; other data as it is.
 */
export function internalData(data: TensorData, dtype: BoundaryDType, what: string): TensorData {
  if (dtype === "i64") return narrowI64(data as BigInt64Array, what);
  return dtype === "bf16" ? widenBf16(data as Uint16Array) : data;
}

/**
 * Data kiln holds as it leaves at a boundary of `dtype`: i32 (or f64) widened to i64, f32 to
 * bf16 bits.
 */
export function boundaryData(data: TensorData, dtype: BoundaryDType): TensorData {
  if (dtype === "i64" && !(data instanceof BigInt64Array)) return widenToI64(data);
  return dtype === "bf16" ? narrowToBf16(data as Float32Array) : data;
}

/** The engine's Float16Array, where it has one (Deno 2; not Node 20): bulk f16 conversion. */
const Float16 = (globalThis as { Float16Array?: Float16ArrayConstructor }).Float16Array;

/**
 * `values` as f16 bits, each rounded as {@linkcode toF16Bits} rounds it (through f32), in bulk:
 * natively through `Float16Array` where the engine has it. Element by element, the conversion of
 * an f16 model's inputs and outputs took 140 ns an element, seconds a run (GPT-2's logits).
 */
export function toF16Array(values: ArrayLike<number>): Uint16Array {
  if (!Float16) return Uint16Array.from(values, (v) => toF16Bits(v));
  const f32 = values instanceof Float32Array ? values : Float32Array.from(values);
  const out = new Uint16Array(new Float16(f32).buffer);
  // NaNs as toF16Bits makes them: the sign kept, the quiet bit set.
  for (let i = 0; i < out.length; i++) {
    if ((out[i] & 0x7c00) === 0x7c00 && (out[i] & 0x3ff) !== 0) out[i] = toF16Bits(f32[i]);
  }
  return out;
}

/** f16 `bits` as f32 values, as {@linkcode fromF16Bits} reads each, in bulk. */
export function fromF16Array(bits: Uint16Array): Float32Array {
  if (!Float16) return Float32Array.from(bits, fromF16Bits);
  const out = new Float32Array(new Float16(bits.buffer, bits.byteOffset, bits.length));
  for (let i = 0; i < out.length; i++) if (out[i] !== out[i]) out[i] = NaN;
  return out;
}

/** Converts a number to IEEE half-precision bits, rounding to nearest even. */
export function toF16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let m = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    if (rest > half || (rest === half && (m & 1))) m++;
    return sign | m;
  }
  let m = mant >>> 13;
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (m & 1))) {
    m++;
    if (m === 0x400) {
      m = 0;
      e++;
      if (e >= 0x1f) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | m;
}

/** Converts IEEE half-precision bits to a number. */
export function fromF16Bits(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
