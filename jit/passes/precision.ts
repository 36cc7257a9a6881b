/**
 * The precision policy of a compile (`compile(graph, { precision })`), as a rewrite of the graph
 * before it is legalized and fused. The caller's tensors stay f32 either way.
 *
 * - `"f32"` (default): the graph as it is.
 * - `"f16-storage"`: the graph's float inputs and outputs travel and are stored in f16 (half the
 *   bytes moved by the kernels that read and write them); parameters and all arithmetic stay f32.
 *   The executable converts the caller's f32 inputs to f16 on the host and f16 outputs back (see
 *   {@linkcode Widened}); outputs kept on the device (`runOnDevice`) are f16 device tensors.
 * - `"f16"`: every float tensor is f16 — inputs as the first kernel reads them, parameters
 *   (converted once, at compile time), constants and every intermediate — and elementwise
 *   arithmetic rounds to f16 after each op, while reductions and matmuls accumulate in f32 (the
 *   kernel IR's semantics of f16). Inputs and outputs cross as f32: the kernels that read and
 *   write them round and widen, so no conversion runs on the host.
 *
 * - `"exact"`: f32, every backend's outputs bit-identical to the reference's: each reduction
 *   summed in f32 in one fixed order, no product contracted into an add, the transcendentals
 *   computed by one decomposition into exactly rounded operations (`exact_math.ts`), and no
 *   graph rewrite that regroups a rounding (scales moved past products). It costs the
 *   specialized kernels (tiles, flash attention, block products): see `docs/numerics.md`.
 *
 * The f16 precisions run on every backend and under every placement policy. A device with native f16 (WebGPU
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
import { freshNames, Graph, type GraphSpec, type NodeSpec } from "../ir/graph.ts";
import type { Attrs } from "../ops/mod.ts";

/** Numeric precision of a compiled program's float tensors. */
export type Precision = "f32" | "f16-storage" | "f16" | "exact";

const PRECISIONS: readonly Precision[] = ["f32", "f16-storage", "f16", "exact"];

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
  if (precision === "f32" || precision === "exact") return { graph };
  if (precision === "f16-storage") {
    // f16 at the edges, f32 inside: the caller's f32 data crosses as f16, converted on the host.
    const inputs = graph.inputs.filter((i) => i.dtype === "f32").map((i) => i.name);
    const outputs = graph.outputs
      .filter((o) => o.dtype === "f32" && graph.values[o.value].dtype === "f32")
      .map((o) => o.name);
    return {
      graph: castEdges(graph, { inner: "f32", edge: "f16", inputs, outputs }),
      widened: {
        wide: "f32",
        narrow: "f16",
        inputs: new Set(inputs),
        params: new Set(),
        outputs: new Set(outputs),
      },
    };
  }
  // f16: every float tensor f16 inside, and the caller's f32 inputs and outputs cross as f32,
  // rounded and widened by the kernels that read and write them: a GPU converts in the same
  // pass at no cost, where the host took 4-9 ns an element (GPT-2's logits: 55 ms on the H200).
  const { graph: half, widened } = retype(graph, "f32", "f16");
  const edged = castEdges(half, {
    inner: "f16",
    edge: "f32",
    inputs: [...widened.inputs],
    outputs: [...widened.outputs],
  });
  return { graph: edged, widened: { ...widened, inputs: new Set(), outputs: new Set() } };
}

/**
 * `graph` with `inputs` declared as `edge` and cast to `inner` for their readers, and `outputs`
 * cast from `inner` to `edge` where they leave.
 */
function castEdges(
  graph: Graph,
  { inner, edge, inputs, outputs }: {
    inner: DType;
    edge: DType;
    inputs: readonly string[];
    outputs: readonly string[];
  },
): Graph {
  const name = (v: number) => graph.values[v].name;
  const fresh = freshNames(graph);
  const renamed = new Map<number, string>();
  const casts: NodeSpec[] = [];
  for (const i of graph.inputs) {
    if (!inputs.includes(i.name)) continue;
    const cast = fresh(`${i.name}/${inner}`);
    renamed.set(i.value, cast);
    casts.push({ op: "Cast", name: cast, inputs: [i.name], outputs: [cast], attrs: { to: inner } });
  }
  const ref = (v: number) => renamed.get(v) ?? name(v);
  const tails: NodeSpec[] = [];
  const outputNames = new Map<string, string>();
  for (const o of graph.outputs) {
    if (!outputs.includes(o.name)) continue;
    const cast = fresh(`${o.name}/${edge}`);
    tails.push({
      op: "Cast",
      name: cast,
      inputs: [ref(o.value)],
      outputs: [cast],
      attrs: { to: edge },
    });
    outputNames.set(o.name, cast);
  }
  return Graph.create({
    inputs: graph.inputs.map((i) => ({
      name: i.name,
      shape: i.shape,
      dtype: inputs.includes(i.name) ? edge : i.dtype,
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
      dtype: outputNames.has(o.name) ? edge : o.dtype,
    })),
  });
}
