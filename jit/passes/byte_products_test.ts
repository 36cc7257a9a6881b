/**
 * Quantized products over bytes: the rewrite keeps every value exact (the reference runs both
 * graphs), takes the activation's 8 bits as they are (u8) or moved to unsigned (i8), pads a
 * convolution by the zero point, and leaves alone what does not fit (weights past i8, a
 * grouped convolution).
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile, GraphBuilder, type Sym } from "../../mod.ts";
import type { Graph } from "../ir/graph.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { uniform } from "../support/random.ts";
import { byteProducts } from "./byte_products.ts";

/** Values in [lo, hi) as `Type`'s integers. */
const ints = <T extends Int8Array | Uint8Array>(
  Type: { from(v: ArrayLike<number>, f: (x: number) => number): T },
  n: number,
  seed: number,
  lo: number,
  hi: number,
) => Type.from(uniform(n, seed, lo, hi), Math.floor);

/** A graph of one quantized op over input `x` [shape] of `dtype`. */
function graphOf(
  shape: number[],
  dtype: "u8" | "i8",
  build: (b: GraphBuilder, x: Sym) => Sym,
): Graph {
  const b = new GraphBuilder();
  return b.output("y", build(b, b.input("x", shape, dtype))).build();
}

/** Runs `graph` and its rewrite on the reference with `x`: equal outputs, and the rewrite's ops. */
async function rewritten(graph: Graph, x: HostTensor): Promise<string[]> {
  const bytes = byteProducts(graph);
  using before = await compile(graph, { backend: "reference" });
  using after = await compile(bytes, { backend: "reference" });
  assert.deepEqual((await after.run({ x })).y.data, (await before.run({ x })).y.data);
  return bytes.nodes.map((n) => `${n.op}:${n.inputs.map((v) => bytes.values[v].dtype).join("/")}`);
}

Deno.test("a padded QLinearConv of u8 runs over its bytes, padded by the zero point, exact", async () => {
  const [c, m] = [8, 6];
  const graph = graphOf([1, c, 7, 7], "u8", (b, x) => {
    const f = (v: number) => b.constant(new Float32Array([v]), [], "f32");
    return b.op("QLinearConv", [
      x,
      f(0.5),
      b.constant(new Uint8Array([200]), [], "u8"),
      b.constant(ints(Int8Array, m * c * 9, 1, -128, 128), [m, c, 3, 3], "i8"),
      f(2 ** -9),
      b.constant(new Int8Array([0]), [], "i8"),
      f(1),
      b.constant(new Uint8Array([100]), [], "u8"),
    ], { kernel_shape: [3, 3], pads: [1, 1, 1, 1], strides: [2, 2] });
  });
  const x = {
    data: ints(Uint8Array, c * 49, 2, 0, 256),
    shape: [1, c, 7, 7],
    dtype: "u8" as const,
  };
  const ops = await rewritten(graph, x);
  assert.ok(ops.includes("IntegerConv:u8/i8"), ops.join(" "));
  assert.ok(ops.includes("Pad:u8"), ops.join(" "));
  // No activation shifted to i16 remains.
  assert.ok(!ops.some((o) => o.startsWith("Cast") && o.includes("i16")), ops.join(" "));
});

Deno.test("MatMulInteger of i8 by a runtime zero point runs over unsigned bytes less the zero's share", async () => {
  const [k, n] = [16, 5];
  const graph = graphOf([3, k], "i8", (b, x) => {
    const zero = b.op("Cast", [b.op("Floor", [b.constant(new Float32Array([-7.5]), [])])], {
      to: "i8",
    });
    return b.op("MatMulInteger", [
      x,
      b.constant(ints(Int8Array, k * n, 3, -128, 128), [k, n], "i8"),
      zero,
    ], { a_zero: 1 });
  });
  const x = { data: ints(Int8Array, 3 * k, 4, -128, 128), shape: [3, k], dtype: "i8" as const };
  const ops = await rewritten(graph, x);
  assert.ok(ops.includes("IntegerMatMul:u8/i8"), ops.join(" "));
  assert.ok(ops.includes("Mul:i32/i32"), ops.join(" "));
});

Deno.test("a byte product bounds its bytes at 255 where its i8 activation less no zero point reached 128", () => {
  // A float decomposition counts its exact chunks from max_a: kept at 128, the bytes' sums
  // (x + 128 up to 255) could pass 2^24 in a chunk it took for exact.
  const graph = graphOf(
    [3, 16],
    "i8",
    (b, x) =>
      b.op("MatMulInteger", [x, b.constant(ints(Int8Array, 16 * 5, 3, -128, 128), [16, 5], "i8")]),
  );
  const product = byteProducts(graph).nodes.find((n) => n.op === "IntegerMatMul")!;
  assert.deepEqual([product.attrs.bound, product.attrs.max_a], [255 * 128, 255]);
});

Deno.test("products the bytes cannot hold stay as they are", () => {
  // Weights of u8 with a zero point of 0 shift to [0, 255]: past i8. A grouped convolution.
  const wide = graphOf([2, 8], "u8", (b, x) =>
    b.op("MatMulInteger", [
      x,
      b.constant(ints(Uint8Array, 8 * 4, 5, 0, 256), [8, 4], "u8"),
      b.constant(new Uint8Array([3]), [], "u8"),
      b.constant(new Uint8Array([0]), [], "u8"),
    ], { a_zero: 1, b_zero: 1 }));
  const grouped = graphOf([1, 8, 4, 4], "u8", (b, x) =>
    b.op("ConvInteger", [
      x,
      b.constant(ints(Int8Array, 4 * 4 * 9, 6, -128, 128), [4, 4, 3, 3], "i8"),
      b.constant(new Uint8Array([3]), [], "u8"),
    ], { a_zero: 1, group: 2 }));
  for (const graph of [wide, grouped]) {
    const ops = byteProducts(graph).nodes.map((n) => n.op);
    assert.ok(!ops.includes("Pad") && !ops.some((o) => o === "Sub"), ops.join(" "));
  }
});

Deno.test("an imported QDQ convolution's zero point, an i32 constant, takes the bytes too", async () => {
  // As the importer writes ONNX Runtime's QDQ convolution: the zero point's Cast folded.
  const [c, m] = [4, 5];
  const graph = graphOf([1, c, 6, 6], "u8", (b, x) => {
    const shifted = b.op("Sub", [
      b.op("Cast", [x], { to: "i32" }),
      b.constant(Int32Array.of(77), []),
    ]);
    const weights = Int16Array.from(ints(Int8Array, m * c * 9, 7, -128, 128));
    return b.op("IntegerConv", [
      b.op("Cast", [shifted], { to: "i16" }),
      b.constant(weights, [m, c, 3, 3], "i16"),
    ], { pads: [1, 1, 1, 1], bound: 255 * 128, max_a: 255 });
  });
  const x = {
    data: ints(Uint8Array, c * 36, 8, 0, 256),
    shape: [1, c, 6, 6],
    dtype: "u8" as const,
  };
  const ops = await rewritten(graph, x);
  assert.ok(ops.includes("IntegerConv:u8/i8") && ops.includes("Pad:u8"), ops.join(" "));
});

Deno.test("a stem of 3 channels by 7×7 takes a channel of zero weights: patches of 4 × 49 bytes", async () => {
  const graph = graphOf([1, 3, 16, 16], "u8", (b, x) =>
    b.op("ConvInteger", [
      x,
      b.constant(ints(Int8Array, 8 * 3 * 49, 11, -128, 128), [8, 3, 7, 7], "i8"),
      b.constant(new Uint8Array([5]), [], "u8"),
    ], { a_zero: 1, pads: [3, 3, 3, 3], strides: [2, 2] }));
  const x = {
    data: ints(Uint8Array, 3 * 256, 12, 0, 256),
    shape: [1, 3, 16, 16],
    dtype: "u8" as const,
  };
  const ops = await rewritten(graph, x);
  assert.ok(ops.includes("IntegerConv:u8/i8") && ops.includes("Pad:u8"), ops.join(" "));
  const conv = byteProducts(graph).nodes.find((n) => n.op === "IntegerConv")!;
  assert.deepEqual(byteProducts(graph).values[conv.inputs[1]].shape, [8, 4, 7, 7]);
});
