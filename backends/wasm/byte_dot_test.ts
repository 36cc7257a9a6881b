/**
 * `exactByteDot()` says what this engine's relaxed byte dot product does: where it says exact,
 * random full-range bytes (signed by unsigned) sum as integers do; where it does not, some bytes
 * past 127 sum otherwise (saturated in 16 bits, or read as signed), and the byte products stay off.
 *
 * @module
 */
import assert from "node:assert/strict";
import { wasm } from "../../shaders/wasm/encoder.ts";
import { exactByteDot, hasRelaxedSimd, WasmBackend } from "./wasm_backend.ts";
import { uniform } from "../../jit/support/random.ts";

/** Lane 0 of the engine's byte dot of signed `a` by unsigned `b` (16 bytes each, 4 a lane). */
function engineDot(a: readonly number[], b: readonly number[]): number {
  const m = new wasm.Module();
  const dot = m.i32x4.relaxed_dot_i8x16_i7x16_add_s(
    m.v128.const(a.map((x) => x & 255)),
    m.v128.const([...b]),
    m.i32x4.splat(m.i32.const(0)),
  );
  m.addFunction("f", wasm.none, wasm.i32, [], m.i32x4.extract_lane(dot, 0));
  m.addFunctionExport("f", "f");
  const bytes = m.emitBinary() as Uint8Array<ArrayBuffer>;
  return (new WebAssembly.Instance(new WebAssembly.Module(bytes)).exports.f as () => number)();
}

Deno.test("exactByteDot() tells whether the engine's byte dot sums signed by unsigned bytes exactly", () => {
  if (!hasRelaxedSimd()) {
    assert.equal(exactByteDot(), false);
    return;
  }
  const exact = (a: readonly number[], b: readonly number[]) =>
    a.slice(0, 4).reduce((s, x, j) => s + x * b[j], 0);
  const cases = [...Array(200).keys()].map((i) => {
    const a = Array.from(uniform(16, 2 * i + 1, -128, 128), Math.floor);
    const b = Array.from(uniform(16, 2 * i + 2, 0, 256), Math.floor);
    return [a, b] as const;
  });
  // The lanes that tell the lowerings apart: two products of −128 · 255 saturate a 16-bit pair.
  cases.push([Array(16).fill(-128), Array(16).fill(255)]);
  const agree = cases.every(([a, b]) => engineDot(a, b) === exact(a, b));
  assert.equal(exactByteDot(), agree);
  // Bytes below 128 sum exactly on every engine (the tests that force the byte products use them).
  const small = cases.map(([a, b]) => [a, b.map((x) => x & 127)] as const);
  assert.ok(small.every(([a, b]) => engineDot(a, b) === exact(a, b)));
  // The backend's capability follows the probe unless forced.
  assert.equal(new WasmBackend().capabilities().byteDot, exactByteDot());
  assert.equal(new WasmBackend({ byteDot: true }).capabilities().byteDot, true);
});
