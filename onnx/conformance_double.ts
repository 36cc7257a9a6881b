/**
 * The ONNX suite's node cases again in double: every case whose inputs or outputs are float, its
 * float tensors (graph inputs and outputs, initializers, constants, `to`/`dtype` attributes) made
 * double, run against the float case's own expected values. ONNX ships few double cases (Cast,
 * Max, Min, Mod), while most of its ops accept double; this derived suite catches a converter
 * that mixes f32 constants into an f64 graph, and an f64 kernel path that a backend gets wrong.
 *
 * @module
 */
import type { HostTensor } from "../jit/host_tensor.ts";
import {
  type GraphProto,
  type ModelProto,
  protoOf,
  tensorOf,
  type TensorProto,
  type TypeProto,
} from "./proto.ts";

/** What marks a derived case: its id is the float case's folder with this suffix. */
export const AS_DOUBLE = "#double";

const FLOAT = 1, STRING = 8, DOUBLE = 11, BFLOAT16 = 16;

/**
 * Ops whose float operands ONNX does not allow to be double (quantization takes float scales,
 * TfIdfVectorizer outputs float): their cases have no double form.
 */
const FLOAT_ONLY = new Set([
  "QuantizeLinear",
  "DequantizeLinear",
  "DynamicQuantizeLinear",
  "QLinearConv",
  "QLinearMatMul",
  "TfIdfVectorizer",
]);

/** Ops whose output type is an `output_datatype` attribute (float when absent). */
const TYPED_OUTPUT = new Set(["HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"]);

/** `t` as double if it is float, else itself. */
function doubleTensor(t: TensorProto): TensorProto {
  if (t.dataType !== FLOAT) return t;
  const h = tensorOf(t, t.name ?? "tensor");
  return protoOf(t.name ?? "", {
    ...h,
    data: Float64Array.from(h.data as Float32Array),
    dtype: "f64",
  });
}

function doubleType(t: TypeProto | null | undefined): void {
  if (!t) return;
  if (t.tensorType?.elemType === FLOAT) t.tensorType.elemType = DOUBLE;
  doubleType(t.sequenceType?.elemType);
  doubleType(t.optionalType?.elemType);
}

function doubleGraph(g: GraphProto): void {
  for (const v of [...g.input, ...g.output]) doubleType(v.type);
  g.initializer = g.initializer.map(doubleTensor);
  for (const n of g.node) {
    for (const a of n.attribute) {
      if (a.t) a.t = doubleTensor(a.t);
      if (a.g) doubleGraph(a.g);
      if (["to", "dtype", "output_datatype"].includes(a.name) && Number(a.i) === FLOAT) {
        a.i = DOUBLE;
      }
    }
    if (TYPED_OUTPUT.has(n.opType) && !n.attribute.some((a) => a.name === "output_datatype")) {
      n.attribute.push({ name: "output_datatype", type: 2, i: DOUBLE });
    }
  }
}

/** Whether `g` (or a subgraph) has a node of an op in `ops`. */
function hasOp(g: GraphProto, ops: ReadonlySet<string>): boolean {
  return g.node.some((n) =>
    ops.has(n.opType) ||
    n.attribute.some((a) => a.g !== undefined && a.g !== null && hasOp(a.g, ops))
  );
}

/** Whether any tensor type in `g`'s inputs and outputs is `code`. */
function typed(g: GraphProto, code: number): boolean {
  const of = (t: TypeProto | null | undefined): boolean =>
    !!t && (t.tensorType?.elemType === code || of(t.sequenceType?.elemType) ||
      of(t.optionalType?.elemType));
  return [...g.input, ...g.output].some((v) => of(v.type));
}

/**
 * `model` rewritten in double (in place), or `undefined` when the case has no double form: no
 * float inputs or outputs, bfloat16 or strings among them, or an op that takes float only.
 */
export function asDouble(model: ModelProto): ModelProto | undefined {
  const g = model.graph;
  // Strings written from floats, and bfloat16, depend on the float type itself.
  if (!typed(g, FLOAT) || typed(g, BFLOAT16) || typed(g, STRING) || hasOp(g, FLOAT_ONLY)) {
    return undefined;
  }
  doubleGraph(g);
  return model;
}

/** A float input tensor as the double case takes it (other tensors as they are). */
export function doubleInput(t: HostTensor): HostTensor {
  return t.dtype === "f32"
    ? { ...t, data: Float64Array.from(t.data as Float32Array), dtype: "f64" }
    : t;
}
