/**
 * Integer products that share their left operand, joined, as `joined_products.ts` joins MatMuls.
 * ONNX Runtime's `quantize_dynamic` writes each projection as MatMulInteger, which the importer
 * reads as an IntegerMatMul of the shifted activation by a constant shifted weight, a Cast to
 * f32, a Mul by that product's scale (the activation's scale times the weight's, a scalar known
 * in the run) and the bias Add. BERT-base int8's Q, K and V (once their activation is quantized
 * once, `shared_nodes.ts`) ran as three products of [128 × 768] by [768 × 768] through Dawn, 0.021
 * ms each, where the f32 form's joined product of [768 × 2304] takes 0.041.
 *
 * The join lays the weights side by side, multiplies the product's columns by a vector that
 * repeats each member's scale over its columns (`Concat` of `Expand`s, so every element keeps its
 * own scale), adds the biases side by side and slices along N: each output element is the same
 * exact integer sum, scaled and biased by the same operations, so results are unchanged to the
 * bit. The exact f32 chunks of K (`parts`) are the members' most, which keeps every chunk exact.
 *
 * @module
 */
import { type Graph, type Node, type NodeSpec, type ParamSpec, soleReader } from "../ir/graph.ts";
import {
  constantNode,
  constantOf,
  type JoinedConstant,
  rewriteJoins,
  sideBySide,
  slicesOf,
} from "./joined_products.ts";

/** One integer product of a join and the nodes that scale and bias it. */
interface Member {
  readonly product: Node;
  /** The constant weight [K, N] (a param's or a Constant node's). */
  readonly weight: JoinedConstant;
  readonly cast: Node;
  readonly mul: Node;
  /** The scalar scale the Mul multiplies by. */
  readonly scale: number;
  readonly add?: Node;
  /** The constant bias [N], where there is an Add. */
  readonly bias?: JoinedConstant;
}

/** `graph` with every set of integer products sharing their left operand joined. */
export function joinedIntegerProducts(graph: Graph): Graph {
  return rewriteJoins(graph, joinable(graph), {
    dropped: (m) => [
      m.product.id,
      m.cast.id,
      m.mul.id,
      ...(m.add ? [m.add.id] : []),
      ...constantNode(graph, m.weight.value),
      ...(m.bias ? constantNode(graph, m.bias.value) : []),
    ],
    replaced: (m) => [m.weight.value, ...(m.bias ? [m.bias.value] : [])],
    joined: (join, at) => joinedNodes(graph, join, at),
  });
}

/** The joined product, its scaling, bias and the members' slices (see the module note). */
function joinedNodes(
  graph: Graph,
  join: readonly Member[],
  { fresh, params }: { fresh: (base: string) => string; params: ParamSpec[] },
): NodeSpec[] {
  const name = (v: number) => graph.values[v].name;
  const a = name(join[0].product.inputs[0]);
  const weight = fresh(`${a}/joined_weight`);
  // A Constant, as the importer gives the weights: the product's decomposition reads its f32
  // form at compile (a param's it would convert in every run).
  const { data, shape, dtype } = sideBySide(graph, join.map((m) => m.weight), weight);
  const widths = join.map((m) => graph.values[m.weight.value].shape[1]);
  const most = (key: "parts" | "bound") => {
    const values = join.map((m) => m.product.attrs[key] as number | undefined);
    return values[0] === undefined ? {} : { [key]: Math.max(...(values as number[])) };
  };
  const product = fresh(`${a}/joined`), cast = fresh(`${a}/joined_f32`);
  const scales = fresh(`${a}/joined_scales`), scaled = fresh(`${a}/joined_scaled`);
  const attrs = { ...join[0].product.attrs, ...most("parts"), ...most("bound") };
  const nodes: NodeSpec[] = [
    {
      op: "Constant",
      inputs: [],
      outputs: [weight],
      attrs: { value: { data: data!, shape, dtype } },
    },
    {
      op: "IntegerMatMul",
      inputs: [a, weight],
      outputs: [product],
      attrs,
      name: join[0].product.name,
    },
    { op: "Cast", inputs: [product], outputs: [cast], attrs: { to: "f32" } },
  ];
  const expanded = join.map((m, i) => {
    const out = fresh(`${name(m.scale)}/columns`);
    nodes.push({
      op: "Expand",
      inputs: [name(m.scale)],
      outputs: [out],
      attrs: { shape: [widths[i]] },
    });
    return out;
  });
  nodes.push({ op: "Concat", inputs: expanded, outputs: [scales], attrs: { axis: 0 } });
  nodes.push({ op: "Mul", inputs: [cast, scales], outputs: [scaled], name: join[0].mul.name });
  let sum = scaled;
  if (join[0].add) {
    const bias = fresh(`${a}/joined_bias`);
    params.push(sideBySide(graph, join.map((m) => m.bias!), bias));
    sum = fresh(`${a}/joined_biased`);
    nodes.push({ op: "Add", inputs: [scaled, bias], outputs: [sum], name: join[0].add.name });
  }
  const parts = join.map((m) => ({
    product: m.product,
    weight: m.weight.value,
    last: m.add ?? m.mul,
  }));
  return [...nodes, ...slicesOf(graph, sum, parts)];
}

/**
 * The sets of integer products to join, each in graph order: two or more IntegerMatMuls of one A
 * by 2-D constant weights read by nothing else, each read only by a Cast to f32 that only a Mul
 * by a scalar reads, all with a bias Add of a 1-D f32 constant read by nothing else, or none.
 */
function joinable(graph: Graph): Member[][] {
  const byA = new Map<string, Member[]>();
  for (const n of graph.nodes) {
    const member = n.op === "IntegerMatMul" ? memberOf(graph, n) : undefined;
    if (!member) continue;
    const w = graph.values[member.weight.value];
    const key = `${n.inputs[0]} ${w.dtype} ${n.attrs.parts === undefined} ${
      n.attrs.bound === undefined
    }`;
    byA.set(key, [...byA.get(key) ?? [], member]);
  }
  return [...byA.values()].flatMap((members) => {
    const withBias = members.filter((m) => m.add), without = members.filter((m) => !m.add);
    return [withBias, without].filter((set) => set.length >= 2);
  });
}

/** `n` with the chain after it as a {@linkcode Member}, if it is one. */
function memberOf(graph: Graph, n: Node): Member | undefined {
  const [a, w] = n.inputs;
  const weight = constantOf(graph, w);
  const shapeW = graph.values[w].shape, shapeA = graph.values[a].shape;
  if (n.inputs.length !== 2 || !weight || shapeW.length !== 2) return undefined;
  if (shapeA.length < 2 || shapeA[shapeA.length - 1] !== shapeW[0]) return undefined;
  const cast = soleReader(graph, n.outputs[0]);
  if (cast?.op !== "Cast" || cast.attrs.to !== "f32") return undefined;
  const mul = soleReader(graph, cast.outputs[0]);
  const scale = mul?.op === "Mul" ? mul.inputs.find((v) => v !== cast.outputs[0]) : undefined;
  if (!mul || scale === undefined || mul.inputs.length !== 2) return undefined;
  const s = graph.values[scale];
  if (s.shape.length !== 0 || s.dtype !== "f32") return undefined;
  const add = soleReader(graph, mul.outputs[0]);
  const biasValue = add?.op === "Add" ? add.inputs.find((v) => v !== mul.outputs[0]) : undefined;
  const bias = biasValue === undefined ? undefined : constantOf(graph, biasValue);
  const biased = bias !== undefined && graph.values[biasValue!].dtype === "f32" &&
    graph.values[biasValue!].shape.join() === String(shapeW[1]);
  const member = { product: n, weight: { value: w, data: weight }, cast, mul, scale };
  return biased ? { ...member, add, bias: { value: biasValue!, data: bias } } : member;
}
