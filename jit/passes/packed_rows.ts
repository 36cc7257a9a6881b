/**
 * Products of few rows over A rounded to 8 bits a block (QuantizeRowBlocks, then a BlockMatMul of
 * `int8`: MatMulNBits of `accuracy_level` 4, a decode step's products) take A packed by its
 * producer instead (`PackRowBlocks`: its integers as bytes four to a word and a scale a block),
 * for a backend whose block products sum bytes in dot products as the words lie
 * (`DeviceProfile.packedRows`: WebGPU with `packed_4x8_integer_dot_product`). The rounding kernel
 * stays one kernel and stores a quarter of the bytes; each product's workgroups had packed A again
 * from its rounded f32 values, and the vocabulary's product of a 0.5B decoder took 40-42 µs on
 * the H200 where a hand-written kernel over the packed words took 34 (`bench/gemv_bytes.ts`).
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
} from "../ir/graph.ts";
import { sizeOf } from "../ir/shape.ts";
import { nativeBlockMatMul } from "../ops/block_matmul.ts";
import { withoutUnread } from "./byte_products.ts";

/** `given` with its few-row products over A rounded to 8 bits reading A packed (see the note). */
export function packedRows(given: Graph): Graph {
  const fresh = freshNames(given);
  const rewrites = new Map<number, NodeSpec[]>();
  // Products of one rounded A (through one view, or none) share its packing: its words, scales.
  const packings = new Map<string, [string, string]>();
  for (const n of given.nodes) {
    if (n.op !== "BlockMatMul" || n.attrs.int8 !== 1 || n.attrs.packed || n.attrs.bits !== 4) {
      continue;
    }
    // The rows a generation's last step picks (`rows_first.ts`) may lie between: a Slice that
    // keeps K picks the same rows of A before its rounding (a row's blocks are its own).
    const view = producerOf(given, n.inputs[0]);
    const rows = view?.op === "Slice" && sameK(given, view) ? view : undefined;
    const rounded = producerOf(given, (rows ?? n).inputs[0]);
    const block = Number(n.attrs.block), a = given.values[n.inputs[0]], k = a.shape.at(-1)!;
    if (rounded?.op !== "QuantizeRowBlocks" || Number(rounded.attrs.block) !== block) continue;
    if (!nativeBlockMatMul(sizeOf(a.shape.slice(0, -1))) || block % 32 || k % block) continue;
    const spec = nodeSpecOf(given, n), key = `${n.inputs[0]} ${block}`;
    const nodes: NodeSpec[] = [];
    if (!packings.has(key)) {
      packings.set(key, [fresh(`${a.name}/words`), fresh(`${a.name}/scales`)]);
      nodes.push(...packing(given, rounded, rows, packings.get(key)!, fresh));
    }
    const inputs = [...packings.get(key)!, ...spec.inputs.slice(1)];
    nodes.push({ ...spec, inputs, attrs: { ...spec.attrs, packed: 1 } });
    rewrites.set(n.id, nodes);
  }
  if (rewrites.size === 0) return given;
  const nodes = given.nodes.flatMap((n) => rewrites.get(n.id) ?? [nodeSpecOf(given, n)]);
  // A rounding no other node reads is left unread, and dropped.
  return withoutUnread(Graph.create({ ...boundaryOf(given), nodes }));
}

/**
 * The nodes packing the input of `rounded` (a QuantizeRowBlocks), through the rows `view` picks
 * where one lies between, into `outputs` (words and scales).
 */
function packing(
  graph: Graph,
  rounded: Node,
  view: Node | undefined,
  outputs: [string, string],
  fresh: (base: string) => string,
): NodeSpec[] {
  const x = graph.values[rounded.inputs[0]].name, attrs = { block: rounded.attrs.block };
  if (!view) return [{ op: "PackRowBlocks", inputs: [x], outputs, attrs }];
  const pick = nodeSpecOf(graph, view), picked = fresh(`${x}/rows`);
  return [
    { ...pick, inputs: [x, ...pick.inputs.slice(1)], outputs: [picked] },
    { op: "PackRowBlocks", inputs: [picked], outputs, attrs },
  ];
}

/** Whether Slice `n` keeps its input's last axis whole. */
function sameK(graph: Graph, n: Node): boolean {
  return graph.values[n.outputs[0]].shape.at(-1) === graph.values[n.inputs[0]].shape.at(-1);
}
