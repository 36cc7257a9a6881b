/**
 * Canonical serialization and structural hash of a graph. Each node gets a key from its op,
 * attributes, output types and its inputs' keys (inputs and params are keyed by position, never
 * by name); nodes are then listed in a topological order that breaks ties by key. Two graphs
 * therefore serialize identically exactly when they are isomorphic, whatever their node order or
 * value names. Constants up to 64 bytes are written out; larger ones by length and a 128-bit
 * digest of their bytes.
 *
 * @module
 */
import { digest, hexBytes } from "./digest.ts";
import type { Graph } from "./graph.ts";
import type { HostTensor } from "./host_tensor.ts";
import type { Attrs, AttrValue } from "../ops/mod.ts";

const INLINE_BYTES = 64;

function tensorText(t: HostTensor): string {
  const bytes = t.data.byteLength;
  const body = bytes <= INLINE_BYTES ? hexBytes(t.data) : `${bytes}b#${digest(t.data)}`;
  return `tensor<${t.dtype}[${t.shape.join(",")}]:${body}>`;
}

function attrText(v: AttrValue): string {
  if (typeof v === "object" && !Array.isArray(v)) return tensorText(v as HostTensor);
  if (typeof v === "number") return Object.is(v, -0) ? "-0" : String(v);
  return JSON.stringify(v);
}

/** Attributes as sorted `key=value` text. */
export function attrsText(attrs: Attrs): string {
  return Object.keys(attrs).sort().filter((k) => attrs[k] !== undefined)
    .map((k) => `${k}=${attrText(attrs[k]!)}`).join(";");
}

/** Canonical text and its hash for `graph`. */
export function canonicalize(graph: Graph): { text: string; hash: string } {
  const key: string[] = new Array(graph.values.length);
  const type = (id: number) => `${graph.values[id].dtype}[${graph.values[id].shape.join(",")}]`;
  graph.inputs.forEach((inp, i) => (key[inp.value] = `in${i}`));
  graph.params.forEach((p, i) => (key[p.value] = `p${i}`));
  const nodeKey = graph.nodes.map((n) => {
    const k = digest(
      `${n.op}(${attrsText(n.attrs)})[${n.inputs.map((v) => key[v]).join(",")}]->${
        n.outputs.map(type).join(",")
      }`,
    );
    n.outputs.forEach((v, j) => (key[v] = `${k}.${j}`));
    return k;
  });

  // Topological order with ties broken by key: independent of how the graph was built.
  const pending = graph.nodes.map((n) =>
    n.inputs.filter((v) => graph.values[v].producer >= 0).length
  );
  const ready = graph.nodes.filter((_, i) => pending[i] === 0).map((n) => n.id);
  const index = new Map<number, number>();
  const lines: string[] = [
    ...graph.inputs.map((inp, i) => `in${i}: ${inp.dtype}[${inp.shape.join(",")}]`),
    ...graph.params.map((_, i) => `p${i}: ${type(graph.params[i].value)}`),
  ];
  const ref = (v: number): string => {
    const producer = graph.values[v].producer;
    if (producer < 0) return key[v];
    return `%${index.get(producer)}.${graph.nodes[producer].outputs.indexOf(v)}`;
  };
  while (ready.length) {
    ready.sort((a, b) => (nodeKey[a] < nodeKey[b] ? -1 : nodeKey[a] > nodeKey[b] ? 1 : 0));
    const id = ready.shift()!;
    const n = graph.nodes[id];
    index.set(id, index.size);
    lines.push(
      `%${index.get(id)} = ${n.op}(${attrsText(n.attrs)})(${n.inputs.map(ref).join(", ")}) : ${
        n.outputs.map(type).join(", ")
      }`,
    );
    for (const v of n.outputs) {
      for (const c of new Set(graph.consumers(v))) {
        pending[c] -= graph.nodes[c].inputs.filter((x) => x === v).length;
        if (pending[c] === 0 && !index.has(c) && !ready.includes(c)) ready.push(c);
      }
    }
  }
  graph.outputs.forEach((o, i) => lines.push(`out${i}: ${ref(o.value)} as ${o.dtype}`));
  const text = lines.join("\n");
  return { text, hash: digest(text) };
}
