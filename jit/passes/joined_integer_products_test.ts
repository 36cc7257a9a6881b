import assert from "node:assert/strict";
import { compile } from "../compile.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import type { Graph } from "../ir/graph.ts";
import { f32, hashed } from "../testing/testing.ts";
import { joinedIntegerProducts } from "./joined_integer_products.ts";

/** Integer weights [k, n] in [−127, 127], from `seed`. */
const weights = (k: number, n: number, seed: number) =>
  Int16Array.from(hashed(k * n, seed), (v) => Math.round(v * 127));

/**
 * Projections of one activation as the importer reads `quantize_dynamic`'s: x quantized once,
 * shifted to i16, and for each of `widths` an IntegerMatMul by a constant weight, its Cast to f32,
 * a Mul by its scale (the activation's times the weight's) and, with `bias`, an Add.
 */
function projections(widths: number[], { bias = true, twice = false } = {}): Graph {
  const b = new GraphBuilder();
  const [q, scale, zero] = b.opN("DynamicQuantizeLinear", [b.input("x", [2, 6, 40])], {}, 3);
  const wide = (v: typeof q) => b.op("Cast", [v], { to: "i32" });
  const a = b.op("Cast", [b.op("Sub", [wide(q), wide(zero)])], { to: "i16" });
  const ws = widths.map((n, i) => b.constant(weights(40, n, 11 + i), [40, n], "i16"));
  widths.forEach((n, i) => {
    const attrs = { bound: 255 * 127, parts: i + 1 };
    const product = b.op("Cast", [b.op("IntegerMatMul", [a, ws[i]], attrs)], { to: "f32" });
    const scaled = b.op("Mul", [product, b.op("Mul", [scale, b.constant(0.01 * (i + 1))])]);
    const biases = new Float32Array(hashed(n, 5 + i));
    b.output(`y${i}`, bias ? b.op("Add", [scaled, b.constant(biases, [n], "f32")]) : scaled);
  });
  if (twice) b.output("again", b.op("IntegerMatMul", [a, ws[0]], { bound: 255 * 127 }));
  return b.build();
}

Deno.test("integer products of one A join into one, each column scaled by its own scale, to the bit", async () => {
  const x = { x: f32(hashed(480, 3), [2, 6, 40]) };
  for (const bias of [true, false]) {
    const graph = projections([8, 4, 12], { bias });
    const joined = joinedIntegerProducts(graph);
    const ops = joined.nodes.map((n) => n.op);
    assert.equal(ops.filter((op) => op === "IntegerMatMul").length, 1, ops.join());
    assert.equal(ops.filter((op) => op === "Slice").length, 3);
    const product = joined.nodes.find((n) => n.op === "IntegerMatMul")!;
    // The most exact chunks of any member's, over the weights side by side.
    assert.equal(product.attrs.parts, 3);
    assert.deepEqual(joined.values[product.inputs[1]].shape, [40, 24]);
    const want = await (await compile(graph, { backend: "reference", fuse: false })).run(x);
    // compile joins only for a GPU: the joined graph itself on each backend.
    for (const backend of ["reference", "wasm", "webgpu"]) {
      const exe = await compile(joined, { backend, cache: false });
      const got = await exe.run(x);
      for (const name of ["y0", "y1", "y2"]) {
        assert.deepEqual(got[name].data, want[name].data, `${backend} ${name}`);
      }
      exe.dispose();
    }
    // Compiled for webgpu, the graph as given is joined: one product kernel of 24 columns.
    const exe = await compile(graph, { backend: "webgpu", cache: false });
    const products = exe.plan!.kernels.filter((k) => k.pattern === "matmul");
    assert.deepEqual(products.map((k) => k.space.at(-2)), [24]);
    // Its columns' scales (scalars and constant masks) computed in its epilogue, not stored.
    assert.ok(!exe.plan!.kernels.some((k) => k.space.join() === "24"), "no kernel of 24 scales");
    exe.dispose();
  }
});

Deno.test("integer products stay apart where a weight has another reader; a lone one is left as it is", () => {
  const shared = joinedIntegerProducts(projections([8, 4], { twice: true }));
  assert.equal(shared.nodes.filter((n) => n.op === "IntegerMatMul").length, 3);
  // A lone product (nothing to join it with) is left as it is.
  const lone = projections([8]);
  assert.equal(joinedIntegerProducts(lone), lone);
});
