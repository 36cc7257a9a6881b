/**
 * The ONNX protobuf layer: decoding model bytes (`proto_codec.ts`), and converting
 * `TensorProto`s to host tensors and back. Anything malformed — truncated or corrupt bytes, an
 * unsupported element type, external data — becomes a typed `KilnError` with a `Fix:` hint.
 *
 * @module
 */
import {
  type BoundaryDType,
  type DType,
  LITTLE_ENDIAN,
  narrowI64,
  type TensorData,
} from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { checkWireFormat } from "./wire_check.ts";
import { decode, encode, MESSAGES } from "./proto_codec.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { Shape } from "../../jit/ir/shape.ts";

/** A protobuf int64: decoded as a number; a bigint or a Long-like object also encodes. */
export type Int64 = number | bigint | { toNumber(): number; toString(): string };

/** `AttributeProto`: one node attribute. */
export interface AttributeProto {
  name: string;
  type?: number;
  f?: number;
  i?: Int64;
  s?: Uint8Array;
  t?: TensorProto;
  floats?: number[];
  ints?: Int64[];
  strings?: Uint8Array[];
  g?: GraphProto;
}

/** `NodeProto`: one op. */
export interface NodeProto {
  opType: string;
  domain?: string;
  name?: string;
  input: string[];
  output: string[];
  attribute: AttributeProto[];
}

/** `ValueInfoProto`: a graph input or output with its type. */
export interface ValueInfoProto {
  name: string;
  type?: TypeProto;
}

/** `TypeProto`: a tensor, or a sequence or optional of a type. */
export interface TypeProto {
  tensorType?: { elemType?: number; shape?: { dim?: { dimValue?: Int64; dimParam?: string }[] } };
  sequenceType?: { elemType?: TypeProto };
  optionalType?: { elemType?: TypeProto };
}

/** `GraphProto`. */
export interface GraphProto {
  name?: string;
  node: NodeProto[];
  initializer: TensorProto[];
  input: ValueInfoProto[];
  output: ValueInfoProto[];
}

/** `ModelProto`. */
export interface ModelProto {
  irVersion?: Int64;
  producerName?: string;
  producerVersion?: string;
  opsetImport: { domain?: string; version?: Int64 }[];
  graph: GraphProto;
}

/** Encodes a model to bytes. */
export function encodeModel(model: ModelProto): Uint8Array {
  return encode(MESSAGES.model, model);
}

/** The fields of `TensorProto` kiln reads. */
export interface TensorProto {
  name?: string;
  dims?: Int64[];
  dataType?: number;
  rawData?: Uint8Array;
  floatData?: number[];
  int32Data?: number[];
  stringData?: Uint8Array[];
  int64Data?: Int64[];
  doubleData?: number[];
  uint64Data?: Int64[];
  dataLocation?: number;
  externalData?: unknown[];
}

/**
 * ONNX `TensorProto.DataType` codes kiln handles, with their boundary dtype. Types kiln has no
 * storage for are held in a wider one: uint64 in u32 with a range check (as int64 in i32), and bfloat16 in f32 (exactly: a bfloat16 is
 * the top half of an f32), so their values, not their bits, cross the boundary, and arithmetic on
 * them is 32-bit. The importer rounds to bfloat16 where the model asks for it (Cast, outputs).
 */
const DTYPE_OF_CODE: Record<number, OnnxDType> = {
  1: "f32",
  2: "u8",
  3: "i8",
  4: "u16",
  5: "i16",
  6: "i32",
  7: "i64",
  9: "bool",
  10: "f16",
  11: "f64",
  12: "u32",
  13: "u32",
  16: "f32",
};
const NAMES: Record<number, string> = {
  1: "float",
  2: "uint8",
  3: "int8",
  4: "uint16",
  5: "int16",
  6: "int32",
  7: "int64",
  8: "string",
  9: "bool",
  10: "float16",
  11: "double",
  12: "uint32",
  13: "uint64",
  14: "complex64",
  15: "complex128",
  16: "bfloat16",
  21: "uint4",
  22: "int4",
};

/**
 * The dtype an ONNX element type is held in (the boundary's own `bf16` aside: a model's bfloat16
 * inputs and outputs are declared `bf16`, see `onnx/import/inputs.ts`).
 */
export type OnnxDType = Exclude<BoundaryDType, "bf16">;

/** The ONNX data type code of a kiln dtype (`i32` exports as int32). */
export const CODE_OF_DTYPE: Record<BoundaryDType, number> = {
  f32: 1,
  f64: 11,
  u8: 2,
  i8: 3,
  u16: 4,
  i16: 5,
  i32: 6,
  i64: 7,
  bool: 9,
  f16: 10,
  u32: 12,
  bf16: 16,
};

/** A number from a protobuf int64. */
export function int(v: Int64 | undefined | null): number {
  if (v === undefined || v === null) return 0;
  return typeof v === "number" ? v : typeof v === "bigint" ? Number(v) : v.toNumber();
}

/** An int64 field's value as the exact bigint it holds (decoded past 2^53 as a bigint). */
function exactBig(v: Int64): bigint {
  return typeof v === "bigint"
    ? v
    : typeof v === "number"
    ? BigInt(Math.trunc(v))
    : BigInt(v.toString());
}

/** The boundary dtype of an ONNX element type code, or a typed error naming it. */
export function dtypeOfCode(code: number, where: string): OnnxDType {
  const d = DTYPE_OF_CODE[code];
  if (d) return d;
  throw new KilnError(`${where}: element type ${NAMES[code] ?? code} is not supported`, {
    code: "unsupported",
    fix:
      "export the model with float32/float16/bfloat16/double or (u)int8/16/32/64 or bool tensors (strings and complex are not supported)",
  });
}

/** Decodes model bytes; malformed bytes give a typed error. */
export function decodeModel(bytes: Uint8Array): ModelProto {
  if (!(bytes instanceof Uint8Array) || bytes.byteLength === 0) {
    throw new KilnError("The ONNX model is empty", {
      code: "bad-input",
      fix: "pass the bytes of a .onnx file",
    });
  }
  checkWireFormat(bytes);
  let model: ModelProto;
  try {
    model = decode(MESSAGES.model, bytes) as unknown as ModelProto;
  } catch (e) {
    throw new KilnError(
      `The ONNX model could not be decoded (${
        (e as Error).message
      }); the file is truncated or not ONNX`,
      {
        code: "bad-input",
        fix: "re-export the model, or check that the whole .onnx file was copied",
        cause: e,
      },
    );
  }
  if (!model.graph) {
    throw new KilnError("The ONNX model has no graph", {
      code: "bad-input",
      fix: "pass an ONNX model file (ModelProto with a graph)",
    });
  }
  return model;
}

/** Decodes a serialized `TensorProto` (a test case's `input_0.pb`); malformed bytes give a typed error. */
export function decodeTensor(bytes: Uint8Array, where: string): TensorProto {
  try {
    return decode(MESSAGES.tensor, bytes) as unknown as TensorProto;
  } catch (e) {
    throw new KilnError(`${where} is not a serialized TensorProto (${(e as Error).message})`, {
      code: "bad-input",
      fix: "pass the bytes of a .pb file written by onnx.numpy_helper.from_array",
      cause: e,
    });
  }
}

/** The typed arrays raw tensor data is read into. */
type RawElements =
  | Float32Array
  | Float64Array
  | Uint16Array
  | Int16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array;

/**
 * `count` elements of raw little-endian data as a `Ctor` array: on a little-endian engine, where
 * the data starts on an element, a view of it (a model's bytes are kiln's own, read from its file
 * or copied from the caller's, and nothing writes decoded tensors: a 0.5B decoder's 544 MB
 * embedding table took 2-3 s to copy on the 2-core VM, the fresh pages' first touch); else one
 * byte copy (a DataView read per element took 120 ms for shufflenet's 1.4M weights), then on a
 * big-endian engine each element read again through `read` at its byte offset.
 */
function fromRaw<T extends RawElements>(
  Ctor: {
    new (buffer: ArrayBufferLike, byteOffset?: number, length?: number): T;
    readonly BYTES_PER_ELEMENT: number;
  },
  raw: Uint8Array,
  count: number,
  read: (view: DataView, at: number) => T[number],
): T {
  const size = count * Ctor.BYTES_PER_ELEMENT;
  if (LITTLE_ENDIAN && raw.byteOffset % Ctor.BYTES_PER_ELEMENT === 0 && raw.length >= size) {
    return new Ctor(raw.buffer, raw.byteOffset, count);
  }
  const bytes = new Uint8Array(size);
  bytes.set(raw.subarray(0, bytes.length));
  const out = new Ctor(bytes.buffer);
  if (LITTLE_ENDIAN) return out;
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < count; i++) out[i] = read(view, i * Ctor.BYTES_PER_ELEMENT);
  return out;
}

/**
 * The first `count` u32 words of little-endian `bytes` (see `fromRaw`: a view where they start on
 * a word; the importer's decoded bytes are a copy of their own, so a 0.5B decoder's 247 MB of
 * 4-bit weights are no longer copied again, about a second of its import on the 2-core VM).
 */
export function littleEndianWords(bytes: Uint8Array, count: number): Uint32Array {
  return fromRaw(Uint32Array, bytes, count, (v, at) => v.getUint32(at, true));
}

/** Bytes of one element of ONNX element type `code` in raw data (a typed error for unsupported ones). */
export function elementBytes(code: number, where: string): number {
  const dtype = dtypeOfCode(code, where);
  return code === 11 || code === 7 || code === 13
    ? 8
    : dtype === "f16" || code === 4 || code === 5 || code === 16
    ? 2
    : dtype === "f32" || dtype === "i32" || dtype === "u32"
    ? 4
    : 1;
}

/** Whether tensor `t` keeps its data in an external file (see `external_data.ts`). */
export function isExternal(t: TensorProto): boolean {
  return t.dataLocation === 1 || (t.externalData?.length ?? 0) > 0;
}

/** ONNX's element type codes of uint4 and int4 (opset 21: QDQ weights of 4 bits). */
export const UINT4 = 21, INT4 = 22;

/**
 * A uint4 or int4 tensor (two elements a byte, the first in the low bits) held in u8 or i8: the
 * values of 4-bit weights, which DequantizeLinear reads. Only raw data is read (the form every
 * exporter writes).
 */
function fourBit(
  t: TensorProto,
  code: number,
  shape: Shape,
  count: number,
  name: string,
): HostTensor & { dtype: DType } {
  const raw = t.rawData ?? new Uint8Array();
  if (raw.byteLength !== Math.ceil(count / 2)) {
    throw new KilnError(
      `${name}: ${raw.byteLength} bytes of raw data for ${count} ${
        code === INT4 ? "int4" : "uint4"
      } elements`,
      { code: "bad-input", fix: "give 4-bit tensors as raw_data, two elements a byte" },
    );
  }
  const nibble = (i: number) => (raw[i >> 1] >> ((i & 1) * 4)) & 15;
  return code === INT4
    ? {
      data: Int8Array.from({ length: count }, (_, i) => (nibble(i) << 28) >> 28),
      shape,
      dtype: "i8",
    }
    : { data: Uint8Array.from({ length: count }, (_, i) => nibble(i)), shape, dtype: "u8" };
}

/**
 * int64 data holding a saturated "to the end" sentinel: right as a Slice bound or a clamp, wrong
 * as a number (`-INT64_MAX` is not `-(2^31 - 1)`); the importer refuses arithmetic on it.
 */
const SATURATED = new WeakSet<TensorData>();

/** Whether `data` came from int64 data with INT64_MAX or INT64_MIN saturated into 32 bits. */
export function isSaturated(data: TensorData): boolean {
  return SATURATED.has(data);
}

/** Marks `data` as computed from saturated sentinels only by moving or clamping them. */
export function markSaturated(data: TensorData): void {
  SATURATED.add(data);
}

/** Converts a `TensorProto` to a host tensor in kiln's internal dtypes (int64 narrowed). */
export function tensorOf(t: TensorProto, where: string): HostTensor & { dtype: DType } {
  const name = `${where}${t.name ? ` "${t.name}"` : ""}`;
  if (isExternal(t)) {
    throw new KilnError(`${name} keeps its data in an external file, which was not read`, {
      code: "bad-input",
      fix:
        "load the model from its path (OnnxModel.load(path), kiln run PATH) so that the data file beside it is read, or re-save it with the data inline (onnx.save(onnx.load(path), path))",
    });
  }
  const shape: Shape = (t.dims ?? []).map(int);
  if (shape.some((d) => !Number.isSafeInteger(d) || d < 0)) {
    throw new KilnError(`${name} has invalid dims [${shape}]`, {
      code: "bad-input",
      fix: "re-export the model",
    });
  }
  const count = shape.reduce((a, b) => a * b, 1);
  const code = t.dataType ?? 0;
  if (code === UINT4 || code === INT4) return fourBit(t, code, shape, count, name);
  const dtype = dtypeOfCode(code, name);
  const raw = t.rawData && t.rawData.byteLength ? t.rawData : undefined;
  const bytesPer = elementBytes(code, name);
  if (raw && raw.byteLength !== count * bytesPer) {
    throw new KilnError(
      `${name}: ${raw.byteLength} bytes of data for ${count} elements of ${NAMES[code]}`,
      {
        code: "bad-input",
        fix: "the model is corrupt; re-export it",
      },
    );
  }
  const fields: Fields = <T>(xs: ArrayLike<T> | undefined, what: string): ArrayLike<T> => {
    if (count > 0 && (!xs || xs.length !== count)) {
      throw new KilnError(
        `${name}: expected ${count} values in ${what}, found ${xs?.length ?? 0}`,
        { code: "bad-input", fix: "the model is corrupt; re-export it" },
      );
    }
    return xs ?? [];
  };
  const data = elementsOf(code, { t, raw, count, fields, name });
  return { data, shape, dtype: dtype === "i64" ? "i32" : dtype };
}

/** Reads a repeated field of `count` values (`count` checked). */
type Fields = <T>(xs: ArrayLike<T> | undefined, what: string) => ArrayLike<T>;

/** What decoding a tensor's elements reads: the message, its raw bytes, its size and name. */
interface Elements {
  readonly t: TensorProto;
  readonly raw?: Uint8Array;
  readonly count: number;
  readonly fields: Fields;
  readonly name: string;
}

/** The elements of a tensor of ONNX type `code`, from `raw_data` or the typed field. */
function elementsOf(code: number, d: Elements): TensorData {
  const { t, raw, count, fields } = d;
  switch (code) {
    case 1:
      return raw
        ? fromRaw(Float32Array, raw, count, (v, at) => v.getFloat32(at, true))
        : Float32Array.from(fields(t.floatData, "float_data"));
    case 11:
      return raw
        ? fromRaw(Float64Array, raw, count, (v, at) => v.getFloat64(at, true))
        : Float64Array.from(fields(t.doubleData, "double_data"));
    case 10:
      return raw
        ? fromRaw(Uint16Array, raw, count, (v, at) => v.getUint16(at, true))
        : Uint16Array.from(fields(t.int32Data, "int32_data"));
    case 16: {
      // A bfloat16 is the high 16 bits of the f32 with the same value.
      const bits = raw
        ? fromRaw(Uint16Array, raw, count, (v, at) => v.getUint16(at, true))
        : Uint16Array.from(fields(t.int32Data, "int32_data"));
      return new Float32Array(Uint32Array.from(bits, (b) => b << 16).buffer);
    }
    case 6:
      return raw
        ? fromRaw(Int32Array, raw, count, (v, at) => v.getInt32(at, true))
        : Int32Array.from(fields(t.int32Data, "int32_data"));
    case 4:
      return raw
        ? fromRaw(Uint16Array, raw, count, (v, at) => v.getUint16(at, true))
        : Uint16Array.from(fields(t.int32Data, "int32_data"));
    case 5:
      return raw
        ? fromRaw(Int16Array, raw, count, (v, at) => v.getInt16(at, true))
        : Int16Array.from(fields(t.int32Data, "int32_data"));
    case 13:
      return uint64Elements(d);
    case 12:
      return raw
        ? fromRaw(Uint32Array, raw, count, (v, at) => v.getUint32(at, true))
        : Uint32Array.from(fields((t.uint64Data ?? []).map(int), "uint64_data"));
    case 7:
      return int64Elements(d);
    case 2:
    case 9:
      // Views of the bytes, as the wider types' are (the importer's decoded bytes are a copy of
      // their own): a 0.5B decoder's 247 MB of 4-bit weights were copied once more, 1.5 s of
      // its first generation on the 2-core VM (`from` read them one by one: 2.1 s).
      return raw
        ? new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength)
        : Uint8Array.from(fields(t.int32Data, "int32_data"));
    default:
      return raw
        ? new Int8Array(raw.buffer, raw.byteOffset, raw.byteLength)
        : Int8Array.from(fields(t.int32Data, "int32_data"));
  }
}

/** uint64 elements, held in 32 bits: a value past 2^32 - 1 is refused. */
function uint64Elements({ t, raw, count, fields, name }: Elements): Uint32Array {
  const big = raw
    ? fromRaw(BigUint64Array, raw, count, (v, at) => v.getBigUint64(at, true))
    : BigUint64Array.from(
      fields((t.uint64Data ?? []).map(int), "uint64_data"),
      (v) => BigInt(v),
    );
  const over = big.findIndex((v) => v > 0xffffffffn);
  if (over >= 0) {
    throw new KilnError(
      `${name}: uint64 value ${big[over]} is past 2^32 - 1, which kiln holds uint64 in`,
      { code: "unsupported", fix: "keep uint64 values below 2^32 (kiln computes in 32 bits)" },
    );
  }
  return Uint32Array.from(big, Number);
}

/** int64 elements, held in 32 bits: the exporters' sentinels saturate, other overflow is refused. */
function int64Elements({ t, raw, count, fields, name }: Elements): Int32Array {
  const big = raw
    ? fromRaw(BigInt64Array, raw, count, (v, at) => v.getBigInt64(at, true))
    : BigInt64Array.from(fields(t.int64Data, "int64_data"), exactBig);
  // INT64_MAX, INT64_MIN and −INT64_MAX are the exporters' "to the end" sentinels (Slice
  // starts and ends; torchvision's Swin slices from −INT64_MAX): they saturate, which
  // clamps the same. Any other value outside i32 is an error.
  let sentinel = false;
  for (let i = 0; i < big.length; i++) {
    if (big[i] === 9223372036854775807n) big[i] = 2147483647n;
    else if (big[i] <= -9223372036854775807n) big[i] = -2147483648n;
    else continue;
    sentinel = true;
  }
  const data = narrowI64(big, name);
  if (sentinel) SATURATED.add(data);
  return data;
}

/** Converts a host tensor to a `TensorProto` (raw little-endian data); `asI64` widens i32. */
export function protoOf(name: string, t: HostTensor, asI64 = false): TensorProto {
  const dtype: BoundaryDType = asI64 && t.dtype === "i32" ? "i64" : t.dtype;
  let bytes: Uint8Array;
  if (dtype === "i64" && t.dtype === "i32") {
    const big = BigInt64Array.from(t.data as Int32Array, (v) => BigInt(v));
    bytes = new Uint8Array(big.buffer);
  } else {
    bytes = new Uint8Array(
      t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength),
    );
  }
  return { name, dims: t.shape.map((d) => d), dataType: CODE_OF_DTYPE[dtype], rawData: bytes };
}

/** Length-delimited fields `field` of a serialized message (a minimal reader for the test data). */
function fieldsOf(bytes: Uint8Array, where: string): Map<number, Uint8Array[]> {
  const out = new Map<number, Uint8Array[]>();
  let pos = 0;
  const varint = () => {
    let v = 0, scale = 1;
    for (let i = 0; i < 10 && pos < bytes.length; i++) {
      const b = bytes[pos++];
      v += (b & 0x7f) * scale;
      if (b < 0x80) return v;
      scale *= 128;
    }
    throw new KilnError(`${where} is malformed (a bad varint)`, {
      code: "bad-input",
      fix: "pass a serialized SequenceProto or OptionalProto",
    });
  };
  while (pos < bytes.length) {
    const key = varint(), wire = key % 8, field = Math.floor(key / 8);
    if (wire === 0) varint();
    else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else if (wire === 2) {
      const n = varint();
      if (pos + n > bytes.length) {
        throw new KilnError(`${where} is truncated`, {
          code: "bad-input",
          fix: "pass the whole file",
        });
      }
      out.set(field, [...(out.get(field) ?? []), bytes.subarray(pos, pos + n)]);
      pos += n;
    } else {
      throw new KilnError(`${where} is malformed (wire type ${wire})`, {
        code: "bad-input",
        fix: "pass a serialized SequenceProto or OptionalProto",
      });
    }
  }
  return out;
}

/** A serialized `SequenceProto` of tensors, as host tensors (the ONNX test data's form). */
export function decodeSequence(
  bytes: Uint8Array,
  where: string,
): (HostTensor & { dtype: DType })[] {
  return (fieldsOf(bytes, where).get(3) ?? []).map((t, i) =>
    tensorOf(decodeTensor(t, `${where} element ${i}`), `${where} element ${i}`)
  );
}

/**
 * A serialized `OptionalProto`: its tensor, its sequence of tensors, or `null` when it is empty.
 */
export function decodeOptional(
  bytes: Uint8Array,
  where: string,
): (HostTensor & { dtype: DType }) | (HostTensor & { dtype: DType })[] | null {
  const fields = fieldsOf(bytes, where);
  const tensor = fields.get(3)?.[0];
  if (tensor) return tensorOf(decodeTensor(tensor, where), where);
  const seq = fields.get(5)?.[0];
  return seq ? decodeSequence(seq, where) : null;
}
