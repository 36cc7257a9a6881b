/**
 * A model's bytes moved within their buffer so that its initializers' raw data start on their
 * elements, where the buffer has room after them (a loader's own): the importer then views each
 * such tensor in the model's bytes instead of copying it (`fromRaw`). Protobuf aligns nothing; the
 * level-4 0.5B-shaped decoder's 544 MB f32 embedding table started two bytes off a word and was
 * copied at every load, 544 MB more resident memory and its first touch (about 1.5 s on the 2-core
 * VM). The whole file moves by the shift that aligns the most bytes, then each tensor still off
 * moves back over its own field header.
 *
 * @module
 */
import { decodeModel, elementBytes, type ModelProto, type TensorProto } from "./proto.ts";

/** Most bytes a move may take: one less than the widest element (8). */
export const ALIGN_ROOM = 7;

/**
 * `bytes` (a model file as read, `ALIGN_ROOM` bytes of its buffer free after it) moved by the
 * shift that starts the most initializer bytes on their elements, and decoded; `bytes` decoded
 * as they are where there is no room or no shift gains. Moves the bytes in place: only for a
 * buffer the caller gave up.
 */
export function decodeAligned(bytes: Uint8Array): ModelProto {
  const proto = decodeModel(bytes);
  const room = bytes.buffer.byteLength - bytes.byteOffset - bytes.length;
  if (room < ALIGN_ROOM) return proto;
  const shift = bestShift(proto);
  if (shift === 0) return alignedEach(proto);
  const buffer = new Uint8Array(bytes.buffer);
  buffer.copyWithin(bytes.byteOffset + shift, bytes.byteOffset, bytes.byteOffset + bytes.length);
  return alignedEach(
    decodeModel(buffer.subarray(bytes.byteOffset + shift, bytes.byteOffset + shift + bytes.length)),
  );
}

/**
 * `proto` with each initializer one shift left off its elements moved back onto them, over its
 * raw data field's own tag and length (read already, and nothing views them) where those are as
 * long as the move: each f32 tensor of 128 bytes or more. A BERT-shaped model's tensors start at
 * every offset mod 4, so one shift left most of its 435 MB to be copied at import (0.5-0.7 s on
 * the 2-core VM, most of it the copies' fresh pages).
 */
function alignedEach(proto: ModelProto): ModelProto {
  for (const t of proto.graph?.initializer ?? []) {
    const raw = t.rawData, size = rawElementBytes(t);
    const off = size && raw ? raw.byteOffset % size : 0;
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

/** The shift (0 … 7) that starts the most raw-data bytes of `proto`'s initializers on an element. */
function bestShift(proto: ModelProto): number {
  const aligned = new Array<number>(ALIGN_ROOM + 1).fill(0);
  for (const t of proto.graph?.initializer ?? []) {
    const raw = t.rawData, size = rawElementBytes(t);
    if (!raw || !size) continue;
    for (let s = 0; s <= ALIGN_ROOM; s++) {
      if ((raw.byteOffset + s) % size === 0) aligned[s] += raw.length;
    }
  }
  const best = aligned.indexOf(Math.max(...aligned));
  return aligned[best] > aligned[0] ? best : 0;
}
