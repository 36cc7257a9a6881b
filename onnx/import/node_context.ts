/**
 * What an ONNX node converter works with: the importer's knowledge of each value (constant data
 * or a graph value), the node's context, and the rule for inputs that must be constant.
 *
 * @module
 */
import { byteSize, type DType, fromF16Bits, fromNumbers, isFloat } from "../../jit/ir/dtype.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { checkBudget } from "../../jit/runtime/budget.ts";
import { handOver } from "../../jit/ir/hand_over.ts";
import { KilnError } from "../../jit/support/errors.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { Attrs, ValueType } from "../../jit/ops/mod.ts";
import {
  type AttributeProto,
  dtypeOfCode,
  int,
  INT4,
  type NodeProto,
  tensorOf,
  type TensorProto,
  UINT4,
} from "../wire/proto.ts";

/** What the importer knows about an ONNX value: constant data, or a graph value. */
export type Known =
  | {
    readonly kind: "const";
    readonly tensor: HostTensor & { dtype: DType };
    readonly i64: boolean;
    /** Whether the model types it bfloat16 (held in f32). */
    readonly bf16?: boolean;
    /** Whether the model types it uint4 or int4 (held in u8 or i8). */
    readonly fourBit?: boolean;
  }
  | {
    readonly kind: "value";
    readonly name: string;
    readonly type: ValueType;
    readonly i64: boolean;
    /** Whether the model types it bfloat16 (held in f32). */
    readonly bf16?: boolean;
  };

/**
 * An ONNX sequence, known element by element at import: sequence ops only rearrange tensors, so
 * they run in the importer and never reach a graph.
 */
export interface Sequence {
  /** Discriminant. */
  readonly kind: "sequence";
  /** The tensors, in order. */
  readonly items: readonly Known[];
}

/** An empty ONNX optional. */
export interface None {
  /** Discriminant. */
  readonly kind: "none";
}

/**
 * `k` as a constant of the graph where it is one, not the named param an initializer becomes:
 * an op whose decomposition reads the values (a scatter's indices, RoiAlign's regions) sees them.
 */
export function asConstant(k: Known): Known {
  return k.kind === "const" ? { ...k, tensor: { ...k.tensor } } : k;
}

/** Emits one op and returns its (single) output: the shorthand composites are written in. */
export type OpFn = (name: string, xs: Known[], attrs?: Attrs) => Known;

/** `c.emit`'s first output, as an {@linkcode OpFn}. */
export function opOf(c: NodeContext): OpFn {
  return (name, xs, a = {}) => c.emit(name, xs, a)[0];
}

/** A constant tensor of `dtype` (floats for f32, 0/1 for bool, integers otherwise). */
export function constant(
  values: ArrayLike<number>,
  shape: number[],
  dtype: DType,
  i64 = false,
): Known {
  return {
    kind: "const",
    tensor: { data: handOver(fromNumbers(dtype, values)), shape, dtype },
    i64,
  };
}

/** `attrs` without its undefined entries (absent ONNX attributes). */
export function clean(attrs: Attrs): Attrs {
  return Object.fromEntries(Object.entries(attrs).filter(([, v]) => v !== undefined));
}

/** The node that made a value, and what its inputs were (undefined: left out). */
export interface Producer {
  /** The node. */
  readonly node: NodeProto;
  /** Its label for messages. */
  readonly label: string;
  /** Its inputs as converted. */
  readonly inputs: readonly (Known | undefined)[];
}

/**
 * Largest constant the importer folds eagerly (elements), whatever its inputs: past it a
 * constant expression stays in the graph unless it transforms a weight (see `import.ts`).
 */
export const FOLD_LIMIT = 1 << 20;

/**
 * Largest constant the importer folds where it takes no more than twice the bytes of a constant
 * input: a weight's transform (a transpose, an 8-bit weight widened to i16, a Cast of f16), which
 * unfolded runs on every run. A large constant made from small ones (a causal mask from two
 * ranges) stays index arithmetic, and so does a weight's expansion to 4× its bytes (an int8 or
 * int4 weight dequantized to f32), which keeps a quantized model's memory its packed bytes.
 * Packed weights that must stay packed whatever their size say so (`NodeContext.held`).
 */
const TRANSFORM_FOLD_LIMIT = 1 << 24;

/**
 * Whether an op of constant inputs `ins` giving `types` folds at import. An op of no inputs (a
 * decomposition's constant, already computed) always does.
 */
export function folds(ins: readonly Known[], types: readonly ValueType[]): boolean {
  const bytesOf = (t: { shape: readonly number[]; dtype: DType }) =>
    sizeOf(t.shape) * byteSize(t.dtype);
  const largest = Math.max(0, ...ins.map((k) => (k.kind === "const" ? bytesOf(k.tensor) : 0)));
  return types.every((t) => {
    // int64 held in 64 bits is computed by the compile's lowering (`jit/passes/int64.ts`).
    if (t.dtype === "i64") return false;
    const size = sizeOf(t.shape);
    return ins.length === 0 || size <= FOLD_LIMIT ||
      (size <= TRANSFORM_FOLD_LIMIT && bytesOf(t) <= 2 * largest);
  });
}

/** What a converter can do. */
export interface NodeContext {
  /** The ONNX node. */
  readonly node: NodeProto;
  /** Label for messages. */
  readonly label: string;
  /** The model's opset version (old forms of an op are adapted by its converter). */
  readonly opset: number;
  /** Input `i`, or `undefined` when absent (optional inputs). */
  input(i: number): Known | undefined;
  /** Input `i`, which the op requires: a typed error when the model leaves it out. */
  required(i: number): Known;
  /** Every input, in order; a typed error when one is left out before a present one. */
  inputs(): Known[];
  /** Input `i` as a sequence (a typed error when it is a tensor or absent). */
  sequence(i: number): readonly Known[];
  /**
   * Inlines the node's graph attribute `name` (If's branches, a Loop or Scan body): its inputs
   * bound to `args`, outer names visible; returns its outputs.
   */
  subgraph(name: string, args: readonly (Known | Sequence | None)[]): (Known | Sequence | None)[];
  /** Whether input `i` names an empty optional. */
  absent(i: number): boolean;
  /** The node that made tensor `name` (here or in an enclosing graph), with its inputs. */
  producer(name: string): Producer | undefined;
  /** The tensor `name` names, here or in an enclosing graph. */
  value(name: string): Known | undefined;
  /**
   * Emits a kiln op: folded when its inputs are constant, written out through its decomposition
   * where the importer expands it (`expand.ts`).
   */
  emit(op: string, inputs: readonly Known[], attrs?: Attrs, outputs?: number): Known[];
  /**
   * Constant `k` as a value of the graph: ops on it run with the model instead of folding at
   * import (a packed weight whose unpacked form would be larger than itself).
   */
  held(k: Known): Known;
  /**
   * Requires boolean `bad` to hold no `true`: a typed error saying `why` at import where it is
   * constant, else when a run finds one (a check output of the graph).
   */
  check(bad: Known, why: string): void;
}

/**
 * An input that decides shapes or attributes (Reshape's shape, Slice's bounds, axes, pads, …) is
 * computed at run time. `OnnxModel` catches it and specialises the model on the values of its
 * small inputs instead (one compile per distinct value set).
 */
export class NeedsValue extends KilnError {
  /** The error for input `what` of the node `c` converts. */
  constructor(c: NodeContext, what: string) {
    super(`${c.label}: its ${what} input is computed at run time; kiln needs it constant`, {
      code: "unsupported",
      fix:
        "feed it from a model input of up to 64 elements (OnnxModel.run, OnnxModel.compileFor and kiln run specialise on those values), or export with fixed shapes so the importer can fold it",
    });
  }
}

/**
 * Input `i`'s values as integers (axes, a shape, K; kiln needs them static), `undefined` when
 * absent: a typed error when its elements are floats.
 */
export function constInts(c: NodeContext, i: number, what: string): number[] | undefined {
  const k = c.input(i);
  if (k?.kind === "const" && isFloat(k.tensor.dtype)) {
    // A count or an index taken as a float reached `Array(0.02)` (a fuzzed TopK's K).
    throw new KilnError(`${c.label}: its ${what} input is ${k.tensor.dtype}, not integers`, {
      code: "dtype-mismatch",
      fix: `store ${what} as an int64 tensor, as the operator's definition asks`,
    });
  }
  return constNumbers(c, i, what);
}

/**
 * Input `i`'s values as numbers, whatever its element type (a Clip's bounds, a region's corners),
 * `undefined` when absent; a specialisation request when it is computed.
 */
export function constNumbers(c: NodeContext, i: number, what: string): number[] | undefined {
  const k = c.input(i);
  if (!k) return undefined;
  if (k.kind !== "const") throw new NeedsValue(c, what);
  return valuesOf(k.tensor);
}

/** A constant tensor's elements as numbers: f16 decoded from its bits, i64 made numbers. */
export function valuesOf(t: HostTensor): number[] {
  return t.dtype === "f16"
    ? Array.from(t.data as Uint16Array, fromF16Bits)
    : Array.from(t.data as ArrayLike<number>, Number);
}

/**
 * Input `i` as a constant tensor: a typed error when it is missing, a specialisation request
 * ({@linkcode NeedsValue}) when it is computed.
 */
export function constInput(
  c: NodeContext,
  i: number,
  what: string,
): Extract<Known, { kind: "const" }> {
  const k = c.input(i);
  if (!k) {
    throw new KilnError(`${c.label}: its ${what} input is missing`, {
      code: "invalid-graph",
      fix: `give the node its ${what} input`,
    });
  }
  if (k.kind !== "const") throw new NeedsValue(c, what);
  return k;
}

/**
 * An ONNX op's converter: the node's outputs as kiln values, in order (`Converter<Known>` for
 * ops whose outputs are tensors).
 */
export type Converter<T = Known | Sequence | None> = (c: NodeContext) => T[];

/** The type of a known value (a constant's tensor carries its shape and dtype). */
export function typeOf(k: Known): ValueType {
  return k.kind === "const" ? k.tensor : k.type;
}

const consulted = new WeakMap<NodeProto, Set<string>>();

/** The node's attribute `name`, as stored (the read is recorded: see {@linkcode unreadAttributes}). */
export function attribute(c: NodeView, name: string): AttributeProto | undefined {
  const seen = consulted.get(c.node) ?? consulted.set(c.node, new Set()).get(c.node)!;
  seen.add(name);
  return c.node.attribute?.find((a) => a.name === name);
}

/**
 * The attributes of `node` its converter never looked at: ones kiln does not know (a typo, an
 * extension) or ones it would silently ignore. Either way the model means something kiln does not.
 */
export function unreadAttributes(node: NodeProto): string[] {
  const seen = consulted.get(node);
  return (node.attribute ?? []).map((a) => a.name).filter((n) => !seen?.has(n));
}

/** A node's ONNX attributes by name, each `undefined` (or the fallback) when absent. */
export interface NodeAttrs {
  /** An `INT` attribute. */
  int(name: string, fallback?: number): number | undefined;
  /** An `INTS` attribute. */
  ints(name: string): number[] | undefined;
  /** A `FLOAT` attribute. */
  float(name: string, fallback?: number): number | undefined;
  /** A `FLOATS` attribute. */
  floats(name: string): number[] | undefined;
  /** A `STRING` attribute. */
  string(name: string, fallback?: string): string | undefined;
  /** A `TENSOR` attribute, converted. */
  tensor(name: string): (HostTensor & { dtype: DType }) | undefined;
  /**
   * A boolean `INT` attribute (`fallback` where absent): 0 or 1, anything else a typed error,
   * since ONNX defines no other and ONNX Runtime reads other values differently op by op (Trilu
   * keeps the lower part for `upper` -1, IsInf detects for `detect_positive` -2).
   */
  flag(name: string, fallback: boolean): boolean;
}

/**
 * The element type ONNX dtype attribute `name` of the node `c` converts names, as kiln holds it
 * (int64 as i32, marked `i64`), or `fallback` when the node has no such attribute.
 */
export function dtypeAttr(
  c: NodeContext,
  name: string,
  fallback?: { dtype: DType; i64: boolean },
): { dtype: DType; i64: boolean; bf16?: boolean } {
  const code = attrs(c).int(name);
  if (code === undefined && fallback) return fallback;
  const d = dtypeOfCode(code!, c.label);
  return { dtype: d === "i64" ? "i32" : d, i64: d === "i64", bf16: code === BF16 };
}

/** ONNX's element type code of bfloat16. */
export const BF16 = 16;

/**
 * Each initializer decoded once however often its model is imported (a generation imports its
 * decoder twice, for prefill and for the step, and a model once per input shape): the graphs share
 * its data, and so do the device uploads keyed by it.
 */
const decoded = new WeakMap<TensorProto, ReturnType<typeof tensorOf>>();

/**
 * What the importer knows of an initializer: its data, and whether the model types it int64,
 * bfloat16 or 4-bit.
 */
export function initializerOf(t: TensorProto): Known {
  let tensor = decoded.get(t);
  if (!tensor) {
    decoded.set(t, tensor = tensorOf(t, "initializer"));
    handOver(tensor.data);
  }
  // Checked here, not only as a param: one the importer folds away never becomes one.
  checkBudget(tensor.shape, tensor.dtype, `initializer "${t.name ?? ""}"`);
  return {
    kind: "const",
    tensor,
    i64: t.dataType === 7,
    bf16: t.dataType === BF16,
    fourBit: t.dataType === UINT4 || t.dataType === INT4,
  };
}

/**
 * `x` (f32) rounded to the nearest bfloat16, ties to even, as ONNX Runtime and ONNX's later Cast
 * spec round: on the f32's bits, add half of the dropped 16 bits' unit (minus one unless the kept
 * last bit is odd) and clear them. NaN stays NaN; past the largest bfloat16 rounds to infinity.
 */
export function roundToBf16(op: OpFn, x: Known): Known {
  return { ...op("RoundToBf16", [x]), bf16: true };
}

/**
 * A node as its attributes are read: the one a converter converts (its {@linkcode NodeContext}),
 * or one that made an input (its {@linkcode Producer}).
 */
export type NodeView = Pick<NodeContext, "node" | "label">;

/** The attributes of node `c` (the one a converter converts, or a producer of its inputs). */
export function attrs(c: NodeView): NodeAttrs {
  return {
    int: (name, fallback) => {
      const a = attribute(c, name);
      return a ? int(a.i) : fallback;
    },
    ints: (name) => attribute(c, name)?.ints?.map(int),
    float: (name, fallback) => {
      const a = attribute(c, name);
      return a ? a.f ?? 0 : fallback;
    },
    floats: (name) => {
      const a = attribute(c, name);
      return a?.floats ? [...a.floats] : undefined;
    },
    string: (name, fallback) => {
      const a = attribute(c, name);
      return a?.s ? new TextDecoder().decode(a.s) : fallback;
    },
    tensor: (name) => {
      const a = attribute(c, name);
      return a?.t ? tensorOf(a.t, `${c.label} attribute ${name}`) : undefined;
    },
    flag: (name, fallback) => {
      const a = attribute(c, name);
      if (!a) return fallback;
      const v = int(a.i);
      if (v !== 0 && v !== 1) {
        throw new KilnError(`${c.label}: attribute ${name} is ${v}, not a boolean`, {
          code: "bad-attribute",
          fix: `set ${name} to 0 or 1`,
        });
      }
      return v === 1;
    },
  };
}

/**
 * A Reduce* node's axes (input 1 from opset 18, the attribute before) and keepdims, or
 * `"identity"` when the axes are empty and `noop_with_empty_axes` is set.
 */
export function reduceAxes(c: NodeContext): { axes: number[]; keepdims: number } | "identity" {
  const a = attrs(c);
  const axes = constInts(c, 1, "axes") ?? a.ints("axes") ?? [];
  // Both read even when moot, so they are not reported unread (dynamo exports set both).
  const keepdims = a.int("keepdims", 1)!;
  const noop = a.int("noop_with_empty_axes", 0) === 1;
  if (axes.length === 0 && noop) return "identity";
  return { axes, keepdims };
}

/** Fails when an optional output the model uses cannot be produced. */
export function onlyFirstOutput(c: NodeContext, what: string): void {
  if (c.node.output.slice(1).some((o) => o !== "")) {
    throw new KilnError(`${c.label}: its ${what} output is not supported`, {
      code: "unsupported",
      fix: "export the model for inference, without that output",
    });
  }
}
