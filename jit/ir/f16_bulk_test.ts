import assert from "node:assert/strict";
import { fromF16Array, fromF16Bits, toF16Array, toF16Bits } from "./dtype.ts";

// The bulk f16 conversions (native Float16Array where the engine has it) give exactly what the
// element-by-element ones give, NaNs, signed zeros, subnormals and overflow included.

Deno.test("every f16 bit pattern reads in bulk as fromF16Bits reads it", () => {
  const bits = Uint16Array.from({ length: 65536 }, (_, i) => i);
  const bulk = fromF16Array(bits);
  const one = Float32Array.from(bits, fromF16Bits);
  assert.deepEqual(new Uint32Array(bulk.buffer), new Uint32Array(one.buffer));
});

Deno.test("floats round to f16 in bulk as toF16Bits rounds them", () => {
  // Every f16 value, the midpoints between neighbours (ties to even), values past the largest,
  // subnormals, signed zeros, infinities, NaNs of both signs, and a spread of f32 values.
  const values: number[] = [0, -0, Infinity, -Infinity, NaN, -NaN, 65504, 65519.99, 65520, 1e6];
  for (let b = 0; b < 0x7c00; b++) {
    const v = fromF16Bits(b), next = fromF16Bits(b + 1);
    values.push(v, -v, (v + next) / 2, -(v + next) / 2);
  }
  for (let i = 0; i < 100000; i++) values.push(Math.sin(i) * 2 ** ((i % 60) - 30));
  const f32 = Float32Array.from(values);
  f32[5] = new Float32Array(new Uint32Array([0xffc00001]).buffer)[0]; // a negative NaN
  const want = Uint16Array.from(f32, (v) => toF16Bits(v));
  assert.deepEqual(toF16Array(f32), want);
  // From doubles, through f32 as toF16Bits rounds (a double between f32 neighbours included).
  const doubles = [1 + 2 ** -11 + 2 ** -30, 1 + 2 ** -11 - 2 ** -30, 3.000244140625];
  assert.deepEqual(toF16Array(doubles), Uint16Array.from(doubles, toF16Bits));
});
