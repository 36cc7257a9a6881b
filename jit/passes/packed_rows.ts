/**
 * Products of few rows over A rounded to 8 bits a block (QuantizeRowBlocks, then a BlockMatMul of
 * `int8`: MatMulNBits of `accuracy_level` 4, a decode step's products) take A packed by its
 * producer instead (`PackRowBlocks`: its integers as bytes four to a word and a scale a block),
 * for a backend whose block products sum bytes in dot products as the words lie
 * (`DeviceProfile.packedRows`: WebGPU with `packed_4x8_integer_dot_product`). The rounding kernel
 * stays one kernel and stores a quarter of the bytes; each product's workgroups had packed A again
 * from its rounded f32 values, and the vocabulary's product of a 0.5B decoder took 40-42 µs on
 * the H200 where a hand-written kernel over the packed words took 34 (`bench/gemv_bytes.ts`).
 * A product of one row and fewer outputs (a decode layer's) rounds A itself instead (`rounds`,
 * see {@linkcode ROUNDING_OUTPUTS}): no kernel rounds or packs A before it, and a normalization
 * or a gate computing A runs inside it (`BlockProduct.prologue`), so a layer takes fewer
 * dispatches.
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

/**
 * Outputs up to which a product rounds A itself (`rounds`) rather than reading it packed: each
 * of its workgroups rounds and packs the row's blocks again, a small share of a decode layer's
 * product (a few hundred workgroups at most), where it saves the packing's dispatch and lets a
 * normalization or a gate before it run inside the product (a decode step is bound by the host's
 * dispatches, `bench/REPORT-generate.md`). The vocabulary's product (151936 outputs, 2374
 * workgroups) read A packed by its producer in 34-35 µs on the H200, packing in each workgroup
 * 41-43 (`bench/gemv_bytes.ts`).
 */
export const ROUNDING_OUTPUTS = 32768;

/** Options of {@linkcode packedRows}. */
export interface PackedRowsOptions {
  /** Outputs up to which a product rounds A itself (default {@linkcode ROUNDING_OUTPUTS}). */
  readonly roundsUpTo?: number;
  /** Whether the other products read A packed (default true); else they stay as they are. */
  readonly packs?: boolean;
}

/** `given` with its few-row products over A rounded to 8 bits reading A packed or rounding it. */
export function packedRows(given: Graph, options: PackedRowsOptions = {}): Graph {
  const roundsUpTo = options.roundsUpTo ?? ROUNDING_OUTPUTS;
  const fresh = freshNames(given);
  const rewrites = new Map<number, NodeSpec[]>();
  // Products of one rounded A (through one view, or none) share its rows and its packing.
  const rowsOf = new Map<string, string>(), packings = new Map<string, [string, string]>();
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
    const m = sizeOf(a.shape.slice(0, -1));
    if (rounded?.op !== "QuantizeRowBlocks" || Number(rounded.attrs.block) !== block) continue;
    if (!nativeBlockMatMul(m) || block % 32 || k % block) continue;
    // One row (a decode step's) rounds: every workgroup's outputs share it, as a kernel packing
    // its own A needs.
    const rounds = m === 1 && given.values[n.outputs[0]].shape.at(-1)! <= roundsUpTo;
    if (!rounds && options.packs === false) continue;
    const spec = nodeSpecOf(given, n), key = `${n.inputs[0]} ${block}`;
    const nodes: NodeSpec[] = [];
    if (!rowsOf.has(key)) {
      const picked = rowsBefore(given, rounded, rows, fresh);
      rowsOf.set(key, picked.name);
      nodes.push(...picked.nodes);
    }
    const x = rowsOf.get(key)!;
    if (rounds) {
      nodes.push({
        ...spec,
        inputs: [x, ...spec.inputs.slice(1)],
        attrs: { ...spec.attrs, rounds: 1 },
      });
    } else {
      if (!packings.has(key)) {
        const outputs: [string, string] = [fresh(`${a.name}/words`), fresh(`${a.name}/scales`)];
        packings.set(key, outputs);
        nodes.push({ op: "PackRowBlocks", inputs: [x], outputs, attrs: { block } });
      }
      const inputs = [...packings.get(key)!, ...spec.inputs.slice(1)];
      nodes.push({ ...spec, inputs, attrs: { ...spec.attrs, packed: 1 } });
    }
    rewrites.set(n.id, nodes);
  }
  if (rewrites.size === 0) return given;
  const nodes = given.nodes.flatMap((n) => rewrites.get(n.id) ?? [nodeSpecOf(given, n)]);
  // A rounding or a view no node reads any more is left unread, and dropped.
  return withoutUnread(Graph.create({ ...boundaryOf(given), nodes }));
}

/**
 * The value of the rows of `rounded`'s input (a QuantizeRowBlocks') that `view` picks where one
 * lies between (a Slice of them, `nodes`), else that input itself.
 */
function rowsBefore(
  graph: Graph,
  rounded: Node,
  view: Node | undefined,
  fresh: (base: string) => string,
): { name: string; nodes: NodeSpec[] } {
  const x = graph.values[rounded.inputs[0]].name;
  if (!view) return { name: x, nodes: [] };
  const pick = nodeSpecOf(graph, view), picked = fresh(`${x}/rows`);
  return {
    name: picked,
    nodes: [{ ...pick, inputs: [x, ...pick.inputs.slice(1)], outputs: [picked] }],
  };
}

/** Whether Slice `n` keeps its input's last axis whole. */
function sameK(graph: Graph, n: Node): boolean {
  return graph.values[n.outputs[0]].shape.at(-1) === graph.values[n.inputs[0]].shape.at(-1);
}
