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

/** Whether the wasm of `graph`'s kernel `i` holds the SIMD instruction of LEB128 code `code`. */
async function hasSimd(graph: ReturnType<GraphBuilder["build"]>, i: number, code: number[]) {
  const bytes = await wasm.codegen!.generate(fuse(graph).kernels[i]) as Uint8Array;
  return bytes.some((v, at) => v === 0xfd && code.every((c, j) => bytes[at + 1 + j] === c));
}

Deno.test("integer lanes: shifted quantizations, dequantizations, i32 arithmetic and comparisons four at a time", async () => {
  // A quantization's zero-point shift (MatMulInteger's A as the importer lays it), over 103
  // points (the last three one at a time), and a dequantization of stored bytes.
  const x = f32(Float32Array.from({ length: 103 }, (_, i) => Math.sin(i * 0.7) * (1 + i)), [103]);
  const q = new GraphBuilder();
  const [y, , z] = q.opN("DynamicQuantizeLinear", [q.input("x", [103])], {}, 3);
  const shifted = q.op("Sub", [q.op("Cast", [y], { to: "i32" }), q.op("Cast", [z], { to: "i32" })]);
  q.output("shifted", q.op("Cast", [shifted], { to: "i16" }));
  const stored = q.input("bytes", [103], "u8");
  q.output("back", q.op("DequantizeLinear", [stored, q.constant(0.25), q.constant(131, [], "u8")]));
  const quantized = q.build();
  const bytes = {
    data: Uint8Array.from({ length: 103 }, (_, i) => (i * 37) % 256),
    shape: [103],
    dtype: "u8" as const,
  };
  const [got, want] = await Promise.all(
    [wasm, "reference"].map((backend) => runGraph(quantized, { x, bytes }, backend)),
  );
  for (const name of ["shifted", "back"]) {
    assert.deepEqual(numbers(got[name].data), numbers(want[name].data), name);
  }
  // i32 lanes: products and sums wrapping at 32 bits, casts saturating, a select between them.
  const big = [2 ** 31 - 1, -(2 ** 31), 65537, -70000, 300, -300, 255, 0, 1, -1, 46341];
  const a = {
    data: Int32Array.from({ length: 103 }, (_, i) => big[i % big.length] + i),
    shape: [103],
    dtype: "i32" as const,
  };
  const g = new GraphBuilder();
  const ai = g.input("a", [103], "i32");
  const wrapped = g.op("Add", [g.op("Mul", [ai, ai]), g.constant(7, [], "i32")]);
  g.output("wrapped", wrapped);
  g.output("bytes", g.op("Cast", [wrapped], { to: "u8" }));
  const pick = g.op("Greater", [g.op("Cast", [ai], { to: "f32" }), g.constant(0)]);
  g.output(
    "picked",
    g.op("Where", [pick, g.op("Cast", [ai], { to: "i16" }), g.constant(-5, [], "i16")]),
  );
  // Comparisons of the integers themselves: lane masks from i32x4 comparisons.
  const below = g.op("Less", [ai, g.constant(300, [], "i32")]);
  const same = g.op("Equal", [g.op("Cast", [ai], { to: "u8" }), g.constant(255, [], "u8")]);
  const either = g.op("Or", [below, same]);
  g.output("compared", g.op("Where", [either, ai, g.constant(9, [], "i32")]));
  const ints = g.build();
  const [gi, wi] = await Promise.all([wasm, "reference"].map((b) => runGraph(ints, { a }, b)));
  const compareAt = fuse(ints).kernels.findIndex((k) => k.ops.some((o) => o.includes("Less")));
  assert.ok(await hasSimd(ints, compareAt, [0x39]), "no i32x4.lt_s in the comparison");
  for (const name of ["wrapped", "bytes", "picked", "compared"]) {
    assert.deepEqual(numbers(gi[name].data), numbers(wi[name].data), name);
  }
  // The shift's kernel subtracts i32 lanes (i32x4.sub: 0xfd 0xb1 0x01); the dequantization
  // converts them (f32x4.convert_i32x4_s: 0xfd 0xfa 0x01).
  const kernels = fuse(quantized).kernels;
  const shiftAt = kernels.findIndex((k) => k.outputs.some((o) => o.dtype === "i16"));
  assert.ok(await hasSimd(quantized, shiftAt, [0xb1, 0x01]), "no i32x4.sub in the shift");
  const backAt = kernels.findIndex((k) =>
    k.outputs.some((o) => o.dtype === "f32" && o.shape.length === 1)
  );
  assert.ok(await hasSimd(quantized, backAt, [0xfa, 0x01]), "no f32x4.convert_i32x4_s");
});
