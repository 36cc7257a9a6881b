/**
 * Nodes that compute the same thing, computed once: a node with the op, attributes and inputs of
 * an earlier one is dropped and its readers read the earlier node's outputs (common
 * subexpression elimination). Exporters repeat work: ONNX Runtime's `quantize_dynamic` gives each
 * MatMulInteger its own DynamicQuantizeLinear, so BERT-base's Q, K and V projections quantize one
 * activation three times, three range reductions and three stored copies a layer. Ops are
 * functions of their inputs and attributes (random ops are drawn inputs by now, and a custom op's
 * reference is such a function), so results are unchanged to the bit.
 *
 * @module
 */
import { boundaryOf, Graph, type Node, nodeSpecOf } from "../ir/graph.ts";
import { attrsText } from "../ir/canonical.ts";
import { RANDOM_OPS } from "./random_inputs.ts";

/** `graph` with every repeated node dropped (`graph` itself when none repeats). */
export function sharedNodes(graph: Graph): Graph {
  // Value id → the earlier node's output that it repeats.
  const same = new Map<number, number>();
  const first = new Map<string, Node>();
  const dropped = new Set<number>();
  const exposed = new Set(graph.outputs.map((o) => o.value));
  const read = (v: number) => same.get(v) ?? v;
  for (const n of graph.nodes) {
    if (RANDOM_OPS.has(n.op)) continue;
    const key = `${n.op}(${attrsText(n.attrs, tensorKey)})[${n.inputs.map(read).join(",")}]`;
    const earlier = first.get(key);
    if (!earlier) {
      first.set(key, n);
      continue;
    }
    // A graph output keeps its own value (two outputs are never one value).
    if (n.outputs.some((v) => exposed.has(v))) continue;
    dropped.add(n.id);
    n.outputs.forEach((v, i) => same.set(v, earlier.outputs[i]));
  }
  if (dropped.size === 0) return graph;
  const name = (v: number) => graph.values[read(v)].name;
  const nodes = graph.nodes.filter((n) => !dropped.has(n.id)).map((n) =>
    nodeSpecOf(graph, n, name)
  );
  return Graph.create({ ...boundaryOf(graph), nodes });
}

/** Tensor attributes by identity: a Constant's weights are not read, let alone hashed. */
const tensorIds = new WeakMap<object, number>();
let tensorCount = 0;

/**
 * A tensor attribute's key: its identity (two copies of one constant stay two nodes; digesting
 * BERT-base int8's attributes' bytes cost its compile 0.26 s).
 */
function tensorKey(t: object): string {
  let id = tensorIds.get(t);
  if (id === undefined) tensorIds.set(t, id = tensorCount++);
  return `#${id}`;
}
