import assert from "node:assert/strict";
import { ALIGN_ROOM, decodeAligned } from "./aligned.ts";
import { decodeModel, elementBytes, tensorOf } from "./proto.ts";

Deno.test("a loader's model bytes move so its initializers start on words, tensors unchanged", async () => {
  const file = await Deno.readFile(new URL("../testdata/embedding_mlp.onnx", import.meta.url));
  const want = decodeModel(file.slice());
  // The file as a loader reads it: at some offset of its buffer, ALIGN_ROOM bytes free after it.
  const placed = (at: number) => {
    const buffer = new Uint8Array(at + file.length + ALIGN_ROOM);
    buffer.set(file, at);
    return buffer.subarray(at, at + file.length);
  };
  let off = 0;
  for (let at = 0; at < 8; at++) {
    const before = decodeModel(placed(at)).graph?.initializer ?? [];
    off += before.filter((t) => t.rawData!.length >= 128 && t.rawData!.byteOffset % 4).length;
    const got = decodeAligned(placed(at));
    const inits = got.graph?.initializer ?? [];
    assert.equal(inits.length, want.graph?.initializer?.length);
    inits.forEach((t, i) => {
      const raw = t.rawData!, size = elementBytes(t.dataType!, "");
      if (raw.length >= 128 && size <= 4) assert.equal(raw.byteOffset % 4, 0, `${t.name} at ${at}`);
      const w = want.graph!.initializer![i];
      assert.deepEqual(tensorOf(t, t.name ?? "").data, tensorOf(w, w.name ?? "").data, t.name);
    });
  }
  assert.ok(off >= 8, `${off} tensors started off a word`);
  // No room after the bytes (bytes a caller gave): nothing moves.
  const exact = file.slice();
  decodeAligned(exact);
  assert.deepEqual(exact, file);
});
