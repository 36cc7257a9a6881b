/**
 * Protocol Buffers wire format for the ONNX messages kiln reads and writes, from a table of their
 * fields (`onnx.proto`'s numbers and types). It replaces a generated protobuf.js codec (and its
 * 22 MB, install-script-bearing dependency): decoding is one pass over the bytes that keeps only
 * the fields in the table, and skips the rest as protobuf requires. Decoded objects look like
 * protobuf.js's: unset strings are `""`, numbers 0, bytes empty, repeated fields `[]`, and unset
 * messages `undefined`. int64 fields decode to numbers (exact up to 2^53, as `Long.toNumber()`).
 * Errors are plain `Error`s with what was wrong: `proto.ts` turns them into typed ones.
 *
 * @module
 */

/** How a field is stored. */
type Kind = "string" | "bytes" | "int64" | "uint64" | "int32" | "float" | "double";

/** A field: its name, its kind or message type, whether it repeats and is packed on output. */
interface Field {
  readonly name: string;
  readonly kind: Kind | Message;
  readonly repeated?: boolean;
  readonly packed?: boolean;
}

/** A message type: fields by number. */
type Message = { readonly [number: number]: Field };

const field = (name: string, kind: Kind | Message, more: Partial<Field> = {}): Field => ({
  name,
  kind,
  ...more,
});
const many = { repeated: true };
const packed = { repeated: true, packed: true };

const TENSOR: Message = {
  1: field("dims", "int64", many),
  2: field("dataType", "int32"),
  4: field("floatData", "float", packed),
  5: field("int32Data", "int32", packed),
  6: field("stringData", "bytes", many),
  7: field("int64Data", "int64", packed),
  8: field("name", "string"),
  9: field("rawData", "bytes"),
  10: field("doubleData", "double", packed),
  11: field("uint64Data", "uint64", packed),
  13: field("externalData", { 1: field("key", "string"), 2: field("value", "string") }, many),
  14: field("dataLocation", "int32"),
};

const DIMENSION: Message = {
  1: field("dimValue", "int64"),
  2: field("dimParam", "string"),
  3: field("denotation", "string"),
};

// TypeProto refers to itself (sequence and optional element types): filled in below.
const TYPE: { [number: number]: Field } = {};
Object.assign(TYPE, {
  1: field("tensorType", {
    1: field("elemType", "int32"),
    2: field("shape", { 1: field("dim", DIMENSION, many) }),
  }),
  4: field("sequenceType", { 1: field("elemType", TYPE) }),
  9: field("optionalType", { 1: field("elemType", TYPE) }),
  6: field("denotation", "string"),
});

const VALUE_INFO: Message = { 1: field("name", "string"), 2: field("type", TYPE) };

// Graphs and attributes refer to each other (If/Loop/Scan bodies): filled in below.
const GRAPH: { [number: number]: Field } = {};
const ATTRIBUTE: Message = {
  1: field("name", "string"),
  20: field("type", "int32"),
  2: field("f", "float"),
  3: field("i", "int64"),
  4: field("s", "bytes"),
  5: field("t", TENSOR),
  6: field("g", GRAPH),
  7: field("floats", "float", many),
  8: field("ints", "int64", many),
  9: field("strings", "bytes", many),
  10: field("tensors", TENSOR, many),
  11: field("graphs", GRAPH, many),
  21: field("refAttrName", "string"),
};
const NODE: Message = {
  1: field("input", "string", many),
  2: field("output", "string", many),
  3: field("name", "string"),
  4: field("opType", "string"),
  7: field("domain", "string"),
  5: field("attribute", ATTRIBUTE, many),
};
Object.assign(GRAPH, {
  1: field("node", NODE, many),
  2: field("name", "string"),
  5: field("initializer", TENSOR, many),
  11: field("input", VALUE_INFO, many),
  12: field("output", VALUE_INFO, many),
  13: field("valueInfo", VALUE_INFO, many),
});

const MODEL: Message = {
  1: field("irVersion", "int64"),
  2: field("producerName", "string"),
  3: field("producerVersion", "string"),
  4: field("domain", "string"),
  5: field("modelVersion", "int64"),
  7: field("graph", GRAPH),
  8: field("opsetImport", { 1: field("domain", "string"), 2: field("version", "int64") }, many),
};

/** The message types this codec knows. */
export const MESSAGES = { model: MODEL, tensor: TENSOR } as const;

const utf8 = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

/** A reader over `bytes[start, end)`. */
class Reader {
  pos: number;
  constructor(readonly bytes: Uint8Array, start: number, readonly end: number) {
    this.pos = start;
  }

  /** A varint as a number; 64-bit values above 2^53 lose precision, negatives wrap from 2^64. */
  varint(): number {
    const v = this.#varint();
    return typeof v === "bigint" ? Number(v) : v;
  }

  /**
   * An int64 field's varint, exact: a value past 2^53 (INT64_MAX, an exporter's "to the end")
   * as a bigint, since a number would round it (2^63 - 1 to 2^63, which wraps to INT64_MIN).
   */
  varint64(): number | bigint {
    const v = this.#varint();
    return typeof v === "bigint" && Number.isSafeInteger(Number(v)) ? Number(v) : v;
  }

  /** A varint: a number where it fits 28 bits, else the exact signed 64-bit bigint. */
  #varint(): number | bigint {
    let lo = 0, shift = 0, b: number;
    // The first 28 bits with 32-bit arithmetic, the rest with BigInt.
    do {
      if (this.pos >= this.end) throw new Error("a varint runs past the end of its message");
      b = this.bytes[this.pos++];
      if (shift < 28) lo |= (b & 0x7f) << shift;
      else return this.#wide(lo, b, shift);
      shift += 7;
    } while (b & 0x80);
    return lo >>> 0;
  }

  /** The rest of a varint past 28 bits, with BigInt (only huge or negative values get here). */
  #wide(lo: number, first: number, shift: number): bigint {
    let v = BigInt(lo >>> 0) | (BigInt(first & 0x7f) << BigInt(shift));
    let b = first;
    while (b & 0x80) {
      shift += 7;
      if (shift > 63) throw new Error("a varint is longer than 10 bytes");
      if (this.pos >= this.end) throw new Error("a varint runs past the end of its message");
      b = this.bytes[this.pos++];
      v |= BigInt(b & 0x7f) << BigInt(shift);
    }
    return BigInt.asIntN(64, v);
  }

  /** `n` bytes, checked against the end. */
  take(n: number): Uint8Array {
    if (n < 0 || this.pos + n > this.end) {
      throw new Error("a field runs past the end of its message");
    }
    const out = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }
}

/** A scalar of `kind` from a reader positioned at its value (wire type `wire`). */
function scalar(r: Reader, kind: Kind, wire: number): number | bigint | string | Uint8Array {
  switch (kind) {
    case "string":
      return utf8.decode(r.take(r.varint()));
    case "bytes":
      // A view into the message's bytes, not a copy: a tensor's raw data is copied once, into its
      // typed array (`fromRaw`). Copying BERT-base's 440 MB of weights here as well took 230 ms
      // of its 2.1 s first result on the H200 host; a BERT-shaped 435 MB file loaded in 0.8-1.1 s
      // with the copy on the 2-core VM, 0.58 s without.
      return r.take(r.varint());
    case "float": {
      if (wire !== 5) throw new Error("a float field has the wrong wire type");
      const b = r.take(4);
      return new DataView(b.buffer, b.byteOffset, 4).getFloat32(0, true);
    }
    case "double": {
      if (wire !== 1) throw new Error("a double field has the wrong wire type");
      const b = r.take(8);
      return new DataView(b.buffer, b.byteOffset, 8).getFloat64(0, true);
    }
    case "uint64": {
      const v = r.varint();
      return v < 0 ? v + 2 ** 64 : v;
    }
    case "int32":
      return r.varint() | 0;
    default:
      return r.varint64();
  }
}

/** Skips a field of wire type `wire`. */
function skip(r: Reader, wire: number): void {
  if (wire === 0) r.varint();
  else if (wire === 1) r.take(8);
  else if (wire === 2) r.take(r.varint());
  else if (wire === 5) r.take(4);
  else throw new Error(`wire type ${wire} is not valid here`);
}

/** The wire type a value of `kind` is written with. */
const wireOf = (kind: Kind | Message): number =>
  typeof kind !== "string"
    ? 2
    : kind === "float"
    ? 5
    : kind === "double"
    ? 1
    : kind === "string" || kind === "bytes"
    ? 2
    : 0;

/** Decodes message `type` from `bytes[start, end)`. */
function decodeMessage(
  type: Message,
  bytes: Uint8Array,
  start: number,
  end: number,
  depth: number,
): Record<string, unknown> {
  if (depth > 64) throw new Error("messages nest more than 64 deep");
  const out: Record<string, unknown> = {};
  for (const f of Object.values(type)) {
    if (f.repeated) out[f.name] = [];
    else if (typeof f.kind === "string") {
      out[f.name] = f.kind === "string" ? "" : f.kind === "bytes" ? new Uint8Array() : 0;
    }
  }
  const r = new Reader(bytes, start, end);
  while (r.pos < end) {
    const key = r.varint(), wire = key & 7, number = key >>> 3;
    const f = type[number];
    if (!f) {
      skip(r, wire);
      continue;
    }
    if (typeof f.kind !== "string") {
      if (wire !== 2) throw new Error(`field ${f.name} has the wrong wire type`);
      const n = r.varint();
      r.take(n);
      const value = decodeMessage(f.kind, bytes, r.pos - n, r.pos, depth + 1);
      if (f.repeated) (out[f.name] as unknown[]).push(value);
      else out[f.name] = value;
    } else if (f.repeated && wire === 2 && wireOf(f.kind) !== 2) {
      // A packed run of scalars.
      const n = r.varint();
      const inner = new Reader(bytes, r.pos, r.pos + n);
      r.take(n);
      const list = out[f.name] as unknown[];
      while (inner.pos < inner.end) list.push(scalar(inner, f.kind, wireOf(f.kind)));
    } else {
      if (wire !== wireOf(f.kind)) throw new Error(`field ${f.name} has the wrong wire type`);
      const value = scalar(r, f.kind, wire);
      if (f.repeated) (out[f.name] as unknown[]).push(value);
      else out[f.name] = value;
    }
  }
  return out;
}

/** Decodes `bytes` as message `type` (see the module doc for the form). */
export function decode(type: Message, bytes: Uint8Array): Record<string, unknown> {
  return decodeMessage(type, bytes, 0, bytes.byteLength, 0);
}

/** A growable byte buffer with protobuf's primitives. */
class Writer {
  #buf = new Uint8Array(256);
  #len = 0;

  #room(n: number): void {
    if (this.#len + n <= this.#buf.length) return;
    const next = new Uint8Array(Math.max(this.#buf.length * 2, this.#len + n));
    next.set(this.#buf.subarray(0, this.#len));
    this.#buf = next;
  }

  byte(b: number): void {
    this.#room(1);
    this.#buf[this.#len++] = b;
  }

  /** A non-negative integer below 2^53, or any int64 (negatives take ten bytes). */
  varint(v: number | bigint): void {
    if (typeof v === "number" && v >= 0 && v <= Number.MAX_SAFE_INTEGER) {
      while (v >= 0x80) {
        this.byte((v % 0x80) | 0x80);
        v = Math.floor(v / 0x80);
      }
      this.byte(v);
      return;
    }
    let u = BigInt.asUintN(64, BigInt(v));
    while (u >= 0x80n) {
      this.byte(Number(u & 0x7fn) | 0x80);
      u >>= 7n;
    }
    this.byte(Number(u));
  }

  raw(bytes: Uint8Array): void {
    this.#room(bytes.length);
    this.#buf.set(bytes, this.#len);
    this.#len += bytes.length;
  }

  fixed(bytes: number, write: (view: DataView) => void): void {
    this.#room(bytes);
    write(new DataView(this.#buf.buffer, this.#len, bytes));
    this.#len += bytes;
  }

  finish(): Uint8Array {
    return this.#buf.slice(0, this.#len);
  }
}

/** A number from an int64 field's value: a number, a bigint, or a Long-like object. */
function int64(v: unknown): number | bigint {
  if (typeof v === "number" || typeof v === "bigint") return v;
  if (v && typeof (v as { toString(): string }).toString === "function") {
    return BigInt((v as { toString(): string }).toString());
  }
  return 0;
}

/** Writes a scalar of `kind` (without its key). */
function writeScalar(w: Writer, kind: Kind, v: unknown): void {
  switch (kind) {
    case "string": {
      const b = encoder.encode(String(v));
      w.varint(b.length);
      w.raw(b);
      return;
    }
    case "bytes": {
      const b = v as Uint8Array;
      w.varint(b.length);
      w.raw(b);
      return;
    }
    case "float":
      return w.fixed(4, (d) => d.setFloat32(0, Number(v), true));
    case "double":
      return w.fixed(8, (d) => d.setFloat64(0, Number(v), true));
    default:
      return w.varint(int64(v));
  }
}

/** Whether a singular field holds something to write (protobuf omits defaults). */
function present(v: unknown): boolean {
  if (v === undefined || v === null) return false;
  if (typeof v === "string") return v !== "";
  if (typeof v === "number") return v !== 0;
  if (v instanceof Uint8Array) return v.length > 0;
  return true;
}

function encodeMessage(type: Message, value: Record<string, unknown>, w: Writer): void {
  for (const [key, f] of Object.entries(type)) {
    const number = Number(key), v = value[f.name];
    if (f.repeated) {
      const list = (v ?? []) as unknown[];
      if (list.length === 0) continue;
      if (f.packed && typeof f.kind === "string") {
        const inner = new Writer();
        for (const x of list) writeScalar(inner, f.kind, x);
        const bytes = inner.finish();
        w.varint(number * 8 + 2);
        w.varint(bytes.length);
        w.raw(bytes);
        continue;
      }
      for (const x of list) writeField(w, number, f.kind, x);
    } else if (present(v)) writeField(w, number, f.kind, v);
  }
}

function writeField(w: Writer, number: number, kind: Kind | Message, v: unknown): void {
  w.varint(number * 8 + wireOf(kind));
  if (typeof kind === "string") return writeScalar(w, kind, v);
  const inner = new Writer();
  encodeMessage(kind, v as Record<string, unknown>, inner);
  const bytes = inner.finish();
  w.varint(bytes.length);
  w.raw(bytes);
}

/** Encodes `value` as message `type` (fields by the names `decode` gives them). */
export function encode(type: Message, value: object): Uint8Array {
  const w = new Writer();
  encodeMessage(type, value as Record<string, unknown>, w);
  return w.finish();
}
