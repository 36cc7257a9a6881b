/**
 * `exactByteDot()` says what this engine's relaxed byte dot product does: where it says exact,
 * random full-range quads of bytes (signed by unsigned) sum as integers do; where it does not,
 * some bytes past 127 sum otherwise (saturated in 16 bits, or read as signed), and the byte
 * products stay off.
 *
 * @module
 */
import assert from "node:assert/strict";
import { engineByteDot, exactByteDot, hasRelaxedSimd, WasmBackend } from "./wasm_backend.ts";
import { uniform } from "../../jit/support/random.ts";

Deno.test("exactByteDot() tells whether the engine's byte dot sums signed by unsigned bytes exactly", () => {
  if (!hasRelaxedSimd()) {
    assert.equal(exactByteDot(), false);
    return;
  }
  const exact = (a: readonly number[], b: readonly number[]) =>
    a.reduce((s, x, j) => s + x * b[j], 0);
  const cases = [...Array(200).keys()].map((i) => {
    const a = Array.from(uniform(4, 2 * i + 1, -128, 128), Math.floor);
    const b = Array.from(uniform(4, 2 * i + 2, 0, 256), Math.floor);
    return [a, b] as const;
  });
  // The lanes that tell the lowerings apart: two products of −128 · 255 saturate a 16-bit pair.
  cases.push([Array(4).fill(-128), Array(4).fill(255)]);
  const agree = cases.every(([a, b]) => engineByteDot(a, b) === exact(a, b));
  assert.equal(exactByteDot(), agree);
  // Bytes below 128 sum exactly on every engine (the tests that force the byte products use them).
  const small = cases.map(([a, b]) => [a, b.map((x) => x & 127)] as const);
  assert.ok(small.every(([a, b]) => engineByteDot(a, b) === exact(a, b)));
  // The backend's capability follows the probe unless forced.
  assert.equal(new WasmBackend().capabilities().byteDot, exactByteDot());
  assert.equal(new WasmBackend({ byteDot: true }).capabilities().byteDot, true);
});
