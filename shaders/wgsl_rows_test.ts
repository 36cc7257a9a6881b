import assert from "node:assert/strict";
import { fuse } from "../jit/fuse.ts";
import { GraphBuilder } from "../jit/graph_builder.ts";
import { assertClose, f32, numbers, runGraph } from "../jit/testing.ts";
import { generateWgsl, kernelLayout } from "./wgsl.ts";

/** DynamicQuantizeLinear's arithmetic over one row of 2048: a scale from the row's range. */
function quantizing() {
  const b = new GraphBuilder();
  const x = b.input("x", [2048]);
  const lo = b.op("Min", [b.op("ReduceMin", [x], { keepdims: 0 }), b.constant(0)]);
  const hi = b.op("Max", [b.op("ReduceMax", [x], { keepdims: 0 }), b.constant(0)]);
  const scale = b.op("Div", [b.op("Sub", [hi, lo]), b.constant(255)]);
  b.output("y", b.op("Round", [b.op("Div", [x, scale])]));
  return b.build();
}

Deno.test("a held row computes its row-wide values once, not at each of a thread's points", async () => {
  const graph = quantizing();
  // The range's second reduction and the quantizing epilogue over the row (its first reduction is a
  // kernel before, read as a scalar).
  const kernel = fuse(graph).kernels.find((k) => k.outputs.some((o) => o.level === "full"))!;
  const options = { maxInvocations: 256 };
  const rows = kernelLayout(kernel, options).rows!;
  const points = rows.slots * rows.width;
  assert.ok(points >= 8, `a thread holds ${points} points`);
  // One exact division a point (x / scale) and one for the scale, not two a point: each division
  // costs NVIDIA's compiler about 30 ms.
  const divisions = generateWgsl(kernel, options).match(/k_fdiv\(/g)!.length - 1;
  assert.equal(divisions, points + 1);
  const x = f32(Array.from({ length: 2048 }, (_, i) => Math.sin(i * 0.37) * 3 + (i % 7) * 0.1));
  const expected = await runGraph(graph, { x });
  const got = await runGraph(graph, { x }, "webgpu");
  assertClose(numbers(got.y.data), numbers(expected.y.data), { atol: 0, rtol: 0 });
});
