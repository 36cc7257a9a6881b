/**
 * A strict pass over protobuf wire format before decoding. The decoder kiln uses reads lengths as
 * 32-bit varints: a length of 2^40 is taken modulo 2^32 and the rest of the message is parsed from
 * the wrong place, silently. This pass walks every field of the ONNX messages (descending into
 * known submessages) and refuses varints over 10 bytes, lengths past the end of their message,
 * and the deprecated group wire types — each a typed error naming the byte offset.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";

/** Submessage fields by message: field number → message name (others are scalars or bytes). */
const SCHEMA: Readonly<Record<string, Readonly<Record<number, string>>>> = {
  Model: { 7: "Graph", 8: "OpsetId", 14: "Entry", 20: "Opaque", 25: "Opaque" },
  Graph: {
    1: "Node",
    5: "Tensor",
    11: "ValueInfo",
    12: "ValueInfo",
    13: "ValueInfo",
    15: "Opaque",
  },
  Node: { 5: "Attribute", 9: "Entry" },
  Attribute: { 5: "Tensor", 6: "Graph", 10: "Tensor", 11: "Graph", 14: "Type", 15: "Type" },
  Tensor: { 3: "Opaque", 13: "Entry", 16: "Entry" },
  ValueInfo: { 2: "Type", 4: "Entry" },
  Type: { 1: "TensorType", 4: "ElemType", 5: "MapType", 8: "TensorType", 9: "ElemType" },
  TensorType: { 2: "Shape" },
  ElemType: { 1: "Type" },
  MapType: { 2: "Type" },
  Shape: { 1: "Opaque" },
  OpsetId: {},
  Entry: {},
  Opaque: {},
};

/** Deepest nesting followed (graphs in attributes in graphs …): a bound on recursion. */
const MAX_DEPTH = 64;

function bad(what: string, at: number): never {
  throw new KilnError(`The ONNX model is malformed: ${what} at byte ${at}`, {
    code: "bad-input",
    fix: "the file is corrupt or not ONNX; re-export it",
  });
}

/** Checks `bytes` as a serialized `ModelProto`; throws a typed error on malformed wire format. */
export function checkWireFormat(bytes: Uint8Array): void {
  walk(bytes, 0, bytes.length, "Model", 0);
}

function walk(b: Uint8Array, start: number, end: number, message: string, depth: number): void {
  if (depth > MAX_DEPTH) bad(`messages nested over ${MAX_DEPTH} deep`, start);
  const children = SCHEMA[message];
  let pos = start;
  /** Reads a varint as a float (exact below 2^53), refusing over-long encodings. */
  const varint = (): number => {
    let value = 0, scale = 1;
    for (let i = 0; i < 10; i++) {
      if (pos >= end) bad("a varint runs past the end of its message", pos);
      const byte = b[pos++];
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) return value;
      scale *= 128;
    }
    return bad("a varint longer than 10 bytes", pos);
  };
  while (pos < end) {
    const at = pos;
    const key = varint();
    const field = Math.floor(key / 8), wire = key % 8;
    if (field === 0) bad("field number 0", at);
    switch (wire) {
      case 0:
        varint();
        break;
      case 1:
        pos += 8;
        break;
      case 5:
        pos += 4;
        break;
      case 2: {
        const length = varint();
        if (length > end - pos) bad(`a length of ${length} past the end of its message`, at);
        const child = children[field];
        if (child && child !== "Opaque") walk(b, pos, pos + length, child, depth + 1);
        pos += length;
        break;
      }
      default:
        bad(`wire type ${wire}`, at);
    }
    if (pos > end) bad("a fixed-size field past the end of its message", at);
  }
}
