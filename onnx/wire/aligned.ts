/**
 * A model's initializers moved within their buffer so that their raw data start on whole words
 * (and 8-byte elements on their elements): the importer then views each such tensor in the model's
 * bytes instead of copying it (`fromRaw`, `littleEndianWords`). Protobuf aligns nothing: the level-4
 * 0.5B-shaped decoder's 544 MB f32 embedding table started two bytes off a word and was copied at
 * every load, 544 MB more resident memory and its first touch (about 1.5 s on the 2-core VM), and a
 * BERT-shaped export's tensors start at every offset mod 4. Each tensor moves back by at most its
 * raw data field's own tag and length, which were read already and which nothing views: every
 * tensor of 128 bytes or more of elements up to 4 bytes.
 *
 * @module
 */
import { decodeModel, elementBytes, type ModelProto, type TensorProto } from "./proto.ts";

/**
 * Bytes a loader leaves free after a model file it read: its buffer is then the loader's own, and
 * {@linkcode decodeAligned} may move bytes within it.
 */
export const ALIGN_ROOM = 7;

/**
 * `bytes` (a model file) decoded, and where `ALIGN_ROOM` bytes of their buffer are free after
 * them (a loader's own buffer), each initializer moved in place onto a word. A caller's bytes (no
 * room) are never changed.
 */
export function decodeAligned(bytes: Uint8Array): ModelProto {
  const proto = decodeModel(bytes);
  const room = bytes.buffer.byteLength - bytes.byteOffset - bytes.length;
  if (room < ALIGN_ROOM) return proto;
  for (const t of proto.graph?.initializer ?? []) {
    const raw = t.rawData, align = Math.max(4, rawElementBytes(t));
    const off = raw ? raw.byteOffset % align : 0;
    if (!raw || off === 0 || off > 1 + varintBytes(raw.length)) continue;
    const at = raw.byteOffset - off;
    new Uint8Array(raw.buffer).copyWithin(at, raw.byteOffset, raw.byteOffset + raw.length);
    t.rawData = new Uint8Array(raw.buffer, at, raw.length);
  }
  return proto;
}

/** Bytes of a varint holding `n`. */
function varintBytes(n: number): number {
  let bytes = 1;
  for (let v = n; v >= 128; v = Math.floor(v / 128)) bytes++;
  return bytes;
}

/** Bytes of an element of `t`'s raw data; 0 where it has none or its type is unsupported. */
function rawElementBytes(t: TensorProto): number {
  if (!t.rawData?.length || t.dataType === undefined) return 0;
  try {
    return elementBytes(t.dataType, t.name ?? "initializer");
  } catch {
    return 0; // an unsupported type: the import reports it
  }
}
