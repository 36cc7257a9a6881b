/**
 * Products that share their left operand, joined: MatMul nodes reading the same A by constant
 * weights [K, N_i] that nothing else reads, each followed by an Add of a constant bias [N_i] (or
 * none of them), become one MatMul by the weights laid side by side along N, plus one Add of the
 * biases, whose output the old products' readers take through Slices along N. Each output
 * element is the same sum in the same order: results are unchanged to the bit. A transformer
 * layer's Q, K and V projections as Hugging Face's BERT and ViT export them are three products
 * of [tokens × 768] by [768 × 768]: three dispatches on a GPU whose tiles each fill a third of
 * what one product of [768 × 2304] fills. The joined weights are a copy (the caller's graph keeps
 * its own), so `compile` joins only where a GPU may run the plan: on 2 CPU cores a 12-layer
 * ViT-shaped encoder ran 442-473 ms unjoined and 435-466 joined, within noise.
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
  type ParamSpec,
  producerOf,
  readCount,
  soleReader,
} from "../ir/graph.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { sizeOf } from "../ir/shape.ts";
import { handOver } from "../ir/hand_over.ts";
import { allocate } from "../ir/dtype.ts";

/** One product of a join: its MatMul, its bias Add if any, and their constant operands. */
interface Member {
  readonly product: Node;
  readonly weight: JoinedConstant;
  readonly add?: Node;
  readonly bias?: JoinedConstant;
}

/** `graph` with every set of products sharing their left operand joined (see the module note). */
export function joinedProducts(graph: Graph): Graph {
  const name = (v: number) => graph.values[v].name;
  return rewriteJoins(graph, joinable(graph), {
    dropped: (m) => [
      m.product.id,
      ...(m.add ? [m.add.id] : []),
      ...constantNode(graph, m.weight.value),
      ...(m.bias ? constantNode(graph, m.bias.value) : []),
    ],
    replaced: (m) => [m.weight.value, ...(m.bias ? [m.bias.value] : [])],
    joined: (join, { fresh, params }) => {
      const a = name(join[0].product.inputs[0]);
      const weight = fresh(`${a}/joined_weight`);
      params.push(sideBySide(graph, join.map((m) => m.weight), weight));
      let sum = fresh(`${a}/joined`);
      const nodes: NodeSpec[] = [
        { op: "MatMul", inputs: [a, weight], outputs: [sum], name: join[0].product.name },
      ];
      if (join[0].add) {
        const bias = fresh(`${a}/joined_bias`);
        params.push(sideBySide(graph, join.map((m) => m.bias!), bias));
        const biased = fresh(`${a}/joined_biased`);
        nodes.push({ op: "Add", inputs: [sum, bias], outputs: [biased], name: join[0].add.name });
        sum = biased;
      }
      const parts = join.map((m) => ({ product: m.product, weight: m.weight.value, last: m.add }));
      return [...nodes, ...slicesOf(graph, sum, parts)];
    },
  });
}

/** What a join rewrite drops, replaces and adds for its sets of members (see `rewriteJoins`). */
export interface JoinRewrite<M> {
  /** Nodes a member's join drops. */
  dropped(member: M): number[];
  /** Params a member's join replaces. */
  replaced(member: M): number[];
  /** The join's nodes, put where its first product was; the params they read added to `params`. */
  joined(
    join: readonly M[],
    at: { fresh: (base: string) => string; params: ParamSpec[] },
  ): NodeSpec[];
}

/** `graph` with each of `joins` (sets of members, each led by a product) rewritten by `how`. */
export function rewriteJoins<M extends { readonly product: Node }>(
  graph: Graph,
  joins: readonly (readonly M[])[],
  how: JoinRewrite<M>,
): Graph {
  if (joins.length === 0) return graph;
  const fresh = freshNames(graph);
  const dropped = new Set(joins.flat().flatMap(how.dropped));
  const replaced = new Set(joins.flat().flatMap(how.replaced));
  const boundary = boundaryOf(graph);
  // boundaryOf lists the params in the graph's order.
  const params = boundary.params.filter((_, i) => !replaced.has(graph.params[i].value));
  const nodes: NodeSpec[] = [];
  const first = new Map(joins.map((j) => [j[0].product.id, j]));
  for (const n of graph.nodes) {
    const join = first.get(n.id);
    if (join) nodes.push(...how.joined(join, { fresh, params }));
    if (!dropped.has(n.id)) nodes.push(nodeSpecOf(graph, n));
  }
  return Graph.create({ ...boundary, params, nodes });
}

/**
 * The Slices of a joined `sum` along N that give each member's readers its columns: under the
 * name of the member's `last` node's output (its product's where none), its weight's width.
 */
export function slicesOf(
  graph: Graph,
  sum: string,
  members: readonly { product: Node; weight: number; last?: Node }[],
): NodeSpec[] {
  let at = 0;
  return members.map((m) => {
    const width = graph.values[m.weight].shape[1];
    const out = graph.values[(m.last ?? m.product).outputs[0]].name;
    const attrs = { starts: [at], ends: [at + width], axes: [-1] };
    at += width;
    return { op: "Slice", inputs: [sum], outputs: [out], attrs, name: m.product.name };
  });
}

/**
 * The sets of products to join, each in graph order: two or more MatMuls of one A (of K
 * columns, f32 or f16) by 2-D constant weights of K rows read by nothing else, all with a bias
 * Add of a 1-D constant read by nothing else, or none. A constant is a param's data or a
 * Constant node's: `torch.onnx.export` writes Hugging Face's Linear biases as Constant nodes,
 * which left BERT-base's and ViT's Q, K and V biases apart, each added by a kernel of its own
 * that also laid its heads out (24 kernels of BERT-base).
 */
function joinable(graph: Graph): Member[][] {
  const byA = new Map<number, Member[]>();
  for (const n of graph.nodes) {
    if (n.op !== "MatMul") continue;
    const [a, w] = n.inputs;
    const [ta, tw] = [graph.values[a], graph.values[w]];
    const float = ta.dtype === "f32" || ta.dtype === "f16";
    const weight = constantOf(graph, w);
    if (!float || tw.dtype !== ta.dtype || tw.shape.length !== 2 || !weight) continue;
    if (ta.shape.length < 2 || ta.shape[ta.shape.length - 1] !== tw.shape[0]) continue;
    const out = n.outputs[0];
    const reader = soleReader(graph, out);
    const b = reader?.op === "Add" ? reader.inputs.find((v) => v !== out) : undefined;
    const bias = b === undefined ? undefined : constantOf(graph, b);
    const product = { product: n, weight: { value: w, data: weight } };
    const biased = b !== undefined && bias !== undefined &&
      graph.values[b].shape.join() === String(tw.shape[1]) && graph.values[b].dtype === ta.dtype;
    const member: Member = biased
      ? { ...product, add: reader, bias: { value: b, data: bias } }
      : product;
    byA.set(a, [...byA.get(a) ?? [], member]);
  }
  return [...byA.values()].flatMap((members) => {
    const withBias = members.filter((m) => m.add), without = members.filter((m) => !m.add);
    return [withBias, without].filter((set) => set.length >= 2);
  });
}

/** The typed arrays of the constants a join lays side by side (f32, f16's bits, integers). */
export type Weights = Float32Array | Uint16Array | Int16Array | Int8Array | Uint8Array | Int32Array;

/** A constant of a join: its value and its data. */
export interface JoinedConstant {
  /** The value id. */
  readonly value: number;
  /** Its data. */
  readonly data: Weights;
}

/**
 * The data of `v` where it is a constant read once: a param's, or a Constant node's `value`.
 * (Typed arrays only: a weight the importer folded, its bytes never read here.)
 */
export function constantOf(graph: Graph, v: number): Weights | undefined {
  if (readCount(graph, v) !== 1) return undefined;
  const param = graph.params.find((p) => p.value === v);
  const node = producerOf(graph, v);
  const data = param
    ? param.data
    : node?.op === "Constant"
    ? (node.attrs.value as HostTensor | undefined)?.data
    : undefined;
  return data && sizeOf(graph.values[v].shape) === data.length ? data as Weights : undefined;
}

/** The Constant node that makes `v`, as a list of its id (empty where `v` is a param). */
export function constantNode(graph: Graph, v: number): number[] {
  const node = producerOf(graph, v);
  return node?.op === "Constant" ? [node.id] : [];
}

/**
 * Joined weights by the arrays they were joined from (the first one's, then the list): auto's
 * compile and the device compile it tries first rewrite one graph apart (int64 lowered for
 * different backends) but join the same weights; BERT-base's copy took 47 ms each time on the
 * H200 host, and each executable held its own.
 */
const JOINED = new WeakMap<Weights, { parts: readonly Weights[]; data: WeakRef<Weights> }[]>();

/**
 * The constants `values` (weights [K, N_i] or biases [N_i]) laid side by side along their last
 * axis as a param named `name`, its data handed to the graph (the same array as an earlier join
 * of the same arrays, while that one lives).
 */
export function sideBySide(
  graph: Graph,
  values: readonly JoinedConstant[],
  name: string,
): ParamSpec {
  const parts = values.map((c) => ({ data: c.data, shape: graph.values[c.value].shape }));
  const matrix = parts[0].shape.length === 2, rows = matrix ? parts[0].shape[0] : 1;
  const width = parts.reduce((s, p) => s + p.shape[p.shape.length - 1], 0);
  const dtype = graph.values[values[0].value].dtype;
  const shape = matrix ? [rows, width] : [width];
  const sources = parts.map((p) => p.data);
  const earlier = JOINED.get(sources[0]) ?? [];
  const same = earlier.find((e) =>
    e.parts.length === sources.length && e.parts.every((p, i) => p === sources[i])
  )?.data.deref();
  if (same) return { name, shape, dtype, data: same };
  const data = allocate(dtype, rows * width) as Weights;
  let at = 0;
  for (const p of parts) {
    const n = p.shape[p.shape.length - 1];
    for (let r = 0; r < rows; r++) data.set(p.data.subarray(r * n, (r + 1) * n), r * width + at);
    at += n;
  }
  const live = earlier.filter((e) => e.data.deref() !== undefined);
  JOINED.set(sources[0], [...live, { parts: sources, data: new WeakRef(data) }]);
  return { name, shape, dtype, data: handOver(data) };
}
