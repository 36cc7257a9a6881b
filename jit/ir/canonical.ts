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
import type { BoundaryDType, DType } from "./dtype.ts";
import type { HostTensor } from "./host_tensor.ts";
import type { Attrs, AttrValue } from "../ops/mod.ts";

const INLINE_BYTES = 64;

/** Digests of graph tensors' data, which graphs never change: each hashed once however often a graph is keyed. */
const digests = new WeakMap<object, string>();

/**
 * A tensor's canonical text: its type and bytes (a digest of them past 64 bytes), or with
 * `bytes: false` the bytes of a small one only (see {@linkcode canonicalize}).
 */
export function tensorText(t: HostTensor, bytes = true): string {
  const length = t.data.byteLength;
  if (!bytes && length > INLINE_BYTES) return `tensor<${t.dtype}[${t.shape.join(",")}]:${length}b>`;
  let body = length <= INLINE_BYTES ? hexBytes(t.data) : digests.get(t.data);
  if (body === undefined) digests.set(t.data, body = `${length}b#${digest(t.data)}`);
  return `tensor<${t.dtype}[${t.shape.join(",")}]:${body}>`;
}

/** A number's text: −0 apart from 0 (JSON writes both `0`, and NaN and ±Infinity `null`). */
const numberText = (v: number) => (Object.is(v, -0) ? "-0" : String(v));

function attrText(v: AttrValue, tensor: (t: HostTensor) => string): string {
  if (typeof v === "number") return numberText(v);
  if (Array.isArray(v)) return `[${v.map(numberText).join()}]`;
  if (typeof v === "object") return tensor(v as HostTensor);
  return JSON.stringify(v);
}

/**
 * Attributes as sorted `key=value` text, tensors as `tensor` writes them (default:
 * {@linkcode tensorText}).
 */
export function attrsText(
  attrs: Attrs,
  tensor: (t: HostTensor) => string = (t) => tensorText(t),
): string {
  return Object.keys(attrs).sort().filter((k) => attrs[k] !== undefined)
    .map((k) => `${k}=${attrText(attrs[k]!, tensor)}`).join(";");
}

/** A typed value of a graph: its element type, shape and producing node (−1: none). */
interface TypedValue {
  readonly dtype: DType;
  readonly shape: readonly number[];
}

/**
 * What canonical text reads of a graph: its values, nodes, inputs, params and outputs by id.
 * (`Graph` has this shape; naming it here keeps the graph module the only one that imports.)
 */
export interface CanonicalSource {
  /** Every value, by id. */
  readonly values: readonly (TypedValue & { readonly producer: number })[];
  /** Graph inputs. */
  readonly inputs: readonly {
    readonly value: number;
    readonly dtype: BoundaryDType;
    readonly shape: readonly number[];
  }[];
  /** Parameters. */
  readonly params: readonly { readonly value: number }[];
  /** Nodes, by id. */
  readonly nodes: readonly {
    readonly id: number;
    readonly op: string;
    readonly attrs: Attrs;
    readonly inputs: readonly number[];
    readonly outputs: readonly number[];
  }[];
  /** Graph outputs. */
  readonly outputs: readonly { readonly value: number; readonly dtype: BoundaryDType }[];
  /** The nodes that read value `v`. */
  consumers(v: number): readonly number[];
}

/**
 * Canonical text and its hash for `graph`. With `bytes: false` constants past 64 bytes are
 * written by type alone: the graph's structure, which is what its speed depends on (hashing a
 * decoder's 316 MB of constant weights took 0.2-0.7 s of its first compile).
 */
export function canonicalize(
  graph: CanonicalSource,
  { bytes = true }: { bytes?: boolean } = {},
): { text: string; hash: string } {
  const key: string[] = new Array(graph.values.length);
  const type = (id: number) => `${graph.values[id].dtype}[${graph.values[id].shape.join(",")}]`;
  graph.inputs.forEach((inp, i) => (key[inp.value] = `in${i}`));
  graph.params.forEach((p, i) => (key[p.value] = `p${i}`));
  const nodeKey = graph.nodes.map((n) => {
    const k = digest(
      `${n.op}(${attrsText(n.attrs, (t) => tensorText(t, bytes))})[${
        n.inputs.map((v) => key[v]).join(",")
      }]->${n.outputs.map(type).join(",")}`,
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
      `%${index.get(id)} = ${n.op}(${attrsText(n.attrs, (t) => tensorText(t, bytes))})(${
        n.inputs.map(ref).join(", ")
      }) : ${n.outputs.map(type).join(", ")}`,
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
