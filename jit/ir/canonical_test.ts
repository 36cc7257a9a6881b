import assert from "node:assert/strict";
import { Graph, type NodeSpec } from "./graph.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";

const inputs = [{ name: "x", shape: [2, 3], dtype: "f32" as const }, {
  name: "w",
  shape: [3, 3],
  dtype: "f32" as const,
}];

function mlp(nodes: NodeSpec[]): Graph {
  return Graph.create({
    inputs,
    nodes,
    outputs: [{ name: "y", value: nodes.find((n) => n.op === "Softmax")!.outputs[0] }],
  });
}

const base: NodeSpec[] = [
  { op: "MatMul", inputs: ["x", "w"], outputs: ["h"] },
  { op: "Relu", inputs: ["h"], outputs: ["r"] },
  { op: "Exp", inputs: ["x"], outputs: ["e"] },
  { op: "Add", inputs: ["r", "e"], outputs: ["s"] },
  { op: "Softmax", inputs: ["s"], outputs: ["y"], attrs: { axis: -1 } },
];

Deno.test("the hash ignores node order and value names", () => {
  const a = mlp(base);
  const reordered = mlp([base[4], base[2], base[3], base[1], base[0]]);
  const renamed = mlp([
    { op: "Exp", inputs: ["x"], outputs: ["t0"] },
    { op: "MatMul", inputs: ["x", "w"], outputs: ["t1"], name: "fc" },
    { op: "Relu", inputs: ["t1"], outputs: ["t2"] },
    { op: "Add", inputs: ["t2", "t0"], outputs: ["t3"] },
    { op: "Softmax", inputs: ["t3"], outputs: ["out"], attrs: { axis: -1 } },
  ]);
  assert.equal(a.hash(), reordered.hash());
  assert.equal(a.hash(), renamed.hash());
  assert.equal(a.canonical(), renamed.canonical());
  assert.match(a.hash(), /^[0-9a-f]{32}$/);
});

Deno.test("the hash changes with any op, attribute, operand order, shape, dtype or constant byte", () => {
  const h = mlp(base).hash();
  const variants = [
    base.map((n) => (n.op === "Relu" ? { ...n, op: "Sigmoid" } : n)),
    base.map((n) => (n.op === "Softmax" ? { ...n, attrs: { axis: 0 } } : n)),
    base.map((n) => (n.op === "Add" ? { ...n, inputs: ["e", "r"] } : n)),
  ];
  for (const v of variants) assert.notEqual(mlp(v).hash(), h);
  const shape = Graph.create({
    inputs: [{ ...inputs[0], shape: [4, 3] }, inputs[1]],
    nodes: base,
    outputs: [{ name: "y", value: "y" }],
  });
  assert.notEqual(shape.hash(), h);
  const dtype = Graph.create({
    inputs: [{ ...inputs[0], dtype: "f16" }, { ...inputs[1], dtype: "f16" }],
    nodes: base,
    outputs: [{ name: "y", value: "y" }],
  });
  assert.notEqual(dtype.hash(), h);

  const withConstant = (data: Float32Array) => {
    const b = new GraphBuilder();
    b.output("y", b.op("Add", [b.input("x", [data.length]), b.constant(data)]));
    return b.build();
  };
  const big = new Float32Array(1000).fill(1);
  const big2 = big.slice();
  big2[999] = 1.0000001;
  assert.equal(withConstant(big).hash(), withConstant(big.slice()).hash());
  assert.notEqual(withConstant(big).hash(), withConstant(big2).hash());
  assert.notEqual(
    withConstant(new Float32Array([0])).hash(),
    withConstant(new Float32Array([-0])).hash(),
  );
  // The structure's hash leaves out large constants' values, not their types or small ones.
  assert.equal(withConstant(big).structureHash(), withConstant(big2).structureHash());
  assert.notEqual(withConstant(big).structureHash(), withConstant(big.slice(1)).structureHash());
  assert.notEqual(withConstant(big).structureHash(), withConstant(big).hash());
  assert.notEqual(
    withConstant(new Float32Array([1, 2])).structureHash(),
    withConstant(new Float32Array([1, 3])).structureHash(),
  );
});

Deno.test("identical subexpressions in different orders still hash the same", () => {
  const g1 = Graph.create({
    inputs: [inputs[0]],
    nodes: [
      { op: "Exp", inputs: ["x"], outputs: ["a"] },
      { op: "Exp", inputs: ["x"], outputs: ["b"] },
      { op: "Neg", inputs: ["a"], outputs: ["c"] },
      { op: "Sub", inputs: ["c", "b"], outputs: ["y"] },
    ],
    outputs: [{ name: "y", value: "y" }],
  });
  const g2 = Graph.create({
    inputs: [inputs[0]],
    nodes: [
      { op: "Exp", inputs: ["x"], outputs: ["p"] },
      { op: "Neg", inputs: ["p"], outputs: ["q"] },
      { op: "Exp", inputs: ["x"], outputs: ["r"] },
      { op: "Sub", inputs: ["q", "r"], outputs: ["y"] },
    ],
    outputs: [{ name: "y", value: "y" }],
  });
  assert.equal(g1.hash(), g2.hash());
});
