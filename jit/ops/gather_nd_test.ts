import assert from "node:assert/strict";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { decompose } from "../passes/decompose.ts";
import { KilnError } from "../support/errors.ts";
import { uniform } from "../support/random.ts";
import { assertClose, f32, i32, numbers, runGraph } from "../testing/testing.ts";
import "./mod.ts";

const data = f32(uniform(24, 7), [2, 3, 4]);
const tuples = i32([1, 2, 0, -1, 1, 0], [3, 2]);

function gatherGraph(constantIndices: boolean) {
  const b = new GraphBuilder();
  const ids = constantIndices
    ? b.constant(tuples.data as Int32Array, tuples.shape, "i32")
    : b.input("i", tuples.shape, "i32");
  b.output("y", b.op("GatherND", [b.input("x", data.shape, "f32"), ids]));
  return b.build();
}

Deno.test("GatherND with constant or run-time tuples matches the reference on every backend", async () => {
  const want = [
    ...numbers(data.data).slice(20, 24),
    ...numbers(data.data).slice(8, 12),
    ...numbers(data.data).slice(12, 16),
  ];
  for (const known of [true, false]) {
    const graph = gatherGraph(known);
    // Constant tuples pick precomputed rows: no coordinate arithmetic in the decomposition.
    const ops = decompose(graph, () => true).nodes.map((n) => n.op);
    assert.equal(ops.includes("Slice"), !known, ops.join());
    const feeds: Record<string, typeof data> = known ? { x: data } : { x: data, i: tuples };
    for (const backend of ["reference", "wasm", "webgpu"]) {
      const { y } = await runGraph(graph, feeds, backend);
      assert.deepEqual(y.shape, [3, 4]);
      assertClose(numbers(y.data), want, { message: `${backend} constant ${known}` });
    }
  }
});

Deno.test("a GatherND index out of range is a typed error, constant or not", async () => {
  for (const backend of ["reference", "wasm"]) {
    await assert.rejects(
      () => runGraph(gatherGraph(false), { x: data, i: i32([2, 0, 0, 0, 0, 0], [3, 2]) }, backend),
      (e) => e instanceof KilnError && e.code === "out-of-range",
      backend,
    );
  }
});
