import assert from "node:assert/strict";
import { demoMlp } from "../../cli/demo_mlp.ts";
import { compile } from "../../mod.ts";
import { randomGraph } from "../../jit/testing/random_graph.ts";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { toOnnx } from "./export.ts";
import { importOnnx } from "../import/import.ts";
import { exportedModel } from "../testdata.ts";

Deno.test("the demo MLP round-trips through ONNX", async () => {
  const demo = demoMlp();
  const bytes = toOnnx(demo.graph);
  const back = importOnnx(bytes);
  assert.deepEqual(back.inputs.map((i) => [i.name, i.shape]), [["x", [8, 784]]]);
  const a = await (await compile(demo.graph)).run(demo.inputs);
  const b = await (await compile(back)).run(demo.inputs);
  assertClose(numbers(b.y.data), numbers(a.y.data), { atol: 0, rtol: 0 });
});

Deno.test("300 random graphs round-trip through ONNX with identical results", async () => {
  for (let seed = 0; seed < 300; seed++) {
    const c = randomGraph(seed);
    let back;
    try {
      back = importOnnx(toOnnx(c.graph));
    } catch (e) {
      throw new Error(`seed ${seed}: ${(e as Error).message}\n${c.graph}`);
    }
    const a = await (await compile(c.graph, { fuse: false })).run(c.inputs);
    const b = await (await compile(back, { fuse: false })).run(c.inputs);
    for (const name of Object.keys(a)) {
      assert.deepEqual(b[name].shape, a[name].shape, `seed ${seed} ${name}`);
      assertClose(numbers(b[name].data), numbers(a[name].data), {
        atol: 1e-6,
        message: `seed ${seed} ${name}`,
      });
    }
  }
});

Deno.test("a scalar Pad exports as an identity (ONNX Runtime refuses rank-0 pads)", async () => {
  const { GraphBuilder } = await import("../../jit/frontend/graph_builder.ts");
  const b = new GraphBuilder();
  b.output("y", b.op("Pad", [b.input("x", [])], { pads: [] }));
  const back = importOnnx(toOnnx(b.build()));
  assert.ok(back.nodes.length > 0 && back.nodes.every((n) => n.op === "Identity"), back.toString());
});

Deno.test("a quantized model round-trips through ONNX with identical results", async () => {
  // Its integer products import as IntegerMatMul, which opset 17 lacks.
  const m = await exportedModel("quant_bert_tiny_int8");
  const graph = importOnnx(m.bytes);
  assert.ok(graph.nodes.some((n) => n.op === "IntegerMatMul"));
  const again = importOnnx(toOnnx(graph));
  for (const g of [graph, again]) {
    const exe = await compile(g, { backend: "wasm", cache: false });
    assertClose(numbers((await exe.run(m.inputs)).y.data), m.y, { atol: 1e-5, rtol: 0 });
    exe.dispose();
  }
});

Deno.test("toOnnx and importOnnx refuse what is not a graph or an options object", () => {
  const typed = (pattern: RegExp) => (e: unknown) =>
    e instanceof Error && e.name === "KilnError" && pattern.test(e.message);
  // toOnnx(null) had failed inside (`null.nodes`); importOnnx's misspelt options were ignored.
  assert.throws(() => toOnnx(null as never), typed(/toOnnx\(\) takes a Graph, got null/));
  const bytes = toOnnx(demoMlp().graph);
  assert.throws(() => importOnnx(bytes, { inputShape: {} } as never), typed(/no option/));
  assert.throws(() => importOnnx(bytes, 5 as never), typed(/object of options/));
  assert.ok(importOnnx(bytes, { inputShapes: {} }));
});
