import assert from "node:assert/strict";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { decompose } from "../passes/decompose.ts";
import { KilnError } from "../support/errors.ts";
import { uniform } from "../support/random.ts";
import { assertClose, f32, i32, numbers, runGraph } from "../testing/testing.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import type { Attrs } from "./mod.ts";
import "./mod.ts";

/** A scatter of input `data` with constant `indices` and input `updates`. */
function constantScatter(
  op: string,
  data: HostTensor,
  indices: HostTensor,
  updates: HostTensor,
  attrs: Attrs,
) {
  const b = new GraphBuilder();
  const ids = b.constant(indices.data as Int32Array, indices.shape, "i32");
  const y = b.op(op, [
    b.input("data", data.shape, data.dtype),
    ids,
    b.input("u", updates.shape, updates.dtype),
  ], attrs);
  b.output("y", y);
  return b.build();
}

const CASES: [string, HostTensor, HostTensor, HostTensor, Attrs][] = [
  [
    "ScatterElements",
    f32(uniform(12, 1), [3, 4]),
    i32([1, -1, 1, 0, 2, 2], [2, 3]),
    f32(uniform(6, 2), [2, 3]),
    { axis: 1 },
  ],
  [
    "ScatterElements",
    f32(uniform(12, 3), [3, 4]),
    i32([0, 2, 0, 0, 1, 2], [2, 3]),
    f32(uniform(6, 4), [2, 3]),
    { reduction: "mul" },
  ],
  [
    "ScatterElements",
    i32([1, 2, 3, 4, 5, 6], [2, 3]),
    i32([0, 0, 1], [1, 3]),
    i32([7, -8, 9], [1, 3]),
    { reduction: "max" },
  ],
  [
    "ScatterND",
    f32(uniform(24, 5), [2, 3, 4]),
    i32([1, 2, 0, -1, 1, 2], [3, 2]),
    f32(uniform(12, 6), [3, 4]),
    { reduction: "min" },
  ],
  [
    "ScatterND",
    i32(Array.from({ length: 8 }, (_, i) => i), [2, 4]),
    i32([1, 1], [2, 1]),
    i32([1, 2, 3, 4, 5, 6, 7, 8], [2, 4]),
    { reduction: "add" },
  ],
];

Deno.test("scatters with constant indices: the source-map form matches the reference on every backend", async () => {
  for (const [op, data, indices, updates, attrs] of CASES) {
    const graph = constantScatter(op, data, indices, updates, attrs);
    // The decomposition reads the indices: one gather a layer, no matches reduced.
    const expanded = decompose(graph, () => true);
    assert.ok(
      !expanded.nodes.some((n) => /^Reduce|MatMul/.test(n.op)),
      `${op}: ${expanded.nodes.map((n) => n.op)}`,
    );
    const feeds = { data, u: updates };
    const want = (await runGraph(graph, feeds)).y;
    for (const backend of ["wasm", "webgpu"]) {
      const got = (await runGraph(graph, feeds, backend)).y;
      assertClose(numbers(got.data), numbers(want.data), {
        atol: 1e-6,
        message: `${op} ${backend}`,
      });
    }
    assertClose(numbers((await runGraph(expanded, feeds)).y.data), numbers(want.data), {
      atol: 1e-6,
    });
  }
});

Deno.test("a scatter its run-time forms cannot take is a typed error with a fix", async () => {
  const b = new GraphBuilder();
  const y = b.op("ScatterElements", [
    b.input("d", [4], "f32"),
    b.input("i", [2], "i32"),
    b.input("u", [2], "f32"),
  ], {
    reduction: "mul",
  });
  b.output("y", y);
  await assert.rejects(
    () => runGraph(b.build(), { d: f32([1, 2, 3, 4]), i: i32([0, 1]), u: f32([2, 2]) }, "wasm"),
    (e) =>
      e instanceof KilnError && /needs its indices constant/.test(e.message) &&
      /Fix:/.test(e.message),
  );
});

Deno.test("a constant scatter index out of range is a typed error", async () => {
  const graph = constantScatter(
    "ScatterND",
    f32([1, 2, 3], [3]),
    i32([3], [1, 1]),
    f32([9], [1]),
    {},
  );
  for (const backend of ["reference", "wasm"]) {
    await assert.rejects(
      () => runGraph(graph, { data: f32([1, 2, 3], [3]), u: f32([9], [1]) }, backend),
      (e) => e instanceof KilnError && e.code === "out-of-range",
      backend,
    );
  }
});
