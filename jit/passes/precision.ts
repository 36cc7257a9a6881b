/**
 * The precision policy of a compile (`compile(graph, { precision })`), as a rewrite of the graph
 * before it is legalized and fused. The caller's tensors stay f32 either way: the executable
 * converts f32 inputs to f16 on the host before they travel, and f16 outputs back (see
 * {@linkcode Widened}); outputs kept on the device (`runOnDevice`) stay f16 device tensors.
 *
 * - `"f32"` (default): the graph as it is.
 * - `"f16-storage"`: the graph's float inputs and outputs travel and are stored in f16 (half the
 *   bytes moved by the kernels that read and write them); parameters and all arithmetic stay f32.
 * - `"f16"`: every float tensor is f16 — inputs, parameters, constants and every intermediate —
 *   and elementwise arithmetic rounds to f16 after each op, while reductions and matmuls
 *   accumulate in f32 (the kernel IR's semantics of f16).
 *
 * Both run on every backend and under every placement policy. A device with native f16 (WebGPU
 * with `shader-f16`) stores and computes in 16 bits; elsewhere (wasm, the reference, WebGPU
 * without `shader-f16`) f16 values are stored as 16-bit words and computed in f32, rounded as
 * f16 would be: the same numbers, at f32's speed or below.
 *
 * The same rewrite narrows f64 to f32 where the caller allows it (`compile(…, { narrowF64 })`)
 * for a backend without f64 arithmetic (WGSL has none): the caller keeps f64 tensors.
 *
 * @module
 */
import {
  type BoundaryDType,
  type DType,
  fromF16Array,
  fromNumbers,
  type TensorData,
} from "../ir/dtype.ts";
import { KilnError } from "../support/errors.ts";
import { Graph, type GraphSpec, type NodeSpec } from "../ir/graph.ts";
import type { Attrs } from "../ops/mod.ts";

/** Numeric precision of a compiled program's float tensors. */
export type Precision = "f32" | "f16-storage" | "f16";

const PRECISIONS: readonly Precision[] = ["f32", "f16-storage", "f16"];

/** `value` as a precision, or a typed error naming the choices. */
export function checkPrecision(value: unknown): Precision {
  if (value === undefined) return "f32";
  if (PRECISIONS.includes(value as Precision)) return value as Precision;
  throw new KilnError(`Unknown precision ${JSON.stringify(value)}`, {
    code: "bad-input",
    fix: `pass precision: ${PRECISIONS.map((p) => JSON.stringify(p)).join(", ")} (default "f32")`,
  });
}

/**
 * Inputs, params and outputs whose `narrow` tensors the caller sees as `wide` (f16 as f32 under an
 * f16 precision, f32 as f64 under `narrowF64`).
 */
export interface Widened {
  /** The caller's dtype. */
  readonly wide: DType;
  /** The graph's dtype. */
  readonly narrow: DType;
  /** Input names. */
  readonly inputs: ReadonlySet<string>;
  /** Parameter names. */
  readonly params: ReadonlySet<string>;
  /** Output names. */
  readonly outputs: ReadonlySet<string>;
}

/** `data` (of `from`) as `to` stores it: f16 decoded from and rounded to its bits. */
export function convertData(data: TensorData, from: DType, to: DType): TensorData {
  const values = from === "f16" ? fromF16Array(data as Uint16Array) : data;
  return fromNumbers(to, values as ArrayLike<number>);
}

/**
 * `graph` with every `wide` tensor made `narrow`: inputs, parameters, constants, intermediates,
 * outputs and the dtype attributes (`to`, `dtype`) that name `wide`.
 */
function retype(graph: Graph, wide: DType, narrow: DType): { graph: Graph; widened: Widened } {
  const name = (v: number) => graph.values[v].name;
  const swap = (d: BoundaryDType): BoundaryDType => (d === wide ? narrow : d);
  const attr = (key: string, v: unknown): unknown => {
    if ((key === "to" || key === "dtype") && v === wide) return narrow;
    const t = v as { data?: TensorData; shape?: unknown; dtype?: unknown } | undefined;
    if (t && typeof t === "object" && t.dtype === wide && ArrayBuffer.isView(t.data)) {
      return { ...t, data: convertData(t.data, wide, narrow), dtype: narrow };
    }
    return v;
  };
  const spec: GraphSpec = {
    inputs: graph.inputs.map((i) => ({ name: i.name, shape: i.shape, dtype: swap(i.dtype) })),
    params: graph.params.map((p) => ({
      name: p.name,
      shape: p.shape,
      dtype: swap(p.dtype),
      data: p.dtype === wide && p.data ? convertData(p.data, wide, narrow) : p.data,
    })),
    nodes: graph.nodes.map((n): NodeSpec => ({
      op: n.op,
      name: n.name,
      inputs: n.inputs.map(name),
      outputs: n.outputs.map(name),
      attrs: Object.fromEntries(Object.entries(n.attrs).map(([k, v]) => [k, attr(k, v)])) as Attrs,
    })),
    outputs: graph.outputs.map((o) => ({
      name: o.name,
      value: name(o.value),
      dtype: swap(o.dtype),
    })),
  };
  const of = (xs: readonly { name: string; dtype: BoundaryDType }[]) =>
    new Set(xs.filter((x) => x.dtype === wide).map((x) => x.name));
  return {
    graph: Graph.create(spec),
    widened: {
      wide,
      narrow,
      inputs: of(graph.inputs),
      params: of(graph.params),
      outputs: of(graph.outputs.filter((o) => graph.values[o.value].dtype === wide)),
    },
  };
}

/**
 * `graph` with its f64 tensors computed in f32, for a backend without f64 arithmetic; the caller
 * keeps f64 tensors (`widened`). A graph without f64 comes back as it is.
 */
export function narrowF64(graph: Graph): { graph: Graph; widened?: Widened } {
  return graph.values.some((v) => v.dtype === "f64") ? retype(graph, "f64", "f32") : { graph };
}

/** `graph` under `precision`, with what the executable widens back to f32 for the caller. */
export function applyPrecision(
  graph: Graph,
  precision: Precision,
): { graph: Graph; widened?: Widened } {
  if (precision === "f32") return { graph };
  if (precision === "f16") return retype(graph, "f32", "f16");
  const name = (v: number) => graph.values[v].name;
  const f32 = (v: number) => graph.values[v].dtype === "f32";
  const taken = new Set(graph.values.map((v) => v.name));
  const fresh = (base: string) => {
    let n = `${base}/f32`;
    for (let i = 1; taken.has(n); i++) n = `${base}/f32_${i}`;
    taken.add(n);
    return n;
  };
  const inputs = graph.inputs.filter((i) => i.dtype === "f32").map((i) => i.name);
  const outputs = graph.outputs.filter((o) => o.dtype === "f32" && f32(o.value)).map((o) => o.name);
  // f16-storage: f16 at the edges, a cast to f32 after each such input and before each output.
  const renamed = new Map<number, string>();
  const casts: NodeSpec[] = [];
  for (const i of graph.inputs) {
    if (i.dtype !== "f32") continue;
    const wide = fresh(i.name);
    renamed.set(i.value, wide);
    casts.push({ op: "Cast", name: wide, inputs: [i.name], outputs: [wide], attrs: { to: "f32" } });
  }
  const ref = (v: number) => renamed.get(v) ?? name(v);
  const tails: NodeSpec[] = [];
  const outputNames = new Map<string, string>();
  for (const o of graph.outputs) {
    if (!outputs.includes(o.name)) continue;
    const narrow = fresh(`${o.name}/f16`);
    tails.push({
      op: "Cast",
      name: narrow,
      inputs: [ref(o.value)],
      outputs: [narrow],
      attrs: { to: "f16" },
    });
    outputNames.set(o.name, narrow);
  }
  const spec: GraphSpec = {
    inputs: graph.inputs.map((i) => ({
      name: i.name,
      shape: i.shape,
      dtype: i.dtype === "f32" ? "f16" : i.dtype,
    })),
    params: graph.params.map((p) => ({
      name: p.name,
      shape: p.shape,
      dtype: p.dtype,
      data: p.data,
    })),
    nodes: [
      ...casts,
      ...graph.nodes.map((n): NodeSpec => ({
        op: n.op,
        name: n.name,
        inputs: n.inputs.map(ref),
        outputs: n.outputs.map(name),
        attrs: n.attrs,
      })),
      ...tails,
    ],
    outputs: graph.outputs.map((o) => ({
      name: o.name,
      value: outputNames.get(o.name) ?? ref(o.value),
      dtype: outputNames.has(o.name) ? "f16" : o.dtype,
    })),
  };
  return {
    graph: Graph.create(spec),
    widened: {
      wide: "f32",
      narrow: "f16",
      inputs: new Set(inputs),
      params: new Set(),
      outputs: new Set(outputs),
    },
  };
}
