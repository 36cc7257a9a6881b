import assert from "node:assert/strict";
import { demoMlp } from "../../cli/demo_mlp.ts";
import { explain } from "../../mod.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";

Deno.test("explain lists kernels with backend and fused ops, as text and DOT", async () => {
  const e = await explain(demoMlp().graph, { backend: "reference", cache: false });
  assert.equal(e.backend, "reference");
  assert.ok(e.kernels.length <= 3);
  assert.deepEqual(e.kernels[0].ops, ["MatMul", "Add", "Relu"]);
  assert.ok(e.kernels.every((k) => k.backend === "reference"));
  assert.ok(e.memory.plannedBytes > 0);
  assert.match(e.text(), /plan on reference: 3 kernel\(s\)/);
  const dot = e.dot();
  assert.match(dot, /^digraph kiln \{/);
  assert.match(dot, /"matmul_0" -> "matmul_1"/);
  // Graphviz's line-break escape, once: a doubled backslash would print a literal "\n".
  assert.match(dot, /\[label="matmul_0\\nMatMul \+ Add \+ Relu\\nreference"\]/);
  assert.doesNotMatch(dot, /\\\\n/);
});

Deno.test("explain of a node-by-node compile says so", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.input("x", [2])]));
  const e = await explain(b.build(), { fuse: false });
  assert.equal(e.kernels.length, 1);
  assert.match(e.log[0], /one by one/);
});
