import assert from "node:assert/strict";
import { type DType, type TensorData, toF16Bits } from "../jit/ir/dtype.ts";
import {
  elementBytes,
  fromStored,
  packedBytes,
  packedLength,
  storedBytes,
  storedRange,
  toStored,
  toWords,
  wordsInto,
  writeWords,
} from "./words.ts";

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

Deno.test("wordsInto writes the caller's array where it fits, else hands back a fresh copy", () => {
  const stored = new Uint32Array([0, 5, 0xffffffff, 7, 1]).buffer;
  // Words that are the elements: copied straight in, the target returned, its tail untouched.
  const u = new Uint32Array(6).fill(9);
  assert.equal(wordsInto(u, stored, 4, 3, "u32"), u);
  assert.deepEqual([...u], [5, 0xffffffff, 7, 9, 9, 9]);
  // Narrow types are converted from their words, then written in.
  const b = new Int8Array(3);
  assert.equal(wordsInto(b, new Int32Array([-3, 4, -128]).buffer, 0, 3, "i8"), b);
  assert.deepEqual([...b], [-3, 4, -128]);
  const flags = new Uint8Array(2);
  assert.equal(wordsInto(flags, new Uint32Array([1, 0]).buffer, 0, 2, "bool"), flags);
  assert.deepEqual([...flags], [1, 0]);
  // An array of another type or too short is left alone: the elements come back fresh.
  const wrong = new Float32Array(3).fill(2), short = new Uint32Array(2).fill(2);
  for (const target of [wrong, short]) {
    const got = wordsInto(target, stored, 0, 3, "u32");
    assert.notEqual(got, target);
    assert.deepEqual([...got], [0, 5, 0xffffffff]);
    assert.ok([...target].every((v) => v === 2));
  }
});

Deno.test("writeWords widens narrow integers in place as toWords does, at any offset", () => {
  const cases: [TensorData, DType][] = [
    [Int8Array.of(-128, -1, 0, 127), "i8"],
    [Uint8Array.of(0, 1, 200, 255), "u8"],
    [Int16Array.of(-32768, -2, 3, 32767), "i16"],
    [Uint16Array.of(0, 9, 40000, 65535), "u16"],
    [Uint8Array.of(1, 0, 1, 1), "bool"],
  ];
  for (const [data, dtype] of cases) {
    const want = new Uint8Array(toWords(data, dtype).buffer);
    // A word-aligned place (straight into the words) and a misaligned one (through them).
    for (const at of [16, 6]) {
      const buffer = new ArrayBuffer(64);
      assert.equal(writeWords(buffer, at, data, dtype), 16);
      assert.deepEqual(new Uint8Array(buffer, at, 16), want, `${dtype} at ${at}`);
    }
  }
});

Deno.test("packed constants: four bytes or eight nibbles a word, padded to whole words", () => {
  const data = Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8, 9, 15);
  assert.deepEqual([...packedBytes(data)], [1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 0, 0]);
  // Element i in bits 4·(i mod 8) of word i / 8: low half of each byte first.
  const nibbles = new Uint32Array(packedBytes(data, "nibbles").buffer);
  assert.deepEqual([...nibbles], [0x87654321, 0xf9]);
  assert.deepEqual([packedLength(10), packedLength(10, "nibbles"), packedLength(0, "nibbles")], [
    12,
    8,
    4,
  ]);
});
