import assert from "node:assert/strict";
import { compile, KilnError } from "../../mod.ts";
import { hasRelaxedSimd } from "../../backends/wasm/wasm_backend.ts";
import type { Graph } from "../ir/graph.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { blockProduct } from "../testing/block_product.ts";
import { uniform } from "../support/random.ts";
import { assertClose, f32, numbers } from "../testing/testing.ts";
import { fuse } from "./fuse.ts";
import { packedRows, ROUNDING_OUTPUTS } from "./packed_rows.ts";

/** The pass packing A for products of any size (the small ones here would round it). */
const PACKING = { roundsUpTo: 0 };

Deno.test("a few-row product over A rounded to 8 bits reads A packed, with the same values", async () => {
  for (
    const [lead, form] of [[[1], [96, 40, 4, 32]], [[2], [256, 9, 4, 64]], [[1], [4864, 7, 4, 128]]]
  ) {
    const { graph, feeds } = blockProduct(lead, form, true, { int8: true });
    const packed = packedRows(graph, PACKING);
    const ops = packed.nodes.map((n) => n.op).filter((op) => op !== "Constant");
    assert.deepEqual(ops, ["PackRowBlocks", "BlockMatMul"], `${form}`);
    // The reference's direct kernels, and wasm's decomposition, give the original's values: the
    // integers and scales are QuantizeRowBlocks', unpacked to the same f32 A.
    const want = await (await compile(graph, { backend: "reference", cache: false })).run(feeds);
    for (const backend of ["reference", "wasm"]) {
      const got = await (await compile(packed, { backend, cache: false })).run(feeds);
      assert.deepEqual(numbers(got.y.data), numbers(want.y.data), `${form} on ${backend}`);
    }
    // The packing is one kernel (its words and a scale a block); the product reads both.
    const kernels = fuse(packed, { blockProducts: true }).kernels;
    assert.equal(kernels.length, 2);
    assert.deepEqual(kernels[0].outputs.map((o) => [o.dtype, o.level]), [["u32", "full"], [
      "f32",
      "row",
    ]]);
    assert.ok(kernels[1].blockProduct?.packedA && kernels[1].blockProduct.int8);
  }
});

Deno.test("a prompt's rows keep A rounded as f32; a generation's last row is packed through its slice", async () => {
  // 16 rows: the tiled products, which read A's f32 values.
  const { graph } = blockProduct([16], [64, 8, 4, 32], true, { int8: true });
  assert.equal(packedRows(graph), graph);
  // The last of 5 rows, picked after the rounding (as `rows_first.ts` leaves a step's logits).
  const k = 64, n = 8, b = new GraphBuilder();
  const x = b.input("x", [1, 5, k]);
  const rounded = b.op("QuantizeRowBlocks", [x], { block: 32 });
  const last = b.op("Slice", [rounded], { starts: [4], ends: [5], axes: [1] });
  const words = b.param(
    "q",
    [n, k / 8],
    "u32",
    Uint32Array.from(uniform(n * k / 8, 3, 0, 2 ** 32)),
  );
  const scales = b.param("s", [n, k / 32], "f32", uniform(n * k / 32, 4, 0.01, 0.03));
  b.output("y", b.op("BlockMatMul", [last, words, scales], { bits: 4, block: 32, int8: 1 }));
  const graph2 = b.build(), packed = packedRows(graph2, PACKING);
  assert.deepEqual(packed.nodes.map((node) => node.op), ["Slice", "PackRowBlocks", "BlockMatMul"]);
  const feeds = { x: f32(uniform(5 * k, 5, -2, 2), [1, 5, k]) };
  const want = await (await compile(graph2, { backend: "reference", cache: false })).run(feeds);
  const got = await (await compile(packed, { backend: "reference", cache: false })).run(feeds);
  assert.deepEqual(numbers(got.y.data), numbers(want.y.data));
});

Deno.test("products of one rounded A share its packing", async () => {
  // Two products of one row (a layer's gate and up projections, not joined) read one packing.
  const k = 64, n = 8, b = new GraphBuilder();
  const x = b.input("x", [1, k]);
  const rounded = b.op("QuantizeRowBlocks", [x], { block: 32 });
  const product = (i: number) => {
    const q = Uint32Array.from(uniform(n * k / 8, 10 + i, 0, 2 ** 32));
    const words = b.param(`q${i}`, [n, k / 8], "u32", q);
    const scales = b.param(`s${i}`, [n, k / 32], "f32", uniform(n * k / 32, 20 + i, 0.01, 0.03));
    return b.op("BlockMatMul", [rounded, words, scales], { bits: 4, block: 32, int8: 1 });
  };
  b.output("y", b.op("Add", [product(0), product(1)]));
  const graph = b.build(), packed = packedRows(graph, PACKING);
  assert.deepEqual(packed.nodes.map((node) => node.op), [
    "PackRowBlocks",
    "BlockMatMul",
    "BlockMatMul",
    "Add",
  ]);
  const feeds = { x: f32(uniform(k, 6, -2, 2), [1, k]) };
  const want = await (await compile(graph, { backend: "reference", cache: false })).run(feeds);
  const got = await (await compile(packed, { backend: "reference", cache: false })).run(feeds);
  assert.deepEqual(numbers(got.y.data), numbers(want.y.data));
});

Deno.test("a one-row product of few outputs rounds A itself: no rounding kernel, a gate or norm inside", async () => {
  for (const a of [undefined, "normed", "gated"] as const) {
    const { graph, feeds } = blockProduct([1], [256, 40, 4, 32], true, { int8: true, a });
    const rounding = packedRows(graph);
    const product = rounding.nodes.find((n) => n.op === "BlockMatMul")!;
    assert.equal(product.attrs.rounds, 1, `${a}`);
    assert.ok(
      !rounding.nodes.some((n) => n.op === "QuantizeRowBlocks" || n.op === "PackRowBlocks"),
    );
    // The reference rounds A as QuantizeRowBlocks did: the same values; wasm (its integer
    // product rounding A, or without relaxed SIMD the decomposition) within the f32 sums' order.
    const want = await (await compile(graph, { backend: "reference", cache: false })).run(feeds);
    const run = async (g: Graph, backend: string) =>
      numbers((await (await compile(g, { backend, cache: false })).run(feeds)).y.data);
    assert.deepEqual(await run(rounding, "reference"), numbers(want.y.data), `${a}: reference`);
    assertClose(await run(rounding, "wasm"), numbers(want.y.data), { atol: 1e-5, rtol: 1e-5 });
    // One kernel where the generator rounds (the norm's or the gate's work inside it); its
    // decomposition's kernels elsewhere.
    const [kernel, ...rest] =
      fuse(rounding, { blockProducts: true, blockPrologues: true, roundingProducts: true }).kernels;
    assert.ok(kernel.blockProduct?.roundsA && rest.length === 0, `${a}: one kernel`);
    assert.equal(kernel.blockProduct.prologue !== undefined, a !== undefined, `${a}: a prologue`);
    const plain = fuse(rounding, { blockProducts: true, blockPrologues: true }).kernels;
    assert.ok(plain.length > 1 && plain.every((k) => !k.blockProduct?.roundsA), `${a}: decomposed`);
  }
  // wasm's compile has its integer products round A (relaxed SIMD's), the same values as its
  // products of A rounded first; and packs A for none.
  const { graph } = blockProduct([1], [256, 40, 4, 32], true, { int8: true });
  const exe = await compile(graph, { backend: "wasm", cache: false });
  assert.equal(exe.plan!.kernels.some((k) => k.blockProduct?.roundsA), hasRelaxedSimd());
  assert.equal(exe.plan!.kernels.length, hasRelaxedSimd() ? 1 : 2);
  const unrounded = packedRows(graph, { roundsUpTo: 0, packs: false });
  assert.equal(unrounded, graph, "no packing where the backend does not pack");
  // The vocabulary's product keeps A packed by its producer; two rows keep it too.
  const wide = blockProduct([1], [64, ROUNDING_OUTPUTS + 8, 4, 32], false, { int8: true }).graph;
  assert.ok(packedRows(wide).nodes.some((n) => n.op === "PackRowBlocks"));
  const two = blockProduct([2], [64, 8, 4, 32], false, { int8: true }).graph;
  assert.ok(packedRows(two).nodes.some((n) => n.op === "PackRowBlocks"));
});

Deno.test("a BlockMatMul that rounds A asks for int8 and f32 A, or says how to fix it", () => {
  const k = 64, n = 8;
  const build = (attrs: Record<string, number>, dtype: "f32" | "f16" = "f32") => {
    const b = new GraphBuilder();
    const words = b.param("q", [n, k / 8], "u32", new Uint32Array(n * k / 8));
    const scales = b.param("s", [n, k / 32], "f32", new Float32Array(n * k / 32));
    const a = b.input("a", [1, k], dtype);
    b.output("y", b.op("BlockMatMul", [a, words, scales], { bits: 4, block: 32, ...attrs }));
    return () => b.build();
  };
  const refused = (e: unknown) =>
    e instanceof KilnError && /rounds/.test(e.message) && /Fix:/.test(e.message);
  assert.throws(build({ rounds: 1 }), refused);
  assert.throws(build({ rounds: 1, int8: 1 }, "f16"), KilnError);
  assert.ok(build({ rounds: 1, int8: 1 })().nodes.length === 1);
});
