import assert from "node:assert/strict";
import { ALIGN_ROOM, decodeAligned } from "./aligned.ts";
import { decodeModel, elementBytes, type ModelProto, tensorOf } from "./proto.ts";

/** Raw-data bytes of `proto`'s initializers that start on their elements. */
function alignedBytes(proto: ModelProto): number {
  let n = 0;
  for (const t of proto.graph?.initializer ?? []) {
    const raw = t.rawData;
    if (raw?.length && raw.byteOffset % elementBytes(t.dataType!, "") === 0) n += raw.length;
  }
  return n;
}

Deno.test("a model's bytes move so its initializers start on their elements, tensors unchanged", async () => {
  const file = await Deno.readFile(new URL("../testdata/embedding_mlp.onnx", import.meta.url));
  const want = decodeModel(file.slice());
  // The file as a loader reads it: at some offset of its buffer, ALIGN_ROOM bytes free after it.
  const placed = (at: number) => {
    const buffer = new Uint8Array(at + file.length + ALIGN_ROOM);
    buffer.set(file, at);
    return buffer.subarray(at, at + file.length);
  };
  const offsets = [...Array(ALIGN_ROOM + 1).keys()];
  const best = Math.max(...offsets.map((at) => alignedBytes(decodeModel(placed(at)))));
  let moved = 0;
  for (const at of offsets) {
    const before = alignedBytes(decodeModel(placed(at)));
    const got = decodeAligned(placed(at));
    // Wherever the file lies, its tensors start on their elements as well as one shift aligns
    // them, and each f32 tensor of 128 bytes or more (its field header is as long as any move).
    assert.ok(alignedBytes(got) >= best, `at ${at}`);
    for (const t of got.graph?.initializer ?? []) {
      const raw = t.rawData;
      if (t.dataType !== 1 || !raw || raw.length < 128) continue;
      assert.equal(raw.byteOffset % 4, 0, `${t.name} at ${at}`);
    }
    if (before < best) moved++;
    const inits = got.graph?.initializer ?? [];
    assert.equal(inits.length, want.graph?.initializer?.length);
    inits.forEach((t, i) => {
      const w = want.graph!.initializer![i];
      assert.deepEqual(tensorOf(t, t.name ?? "").data, tensorOf(w, w.name ?? "").data, t.name);
    });
  }
  assert.ok(moved >= 3, `${moved} placements moved`);
  // No room after the bytes (bytes a caller gave): nothing moves.
  const exact = file.slice();
  decodeAligned(exact);
  assert.deepEqual(exact, file);
});
