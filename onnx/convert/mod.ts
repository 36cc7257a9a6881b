/**
 * ONNX node → kiln node conversion. kiln shapes are static, so an ONNX input that only
 * configures an op (Reshape's shape, Slice's bounds, Squeeze's axes, Pad's pads, Clip's limits,
 * …) must be a constant by the time the node is reached — the importer folds constant subgraphs
 * (including `Shape` arithmetic) first — and becomes an attribute here. Each converter handles
 * the forms of opsets 6–21: attributes that later became inputs (Pad, Slice, Clip, Split,
 * Squeeze, Unsqueeze, Reduce*), Softmax's 2-D coercion before 13, and the `broadcast`/`axis`
 * attributes of opset 6 arithmetic.
 *
 * @module
 */
import { isFloat } from "../../jit/ir/dtype.ts";
import { registeredConverter } from "../import/registered_ops.ts";
import { RANDOM_CONVERTERS, trainingDropout } from "./random.ts";
import { KilnError } from "../../jit/support/errors.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { COMPOSITE_CONVERTERS } from "./composite.ts";
import { TFIDF_CONVERTERS } from "./tfidf.ts";
import { LOSS_CONVERTERS } from "./loss.ts";
import { RESIZE_CONVERTERS } from "./resize.ts";
import { CONV_CONVERTERS } from "./conv.ts";
import { TENSOR_CONVERTERS } from "./tensor.ts";
import { SELECT_CONVERTERS } from "./select.ts";
import { MATH_CONVERTERS } from "./math.ts";
import { INTEGER_PRODUCT_CONVERTERS } from "./integer_product.ts";
import { RNN_CONVERTERS } from "./rnn.ts";
import { NORMALIZATION_CONVERTERS } from "./normalization.ts";
import { LLM_CONVERTERS } from "./llm.ts";
import { MS_DOMAIN, MS_QUANT_CONVERTERS } from "./ms_quant.ts";
import { MS_FUSED_CONVERTERS, ORT_DEFAULT_DOMAIN_CONVERTERS } from "./ms_fused.ts";
import { MS_ATTENTION_CONVERTERS } from "./ms_attention.ts";
import { einsum } from "./einsum.ts";
import { dft, stft } from "./dft.ts";
import { affineGrid, deformConv, gridSample, maxRoiPool, roiAlign } from "./grid.ts";
import { SEQUENCE_CONVERTERS } from "./sequence.ts";
import { CONTROL_CONVERTERS } from "./control.ts";
import { TRAINING_CONVERTERS, TRAINING_DOMAIN } from "./training.ts";
import {
  attribute,
  attrs,
  constInts,
  constNumbers,
  type Converter,
  dtypeAttr,
  type Known,
  NeedsValue,
  type NodeContext,
  type None,
  onlyFirstOutput,
  opOf,
  reduceAxes,
  roundToBf16,
  type Sequence,
  typeOf,
  valuesOf,
} from "../import/node_context.ts";

/** Input `i` as a constant scalar. */
function constScalar(c: NodeContext, i: number, what: string): number | undefined {
  const v = constNumbers(c, i, what);
  return v?.[0];
}

const pass = (op: string, pick?: (c: NodeContext) => Attrs): Converter => (c) =>
  c.emit(op, c.inputs(), pick?.(c) ?? {});

/**
 * A binary op with opset 6's explicit broadcast: with `broadcast=1`, B lines up with A from
 * `axis` on (default: trailing), so B gets trailing 1s before NumPy broadcasting applies.
 */
const legacyBinary = (op: string): Converter => (c) => {
  const [a, b] = [c.required(0), c.required(1)];
  const axis = attrs(c).int("axis");
  if (c.opset >= 7 || attrs(c).int("broadcast", 0) !== 1 || axis === undefined) {
    return c.emit(op, c.inputs());
  }
  const [aRank, bShape] = [typeOf(a).shape.length, typeOf(b).shape];
  const at = axis < 0 ? axis + aRank : axis;
  const shape = [...bShape, ...Array(Math.max(0, aRank - at - bShape.length)).fill(1)];
  const [aligned] = c.emit("Reshape", [b], { shape });
  return c.emit(op, [a, aligned]);
};

/** Softmax-like ops before opset 13: the input is viewed as 2-D at `axis` (default 1). */
const rowwise = (op: string): Converter => (c) => {
  if (c.opset >= 13) return c.emit(op, c.inputs(), { axis: attrs(c).int("axis", -1) });
  const x = c.required(0);
  const shape = typeOf(x).shape;
  const axis = attrs(c).int("axis", 1)!;
  const at = axis < 0 ? axis + shape.length : axis;
  const rows = shape.slice(0, at).reduce((p, d) => p * d, 1);
  const [flat] = c.emit("Reshape", [x], { shape: [rows, -1] });
  const [y] = c.emit(op, [flat], { axis: -1 });
  return c.emit("Reshape", [y], { shape: [...shape] });
};

function reduce(op: string): Converter {
  return (c) => {
    const r = reduceAxes(c);
    return r === "identity" ? c.emit("Identity", [c.required(0)]) : c.emit(op, [c.required(0)], r);
  };
}

const withI64 = (k: Known[], i64: boolean): Known[] => k.map((x) => ({ ...x, i64 }));

/** Whether `k` is a constant whose values, truncated, all fit in i32 (NaN does not). */
function fitsI32(k: Known): boolean {
  if (k.kind !== "const") return false;
  return valuesOf(k.tensor).every((x) => {
    const v = Math.trunc(x);
    return v >= -(2 ** 31) && v < 2 ** 31;
  });
}

function argReduce(op: "ArgMax" | "ArgMin"): Converter {
  return (c) => {
    const a = attrs(c);
    return withI64(
      c.emit(op, [c.required(0)], {
        axis: a.int("axis", 0),
        keepdims: a.int("keepdims", 1),
        select_last_index: a.int("select_last_index", 0),
      }),
      true,
    );
  };
}

/** The largest finite value of each float dtype (Clip's default limits). */
const FINITE_MAX: Partial<Record<string, number>> = {
  f32: 3.4028234663852886e38,
  f16: 65504,
  f64: Number.MAX_VALUE,
};

/** Converters by ONNX op type. */
export const CONVERTERS: Record<string, Converter> = {
  ...Object.fromEntries(
    [
      "Pow",
      "Neg",
      "Abs",
      "Sqrt",
      "Exp",
      "Log",
      "Erf",
      "Sin",
      "Cos",
      "Floor",
      "Ceil",
      "Round",
      "Reciprocal",
      "Relu",
      "Sigmoid",
      "Tanh",
      "Not",
      "And",
      "Or",
      "Equal",
      "Greater",
      "Less",
      "GreaterOrEqual",
      "LessOrEqual",
      "IsNaN",
      "Where",
      "Max",
      "Min",
      "MatMul",
      "HardSwish",
    ].map((op) => [op, pass(op)]),
  ),
  Add: legacyBinary("Add"),
  Sub: legacyBinary("Sub"),
  Mul: legacyBinary("Mul"),
  Div: legacyBinary("Div"),
  Mod: pass("Mod", (c) => ({ fmod: attrs(c).int("fmod", 0) })),
  LeakyRelu: pass("LeakyRelu", (c) => ({ alpha: attrs(c).float("alpha", 0.01) })),
  HardSigmoid: pass(
    "HardSigmoid",
    (c) => ({ alpha: attrs(c).float("alpha", 0.2), beta: attrs(c).float("beta", 0.5) }),
  ),
  Gelu: pass("Gelu", (c) => ({ approximate: attrs(c).string("approximate", "none") })),
  Softmax: rowwise("Softmax"),
  LogSoftmax: rowwise("LogSoftmax"),
  Flatten: pass("Flatten", (c) => ({ axis: attrs(c).int("axis", 1) })),
  Transpose: pass("Transpose", (c) => ({ perm: attrs(c).ints("perm") })),
  Concat: pass("Concat", (c) => ({ axis: attrs(c).int("axis") })),
  Gather: (c) => {
    // A constant scalar index is a slice: an index map that fuses, not a gather kernel.
    const [x, idx] = [c.required(0), c.required(1)];
    const axis = attrs(c).int("axis", 0)!;
    const shape = typeOf(x).shape;
    if (idx.kind === "const" && idx.tensor.shape.length === 0 && x.kind === "value") {
      const a = axis < 0 ? axis + shape.length : axis;
      const i = Number((idx.tensor.data as ArrayLike<number>)[0]);
      const start = i < 0 ? i + shape[a] : i;
      if (start >= 0 && start < shape[a]) {
        const [sliced] = c.emit("Slice", [x], { starts: [start], ends: [start + 1], axes: [a] });
        return c.emit("Squeeze", [sliced], { axes: [a] });
      }
    }
    return c.emit("Gather", [x, idx], { axis });
  },
  GatherElements: pass("GatherElements", (c) => ({ axis: attrs(c).int("axis", 0) })),
  Gemm: pass("Gemm", (c) => {
    const a = attrs(c);
    return {
      alpha: a.float("alpha", 1),
      beta: a.float("beta", 1),
      transA: a.int("transA", 0),
      transB: a.int("transB", 0),
    };
  }),
  GlobalAveragePool: pass("GlobalAveragePool"),
  BatchNormalization: (c) => {
    const training = attrs(c).int("training_mode", 0)!;
    const epsilon = attrs(c).float("epsilon", 1e-5)!;
    if (!training) {
      onlyFirstOutput(c, "running statistics (outside training mode)");
      return c.emit("BatchNormalization", c.inputs(), { epsilon, training_mode: 0 });
    }
    const momentum = attrs(c).float("momentum", 0.9)!;
    const a = { epsilon, momentum, training_mode: 1 };
    return c.emit("BatchNormalization", [0, 1, 2, 3, 4].map((i) => c.required(i)), a, 3);
  },
  LayerNormalization: (c) => {
    const axis = attrs(c).int("axis", -1)!, epsilon = attrs(c).float("epsilon", 1e-5)!;
    // Statistics are computed in f32 whatever stash_type says (kiln has no wider float).
    attrs(c).int("stash_type");
    // Mean and InvStdDev are the op's optional outputs (`stats`).
    const stats = c.node.output.slice(1).some((o) => o !== "");
    const a = stats ? { axis, epsilon, stats: 1 } : { axis, epsilon };
    return c.emit("LayerNormalization", c.inputs(), a, stats ? 3 : 1);
  },
  Dropout: (c) => {
    const [ratio, training] = [c.input(1), c.input(2)];
    const off = (k: Known | undefined) => k?.kind === "const" && valuesOf(k.tensor)[0] === 0;
    // Training mode draws a random mask, unless the ratio drops nothing.
    if (training?.kind === "value") throw new NeedsValue(c, "training_mode");
    if (ratio?.kind === "value" && !off(training)) throw new NeedsValue(c, "ratio");
    if (training && !off(training) && !off(ratio)) {
      // ratio defaults to 0.5; it is a probability to drop, below 1.
      const p = ratio?.kind === "const" ? valuesOf(ratio.tensor)[0] : 0.5;
      if (!(p >= 0 && p < 1)) {
        throw new KilnError(`${c.label}: Dropout ratio ${p} is outside [0, 1)`, {
          code: "bad-input",
          fix: "pass a ratio of at least 0 and below 1",
        });
      }
      return trainingDropout(c, p);
    }
    const y = c.emit("Identity", [c.required(0)]);
    if (!c.node.output[1]) return y;
    // Inference keeps every element: the mask is all true.
    const shape = typeOf(c.required(0)).shape;
    return [...y, ...c.emit("ConstantOfShape", [], { shape, value: 1, dtype: "bool" })];
  },
  Cast: (c) => {
    // Opset 19's saturate concerns float8 targets only, which kiln refuses by their type.
    attrs(c).int("saturate");
    const { dtype, i64, bf16 } = dtypeAttr(c, "to");
    const x = c.required(0), from = typeOf(x).dtype;
    if (i64 && from === "i64") return [x];
    // A float or u32 can leave the 32-bit range kiln holds int64 in: it is held in 64 bits,
    // unless it is a constant that fits (a trip count, a shape: those must fold).
    const wide = i64 && (isFloat(from) || from === "u32") && !fitsI32(x);
    const y = withI64(c.emit("Cast", [x], { to: wide ? "i64" : dtype }), i64);
    return bf16 ? [roundToBf16(opOf(c), y[0])] : y;
  },
  ArgMax: argReduce("ArgMax"),
  ArgMin: argReduce("ArgMin"),
  ...COMPOSITE_CONVERTERS,
  ...ORT_DEFAULT_DOMAIN_CONVERTERS,
  ...TFIDF_CONVERTERS,
  ...LOSS_CONVERTERS,
  ...RESIZE_CONVERTERS,
  ...CONV_CONVERTERS,
  ...TENSOR_CONVERTERS,
  ...SELECT_CONVERTERS,
  ...RANDOM_CONVERTERS,
  ...MATH_CONVERTERS,
  ...INTEGER_PRODUCT_CONVERTERS,
  ...RNN_CONVERTERS,
  ...NORMALIZATION_CONVERTERS,
  AffineGrid: affineGrid,
  ...LLM_CONVERTERS,
  Einsum: einsum,
  DFT: dft,
  STFT: stft,
  GridSample: gridSample,
  RoiAlign: roiAlign,
  DeformConv: deformConv,
  MaxRoiPool: maxRoiPool,
  ...SEQUENCE_CONVERTERS,
  ...CONTROL_CONVERTERS,
  CumSum: (c) =>
    c.emit("CumSum", [c.required(0)], {
      axis: constScalar(c, 1, "axis"),
      exclusive: attrs(c).int("exclusive", 0),
      reverse: attrs(c).int("reverse", 0),
    }),
  Reshape: (c) =>
    c.emit("Reshape", [c.required(0)], {
      shape: constInts(c, 1, "shape"),
      allowzero: attrs(c).int("allowzero", 0),
    }),
  Squeeze: (c) =>
    c.emit("Squeeze", [c.required(0)], { axes: constInts(c, 1, "axes") ?? attrs(c).ints("axes") }),
  Unsqueeze: (c) =>
    c.emit("Unsqueeze", [c.required(0)], {
      axes: constInts(c, 1, "axes") ?? attrs(c).ints("axes"),
    }),
  Expand: (c) => c.emit("Expand", [c.required(0)], { shape: constInts(c, 1, "shape") }),
  Slice: (c) =>
    c.emit("Slice", [c.required(0)], {
      // Before opset 10 the bounds are attributes.
      starts: constInts(c, 1, "starts") ?? attrs(c).ints("starts"),
      ends: constInts(c, 2, "ends") ?? attrs(c).ints("ends"),
      axes: constInts(c, 3, "axes") ?? attrs(c).ints("axes"),
      steps: constInts(c, 4, "steps"),
    }),
  Split: (c) => {
    const split = constInts(c, 1, "split") ?? attrs(c).ints("split");
    const outputs = c.node.output.length;
    // Opset 18's num_outputs (what PyTorch's dynamo exporter writes) names the outputs' count.
    const declared = attrs(c).int("num_outputs");
    if (declared !== undefined && (declared !== outputs || split)) {
      throw new KilnError(
        `${c.label}: num_outputs is ${declared} but the node has ${outputs} outputs${
          split ? " and split sizes" : ""
        }`,
        { code: "bad-attribute", fix: "give num_outputs equal to the outputs, and no split sizes" },
      );
    }
    return c.emit("Split", [c.required(0)], {
      axis: attrs(c).int("axis", 0),
      split,
      num_outputs: split ? undefined : outputs,
    }, outputs);
  },
  Pad: (c) => {
    // Before opset 11 the pads and the value are attributes.
    const pads = constInts(c, 1, "pads") ?? attrs(c).ints("pads");
    const axes = constInts(c, 3, "axes"), mode = attrs(c).string("mode", "constant");
    return c.emit("Pad", [c.required(0)], {
      pads,
      value: c.input(2) ? constScalar(c, 2, "constant_value") : attrs(c).float("value", 0),
      axes,
      mode,
    });
  },
  Clip: (c) => {
    const x = c.required(0);
    // An absent limit is the type's lowest or highest finite value (ONNX's defaults), so an
    // infinity is clipped to it: -inf through Clip(max=1) is -3.4e38, as ONNX Runtime gives.
    const finite = FINITE_MAX[typeOf(x).dtype];
    return c.emit("Clip", [x], {
      // Before opset 11 the limits are attributes.
      min: constScalar(c, 1, "min") ?? (c.opset < 11 ? attrs(c).float("min") : undefined) ??
        (finite && -finite),
      max: constScalar(c, 2, "max") ?? (c.opset < 11 ? attrs(c).float("max") : undefined) ??
        finite,
    });
  },
  ReduceSum: reduce("ReduceSum"),
  ReduceMean: reduce("ReduceMean"),
  ReduceMax: reduce("ReduceMax"),
  ReduceMin: reduce("ReduceMin"),
  Sum: (c) => c.emit("Sum", [c.required(0), ...c.inputs().slice(1)]),
  Shape: (c) => {
    const x = c.required(0);
    const shape = typeOf(x).shape;
    const a = attrs(c);
    const rank = shape.length;
    const clamp = (v: number) => Math.min(Math.max(v < 0 ? v + rank : v, 0), rank);
    const dims = shape.slice(clamp(a.int("start", 0)!), clamp(a.int("end", rank)!));
    return [{
      kind: "const",
      tensor: { data: Int32Array.from(dims), shape: [dims.length], dtype: "i32" },
      i64: true,
    }];
  },
  Size: (c) => {
    const x = c.required(0);
    const shape = typeOf(x).shape;
    return [{
      kind: "const",
      tensor: {
        data: Int32Array.from([shape.reduce((p, d) => p * d, 1)]),
        shape: [],
        dtype: "i32",
      },
      i64: true,
    }];
  },
  Constant: (c) => {
    const a = attrs(c);
    const t = a.tensor("value");
    const attr = c.node.attribute[0];
    if (t) return [{ kind: "const", tensor: t, i64: attr?.t?.dataType === 7 }];
    if (attribute(c, "value_float")) {
      return [{
        kind: "const",
        tensor: { data: Float32Array.of(a.float("value_float")!), shape: [], dtype: "f32" },
        i64: false,
      }];
    }
    if (attribute(c, "value_floats")) {
      const v = attribute(c, "value_floats")!.floats ?? [];
      return [{
        kind: "const",
        tensor: { data: Float32Array.from(v), shape: [v.length], dtype: "f32" },
        i64: false,
      }];
    }
    if (attribute(c, "value_int")) {
      return [{
        kind: "const",
        tensor: { data: Int32Array.of(a.int("value_int")!), shape: [], dtype: "i32" },
        i64: true,
      }];
    }
    if (attribute(c, "value_ints")) {
      const v = a.ints("value_ints") ?? [];
      return [{
        kind: "const",
        tensor: { data: Int32Array.from(v), shape: [v.length], dtype: "i32" },
        i64: true,
      }];
    }
    throw new KilnError(`${c.label}: unsupported Constant attribute ${attr?.name}`, {
      code: "unsupported",
      fix: "use value, value_float(s) or value_int(s)",
    });
  },
  ConstantOfShape: (c) => {
    const t = attrs(c).tensor("value");
    const value = t ? valuesOf(t)[0] ?? 0 : 0;
    const dtype = t?.dtype ?? "f32";
    const i64 = c.node.attribute[0]?.t?.dataType === 7;
    return withI64(
      c.emit("ConstantOfShape", [], { shape: constInts(c, 0, "shape"), value, dtype }),
      i64,
    );
  },
  Range: (c) => {
    const x = c.required(0);
    const dtype = typeOf(x).dtype;
    const k = c.emit("Range", [], {
      start: constScalar(c, 0, "start"),
      limit: constScalar(c, 1, "limit"),
      delta: constScalar(c, 2, "delta"),
      dtype,
    });
    return withI64(k, x.i64);
  },
};

/** ONNX Runtime's `com.microsoft` ops kiln imports. */
const MS_CONVERTERS: Record<string, Converter> = {
  ...MS_QUANT_CONVERTERS,
  ...MS_FUSED_CONVERTERS,
  ...MS_ATTENTION_CONVERTERS,
};

/**
 * The converter of op `opType` in `domain` (ONNX's default domain, the training domain, or ONNX
 * Runtime's quantized and fused contrib ops), if kiln has one, else one a program registered for
 * that domain at opset `version` (see `registered_ops.ts`).
 */
export function converterOf(
  domain: string | undefined,
  opType: string,
  version = 1,
): ((c: NodeContext) => (Known | Sequence | None)[]) | undefined {
  const d = domain ?? "";
  const table: Record<string, Converter> | undefined = d === "" || d === "ai.onnx"
    ? CONVERTERS
    : d === TRAINING_DOMAIN
    ? TRAINING_CONVERTERS
    : d === MS_DOMAIN
    ? MS_CONVERTERS
    : undefined;
  if (table && Object.hasOwn(table, opType)) return table[opType];
  // Then what the program registered (registerOnnxOp, or registerOp in kiln's domain).
  return registeredConverter(d, opType, version);
}
