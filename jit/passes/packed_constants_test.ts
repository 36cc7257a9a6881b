/**
 * Which reads of 8-bit constants are marked for storage four to a word.
 *
 * @module
 */
import assert from "node:assert/strict";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { fuse } from "./fuse.ts";
import { packedConstants } from "./packed_constants.ts";
import { byteProducts } from "./byte_products.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import type { FusionResult } from "./fuse_options.ts";

/** The packed inputs' dtypes of every kernel. */
const packed = (kernels: readonly KernelIR[]) =>
  kernels.flatMap((k) => k.inputs.filter((b) => b.packed).map((b) => b.dtype)).sort();

Deno.test("8-bit constants are marked packed on every read; others, inputs and outputs are not", () => {
  const g = new GraphBuilder();
  const w = g.constant(Int8Array.from({ length: 24 }, (_, i) => i - 12), [8, 3], "i8");
  const table = g.constant(Uint8Array.from({ length: 10 }, (_, i) => 3 * i), [10], "u8");
  const scale = g.constant(Float32Array.of(0.5, 1, 2), [3]);
  const y = g.op("Mul", [g.op("Cast", [w], { to: "f32" }), scale]);
  const picked = g.op("Gather", [table, g.input("i", [2], "i32")]);
  const u8 = g.input("x", [8, 3], "u8");
  const sum = g.op("Add", [g.op("Cast", [u8], { to: "f32" }), y]);
  const graph = g.output("y", sum).output("t", picked).output("w8", table).build();
  const fusion = fuse(graph);
  const outputs = (names: string[]) =>
    graph.outputs.filter((o) => names.includes(o.name)).map((o) => o.value);
  // The weights (i8) and the table (u8) on every read; the input x and the f32 scale never.
  assert.deepEqual(packed(packedConstants(fusion, outputs(["y", "t"])).kernels), ["i8", "u8"]);
  // The table is an output as well: words, on every read.
  assert.deepEqual(packed(packedConstants(fusion, outputs(["y", "t", "w8"])).kernels), ["i8"]);
  // The fusion itself is left as it was.
  assert.deepEqual(packed(fusion.kernels), []);
});

Deno.test("a constant an opaque kernel reads stays words everywhere, and so do views of its bytes", () => {
  const g = new GraphBuilder();
  const bytes = Int8Array.from({ length: 16 }, (_, i) => i - 8);
  const a = g.op("Cast", [g.constant(bytes, [4, 4], "i8")], { to: "f32" });
  const b = g.op("Cast", [g.constant(bytes.slice(), [16], "i8")], { to: "f32" });
  const graph = g.output("a", a).output("b", b).build();
  const fusion = fuse(graph);
  const outputs = graph.outputs.map((o) => o.value);
  assert.deepEqual(packed(packedConstants(fusion, outputs).kernels), ["i8", "i8"]);
  // The first kernel made opaque (a custom op's code reads words): the other constant is packed,
  // unless it views the same bytes (as the importer's views of one initializer do).
  const [first, second] = fusion.kernels.map((k) => k.inputs[0].value);
  const kernels = fusion.kernels.map((k, i) =>
    i === 0 ? { ...k, opaque: { op: "Custom", attrs: {} } } : k
  );
  assert.deepEqual(packed(packedConstants({ ...fusion, kernels }, outputs).kernels), ["i8"]);
  const constants = new Map(fusion.constants);
  const shared = constants.get(first)!.data;
  constants.set(second, { ...constants.get(second)!, data: new Int8Array(shared.buffer, 0, 16) });
  const viewed: FusionResult = { ...fusion, kernels, constants };
  assert.deepEqual(packed(packedConstants(viewed, outputs).kernels), []);
});

Deno.test("4-bit zero points are held eight to a word, a product's byte operands four", () => {
  const product = (zeros: Uint8Array, alsoOut: boolean) => {
    const g = new GraphBuilder();
    const words = g.param("w", [6, 4], "u32", new Uint32Array(24));
    const scales = g.param("s", [6, 1], "f32", new Float32Array(6));
    const z = g.constant(zeros, [6, 1], "u8");
    const y = g.op("BlockMatMul", [g.input("a", [1, 32]), words, scales, z], {
      bits: 4,
      block: 32,
    });
    g.output("y", y);
    if (alsoOut) g.output("z", g.op("Cast", [z], { to: "f32" }));
    const graph = g.build();
    const fusion = fuse(graph);
    const out = packedConstants(fusion, graph.outputs.map((o) => o.value));
    return out.kernels.flatMap((k) => k.inputs.flatMap((b) => b.packed ? [b.packed] : []));
  };
  assert.deepEqual(product(Uint8Array.of(0, 3, 8, 15, 9, 1), false), ["nibbles"]);
  // A value of 16 or more keeps them bytes; another elementwise reader reads nibbles too.
  assert.deepEqual(product(Uint8Array.of(0, 3, 8, 16, 9, 1), false), ["bytes"]);
  assert.deepEqual(product(Uint8Array.of(0, 3, 8, 15, 9, 1), true), ["nibbles", "nibbles"]);
});

Deno.test("with intermediates, 8-bit values stored whole by elementwise kernels are marked at both ends", () => {
  // A quantized activation read by a product, a u8 value an output reads (words), and one
  // whose last axis is not a multiple of 4.
  const g = new GraphBuilder();
  const [q, , zero] = g.opN("DynamicQuantizeLinear", [g.input("x", [16, 320])], {}, 3);
  const w = g.constant(
    Int8Array.from({ length: 320 * 24 }, (_, i) => (i % 255) - 127),
    [320, 24],
    "i8",
  );
  g.output("y", g.op("MatMulInteger", [q, w, zero], { a_zero: 1, b_zero: 0 }));
  const cast = (x: string, shape: number[]) =>
    g.op("Cast", [g.op("Relu", [g.input(x, shape)])], { to: "u8" });
  g.output("b", cast("b", [2, 8]));
  g.output("c", g.op("Add", [g.op("Cast", [cast("c", [2, 6])], { to: "f32" }), g.constant(1)]));
  // As a GPU with byte dots fuses it: the product over bytes (`byteProducts`).
  const graph = byteProducts(g.build());
  const fusion = fuse(graph, { combinedRanges: true, integerDot: "bytes" });
  const outputs = graph.outputs.map((o) => o.value);
  const stores = (f: FusionResult) =>
    f.kernels.flatMap((k) => k.outputs.filter((o) => o.packed).map((o) => o.shape.join("x")));
  const reads = (f: FusionResult) =>
    f.kernels.flatMap((k) => k.inputs.filter((b) => b.packed).map((b) => b.shape.join("x")));
  assert.deepEqual(stores(packedConstants(fusion, outputs)), []);
  const marked = packedConstants(fusion, outputs, { intermediates: true });
  assert.deepEqual(stores(marked), ["16x320"]);
  assert.deepEqual(reads(marked).sort(), ["16x320", "320x24"]);
});
