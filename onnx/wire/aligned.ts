/**
 * A model's bytes moved within their buffer so that its initializers' raw data start on their
 * elements, where the buffer has room after them: the importer then views each such tensor in the
 * model's bytes instead of copying it (`fromRaw`). Protobuf aligns nothing; the level-4
 * 0.5B-shaped decoder's 544 MB f32 embedding table started two bytes off a word and was copied at
 * every load, 544 MB more resident memory and its first touch (about 1.5 s on the 2-core VM).
 *
 * @module
 */
import { decodeModel, elementBytes, type ModelProto } from "./proto.ts";

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
  const shift = room >= ALIGN_ROOM ? bestShift(proto) : 0;
  if (shift === 0) return proto;
  const buffer = new Uint8Array(bytes.buffer);
  buffer.copyWithin(bytes.byteOffset + shift, bytes.byteOffset, bytes.byteOffset + bytes.length);
  return decodeModel(
    buffer.subarray(bytes.byteOffset + shift, bytes.byteOffset + shift + bytes.length),
  );
}

/** The shift (0 … 7) that starts the most raw-data bytes of `proto`'s initializers on an element. */
function bestShift(proto: ModelProto): number {
  const aligned = new Array<number>(ALIGN_ROOM + 1).fill(0);
  for (const t of proto.graph?.initializer ?? []) {
    const raw = t.rawData;
    if (!raw?.length || t.dataType === undefined) continue;
    let size: number;
    try {
      size = elementBytes(t.dataType, t.name ?? "initializer");
    } catch {
      continue; // an unsupported type: the import reports it
    }
    for (let s = 0; s <= ALIGN_ROOM; s++) {
      if ((raw.byteOffset + s) % size === 0) aligned[s] += raw.length;
    }
  }
  const best = aligned.indexOf(Math.max(...aligned));
  return aligned[best] > aligned[0] ? best : 0;
}
