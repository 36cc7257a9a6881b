/**
 * The lazy Tensor API. Each op checks its operands and infers its result type at once (errors
 * point at the call), but computes nothing: `await t.data()` compiles the pending expression into
 * one graph (cached by structural hash) and runs it. Tensors are disposable (`dispose()`,
 * `using`); a FinalizationRegistry drops the bookkeeping of tensors that were garbage-collected
 * undisposed, and {@linkcode liveTensors} lists the rest for leak checks.
 *
 * @module
 */
import {
  type DType,
  dtypeOfData,
  exactNumbers,
  fromF16Bits,
  internalDType,
  isDType,
  type TensorData,
} from "../ir/dtype.ts";
import { checkOptions, KilnError, shown } from "../support/errors.ts";
import { acceptInput } from "../ir/host_tensor.ts";
import { type Attrs, inferNode } from "../ops/mod.ts";
import { type Lazy, realize } from "./realize.ts";
import { formatShape, type Shape } from "../ir/shape.ts";

/** Nested arrays of numbers or booleans, as accepted by {@linkcode tensor}. */
export type NestedArray = number | boolean | readonly NestedArray[];

/** A live tensor as reported by {@linkcode liveTensors}. */
export interface LiveTensorInfo {
  /** Creation id. */
  readonly id: number;
  /** Shape. */
  readonly shape: Shape;
  /** Dtype. */
  readonly dtype: DType;
  /** Op that made it, or `"tensor"` for data. */
  readonly origin: string;
}

const live = new Map<number, LiveTensorInfo>();
const finalizer = new FinalizationRegistry<number>((id) => live.delete(id));
let nextId = 0;

/** Tensors created and neither disposed nor garbage-collected. */
export function liveTensors(): LiveTensorInfo[] {
  return [...live.values()];
}

/** A lazily evaluated tensor. */
export class Tensor {
  /** Shape. */
  readonly shape: Shape;
  /** Element type. */
  readonly dtype: DType;
  /** Creation id (matches {@linkcode LiveTensorInfo.id}). */
  readonly id: number;
  #value?: Lazy;

  /** Wraps a lazy value; use {@linkcode tensor} or the op methods to make tensors. */
  constructor(value: Lazy, origin: string) {
    this.shape = value.type.shape;
    this.dtype = value.type.dtype;
    this.id = nextId++;
    this.#value = value;
    live.set(this.id, { id: this.id, shape: this.shape, dtype: this.dtype, origin });
    finalizer.register(this, this.id, this);
  }

  /** Number of dimensions. */
  get rank(): number {
    return this.shape.length;
  }

  /** Whether `dispose()` was called. */
  get disposed(): boolean {
    return this.#value === undefined;
  }

  /** Computes the tensor (compiling its pending graph if needed) and returns a copy of its data. */
  async data(): Promise<TensorData> {
    return (await realize(this.#lazy("data"))).slice();
  }

  /** The data as plain numbers (f16 decoded), nested by shape. */
  async array(): Promise<NestedArray> {
    const d = await this.data();
    const flat = this.dtype === "f16"
      ? Array.from(d as Uint16Array, fromF16Bits)
      : Array.from(d as ArrayLike<number>);
    const nest = (dims: Shape, off: number): NestedArray => {
      if (dims.length === 0) return flat[off];
      const inner = dims.slice(1).reduce((a, b) => a * b, 1);
      return [...Array(dims[0]).keys()].map((i) => nest(dims.slice(1), off + i * inner));
    };
    return nest(this.shape, 0);
  }

  /** Releases the tensor. Pending tensors computed from it still work. */
  dispose(): void {
    if (this.#value === undefined) return;
    this.#value = undefined;
    live.delete(this.id);
    finalizer.unregister(this);
  }

  /** Disposes the tensor at the end of a `using` block. */
  [Symbol.dispose](): void {
    this.dispose();
  }

  #lazy(what: string): Lazy {
    if (!this.#value) {
      throw new KilnError(
        `Tensor #${this.id} ${this.dtype}${
          formatShape(this.shape)
        } was disposed; cannot use it for ${what}`,
        {
          code: "disposed",
          fix: "keep the tensor until its last use, or compute what you need before dispose()",
        },
      );
    }
    return this.#value;
  }

  /** Applies `op` to tensors, inferring its outputs now. */
  static apply(op: string, inputs: readonly Tensor[], attrs: Attrs = {}): Tensor[] {
    // Anything else had failed inside (reading a private field of a non-Tensor) as a TypeError.
    const at = Array.isArray(inputs) ? inputs.findIndex((t) => !(t instanceof Tensor)) : -2;
    if (at !== -1) {
      const got = at === -2 ? shown(inputs) : `${shown(inputs[at])} at ${at}`;
      throw new KilnError(`${op} takes a list of Tensors, got ${got}`, {
        code: "bad-input",
        fix: "pass Tensors made by tensor(...) or by their ops, e.g. concat([a, b])",
      });
    }
    return applyLazy(op, inputs.map((t) => t.#lazy(op)), attrs);
  }

  /** A tensor operand as is; a number as a scalar leaf of `dtype` (no user-visible tensor). */
  static #operand(v: Tensor | number, dtype: DType, op: string): Lazy {
    if (v instanceof Tensor) return v.#lazy(op);
    // A string or an object had become NaN (and null 0) without a word.
    if (typeof v !== "number") {
      throw new KilnError(`Tensor.${op}: an operand is ${shown(v)}, not a Tensor or a number`, {
        code: "bad-input",
        fix: "pass a Tensor (tensor(...)) or a plain number",
      });
    }
    return {
      type: { shape: [], dtype },
      data: exactNumbers(dtype, [v], `${op}()`),
    };
  }

  #op(op: string, others: readonly (Tensor | number)[] = [], attrs?: Attrs): Tensor {
    const inputs = [this.#lazy(op), ...others.map((o) => Tensor.#operand(o, this.dtype, op))];
    return applyLazy(op, inputs, attrs ?? {})[0];
  }

  /** `this + other` (broadcasting). */
  add(other: Tensor | number): Tensor {
    return this.#op("Add", [other]);
  }
  /** `this - other`. */
  sub(other: Tensor | number): Tensor {
    return this.#op("Sub", [other]);
  }
  /** `this * other`. */
  mul(other: Tensor | number): Tensor {
    return this.#op("Mul", [other]);
  }
  /** `this / other`. */
  div(other: Tensor | number): Tensor {
    return this.#op("Div", [other]);
  }
  /** `this ** other`. */
  pow(other: Tensor | number): Tensor {
    return this.#op("Pow", [other]);
  }
  /** Elementwise maximum (NaN propagates). */
  maximum(other: Tensor | number): Tensor {
    return this.#op("Max", [other]);
  }
  /** Elementwise minimum (NaN propagates). */
  minimum(other: Tensor | number): Tensor {
    return this.#op("Min", [other]);
  }
  /** `this == other` as bool. */
  equal(other: Tensor | number): Tensor {
    return this.#op("Equal", [other]);
  }
  /** `this > other` as bool. */
  greater(other: Tensor | number): Tensor {
    return this.#op("Greater", [other]);
  }
  /** `this < other` as bool. */
  less(other: Tensor | number): Tensor {
    return this.#op("Less", [other]);
  }
  /** `-this`. */
  neg(): Tensor {
    return this.#op("Neg");
  }
  /** `|this|`. */
  abs(): Tensor {
    return this.#op("Abs");
  }
  /** Square root. */
  sqrt(): Tensor {
    return this.#op("Sqrt");
  }
  /** `e^this`. */
  exp(): Tensor {
    return this.#op("Exp");
  }
  /** Natural logarithm. */
  log(): Tensor {
    return this.#op("Log");
  }
  /** Sine. */
  sin(): Tensor {
    return this.#op("Sin");
  }
  /** Cosine. */
  cos(): Tensor {
    return this.#op("Cos");
  }
  /** Error function. */
  erf(): Tensor {
    return this.#op("Erf");
  }
  /** `1 / this`. */
  reciprocal(): Tensor {
    return this.#op("Reciprocal");
  }
  /** Rounds down. */
  floor(): Tensor {
    return this.#op("Floor");
  }
  /** Rounds up. */
  ceil(): Tensor {
    return this.#op("Ceil");
  }
  /** Rounds half to even. */
  round(): Tensor {
    return this.#op("Round");
  }
  /** `max(this, 0)`. */
  relu(): Tensor {
    return this.#op("Relu");
  }
  /** `this < 0 ? alpha * this : this`. */
  leakyRelu(alpha = 0.01): Tensor {
    return this.#op("LeakyRelu", [], { alpha });
  }
  /** Logistic sigmoid. */
  sigmoid(): Tensor {
    return this.#op("Sigmoid");
  }
  /** Hyperbolic tangent. */
  tanh(): Tensor {
    return this.#op("Tanh");
  }
  /** GELU, exact (erf) or with the tanh approximation. */
  gelu(approximate: "none" | "tanh" = "none"): Tensor {
    return this.#op("Gelu", [], { approximate });
  }
  /** Clamps into `[min, max]`. */
  clip(min?: number, max?: number): Tensor {
    return this.#op("Clip", [], { min, max });
  }
  /**
   * Converts to `dtype` (truncating and saturating into integers; `bf16` rounds to the nearest
   * bfloat16, held as f32).
   */
  cast(dtype: DType | "bf16"): Tensor {
    // bf16 is held as f32: values rounded to the nearest bfloat16.
    if (dtype === "bf16") return this.cast("f32").#op("RoundToBf16", [], {});
    return this.#op("Cast", [], { to: dtype });
  }
  /** `this ? a : b` elementwise; `this` must be bool. */
  where(a: Tensor | number, b: Tensor | number): Tensor {
    const dtype = a instanceof Tensor ? a.dtype : b instanceof Tensor ? b.dtype : "f32";
    const inputs = [
      this.#lazy("Where"),
      Tensor.#operand(a, dtype, "Where"),
      Tensor.#operand(b, dtype, "Where"),
    ];
    return applyLazy("Where", inputs, {})[0];
  }
  /** Matrix product (batched, NumPy semantics). */
  matmul(other: Tensor): Tensor {
    return this.#op("MatMul", [other]);
  }
  /** Sum over `axes` (default all). */
  sum(axes?: number | readonly number[], keepdims = false): Tensor {
    return this.#reduce("ReduceSum", axes, keepdims);
  }
  /** Mean over `axes` (default all). */
  mean(axes?: number | readonly number[], keepdims = false): Tensor {
    return this.#reduce("ReduceMean", axes, keepdims);
  }
  /** Maximum over `axes` (default all). */
  max(axes?: number | readonly number[], keepdims = false): Tensor {
    return this.#reduce("ReduceMax", axes, keepdims);
  }
  /** Minimum over `axes` (default all). */
  min(axes?: number | readonly number[], keepdims = false): Tensor {
    return this.#reduce("ReduceMin", axes, keepdims);
  }
  /** Index of the maximum along `axis` (i32). */
  argmax(axis = 0, keepdims = false): Tensor {
    return this.#op("ArgMax", [], { axis, keepdims: flag(keepdims, "keepdims", "ArgMax") });
  }
  /** Cumulative sum along `axis`. */
  cumsum(axis = 0, options?: { exclusive?: boolean; reverse?: boolean }): Tensor {
    // A misspelt key (`excl`) had summed inclusively without a word.
    checkOptions(options, ["exclusive", "reverse"], "Tensor.cumsum");
    return this.#op("CumSum", [], {
      axis,
      exclusive: +!!options?.exclusive,
      reverse: +!!options?.reverse,
    });
  }
  /** Softmax along `axis`. */
  softmax(axis = -1): Tensor {
    return this.#op("Softmax", [], { axis });
  }
  /** Log-softmax along `axis`. */
  logSoftmax(axis = -1): Tensor {
    return this.#op("LogSoftmax", [], { axis });
  }
  /** Layer normalization over the axes from `axis` on. */
  layerNorm(scale: Tensor, bias?: Tensor, options?: { axis?: number; epsilon?: number }): Tensor {
    // A misspelt key (`eps`) had normalized with the default epsilon.
    checkOptions(options, ["axis", "epsilon"], "Tensor.layerNorm");
    const inputs = bias ? [this, scale, bias] : [this, scale];
    return Tensor.apply("LayerNormalization", inputs, {
      axis: options?.axis ?? -1,
      epsilon: options?.epsilon ?? 1e-5,
    })[0];
  }
  /** Reshape (`-1` infers one dimension). */
  reshape(shape: readonly number[]): Tensor {
    return this.#op("Reshape", [], { shape, allowzero: 1 });
  }
  /** Permute axes (default: reverse them). */
  transpose(perm?: readonly number[]): Tensor {
    return this.#op("Transpose", [], { perm });
  }
  /** Flatten to 2-D around `axis`. */
  flatten(axis = 1): Tensor {
    return this.#op("Flatten", [], { axis });
  }
  /** Remove size-1 axes (all, or those listed). */
  squeeze(axes?: readonly number[]): Tensor {
    return this.#op("Squeeze", [], { axes });
  }
  /** Insert size-1 axes. */
  unsqueeze(axes: readonly number[]): Tensor {
    return this.#op("Unsqueeze", [], { axes });
  }
  /** Broadcast to `shape`. */
  expand(shape: readonly number[]): Tensor {
    return this.#op("Expand", [], { shape });
  }
  /** Slice with ONNX semantics (negative indices, clamping, steps). */
  slice(
    starts: readonly number[],
    ends: readonly number[],
    axes?: readonly number[],
    steps?: readonly number[],
  ): Tensor {
    return this.#op("Slice", [], { starts, ends, axes, steps });
  }
  /** Pad with a constant, by reflection or by repeating the edge. */
  pad(
    pads: readonly number[],
    options?: { mode?: "constant" | "reflect" | "edge"; value?: number },
  ): Tensor {
    return this.#op("Pad", [], {
      pads,
      mode: options?.mode ?? "constant",
      value: options?.value ?? 0,
    });
  }
  /** Take `indices` (i32 tensor) along `axis`. */
  gather(indices: Tensor, axis = 0): Tensor {
    return Tensor.apply("Gather", [this, indices], { axis })[0];
  }
  /** The same values, required to live on a device (GPU) from here on. */
  toDevice(): Tensor {
    return this.#op("ToDevice");
  }
  /** The same values, required back in host memory. */
  toHost(): Tensor {
    return this.#op("ToHost");
  }
  /** Split along `axis` into parts of the given sizes. */
  split(sizes: readonly number[], axis = 0): Tensor[] {
    return Tensor.apply("Split", [this], { axis, split: sizes });
  }

  #reduce(op: string, axes: number | readonly number[] | undefined, keepdims: boolean): Tensor {
    return this.#op(op, [], {
      axes: typeof axes === "number" ? [axes] : axes,
      keepdims: flag(keepdims, "keepdims", op),
    });
  }
}

/**
 * A boolean argument as the 0 or 1 of its attribute: anything else is refused, where `+"yes"` had
 * become NaN and been reported as an attribute of null.
 */
function flag(value: unknown, name: string, op: string): number {
  if (typeof value === "boolean") return +value;
  throw new KilnError(`Tensor.${op}: ${name} is ${shown(value)}, not true or false`, {
    code: "bad-input",
    fix: `pass ${name} as a boolean, or leave it out`,
  });
}

function applyLazy(op: string, inputs: readonly Lazy[], attrs: Attrs): Tensor[] {
  const outputs = inferNode(op, inputs.map((l) => l.type), attrs, `Tensor.${op}`);
  const node = { op, inputs, attrs, outputs };
  return outputs.map((type, index) => new Tensor({ type, src: { node, index } }, op));
}

/** Concatenates tensors along `axis`. */
export function concat(tensors: readonly Tensor[], axis = 0): Tensor {
  return Tensor.apply("Concat", tensors, { axis })[0];
}

/** `cond ? a : b` elementwise. */
export function where(cond: Tensor, a: Tensor | number, b: Tensor | number): Tensor {
  if (!(cond instanceof Tensor)) {
    throw new KilnError(`where() takes a bool Tensor first, got ${shown(cond)}`, {
      code: "bad-input",
      fix: "pass the condition as a Tensor, e.g. where(x.greater(0), x, 0)",
    });
  }
  return cond.where(a, b);
}

/**
 * Makes a tensor from data: a typed array, a number, or (nested) arrays of numbers/booleans.
 * `shape` defaults to the nesting (or `[length]`); `dtype` to the typed array's, `bool` for
 * booleans, else `f32`. The data is copied. `bf16` takes bfloat16 bits (a `Uint16Array`) or
 * numbers, rounded to the nearest bfloat16; the tensor holds them as f32.
 *
 * @example
 * ```ts
 * import { tensor } from "./tensor.ts";
 * const y = tensor([[1, 2], [3, 4]]).mul(2).add(1).sum(-1);
 * console.log(await y.data()); // Float32Array [7, 15]
 * ```
 */
export function tensor(
  data: TensorData | NestedArray,
  shape?: Shape,
  dtype?: DType | "bf16",
): Tensor {
  const { flat, dims, natural } = flatten(data);
  const type = dtype ?? natural;
  if (!isDType(type) || type === ("i64" as string)) {
    throw new KilnError(`tensor(): unknown dtype ${shown(type)}`, {
      code: "bad-input",
      fix: "use f32, f16, bf16, i32, u32, i8, u8 or bool (i64 data is accepted as BigInt64Array)",
    });
  }
  const target = shape ?? dims;
  const bf16 = type === "bf16";
  const typed = ArrayBuffer.isView(flat)
    ? flat
    : bf16
    ? Float32Array.from(flat)
    : exactNumbers(type, flat, "tensor()");
  // bfloat16 bits are taken as they are, other data for a bf16 tensor as f32 values, rounded.
  const given = typed instanceof BigInt64Array
    ? "i64"
    : bf16 && !(typed instanceof Uint16Array)
    ? "f32"
    : type;
  const accepted = acceptInput(
    { data: typed, shape: target, dtype: given },
    { shape: target, dtype: given === "i64" ? "i64" : type },
    "tensor()",
  );
  const copy = accepted.data === typed ? typed.slice() : accepted.data;
  return new Tensor({ type: { shape: [...target], dtype: accepted.dtype }, data: copy }, "tensor");
}

function flatten(
  data: TensorData | NestedArray,
): { flat: TensorData | number[]; dims: number[]; natural: DType } {
  if (ArrayBuffer.isView(data)) {
    const d = dtypeOfData(data);
    return { flat: data, dims: [data.length], natural: internalDType(d) };
  }
  const dims: number[] = [];
  for (let v: NestedArray = data; Array.isArray(v); v = (v as readonly NestedArray[])[0]) {
    dims.push(v.length);
  }
  const flat: unknown[] = [];
  const walk = (v: NestedArray): void => {
    if (Array.isArray(v)) (v as readonly NestedArray[]).forEach(walk);
    else flat.push(v);
  };
  walk(data);
  if (flat.some((v) => typeof v !== "number" && typeof v !== "boolean")) {
    throw new KilnError("tensor(): data must be numbers, booleans or a typed array", {
      code: "bad-input",
      fix: "pass e.g. [[1, 2], [3, 4]] or a Float32Array",
    });
  }
  return {
    flat: flat.map(Number),
    dims,
    natural: flat.length && typeof flat[0] === "boolean" ? "bool" : "f32",
  };
}
