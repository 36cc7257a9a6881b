/**
 * The importer's folds and the graph's copies: a fold's own result goes into the graph as it is
 * (no copy), and one that views a caller's value (a Reshape of an input given at import) keeps
 * the copy that guards it from the caller's later writes.
 *
 * @module
 */
import assert from "node:assert/strict";
import { importModel } from "./import.ts";
import { valueInfo } from "../testdata.ts";
import type { ModelProto } from "../wire/proto.ts";

Deno.test("a fold viewing a caller's value keeps the caller's guard; its own results are the graph's", () => {
  const proto: ModelProto = {
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "g",
      input: [valueInfo("x", 1, [2])],
      initializer: [{ name: "shape", dims: [1], dataType: 7, int64Data: [2] }],
      node: [
        { opType: "Reshape", input: ["x", "shape"], output: ["r"], attribute: [] },
        { opType: "Add", input: ["r", "r"], output: ["y"], attribute: [] },
      ],
      output: [valueInfo("r", 1), valueInfo("y", 1)],
    },
  };
  const given = new Float32Array([1, 2]);
  const graph = importModel(proto, {
    inputValues: { x: { data: given, shape: [2], dtype: "f32" } },
  });
  const values = graph.nodes.filter((n) => n.op === "Constant")
    .map((n) => Array.from((n.attrs.value as { data: Float32Array }).data));
  assert.deepEqual(values.sort(), [[1, 2], [2, 4]]);
  const before = graph.hash();
  given[0] = 99;
  assert.equal(graph.hash(), before);
});
