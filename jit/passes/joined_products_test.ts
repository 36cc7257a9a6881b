import assert from "node:assert/strict";
import { compile } from "../compile.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import type { Graph } from "../ir/graph.ts";
import { f32, hashed, numbers } from "../testing/testing.ts";
import { joinedProducts } from "./joined_products.ts";

/**
 * Q, K and V as exporters write them: MatMul + Add of one A by constants of `widths` columns
 * (`inputs`: the weights as graph inputs instead, which nothing joins; `nodes`: the biases as
 * Constant nodes, as `torch.onnx.export` writes Hugging Face's Linear biases).
 */
function projections(
  widths: number[],
  { bias = true, shareWeight = false, inputs = false, nodes = false } = {},
): Graph {
  const b = new GraphBuilder();
  const a = b.input("a", [2, 5, 8]);
  const weights = widths.map((n, i) =>
    inputs
      ? b.input(`w${i}`, [8, n])
      : b.param(`w${i}`, [8, n], "f32", new Float32Array(hashed(8 * n, 31 + i)))
  );
  widths.forEach((n, i) => {
    const p = b.op("MatMul", [a, weights[i]]);
    const values = new Float32Array(hashed(n, 7 + i));
    const y = bias
      ? b.op("Add", [nodes ? b.constant(values, [n]) : b.param(`b${i}`, [n], "f32", values), p])
      : p;
    b.output(`y${i}`, b.op("Relu", [y]));
  });
  if (shareWeight) b.output("again", b.op("MatMul", [b.input("c", [3, 8]), weights[0]]));
  return b.build();
}

Deno.test("products of one A by constant weights join into one, their outputs slices, to the bit", async () => {
  for (const bias of [true, false]) {
    const graph = projections([6, 4, 6], { bias });
    const joined = joinedProducts(graph);
    const ops = joined.nodes.map((n) => n.op);
    assert.deepEqual(ops.filter((op) => op === "MatMul").length, 1, ops.join());
    assert.deepEqual(ops.filter((op) => op === "Slice").length, 3);
    assert.deepEqual(ops.filter((op) => op === "Add").length, bias ? 1 : 0);
    const weight = joined.params.find((p) => joined.values[p.value].shape.join() === "8,16");
    assert.ok(weight, "the weights side by side, [8, 16]");
    // The first row of the joined weight is each weight's first row in turn.
    const row = Array.from(weight.data as Float32Array).slice(0, 16);
    assert.deepEqual(
      row,
      [...hashed(48, 31).slice(0, 6), ...hashed(32, 32).slice(0, 4), ...hashed(48, 33).slice(0, 6)]
        .map(Math.fround),
    );
    // The same products by the same weights given as inputs (so not joined) answer the same.
    const apart = projections([6, 4, 6], { bias, inputs: true });
    const feeds = {
      a: f32(hashed(80, 5), [2, 5, 8]),
      ...Object.fromEntries([6, 4, 6].map((n, i) => [`w${i}`, f32(hashed(8 * n, 31 + i), [8, n])])),
    };
    // compile joins only for a GPU: the wasm plan of `joined` itself, against the unjoined one.
    for (const backend of ["reference", "wasm"]) {
      const want = await (await compile(apart, { backend })).run(feeds);
      const got = await (await compile(joined, { backend })).run({ a: feeds.a });
      for (const name of Object.keys(want)) {
        assert.deepEqual(numbers(got[name].data), numbers(want[name].data), `${backend} ${name}`);
      }
    }
  }
});

Deno.test("biases made by Constant nodes join too, and those nodes go", async () => {
  const graph = projections([6, 4, 6], { nodes: true });
  const joined = joinedProducts(graph);
  const ops = joined.nodes.map((n) => n.op);
  assert.equal(ops.filter((op) => op === "MatMul").length, 1, ops.join());
  assert.equal(ops.filter((op) => op === "Add").length, 1, ops.join());
  assert.equal(ops.filter((op) => op === "Constant").length, 0, ops.join());
  const bias = joined.params.find((p) => joined.values[p.value].shape.join() === "16");
  assert.deepEqual(
    Array.from(bias!.data as Float32Array),
    [...hashed(6, 7), ...hashed(4, 8), ...hashed(6, 9)].map(Math.fround),
  );
  const feeds = { a: f32(hashed(80, 5), [2, 5, 8]) };
  const want = await (await compile(graph, { backend: "reference" })).run(feeds);
  const got = await (await compile(joined, { backend: "reference" })).run(feeds);
  for (const name of Object.keys(want)) {
    assert.deepEqual(numbers(got[name].data), numbers(want[name].data), name);
  }
});

Deno.test("products are left apart where a weight is read elsewhere, a bias is missing or there is one", () => {
  const apart = (g: Graph) => assert.equal(joinedProducts(g), g);
  apart(projections([6]));
  apart(projections([6, 4], { inputs: true }));
  // A weight read by another product too: joining would keep both copies.
  const shared = projections([6, 4], { shareWeight: true });
  const kept = joinedProducts(shared);
  assert.equal(kept.nodes.filter((n) => n.op === "MatMul").length, 3);
  // One with a bias and one without: neither set has two.
  const b = new GraphBuilder();
  const a = b.input("a", [3, 8]);
  const w0 = b.param("w0", [8, 4], "f32", new Float32Array(32));
  const w1 = b.param("w1", [8, 4], "f32", new Float32Array(32));
  b.output(
    "y0",
    b.op("Add", [b.op("MatMul", [a, w0]), b.param("b0", [4], "f32", new Float32Array(4))]),
  );
  b.output("y1", b.op("MatMul", [a, w1]));
  apart(b.build());
});

Deno.test("joining the same weights again hands out the first join's array, not a copy", () => {
  // auto's compile and the device compile it tries first rewrite one graph apart.
  const graph = projections([6, 4, 6]);
  const joinedData = (g: Graph) =>
    g.params.filter((p) => p.data && p.data.length === 8 * 16).map((p) => p.data);
  const [first] = joinedData(joinedProducts(graph));
  const [again] = joinedData(joinedProducts(graph));
  assert.ok(first !== undefined && first === again);
  // Other weights of the same shapes are joined anew.
  const [other] = joinedData(joinedProducts(projections([6, 4, 6])));
  assert.notEqual(other, first);
  assert.deepEqual(other, first);
});
