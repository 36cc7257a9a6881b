/**
 * Sibling products merged before import: MatMulNBits nodes that read the same A with the same K,
 * bits, block size, accuracy level and zero-point form, their packed weights, scales and zero
 * points initializers, become one MatMulNBits over the weights concatenated along N (all three
 * are N-major, so the concatenation is a copy) and a Split into the original outputs. A decoder
 * layer's Q, K and V projections, and its gate and up, are then one product each: one kernel of
 * their outputs together, where a token step ran three, and a thread's share three times larger.
 *
 * @module
 */
import {
  type AttributeProto,
  int,
  isExternal,
  type ModelProto,
  type NodeProto,
  protoOf,
  type TensorProto,
} from "../wire/proto.ts";
import { sizeOf } from "../../jit/ir/shape.ts";

/** The merged form of each model, made once however often it is imported. */
const merged = new WeakMap<ModelProto, ModelProto>();

/** `model` with its sibling MatMulNBits merged (itself where it has none). */
export function mergeSiblingProducts(model: ModelProto): ModelProto {
  let out = merged.get(model);
  if (!out) merged.set(model, out = withMerged(model));
  return out;
}

function withMerged(model: ModelProto): ModelProto {
  const g = model.graph, inits = new Map(g.initializer.map((t) => [t.name ?? "", t]));
  const groups = new Map<string, NodeProto[]>();
  for (const n of g.node) {
    const key = siblingKey(n, inits);
    if (key !== undefined) groups.set(key, [...groups.get(key) ?? [], n]);
  }
  const merges = [...groups.values()].filter((nodes) => nodes.length > 1);
  if (!merges.length) return model;
  const initializer = [...g.initializer], node: NodeProto[] = [], opset = splitOpset(model);
  const first = new Map(merges.map((nodes) => [nodes[0], nodes]));
  const gone = new Set(merges.flat());
  for (const n of g.node) {
    const nodes = first.get(n);
    if (nodes) node.push(...mergedNodes(nodes, inits, initializer, opset));
    else if (!gone.has(n)) node.push(n);
  }
  return { ...model, graph: { ...g, node, initializer } };
}

/** Integer attribute `name` of `n`, if set. */
const ints = (n: NodeProto, name: string) => {
  const i = n.attribute?.find((a) => a.name === name)?.i;
  return i === undefined ? undefined : int(i);
};

/**
 * What siblings must share to merge, or `undefined` for a node that cannot: a MatMulNBits with
 * its N, A, B, scales and optionally zero points (no g_idx or bias), its tables initializers of
 * raw data (one without N is left to its converter's error).
 */
function siblingKey(n: NodeProto, inits: ReadonlyMap<string, TensorProto>): string | undefined {
  if (n.opType !== "MatMulNBits" || n.domain !== "com.microsoft") return undefined;
  const ins = n.input.filter((i) => i !== "");
  const shaped = ints(n, "N") !== undefined;
  if (!shaped || ins.length < 3 || n.input.length > 4 || n.output.length !== 1) return undefined;
  const tables = ins.slice(1).map((i) => inits.get(i));
  if (tables.some((t) => !t?.rawData || isExternal(t))) return undefined;
  const attrs = ["K", "bits", "block_size", "accuracy_level"].map((a) => ints(n, a) ?? "");
  return [ins[0], ...attrs, ins.length, ...tables.map((t) => t!.dataType)].join("|");
}

/** The default domain's opset: Split takes its sizes as an input from 13. */
function splitOpset(model: ModelProto): number {
  const own = model.opsetImport?.find((o) => !o.domain || o.domain === "ai.onnx");
  return own?.version === undefined ? 13 : int(own.version);
}

/** One MatMulNBits over the siblings' tables concatenated, and the Split into their outputs. */
function mergedNodes(
  nodes: readonly NodeProto[],
  inits: ReadonlyMap<string, TensorProto>,
  initializer: TensorProto[],
  opset: number,
): NodeProto[] {
  const name = `${nodes[0].name ?? nodes[0].output[0]}.siblings`;
  const widths = nodes.map((n) => ints(n, "N")!);
  const tables = nodes[0].input.slice(1).filter((i) => i !== "").map((_, j) => {
    const parts = nodes.map((n) => inits.get(n.input[j + 1])!);
    // B keeps its trailing axes (rows of N); the tables are flat.
    const rows = parts.reduce((s, t) => s + int(t.dims?.[0]), 0);
    const dims = j === 0
      ? [rows, ...(parts[0].dims ?? []).slice(1)]
      : [parts.reduce((s, t) => s + size(t), 0)];
    const t = joined(parts, { name: `${name}.${j}`, dataType: parts[0].dataType, dims });
    initializer.push(t);
    return t.name!;
  });
  const total = widths.reduce((s, w) => s + w, 0), out = `${name}.out`;
  const attribute: AttributeProto[] = nodes[0].attribute!.map((a) =>
    a.name === "N" ? { ...a, i: total } : a
  );
  const product: NodeProto = {
    ...nodes[0],
    name,
    input: [nodes[0].input[0], ...tables],
    output: [out],
    attribute,
  };
  const sizes = `${name}.split`;
  const split: NodeProto = {
    name: `${name}.split`,
    opType: "Split",
    input: opset >= 13 ? [out, sizes] : [out],
    output: nodes.map((n) => n.output[0]),
    attribute: [
      { name: "axis", type: 2, i: -1 },
      ...(opset >= 13 ? [] : [{ name: "split", type: 7, ints: widths }]),
    ],
  };
  if (opset >= 13) {
    const given = { data: Int32Array.from(widths), shape: [widths.length], dtype: "i32" as const };
    initializer.push(protoOf(sizes, given, true));
  }
  return [product, split];
}

/** Elements of `t`. */
function size(t: TensorProto): number {
  return sizeOf((t.dims ?? []).map(int));
}

/**
 * Concatenations already made, by their first part and the parts' names: a model imported again
 * (a generation's step model shares its decoder's initializers) gets the same initializer, so
 * its decoded tensor, graphs and device uploads are shared too.
 */
const concatenated = new WeakMap<TensorProto, Map<string, TensorProto>>();

/** `head` with the raw data of `parts`, one after another. */
function joined(parts: readonly TensorProto[], head: TensorProto): TensorProto {
  const made = concatenated.get(parts[0]) ?? new Map<string, TensorProto>();
  concatenated.set(parts[0], made);
  const key = [head.name, ...parts.map((t) => t.name)].join("\n");
  const hit = made.get(key);
  if (hit) return hit;
  const rawData = new Uint8Array(parts.reduce((s, p) => s + p.rawData!.length, 0));
  let at = 0;
  for (const p of parts) {
    rawData.set(p.rawData!, at);
    at += p.rawData!.length;
  }
  const t = { ...head, rawData };
  made.set(key, t);
  return t;
}
