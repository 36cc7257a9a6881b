import assert from "node:assert/strict";
import { toF16Bits } from "../jit/ir/dtype.ts";
import { elementBytes, fromStored, storedBytes, storedRange, toStored, toWords } from "./words.ts";

// The 16-bit storage of f16 runs only on GPUs with shader-f16 (not CI's): its arithmetic is
// checked here, its kernels on the GPU machine (bench/gpu_kernels.ts).
const half = { half: true }, words = { half: false };

Deno.test("f16 takes 2 bytes where the device stores it natively, everything else a word", () => {
  assert.equal(elementBytes("f16", half), 2);
  assert.equal(elementBytes("f16", words), 4);
  assert.equal(elementBytes("u8", half), 4);
  // Buffers are whole words: 3 f16 elements take 8 bytes, 0 take 0.
  assert.equal(storedBytes(3, "f16", half), 8);
  assert.equal(storedBytes(4, "f16", half), 8);
  assert.equal(storedBytes(0, "f16", half), 0);
  assert.equal(storedBytes(3, "f16", words), 12);
});

Deno.test("toStored pads odd f16 data to whole words and fromStored reads it back", () => {
  const bits = Uint16Array.from([1, -2, 0.5].map((x) => toF16Bits(x)));
  const stored = toStored(bits, "f16", half) as Uint16Array;
  assert.equal(stored.byteLength, 8);
  assert.deepEqual([...stored], [...bits, 0]);
  assert.deepEqual(fromStored(stored.buffer, 2, 2, "f16", half), bits.slice(1));
  // The caller's array is not aliased by what comes back.
  const back = fromStored(stored.buffer, 0, 3, "f16", half);
  stored[0] = 7;
  assert.equal((back as Uint16Array)[0], bits[0]);
  // Without native f16, the words as before (widened to f32).
  assert.deepEqual(toStored(bits, "f16", words), toWords(bits, "f16"));
});

Deno.test("storedRange widens a range of 16-bit elements to the words it touches", () => {
  // Elements 3..6 of f16: bytes 6..14, so words 4..16 and a skip of 2.
  assert.deepEqual(storedRange(3, 4, "f16", half), { start: 4, end: 16, skip: 2 });
  assert.deepEqual(storedRange(2, 2, "f16", half), { start: 4, end: 8, skip: 0 });
  assert.deepEqual(storedRange(3, 4, "f32", half), { start: 12, end: 28, skip: 0 });
  assert.deepEqual(storedRange(5, 0, "f16", half), { start: 8, end: 12, skip: 2 });
});
