/**
 * The built-in demo model: `softmax(relu(x·W1 + b1)·W2 + b2)` for a batch of 8 flattened 28×28
 * images, built with {@linkcode GraphBuilder} and fixed-seed weights. `kiln run` without a model
 * runs it.
 *
 * @module
 */
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import type { Graph } from "../jit/ir/graph.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { uniform } from "../jit/support/random.ts";

/** The demo model and a seeded input for it. */
export interface DemoModel {
  /** The graph (weights included as params). */
  readonly graph: Graph;
  /** A seeded input batch. */
  readonly inputs: Record<string, HostTensor>;
}

/** Builds the demo MLP (784 → 128 → 10) with seeded weights. */
export function demoMlp(options: { batch?: number; hidden?: number } = {}): DemoModel {
  const batch = options.batch ?? 8, hidden = options.hidden ?? 128;
  const scale1 = 1 / Math.sqrt(784), scale2 = 1 / Math.sqrt(hidden);
  const b = new GraphBuilder();
  const x = b.input("x", [batch, 784]);
  const w1 = b.param("w1", [784, hidden], "f32", uniform(784 * hidden, 1, -scale1, scale1));
  const b1 = b.param("b1", [hidden], "f32", uniform(hidden, 2, -scale1, scale1));
  const w2 = b.param("w2", [hidden, 10], "f32", uniform(hidden * 10, 3, -scale2, scale2));
  const b2 = b.param("b2", [10], "f32", uniform(10, 4, -scale2, scale2));
  const h = b.op("Relu", [b.op("Add", [b.op("MatMul", [x, w1], {}, { name: "fc1" }), b1])]);
  const logits = b.op("Add", [b.op("MatMul", [h, w2], {}, { name: "fc2" }), b2]);
  b.output("y", b.op("Softmax", [logits], { axis: -1 }, { name: "softmax" }));
  return {
    graph: b.build(),
    inputs: { x: { data: uniform(batch * 784, 5, 0, 1), shape: [batch, 784], dtype: "f32" } },
  };
}

// Run as a script (`deno run -A cli/demo_mlp.ts`, or by URL): compile, run, and print what
// ran where and the first row of class probabilities.
if (import.meta.main) {
  const { compile, explain } = await import("../mod.ts");
  const { graph, inputs } = demoMlp();
  // Not `using`: this file ships in the npm package, and Node 20 has no explicit resource
  // management syntax.
  const exe = await compile(graph);
  const { y } = await exe.run(inputs);
  const plan = await explain(exe);
  exe.dispose();
  console.log(`demo MLP 784 → 128 → 10, batch 8: ${plan.kernels.length} kernel(s)`);
  for (const k of plan.kernels) console.log(`  ${k.name} on ${k.backend}: ${k.ops.join(" + ")}`);
  const row = Array.from(y.data as Float32Array).slice(0, 10).map((p) => p.toFixed(3));
  console.log(`y[0] = [${row.join(", ")}]`);
}
