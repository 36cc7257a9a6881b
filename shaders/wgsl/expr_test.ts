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
