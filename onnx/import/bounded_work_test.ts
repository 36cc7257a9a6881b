/**
 * Work bounded by what a model asks for: nested loops that would unroll millions of bodies are a
 * typed error, and ops with thousands of inputs compile in time linear in their count.
 */
import assert from "node:assert/strict";
import { setMemoryBudget } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import type { ModelProto } from "../wire/proto.ts";
import { testModel, valueInfo } from "../testdata.ts";
import "../../mod.ts";

type Graph = ModelProto["graph"];
type Node = Graph["node"][0];
const value = (name: string, elemType: number, dims: number[] = []) =>
  valueInfo(name, elemType, dims);
const model = testModel;

/** Loop(M, true, v) whose body passes its condition on and computes `inner` (v -> v2). */
function loop(inner: Node, input: string, output: string): Node {
  const body = {
    name: "body",
    input: [value("i", 7), value("c", 9), value("v", 1, [1])],
    output: [value("c2", 9), value("v2", 1, [1])],
    initializer: [],
    node: [{ opType: "Identity", input: ["c"], output: ["c2"], attribute: [] }, inner],
  };
  return {
    opType: "Loop",
    input: ["M", "T", input],
    output: [output],
    attribute: [{ name: "body", type: 5, g: body }],
  };
}

const x = { data: Float32Array.from([0]), shape: [1], dtype: "f32" as const };

Deno.test("a Loop of 4000 inside a Loop of 4000 is a typed limit error, not 16 million bodies", async () => {
  const nested = (trips: number) =>
    model({
      input: [value("x", 1, [1])],
      output: [value("y", 1, [1])],
      initializer: [
        { name: "M", dims: [], dataType: 7, int64Data: [trips] },
        { name: "T", dims: [], dataType: 9, int32Data: [1] },
        { name: "one", dims: [1], dataType: 1, floatData: [1] },
      ],
      node: [
        loop(
          loop({ opType: "Add", input: ["v", "one"], output: ["v2"], attribute: [] }, "v", "v2"),
          "x",
          "y",
        ),
      ],
    });
  const small = nested(20);
  assert.deepEqual([...(await small.run({ x }, { backend: "wasm" })).y.data], [400]);
  await assert.rejects(
    () => nested(4000).run({ x }, { backend: "wasm" }),
    (e) => e instanceof KilnError && e.code === "limit" && /unrolled/.test(e.message),
  );
  small.dispose();
});

Deno.test("Concat, Max and Sum of 20,000 inputs compile and give the right values", async () => {
  const n = 20_000;
  const wide = (opType: string, out: number[]) =>
    model({
      input: [value("x", 1, [1])],
      output: [value("y", 1, out)],
      initializer: [],
      node: [{
        opType,
        input: Array.from({ length: n }, () => "x"),
        output: ["y"],
        attribute: opType === "Concat" ? [{ name: "axis", type: 2, i: 0 }] : [],
      }],
    });
  const one = { data: Float32Array.from([2]), shape: [1], dtype: "f32" as const };
  for (const backend of ["reference", "wasm"]) {
    const concat = wide("Concat", [n]);
    const y = (await concat.run({ x: one }, { backend, cache: false })).y;
    assert.equal(y.data.length, n);
    assert.ok([...y.data].every((v) => v === 2), backend);
    for (const [op, want] of [["Max", 2], ["Min", 2], ["Sum", 2 * n]] as const) {
      const m = wide(op, [1]);
      assert.deepEqual([...(await m.run({ x: one }, { backend, cache: false })).y.data], [want]);
      m.dispose();
    }
    concat.dispose();
  }
});

Deno.test("an initializer the importer folds is held to the memory budget like any tensor", async () => {
  // 4 KiB of weights, folded away by the importer (Transpose of a constant, added to x).
  const m = model({
    input: [value("x", 1, [32, 32])],
    output: [value("y", 1, [32, 32])],
    initializer: [{ name: "w", dims: [32, 32], dataType: 1, floatData: Array(1024).fill(1) }],
    node: [
      { opType: "Transpose", input: ["w"], output: ["t"], attribute: [] },
      { opType: "Add", input: ["x", "t"], output: ["y"], attribute: [] },
    ],
  });
  const x = { data: new Float32Array(1024), shape: [32, 32], dtype: "f32" as const };
  setMemoryBudget({ maxTensorBytes: 1024 });
  try {
    await assert.rejects(
      () => m.run({ x }, { backend: "reference" }),
      (e) => e instanceof KilnError && e.code === "limit" && /initializer "w"/.test(e.message),
    );
  } finally {
    setMemoryBudget(undefined);
  }
});
