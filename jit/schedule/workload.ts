/**
 * How much work a graph is: operation and byte counts per node, summed. Cost models turn these
 * into time with per-machine rates.
 *
 * @module
 */
import type { Workload } from "../runtime/backend.ts";
import { byteSize } from "../ir/dtype.ts";
import { checkGraph, type Graph, type Node } from "../ir/graph.ts";
import { sizeOf } from "../ir/shape.ts";

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
  checkGraph(graph, "estimateWork");
  const bytesOf = (id: number) => sizeOf(graph.values[id].shape) * byteSize(graph.values[id].dtype);
  let flops = 0, bytes = 0;
  for (const n of graph.nodes) {
    flops += nodeFlops(graph, n);
    for (const v of [...n.inputs, ...n.outputs]) bytes += bytesOf(v);
  }
  const boundary = [...graph.inputs, ...graph.params, ...graph.outputs];
  return { flops, bytes, hostBytes: boundary.reduce((s, b) => s + bytesOf(b.value), 0) };
}
