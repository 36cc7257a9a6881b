/**
 * The ONNX suite's node cases again in other float types: every case whose inputs or outputs are
 * float, its float tensors (graph inputs and outputs, initializers, constants, `to`/`dtype`
 * attributes) made double or float16, run against the float case's own expected values. ONNX
 * ships few such cases (Cast, Max, Min, Mod in double), while most of its ops accept both and
 * real models are exported in fp16: these derived suites catch a converter that mixes f32
 * constants into an f64 or f16 graph, or reads an f16 constant's bits as its value, and a kernel
 * path that a backend gets wrong for either type.
 *
 * @module
 */
import type { DType } from "../../jit/ir/dtype.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { convertData } from "../../jit/passes/precision.ts";
import {
  dtypeOfCode,
  type GraphProto,
  type ModelProto,
  protoOf,
  tensorOf,
  type TensorProto,
  type TypeProto,
} from "../../onnx/wire/proto.ts";

/** A derived form of a float case. */
export interface Form {
  /** What marks a case of this form: its id is the float case's folder with this suffix. */
  readonly suffix: string;
  /** The suite's name in the report. */
  readonly suite: string;
  /** ONNX's element type code the float tensors become. */
  readonly code: number;
  /** Tolerances against the float case's outputs: absolute, relative. */
  readonly tolerance: readonly [number, number];
  /** Ops whose float operands ONNX does not allow in this type: their cases have no such form. */
  readonly refused: ReadonlySet<string>;
  /**
   * Cases whose float values this type cannot carry, with why (they run and are reported, with
   * the reason, as fails).
   */
  readonly beyond: Readonly<Record<string, string>>;
}

/** Ops whose float operands stay float (quantization scales, TfIdfVectorizer's output). */
const FLOAT_ONLY = [
  "QuantizeLinear",
  "DequantizeLinear",
  "DynamicQuantizeLinear",
  "QLinearConv",
  "QLinearMatMul",
  "TfIdfVectorizer",
];

const F16_SPACING = "f16 holds its inputs near 10⁴ only to a spacing of 8, which changes the " +
  "result entirely";
const F16_CANCELS = "its outputs are sums of f16-rounded terms up to 30 times larger that " +
  "cancel, so the terms' rounding shows in them as percents";

/** Double: ONNX's own tolerances (f64 is more precise than the float outputs compared against). */
export const AS_DOUBLE: Form = {
  suffix: "#double",
  suite: "node as double",
  code: 11,
  tolerance: [1e-7, 1e-3],
  refused: new Set(FLOAT_ONLY),
  beyond: {},
};

/**
 * float16: every op rounds to f16 (about 3 decimal digits), so results carry a few f16 ulps of
 * the float case's: atol 1e-3, rtol 1e-2.
 */
export const AS_HALF: Form = {
  suffix: "#half",
  suite: "node as float16",
  code: 10,
  tolerance: [1e-3, 1e-2],
  refused: new Set([...FLOAT_ONLY, "Adam", "Adagrad", "Momentum"]),
  beyond: {
    test_softmax_large_number: F16_SPACING,
    test_softmax_large_number_expanded: F16_SPACING,
    test_logsoftmax_large_number: F16_SPACING,
    test_logsoftmax_large_number_expanded: F16_SPACING,
    test_reduce_prod_default_axes_keepdims_example: "its product, 479001600, is past f16's " +
      "largest finite value (65504)",
    test_tan: "its inputs come near tan's poles, where f16's rounding of an input moves the " +
      "result by a percent",
    test_dft_axis: F16_CANCELS,
    test_stft: F16_CANCELS,
    test_stft_with_window: F16_CANCELS,
    test_layer_normalization_4d_axis_negative_3: "an output of 0.006 carries the f16 rounding " +
      "of a mean and a deviation near 1: 1.1e-3 off, just past atol",
  },
};

/** The derived forms, in report order. */
export const FORMS: readonly Form[] = [AS_DOUBLE, AS_HALF];

/** The form of case id `id` (undefined for ONNX's own cases). */
export function formOf(id: string): Form | undefined {
  return FORMS.find((f) => id.endsWith(f.suffix));
}

const FLOAT = 1, STRING = 8, BFLOAT16 = 16;

/** `t` in `form`'s type if it is float, else itself. */
function retyped(t: TensorProto, form: Form): TensorProto {
  if (t.dataType !== FLOAT) return t;
  return protoOf(t.name ?? "", formInput(tensorOf(t, t.name ?? "tensor"), form));
}

function retype(t: TypeProto | null | undefined, code: number): void {
  if (!t) return;
  if (t.tensorType?.elemType === FLOAT) t.tensorType.elemType = code;
  retype(t.sequenceType?.elemType, code);
  retype(t.optionalType?.elemType, code);
}

/** Ops whose output type is an `output_datatype` attribute (float when absent). */
const TYPED_OUTPUT = new Set(["HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"]);

function retypeGraph(g: GraphProto, form: Form): void {
  for (const v of [...g.input, ...g.output]) retype(v.type, form.code);
  g.initializer = g.initializer.map((t) => retyped(t, form));
  for (const n of g.node) {
    for (const a of n.attribute) {
      if (a.t) a.t = retyped(a.t, form);
      if (a.g) retypeGraph(a.g, form);
      if (["to", "dtype", "output_datatype"].includes(a.name) && Number(a.i) === FLOAT) {
        a.i = form.code;
      }
    }
    if (TYPED_OUTPUT.has(n.opType) && !n.attribute.some((a) => a.name === "output_datatype")) {
      n.attribute.push({ name: "output_datatype", type: 2, i: form.code });
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
 * `model` rewritten in `form`'s type (in place), or `undefined` when the case has no such form:
 * no float inputs or outputs; bfloat16 or strings among them (their values depend on the float
 * type itself); or an op whose float operands must stay float.
 */
export function asForm(model: ModelProto, form: Form): ModelProto | undefined {
  const g = model.graph;
  const other = typed(g, BFLOAT16) || typed(g, STRING) || typed(g, form.code);
  if (!typed(g, FLOAT) || other || hasOp(g, form.refused)) return undefined;
  retypeGraph(g, form);
  return model;
}

/** A float input tensor as `form`'s case takes it (other tensors as they are). */
export function formInput(t: HostTensor, form: Form): HostTensor {
  if (t.dtype !== "f32") return t;
  const dtype = dtypeOfCode(form.code, "form") as DType;
  return { ...t, data: convertData(t.data, "f32", dtype), dtype };
}
