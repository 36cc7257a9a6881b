/**
 * ONNX export: a kiln graph → ONNX opset 17 model bytes, so graphs built with `GraphBuilder`
 * round-trip through other tools (and back through `importOnnx`). Attributes that ONNX takes as
 * inputs (Reshape's shape, Slice's bounds, …) become int64 constants; ops that opset 17 lacks are
 * written in terms of ops it has.
 *
 * @module
 */
import { onnxNameOf } from "../import/registered_ops.ts";
import { decompose } from "../../jit/passes/decompose.ts";
import { type BoundaryDType, type DType, fromNumbers } from "../../jit/ir/dtype.ts";
import { checkGraph, type Graph } from "../../jit/ir/graph.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { AttrValue } from "../../jit/ops/mod.ts";
import {
  type AttributeProto,
  CODE_OF_DTYPE,
  encodeModel,
  type NodeProto,
  protoOf,
  type TensorProto,
  type ValueInfoProto,
} from "../wire/proto.ts";
import { VERSION } from "../../jit/support/version.ts";

/** Attributes ONNX stores as floats (everything else numeric is an int). */
const FLOAT_ATTRS = new Set(["alpha", "beta", "epsilon"]);
/** Per op: kiln attributes that ONNX 17 takes as extra inputs, in input order. */
const AS_INPUTS: Record<string, readonly string[]> = {
  Reshape: ["shape"],
  Expand: ["shape"],
  Slice: ["starts", "ends", "axes", "steps"],
  Squeeze: ["axes"],
  Unsqueeze: ["axes"],
  Split: ["split"],
  Pad: ["pads", "value", "axes"],
  Clip: ["min", "max"],
  ReduceSum: ["axes"],
  CumSum: ["axis"],
};
/**
 * Ops opset 17 lacks, exported through their decompositions (IntegerMatMul's i16 operands are
 * not MatMulInteger's 8-bit ones: its exact float chunks export instead; the block-quantized ops
 * export as the float ops that unpack their bytes).
 */
const DECOMPOSE = new Set([
  "Gelu",
  "ConstantOfShape",
  "Range",
  "IntegerMatMul",
  "BlockDequantize",
  "BlockMatMul",
]);

/** Serializes `graph` as an ONNX model (opset 17). */
export function toOnnx(graph: Graph): Uint8Array {
  const g = decompose(checkGraph(graph, "toOnnx()"), (n) => DECOMPOSE.has(n.op));
  const name = (v: number) => g.values[v].name;
  const initializers: TensorProto[] = [];
  const nodes: NodeProto[] = [];
  const domains = new Map<string, number>();
  let fresh = 0;
  const constant = (t: HostTensor, asI64: boolean): string => {
    const n = `kiln_const_${fresh++}`;
    initializers.push(protoOf(n, t, asI64));
    return n;
  };
  for (const p of g.params) {
    if (p.data) {
      initializers.push(
        protoOf(
          p.name,
          { data: p.data, shape: p.shape, dtype: g.values[p.value].dtype },
          p.dtype === "i64",
        ),
      );
    }
  }
  for (const n of g.nodes) {
    const attrs: AttributeProto[] = [];
    const inputs = n.inputs.map(name);
    const extra = AS_INPUTS[n.op] ?? [];
    let op = n.op;
    for (const [key, value] of Object.entries(n.attrs)) {
      if (value === undefined || extra.includes(key)) continue;
      if (op === "Constant" && key === "value") {
        attrs.push({ name: "value", type: 4, t: protoOf("", value as HostTensor) });
      } else if (op === "Cast" && key === "to") {
        attrs.push({ name: "to", type: 2, i: CODE_OF_DTYPE[value as BoundaryDType] });
      } else if ((op === "Split" && key === "num_outputs") || (op === "Pad" && key === "masked")) {
        // Split's count is its outputs'; a concat's pads are marked for fusion (jit/ops/movement.ts).
        continue;
      } else {
        attrs.push(attribute(key, value));
      }
    }
    // Trailing inputs ONNX treats as optional may be omitted; earlier ones become "".
    const dataType = g.values[n.inputs[0] ?? n.outputs[0]].dtype;
    const extras = extra.map((key) => {
      const v = n.op === "Split" && key === "split"
        ? splitSizes(g, n.outputs, n.attrs.axis as number | undefined)
        : n.attrs[key];
      if (v === undefined) return "";
      if (n.op === "Pad" && key === "value" || n.op === "Clip") {
        return constant(scalar(v as number, dataType), false);
      }
      return constant({
        data: Int32Array.from(Array.isArray(v) ? v : [v as number]),
        shape: Array.isArray(v) ? [v.length] : [],
        dtype: "i32",
      }, true);
    });
    while (extras.length && extras[extras.length - 1] === "") extras.pop();
    // ONNX Runtime refuses to pad a scalar; with no axes to pad it is an identity anyway.
    const scalarPad = n.op === "Pad" && g.values[n.inputs[0]].shape.length === 0;
    if (n.op === "ToDevice" || n.op === "ToHost" || scalarPad) op = "Identity";
    if (scalarPad) extras.length = 0;
    // A registered op is written in its ONNX domain, so the model imports where it is registered.
    const registered = onnxNameOf(op);
    if (registered) domains.set(registered.domain, registered.version);
    nodes.push({
      opType: registered?.opType ?? op,
      domain: registered?.domain ?? "",
      name: n.name,
      input: [...inputs, ...extras],
      output: n.outputs.map(name),
      attribute: attrs,
    });
  }
  const info = (value: number, dtype: BoundaryDType): ValueInfoProto => ({
    name: name(value),
    type: {
      tensorType: {
        elemType: CODE_OF_DTYPE[dtype],
        shape: { dim: g.values[value].shape.map((d) => ({ dimValue: d })) },
      },
    },
  });
  const outputs: ValueInfoProto[] = [];
  for (const o of g.outputs) {
    if (name(o.value) !== o.name) {
      nodes.push({
        opType: "Identity",
        domain: "",
        input: [name(o.value)],
        output: [o.name],
        attribute: [],
      });
    }
    outputs.push({ ...info(o.value, o.dtype), name: o.name });
  }
  return encodeModel({
    irVersion: 8,
    producerName: `kiln ${VERSION}`,
    opsetImport: [
      { domain: "", version: 17 },
      ...[...domains].filter(([d]) => d !== "").map(([domain, version]) => ({ domain, version })),
    ],
    graph: {
      name: "kiln",
      node: nodes,
      initializer: initializers,
      input: g.inputs.map((i) => info(i.value, i.dtype)),
      output: outputs,
    },
  });
}

function attribute(name: string, value: AttrValue): AttributeProto {
  if (typeof value === "string") return { name, type: 3, s: new TextEncoder().encode(value) };
  if (typeof value === "boolean") return { name, type: 2, i: +value };
  if (Array.isArray(value)) return { name, type: 7, ints: [...value] };
  if (typeof value === "number") {
    return FLOAT_ATTRS.has(name) || !Number.isInteger(value)
      ? { name, type: 1, f: value }
      : { name, type: 2, i: value };
  }
  return { name, type: 4, t: protoOf("", value as HostTensor) };
}

function scalar(v: number, dtype: DType): HostTensor {
  return { data: fromNumbers(dtype, [v]), shape: [], dtype };
}

/** The sizes of a Split's parts along its axis, read off its outputs. */
function splitSizes(g: Graph, outputs: readonly number[], axis = 0): number[] {
  const rank = g.values[outputs[0]].shape.length;
  const a = axis < 0 ? axis + rank : axis;
  return outputs.map((v) => g.values[v].shape[a]);
}
