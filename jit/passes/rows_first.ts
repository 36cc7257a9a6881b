/**
 * Rows picked before they are computed: a Gather or Slice of a product's output along its rows'
 * axes (batch or M axes), where nothing else reads the product's output (an Identity between
 * them aside), picks the product's left operand's rows instead, so only those are multiplied. A
 * generation step reads the last position's logits (`Gather(logits, -1, axis 1)`, which the
 * importer makes a Slice): the prefill's head then multiplies one row of 128, and a 4-bit head
 * is read packed by the one-row kernel instead of being unpacked to f32 for the tiled one (544 MB
 * on the GPU for Qwen2.5-0.5B's vocabulary of 151936).
 *
 * @module
 */
import {
  boundaryOf,
  freshNames,
  Graph,
  type Node,
  type NodeSpec,
  nodeSpecOf,
  producerOf,
  readCount,
} from "../ir/graph.ts";

/** Products whose right operand (a plain matrix) does not vary along A's rows. */
const PRODUCTS: ReadonlySet<string> = new Set(["MatMul", "BlockMatMul"]);

/** `graph` with each pick of a product's rows moved onto the product's left operand. */
export function rowsFirst(graph: Graph): Graph {
  const moves = movablePicks(graph);
  if (moves.size === 0) return graph;
  const dropped = new Set([...moves.values()].flatMap((m) => [m.product.id, ...m.between]));
  const name = (v: number) => graph.values[v].name;
  const fresh = freshNames(graph);
  const nodes: NodeSpec[] = [];
  for (const n of graph.nodes) {
    if (dropped.has(n.id)) continue;
    const p = moves.get(n.id)?.product;
    if (!p) {
      nodes.push(nodeSpecOf(graph, n));
      continue;
    }
    // Where the pick was: a Gather's index may be computed after the product.
    const rows = fresh(`${name(p.inputs[0])}/rows`);
    nodes.push({
      op: n.op,
      inputs: [name(p.inputs[0]), ...n.inputs.slice(1).map(name)],
      outputs: [rows],
      attrs: n.attrs,
      name: n.name,
    });
    nodes.push({
      op: p.op,
      inputs: [rows, ...p.inputs.slice(1).map(name)],
      outputs: [name(n.outputs[0])],
      attrs: p.attrs,
      name: p.name,
    });
  }
  return Graph.create({ ...boundaryOf(graph), nodes });
}

/** The axes along which `pick` (a Gather or a Slice) picks, or none for another op. */
function pickedAxes(pick: Node): number[] | undefined {
  if (pick.op === "Gather") return [Number(pick.attrs.axis ?? 0)];
  if (pick.op === "Slice" && Array.isArray(pick.attrs.axes)) return pick.attrs.axes.map(Number);
  return undefined;
}

/**
 * The picks that can move, each with its product and the Identity nodes between them: each value
 * from the product to the pick has the next node as its only reader (and is no graph output),
 * the pick's axes are row axes that A has itself, and B is a matrix.
 */
function movablePicks(graph: Graph): Map<number, { product: Node; between: number[] }> {
  const producer = (v: number) => producerOf(graph, v);
  const moves = new Map<number, { product: Node; between: number[] }>();
  for (const pick of graph.nodes) {
    const axes = pickedAxes(pick);
    if (!axes) continue;
    let value = pick.inputs[0], p = producer(value);
    const between: number[] = [];
    while (p?.op === "Identity" && readCount(graph, value) === 1) {
      between.push(p.id);
      value = p.inputs[0];
      p = producer(value);
    }
    if (!p || !PRODUCTS.has(p.op) || readCount(graph, value) !== 1) continue;
    const out = graph.values[value].shape;
    const a = graph.values[p.inputs[0]].shape, b = graph.values[p.inputs[1]].shape;
    const rows = axes.every((x) => {
      const axis = x < 0 ? x + out.length : x;
      return axis >= 0 && axis <= out.length - 2;
    });
    if (rows && a.length === out.length && b.length === 2) {
      moves.set(pick.id, { product: p, between });
    }
  }
  return moves;
}
