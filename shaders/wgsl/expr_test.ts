import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { assertClose, f32, numbers, runGraph } from "../../jit/testing/testing.ts";
import { generateWgsl } from "./codegen.ts";

Deno.test("Sigmoid's and Tanh's divisions by 1 + exp(·) take the division without the other special cases", async () => {
  const wgsl = (graph: ReturnType<GraphBuilder["build"]>) =>
    fuse(graph).kernels.map((k) => generateWgsl(k, { maxInvocations: 256 })).join("\n");
  const calls = (code: string, name: string) =>
    code.match(new RegExp(`(?<!fn )${name}\\(`, "g"))?.length ?? 0;
  const b = new GraphBuilder();
  const x = b.input("x", [64]);
  b.output("y", b.op("Add", [b.op("Sigmoid", [x]), b.op("Tanh", [x])]));
  const gates = wgsl(b.build());
  assert.ok(calls(gates, "k_fdivexp") > 0);
  assert.equal(calls(gates, "k_fdiv"), 0);
  // A division by anything else keeps every special case.
  b.output("z", b.op("Div", [b.op("Sigmoid", [x]), x]));
  const graph = b.build();
  assert.ok(calls(wgsl(graph), "k_fdiv") > 0);
  const values = [NaN, Infinity, -Infinity, 0, -0, 100, -100, 1e-30, 3e38, -3e38, 0.5, -2.5];
  const xs = f32(Array.from({ length: 64 }, (_, i) => values[i] ?? Math.sin(i) * 12));
  const expected = await runGraph(graph, { x: xs });
  const got = await runGraph(graph, { x: xs }, "webgpu");
  for (const k of ["y", "z"]) {
    assertClose(numbers(got[k].data), numbers(expected[k].data), { atol: 1e-7, rtol: 1e-6 });
  }
});

Deno.test("coordinates divide as u32s: a padded, strided convolution's stored patches and its values", async () => {
  const b = new GraphBuilder();
  const [x, w] = [b.input("x", [2, 5, 13, 11]), b.input("w", [8, 5, 3, 3])];
  b.output("y", b.op("Conv", [x, w], { pads: [1, 2, 1, 0], strides: [2, 1] }));
  const graph = b.build();
  const [patches] = fuse(graph, { patchesFrom: 1 }).kernels;
  const body = generateWgsl(patches, { maxInvocations: 256 }).split("@compute")[1];
  // Every coordinate's division and remainder by a constant is unsigned (NVIDIA's signed ones
  // cost about twice as much); the pads' negative coordinates are discarded by their guards.
  assert.deepEqual(body.match(/ [/%] \d+(?![\du.])/g), null);
  assert.ok(body.match(/ [/%] \d+u/g)!.length >= 4);
  const data = (shape: number[], seed: number) =>
    f32(
      Array.from({ length: shape.reduce((a, d) => a * d) }, (_, i) => Math.sin(i * seed) * 2),
      shape,
    );
  const feeds = { x: data([2, 5, 13, 11], 0.37), w: data([8, 5, 3, 3], 1.13) };
  const [expected, got] = [await runGraph(graph, feeds), await runGraph(graph, feeds, "webgpu")];
  assertClose(numbers(got.y.data), numbers(expected.y.data), { atol: 1e-5, rtol: 1e-5 });
});
