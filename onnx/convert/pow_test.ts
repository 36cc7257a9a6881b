import assert from "node:assert/strict";
import { OnnxModel } from "../model.ts";
import { encodeModel, protoOf } from "../wire/proto.ts";
import "../../mod.ts";

const vector = (n: number) => ({ tensorType: { elemType: 1, shape: { dim: [{ dimValue: n }] } } });

Deno.test("Pow's exponent from an initializer is a constant of the graph, as exporters fold it", async () => {
  // torch.pow(x, 3.0) as exporters write it: the 3.0 an initializer.
  const model = OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "cube",
      node: [{ opType: "Pow", input: ["x", "three"], output: ["y"], attribute: [] }],
      initializer: [protoOf("three", { data: Float32Array.of(3), shape: [], dtype: "f32" })],
      input: [{ name: "x", type: vector(5) }],
      output: [{ name: "y", type: vector(5) }],
    },
  }));
  const graph = model.graph({ x: [5] });
  assert.equal(graph.params.length, 0, "no parameter");
  const pow = graph.nodes.find((n) => n.op === "Pow")!;
  assert.equal(graph.nodes.find((n) => n.outputs.includes(pow.inputs[1]))?.op, "Constant");
  const x = Float32Array.of(-2, -0.5, 0, 1.5, 3);
  for (const backend of ["reference", "wasm"]) {
    using exe = await model.compile({ x: [5] }, { backend, cache: false });
    const y = (await exe.run({ x: { data: x, shape: [5], dtype: "f32" } })).y.data;
    assert.deepEqual([...y as Float32Array], [-8, -0.125, 0, 3.375, 27], backend);
  }
  model.dispose();
});
