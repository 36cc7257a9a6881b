/**
 * Scalar scales moved past the products they feed: `MatMul(q · s₁, kᵀ · s₂)` becomes
 * `MatMul(q, kᵀ) · (s₁ · s₂)` (and a division by a scalar the same). Exporters write attention's
 * scale in several places — on the scores, on the queries, or split as √s on both queries and
 * keys (PyTorch's scaled_dot_product_attention, which Hugging Face's BERT and ViT export) — and
 * fusion found the attention group only where it was on the scores: a scale before the product
 * was a kernel of its own for each operand. After the move it sits in the scores' epilogue, and
 * the three kernels of the group run as one. A scale of a power of two moves exactly; any other
 * regroups the rounding of a product (within an ulp or two of each score), so in f16, whose ulp
 * is coarse, only powers of two move.
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
import type { HostTensor } from "../ir/host_tensor.ts";
import { fromF16Bits, fromNumbers } from "../ir/dtype.ts";

/** Float dtypes a scale moves for. */
const FLOATS: ReadonlySet<string> = new Set(["f32", "f16"]);

/** `graph` with each scalar scale of a MatMul's operand moved onto its product. */
export function scalesOut(graph: Graph): Graph {
  const plans = movableScales(graph);
  if (plans.size === 0) return graph;
  const dropped = new Set([...plans.values()].flatMap((p) => p.scales.map((s) => s.id)));
  const name = (v: number) => graph.values[v].name;
  const fresh = freshNames(graph);
  const nodes: NodeSpec[] = [];
  for (const n of graph.nodes) {
    if (dropped.has(n.id)) continue;
    const plan = plans.get(n.id);
    if (!plan) {
      nodes.push(nodeSpecOf(graph, n));
      continue;
    }
    const out = name(n.outputs[0]), dtype = graph.values[n.outputs[0]].dtype;
    const product = fresh(`${out}/unscaled`), factor = fresh(`${out}/scale`);
    nodes.push({ ...nodeSpecOf(graph, n), inputs: plan.operands.map(name), outputs: [product] });
    const value: HostTensor = { data: fromNumbers(dtype, [plan.factor]), shape: [], dtype };
    nodes.push({ op: "Constant", inputs: [], outputs: [factor], attrs: { value }, name: n.name });
    nodes.push({ op: "Mul", inputs: [product, factor], outputs: [out], name: n.name });
  }
  return Graph.create({ ...boundaryOf(graph), nodes });
}

/** A MatMul's operands with their scales taken off, the scale nodes, and their product. */
interface ScalePlan {
  readonly operands: number[];
  readonly scales: Node[];
  readonly factor: number;
}

/**
 * The MatMuls with an operand scaled by a scalar constant (a Mul or Div whose only reader is the
 * MatMul, its scale a one-element Constant), each with what moves.
 */
function movableScales(graph: Graph): Map<number, ScalePlan> {
  const producer = (v: number) => producerOf(graph, v);
  const constant = (v: number): number | undefined => {
    const p = producer(v);
    const t = p?.op === "Constant" ? p.attrs.value as HostTensor | undefined : undefined;
    if (!t || t.data.length !== 1) return undefined;
    // An f16 constant holds its bits; integer scales are left alone.
    if (t.dtype === "f16") return fromF16Bits(t.data[0] as number);
    return t.dtype === "f32" || t.dtype === "f64" ? t.data[0] as number : undefined;
  };
  const plans = new Map<number, ScalePlan>();
  for (const n of graph.nodes) {
    const dtype = graph.values[n.outputs[0]].dtype;
    if (n.op !== "MatMul" || !FLOATS.has(dtype)) continue;
    const operands = [...n.inputs], scales: Node[] = [];
    let factor = 1;
    for (const [i, v] of n.inputs.entries()) {
      const s = producer(v);
      if (!s || (s.op !== "Mul" && s.op !== "Div") || readCount(graph, v) !== 1) continue;
      // Mul by a scalar on either side; Div of the operand by a scalar.
      const side = s.op === "Mul" && constant(s.inputs[0]) !== undefined ? 0 : 1;
      const c = constant(s.inputs[side]);
      const kept = s.inputs[1 - side];
      if (c === undefined || !Number.isFinite(c) || c === 0 || (s.op === "Div" && side === 0)) {
        continue;
      }
      // In f16 a product rounds coarsely enough that only an exact move is made.
      if (dtype !== "f32" && !Number.isInteger(Math.log2(Math.abs(c)))) continue;
      if (graph.values[kept].shape.join() !== graph.values[v].shape.join()) continue;
      operands[i] = kept;
      scales.push(s);
      factor *= s.op === "Div" ? 1 / c : c;
    }
    if (scales.length) plans.set(n.id, { operands, scales, factor });
  }
  return plans;
}
