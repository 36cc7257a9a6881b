/**
 * Casts of f32 to integer types on wasm: the vector path (four lanes truncated and saturated at
 * once, as quantizations store their u8 and i8) agrees with the reference point by point.
 *
 * @module
 */
import assert from "node:assert/strict";
import { assertMatchesReference, f32, numbers, runGraph } from "../../jit/testing/testing.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { WasmBackend } from "./wasm_backend.ts";

const wasm = new WasmBackend();
await wasm.prepare();

Deno.test("casts of f32 to integers store four at a time, truncated and saturated as one at a time", async () => {
  // Fractions both ways, the types' edges and past them, past i32, NaN and the infinities.
  const edges = [
    0.5,
    -0.5,
    1.9,
    -1.9,
    127.5,
    128,
    -128.7,
    -129,
    255.9,
    256,
    32767.5,
    32768,
    -32769,
    65535.2,
    65536,
    2.5e9,
    -2.5e9,
    NaN,
    Infinity,
    -Infinity,
    0,
    -0,
    3,
    -3,
  ];
  const x = f32(Float32Array.from({ length: 103 }, (_, i) => edges[i % edges.length] * (1 + i)));
  const m = f32(Float32Array.from({ length: 60 }, (_, i) => edges[i % edges.length]), [6, 10]);
  for (const to of ["u8", "i8", "i16", "u16", "i32", "u32"]) {
    await assertMatchesReference(wasm, "Cast", [x], { to }, { atol: 0, rtol: 0 });
    // Stored through a transposing view: the lanes a row apart.
    const b = new GraphBuilder();
    const t = b.op("Transpose", [b.input("m", [6, 10])], { perm: [1, 0] });
    b.output("y", b.op("Cast", [b.op("Mul", [t, b.constant(3)])], { to }));
    const [got, want] = await Promise.all(
      [wasm, "reference"].map((backend) => runGraph(b.build(), { m }, backend)),
    );
    assert.deepEqual(numbers(got.y.data), numbers(want.y.data), to);
  }
  // A quantization's kernel takes the vector path: i32x4.trunc_sat_f32x4_s (0xfd 0xf8 0x01).
  const b = new GraphBuilder();
  b.output("y", b.op("Cast", [b.op("Round", [b.input("x", [103])])], { to: "u8" }));
  const [kernel] = fuse(b.build()).kernels;
  const bytes = await wasm.codegen!.generate(kernel) as Uint8Array;
  const at = bytes.findIndex((v, i) => v === 0xfd && bytes[i + 1] === 0xf8 && bytes[i + 2] === 1);
  assert.ok(at >= 0, "no f32x4 truncation in the cast's kernel");
});
