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
 * Both need a device that stores f16 natively (WebGPU with `shader-f16`): elsewhere they would be
 * slower than f32, so they are refused with a `Fix:`.
 *
 * @module
 */
import { type BoundaryDType, toF16Bits } from "./dtype.ts";
import { KilnError } from "./errors.ts";
import { Graph, type GraphSpec, type NodeSpec } from "./graph.ts";
import type { Attrs } from "./ops/mod.ts";

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

/** Inputs, params and outputs whose f16 tensors the caller sees as f32. */
export interface Widened {
  /** Input names. */
  readonly inputs: ReadonlySet<string>;
  /** Parameter names. */
  readonly params: ReadonlySet<string>;
  /** Output names. */
  readonly outputs: ReadonlySet<string>;
}

/** f32 data as f16 bits. */
export function toF16(data: Float32Array): Uint16Array {
  const out = new Uint16Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = toF16Bits(data[i]);
  return out;
}

/** The value's dtype in the rewritten graph. */
const half = (d: BoundaryDType): BoundaryDType => (d === "f32" ? "f16" : d);

/** An attribute with its f32 tensors and dtype names made f16. */
function halfAttr(key: string, v: unknown): unknown {
  if ((key === "to" || key === "dtype") && v === "f32") return "f16";
  const t = v as { data?: unknown; shape?: unknown; dtype?: unknown } | undefined;
  if (t && typeof t === "object" && t.dtype === "f32" && t.data instanceof Float32Array) {
    return { ...t, data: toF16(t.data), dtype: "f16" };
  }
  return v;
}

/** `graph` under `precision`, with what the executable widens back to f32 for the caller. */
export function applyPrecision(
  graph: Graph,
  precision: Precision,
): { graph: Graph; widened?: Widened } {
  if (precision === "f32") return { graph };
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
  if (precision === "f16") {
    const spec: GraphSpec = {
      inputs: graph.inputs.map((i) => ({ name: i.name, shape: i.shape, dtype: half(i.dtype) })),
      params: graph.params.map((p) => ({
        name: p.name,
        shape: p.shape,
        dtype: half(p.dtype),
        data: p.dtype === "f32" && p.data ? toF16(p.data as Float32Array) : p.data,
      })),
      nodes: graph.nodes.map((n): NodeSpec => ({
        op: n.op,
        name: n.name,
        inputs: n.inputs.map(name),
        outputs: n.outputs.map(name),
        attrs: Object.fromEntries(
          Object.entries(n.attrs).map(([k, v]) => [k, halfAttr(k, v)]),
        ) as Attrs,
      })),
      outputs: graph.outputs.map((o) => ({
        name: o.name,
        value: name(o.value),
        dtype: half(o.dtype),
      })),
    };
    const params = graph.params.filter((p) => p.dtype === "f32").map((p) => p.name);
    return {
      graph: Graph.create(spec),
      widened: { inputs: new Set(inputs), params: new Set(params), outputs: new Set(outputs) },
    };
  }
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
    inputs: graph.inputs.map((i) => ({ name: i.name, shape: i.shape, dtype: half(i.dtype) })),
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
    widened: { inputs: new Set(inputs), params: new Set(), outputs: new Set(outputs) },
  };
}
