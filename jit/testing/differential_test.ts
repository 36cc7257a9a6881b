import assert from "node:assert/strict";
import { checkAgainstReference } from "./differential.ts";
import { fuse } from "../passes/fuse.ts";
import { randomGraph } from "./random_graph.ts";

const COUNT = 2000;

Deno.test(`differential: ${COUNT} random graphs, fused reference vs unfused reference`, async () => {
  let kernels = 0, nodes = 0;
  for (let seed = 0; seed < COUNT; seed++) {
    const c = randomGraph(seed);
    nodes += c.graph.nodes.length;
    kernels += fuse(c.graph).kernels.length;
    await checkAgainstReference(c);
  }
  // Fusion must actually fuse: far fewer kernels than nodes across the corpus.
  assert.ok(kernels < nodes * 0.75, `${kernels} kernels for ${nodes} nodes`);
});

Deno.test("random graphs are deterministic per seed and varied across seeds", () => {
  assert.equal(randomGraph(42).graph.hash(), randomGraph(42).graph.hash());
  const hashes = new Set([...Array(50).keys()].map((s) => randomGraph(s).graph.hash()));
  assert.ok(hashes.size >= 45);
  const ops = new Set(
    [...Array(200).keys()].flatMap((s) => randomGraph(s).graph.nodes.map((n) => n.op)),
  );
  for (
    const op of [
      "MatMul",
      "Softmax",
      "LayerNormalization",
      "Transpose",
      "Reshape",
      "Slice",
      "Pad",
      "Expand",
      "Gather",
      "Concat",
      "ReduceSum",
    ]
  ) {
    assert.ok(ops.has(op), `generator never emits ${op}`);
  }
});
