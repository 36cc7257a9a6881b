/**
 * Empty tensors are constants: a node whose every output has no elements computes nothing its
 * consumers could read, so it becomes an empty param before any backend sees it. Generated kernels
 * never face a zero-sized space (a MatMul with an empty batch divided by zero in wasm address
 * math and produced invalid WGSL), and no backend needs its own special case.
 *
 * @module
 */
import { allocate } from "../ir/dtype.ts";
import { boundaryOf, Graph, type NodeSpec, nodeSpecOf } from "../ir/graph.ts";
import { sizeOf } from "../ir/shape.ts";

/** `graph` with every all-empty node replaced by empty params (`graph` itself when there is none). */
export function foldEmpty(graph: Graph): Graph {
  const empty = (v: number) => sizeOf(graph.values[v].shape) === 0;
  const folded = graph.nodes.filter((n) => n.outputs.length > 0 && n.outputs.every(empty));
  if (folded.length === 0) return graph;
  const boundary = boundaryOf(graph);
  const { params } = boundary;
  const nodes: NodeSpec[] = [];
  for (const n of graph.nodes) {
    if (folded.includes(n)) {
      for (const v of n.outputs) {
        const { name, shape, dtype } = graph.values[v];
        params.push({ name, shape, dtype, data: allocate(dtype, 0) });
      }
      continue;
    }
    nodes.push(nodeSpecOf(graph, n));
  }
  return Graph.create({ ...boundary, nodes });
}
