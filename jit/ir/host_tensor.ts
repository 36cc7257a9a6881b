/**
 * Host data: a typed array with its shape and dtype. This is what users hand to `run` and
 * `setParam`, and what comes back from a run. Validation lives here so every entry point rejects
 * bad data with the same clear message before anything the caller owns is touched.
 *
 * @module
 */
import {
  allocate,
  type BoundaryDType,
  type DType,
  dtypeOfData,
  internalData,
  internalDType,
  isDType,
  matchesDType,
  narrowToBf16,
  type TensorData,
  widenBf16,
} from "./dtype.ts";
import { KilnError, shown } from "../support/errors.ts";
import { formatShape, isValidShape, type Shape, sizeOf } from "./shape.ts";

/** A tensor inside kiln (what backends receive): internal dtype, row-major data. */
export interface RefTensor {
  /** Row-major data. */
  readonly data: TensorData;
  /** Shape. */
  readonly shape: Shape;
  /** Internal dtype. */
  readonly dtype: DType;
}

/** A tensor held in host memory. */
export interface HostTensor {
  /** Row-major element data. */
  readonly data: TensorData;
  /** The tensor's shape. */
  readonly shape: Shape;
  /** The tensor's element type. */
  readonly dtype: BoundaryDType;
}

/** What a {@linkcode HostTensor} is checked against. */
export interface TensorSpec {
  /** Expected shape. */
  readonly shape: Shape;
  /** Expected boundary dtype. */
  readonly dtype: BoundaryDType;
}

/**
 * Makes a validated {@linkcode HostTensor}. `dtype` defaults to the array's natural type
 * (`Uint8Array` → `u8`; pass `"bool"` for booleans); `shape` defaults to `[data.length]`.
 */
export function hostTensor(data: TensorData, shape?: Shape, dtype?: BoundaryDType): HostTensor {
  if (!ArrayBuffer.isView(data)) {
    // Its length and type had been asked for first: a TypeError from inside.
    throw new KilnError(`hostTensor takes a typed array first, got ${shown(data)}`, {
      code: "bad-input",
      fix: "pass e.g. hostTensor(new Float32Array([1, 2]), [2])",
    });
  }
  const t = { data, shape: shape ?? [data.length], dtype: dtype ?? dtypeOfData(data) };
  return checkHostTensor(t, "hostTensor");
}

/** Checks that `t` is a well-formed host tensor and returns it. */
export function checkHostTensor(t: unknown, what: string): HostTensor {
  const ht = t as HostTensor;
  if (typeof t !== "object" || t === null || !ArrayBuffer.isView(ht.data)) {
    throw new KilnError(`${what}: expected a HostTensor { data, shape, dtype }, got ${typeof t}`, {
      code: "bad-input",
      fix: 'pass { data: Float32Array | Int32Array | …, shape: number[], dtype: "f32" | … }',
    });
  }
  if (!isDType(ht.dtype)) {
    throw new KilnError(`${what}: unknown dtype ${shown(ht.dtype)}`, {
      code: "bad-input",
      fix: "use one of f32, f16, i32, u32, i8, u8, bool, i64",
    });
  }
  if (!isValidShape(ht.shape)) {
    throw new KilnError(`${what}: shape ${shown(ht.shape)} is not a list of sizes`, {
      code: "bad-input",
      fix: "pass the shape as an array of non-negative integers",
    });
  }
  if (!matchesDType(ht.data, ht.dtype)) {
    throw new KilnError(
      `${what}: dtype ${ht.dtype} cannot be stored in a ${ht.data.constructor.name}`,
      {
        code: "bad-input",
        fix: `store ${ht.dtype} data in a ${allocate(ht.dtype, 0).constructor.name}`,
      },
    );
  }
  if (ht.data.length !== sizeOf(ht.shape)) {
    throw new KilnError(
      `${what}: shape ${formatShape(ht.shape)} needs ${
        sizeOf(ht.shape)
      } elements, the data has ${ht.data.length}`,
      { code: "bad-input", fix: "pass data whose length is the product of the shape" },
    );
  }
  return ht;
}

/**
 * Checks user data against what a graph declares and converts it to kiln's internal form
 * (`i64` narrowed to `i32`). Returns a fresh array when a conversion happened, the caller's
 * array otherwise; kiln never writes into it.
 */
export function acceptInput(
  t: unknown,
  spec: TensorSpec,
  what: string,
): { data: TensorData; shape: Shape; dtype: DType } {
  const ht = checkHostTensor(t, what);
  // i32 data may feed an i64 input, and f32 data a bf16 one (rounded to bfloat16 first).
  const fits = ht.dtype === spec.dtype || (spec.dtype === "i64" && ht.dtype === "i32") ||
    (spec.dtype === "bf16" && ht.dtype === "f32");
  if (!fits) {
    throw new KilnError(`${what}: expected dtype ${spec.dtype}, got ${ht.dtype}`, {
      code: "bad-input",
      fix: `convert the data to ${spec.dtype} before passing it`,
    });
  }
  if (ht.shape.length !== spec.shape.length || ht.shape.some((d, i) => d !== spec.shape[i])) {
    throw new KilnError(
      `${what}: expected shape ${formatShape(spec.shape)}, got ${formatShape(ht.shape)}`,
      {
        code: "bad-input",
        fix: "pass data of the declared shape (or rebuild the graph for this shape)",
      },
    );
  }
  if (ht.dtype === "i64" || ht.dtype === "bf16") {
    const data = internalData(ht.data, ht.dtype, what);
    return { data, shape: ht.shape, dtype: internalDType(ht.dtype) };
  }
  if (spec.dtype === "bf16") {
    const data = widenBf16(narrowToBf16(ht.data as Float32Array));
    return { data, shape: ht.shape, dtype: "f32" };
  }
  return { data: ht.data, shape: ht.shape, dtype: ht.dtype };
}
