import assert from "node:assert/strict";
import { compile, GraphBuilder } from "../../mod.ts";
import { uniform } from "../support/random.ts";
import { sharedNodes } from "./shared_nodes.ts";

/**
 * Three projections of one activation as `quantize_dynamic` writes them: each MatMulInteger with
 * its own DynamicQuantizeLinear of x, and its scale product, Cast and Mul.
 */
function projections() {
  const b = new GraphBuilder();
  const x = b.input("x", [6, 40]);
  for (const [i, name] of ["q", "k", "v"].entries()) {
    const [xq, scale, zero] = b.opN("DynamicQuantizeLinear", [x], {}, 3);
    const words = Int8Array.from({ length: 40 * 8 }, (_, j) => ((j * 37 + i * 11) % 255) - 127);
    const w = b.param(`w${name}`, [40, 8], "i8", words);
    const product = b.op("MatMulInteger", [xq, w, zero], { a_zero: 1, b_zero: 0 });
    const wScale = b.constant(0.01 * (i + 1));
    const out = b.op("Mul", [b.op("Cast", [product], { to: "f32" }), b.op("Mul", [scale, wScale])]);
    b.output(name, out);
  }
  return b.build();
}

Deno.test("an activation quantized once for its three products, answers equal", async () => {
  const graph = projections();
  const shared = sharedNodes(graph);
  const count = (g: typeof graph, op: string) => g.nodes.filter((n) => n.op === op).length;
  assert.equal(count(graph, "DynamicQuantizeLinear"), 3);
  assert.equal(count(shared, "DynamicQuantizeLinear"), 1);
  assert.equal(count(shared, "MatMulInteger"), 3);
  const x = { data: uniform(240, 5), shape: [6, 40], dtype: "f32" as const };
  const want = await (await compile(graph, { backend: "reference", fuse: false })).run({ x });
  for (const backend of ["reference", "wasm", "webgpu"]) {
    const exe = await compile(graph, { backend, cache: false });
    // The compile quantizes x into one stored [6, 40] (three without the pass).
    const stored = (exe.plan?.kernels ?? []).flatMap((k) => k.outputs)
      .filter((o) => o.shape.join() === "6,40");
    assert.equal(stored.length, 1, backend);
    const got = await exe.run({ x });
    for (const name of ["q", "k", "v"]) assert.deepEqual(got[name].data, want[name].data, name);
    exe.dispose();
  }
});

Deno.test("repeated chains merge whole; outputs, random draws and other inputs stay apart", () => {
  const b = new GraphBuilder();
  const x = b.input("x", [4]), y = b.input("y", [4]);
  const chain = (v: typeof x) => b.op("Exp", [b.op("Relu", [v])]);
  b.output("a", b.op("Add", [chain(x), chain(x)]));
  b.output("b", chain(y));
  // A repeated node that is a graph output keeps its own value.
  b.output("c", b.op("Neg", [x]));
  b.output("d", b.op("Neg", [x]));
  b.output("r1", b.op("Relu", [b.op("RandomUniform", [], { shape: [4] })]));
  b.output("r2", b.op("Relu", [b.op("RandomUniform", [], { shape: [4] })]));
  const shared = sharedNodes(b.build());
  const ops = shared.nodes.map((n) => n.op).sort();
  assert.deepEqual(ops, [
    "Add",
    "Exp",
    "Exp",
    "Neg",
    "Neg",
    "RandomUniform",
    "RandomUniform",
    "Relu",
    "Relu",
    "Relu",
    "Relu",
  ]);
  const add = shared.nodes.find((n) => n.op === "Add")!;
  assert.equal(add.inputs[0], add.inputs[1]);
  const unchanged = sharedNodes(shared);
  assert.equal(unchanged, shared);
});
