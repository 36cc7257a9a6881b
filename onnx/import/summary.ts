/**
 * A model's summary, as `kiln info MODEL` prints it and Netron shows it: producer, opsets,
 * inputs and outputs with their declared types, parameter count and bytes, how often each op
 * occurs (subgraphs of If/Loop/Scan included), and which ops kiln has no converter for. Read from
 * the decoded protobuf alone: nothing is imported or compiled.
 *
 * @module
 */
import { converterOf } from "../convert/mod.ts";
import { domainVersion } from "./declarations.ts";
import { HOST_STRING_OPS } from "./string_ops.ts";
import {
  type GraphProto,
  int,
  type ModelProto,
  type TensorProto,
  type TypeProto,
} from "../wire/proto.ts";

/** A graph input or output as declared. */
export interface ValueSummary {
  /** Name. */
  readonly name: string;
  /** Element type and shape, e.g. `float32[batch, 3, 224, 224]`, or `sequence<…>`. */
  readonly type: string;
}

/** What {@linkcode summarizeModel} reports. */
export interface ModelSummary {
  /** Producer name and version, as the exporter wrote them. */
  readonly producer: string;
  /** The IR version. */
  readonly irVersion: number;
  /** Opset version per domain (`""` is the default ONNX domain). */
  readonly opsets: Readonly<Record<string, number>>;
  /** Graph inputs that are not initializers. */
  readonly inputs: readonly ValueSummary[];
  /** Graph outputs. */
  readonly outputs: readonly ValueSummary[];
  /** Nodes, subgraphs included. */
  readonly nodes: number;
  /** Initializers (parameters and constants) and their elements and bytes. */
  readonly parameters: {
    readonly tensors: number;
    readonly elements: number;
    readonly bytes: number;
  };
  /** Node count per op type (with its domain when not ONNX's), most frequent first. */
  readonly ops: readonly { readonly op: string; readonly count: number }[];
  /** Op types kiln cannot import (none when the model is fully supported). */
  readonly unsupported: readonly string[];
}

const ELEMENT: Record<number, [string, number]> = {
  1: ["float32", 4],
  2: ["uint8", 1],
  3: ["int8", 1],
  4: ["uint16", 2],
  5: ["int16", 2],
  6: ["int32", 4],
  7: ["int64", 8],
  8: ["string", 0],
  9: ["bool", 1],
  10: ["float16", 2],
  11: ["float64", 8],
  12: ["uint32", 4],
  13: ["uint64", 8],
  16: ["bfloat16", 2],
};

/** A declared type as text. */
function typeText(t: TypeProto | undefined): string {
  if (!t) return "?";
  if (t.sequenceType) return `sequence<${typeText(t.sequenceType.elemType)}>`;
  if (t.optionalType) return `optional<${typeText(t.optionalType.elemType)}>`;
  const tt = t.tensorType;
  if (!tt) return "?";
  const dtype = ELEMENT[tt.elemType ?? 0]?.[0] ?? `type ${tt.elemType}`;
  if (!tt.shape) return dtype;
  const dims = (tt.shape.dim ?? []).map((d) => (d.dimParam ? d.dimParam : String(int(d.dimValue))));
  return `${dtype}[${dims.join(", ")}]`;
}

/** Elements and bytes of an initializer (from its dims, whatever form its data takes). */
function sizeOfTensor(t: TensorProto): [number, number] {
  const elements = (t.dims ?? []).reduce((n: number, d) => n * int(d), 1);
  return [elements, elements * (ELEMENT[t.dataType ?? 0]?.[1] ?? 0)];
}

/** The summary of a decoded model. */
export function summarizeModel(model: ModelProto): ModelSummary {
  const counts = new Map<string, number>();
  const unsupported = new Set<string>();
  let nodes = 0, tensors = 0, elements = 0, bytes = 0;
  const visit = (g: GraphProto, depth: number) => {
    if (depth > 64) return;
    for (const t of g.initializer) {
      const [e, b] = sizeOfTensor(t);
      tensors++;
      elements += e;
      bytes += b;
    }
    for (const n of g.node) {
      nodes++;
      const onnx = (n.domain ?? "") === "" || n.domain === "ai.onnx";
      const op = onnx ? n.opType : `${n.domain}::${n.opType}`;
      counts.set(op, (counts.get(op) ?? 0) + 1);
      // The string-only ops run on the host (`strings.ts`), outside any graph.
      const host = onnx && HOST_STRING_OPS.has(n.opType);
      if (!converterOf(n.domain, n.opType, domainVersion(model, n.domain)) && !host) {
        unsupported.add(op);
      }
      for (const a of n.attribute) if (a.g) visit(a.g, depth + 1);
    }
  };
  visit(model.graph, 0);
  const initializers = new Set(model.graph.initializer.map((t) => t.name));
  const value = (v: { name: string; type?: TypeProto }) => ({
    name: v.name,
    type: typeText(v.type),
  });
  return {
    producer: [model.producerName, model.producerVersion].filter(Boolean).join(" "),
    irVersion: int(model.irVersion),
    opsets: Object.fromEntries(model.opsetImport.map((o) => [o.domain ?? "", int(o.version)])),
    inputs: model.graph.input.filter((i) => !initializers.has(i.name)).map(value),
    outputs: model.graph.output.map(value),
    nodes,
    parameters: { tensors, elements, bytes },
    ops: [...counts].map(([op, count]) => ({ op, count }))
      .sort((a, b) => b.count - a.count || (a.op < b.op ? -1 : 1)),
    unsupported: [...unsupported].sort(),
  };
}
