/**
 * How much work a graph is: operation and byte counts per node, summed. Cost models turn these
 * into time with per-machine rates.
 *
 * @module
 */
import type { Workload } from "../runtime/backend.ts";
import { byteSize } from "../ir/dtype.ts";
import type { Graph, Node } from "../ir/graph.ts";
import { sizeOf } from "../ir/shape.ts";
import { KilnError, shown } from "../support/errors.ts";

/** Operations one node performs (multiply-adds count as two). */
export function nodeFlops(graph: Graph, node: Node): number {
  const out = graph.values[node.outputs[0]];
  const inp = node.inputs.length ? graph.values[node.inputs[0]] : out;
  switch (node.op) {
    case "MatMul":
    case "Gemm": {
      const k = inp.shape[inp.shape.length - 1] ?? 1;
      return 2 * sizeOf(out.shape) * k;
    }
    case "Conv": {
      const w = graph.values[node.inputs[1]];
      return 2 * sizeOf(out.shape) * sizeOf(w.shape.slice(1));
    }
    default:
      return Math.max(sizeOf(out.shape), sizeOf(inp.shape));
  }
}

/** The {@linkcode Workload} of a whole graph. */
export function estimateWork(graph: Graph): Workload {
  // By shape, as compile tells a graph: one of another copy of kiln's modules counts.
  if (!Array.isArray((graph as Partial<Graph> | null)?.nodes)) {
    throw new KilnError(`estimateWork takes a Graph, got ${shown(graph)}`, {
      code: "bad-input",
      fix: "pass a built graph (GraphBuilder.build(), importOnnx, or OnnxModel.graph())",
    });
  }
  const bytesOf = (id: number) => sizeOf(graph.values[id].shape) * byteSize(graph.values[id].dtype);
  let flops = 0, bytes = 0;
  for (const n of graph.nodes) {
    flops += nodeFlops(graph, n);
    for (const v of [...n.inputs, ...n.outputs]) bytes += bytesOf(v);
  }
  const boundary = [...graph.inputs, ...graph.params, ...graph.outputs];
  return { flops, bytes, hostBytes: boundary.reduce((s, b) => s + bytesOf(b.value), 0) };
}
