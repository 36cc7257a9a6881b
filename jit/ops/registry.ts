/**
 * The op vocabulary. Each {@linkcode OpDef} says how many inputs an op takes, how its output
 * types follow from its input types and attributes, and whether it is *primitive* (a backend must
 * implement it) or has a *decomposition* into other ops (legalization rewrites it for a backend
 * that lacks it). Shape inference, the graph builder, the lazy Tensor API and the decompositions
 * all go through {@linkcode inferNode}, so an op's rules live in exactly one place.
 *
 * @module
 */
import { checkBudget } from "../runtime/budget.ts";
import {
  type DType,
  DTYPES,
  fromBf16Bits,
  fromF16Bits,
  fromNumbers,
  isFloat,
  type TensorData,
} from "../ir/dtype.ts";
import { KilnError, type KilnErrorCode, shown } from "../support/errors.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { handOver } from "../ir/hand_over.ts";
import {
  formatShape,
  isValidShape,
  normalizeAxes,
  normalizeAxis,
  type Shape,
} from "../ir/shape.ts";

/** An attribute value: numbers, strings, booleans, integer lists, or a tensor (Constant). */
export type AttrValue = number | string | boolean | readonly number[] | HostTensor;

/** A node's attributes. */
export type Attrs = Readonly<Record<string, AttrValue | undefined>>;

/** The static type of a value: shape and dtype. */
export interface ValueType {
  /** The value's shape. */
  readonly shape: Shape;
  /** The value's element type. */
  readonly dtype: DType;
}

/** A value inside an {@linkcode Emitter}; opaque to decompositions. */
export interface EmitRef {
  /** Identifier inside the emitter. */
  readonly id: number;
}

/**
 * What a decomposition writes its replacement ops into. Shapes are inferred as ops are emitted,
 * so a decomposition can branch on them through {@linkcode Emitter.typeOf}.
 */
export interface Emitter {
  /** Emits a single-output op and returns its result. */
  op(op: string, inputs: readonly EmitRef[], attrs?: Attrs): EmitRef;
  /** Emits a multi-output op and returns its results. */
  opN(op: string, inputs: readonly EmitRef[], attrs: Attrs | undefined, outputs: number): EmitRef[];
  /** Emits a scalar constant (shape `[]`). */
  scalar(value: number, dtype: DType): EmitRef;
  /** The type of an emitted or incoming value. */
  typeOf(ref: EmitRef): ValueType;
  /**
   * The elements of `ref` where it is a constant of the graph (a scatter's indices known before
   * the run pick a cheaper form, RoiAlign's regions fix its samples), else `undefined`.
   */
  constantOf(ref: EmitRef): ArrayLike<number> | undefined;
}

/** A constant tensor of `values` in a decomposition, stored as `dtype` stores them. */
export function constantTensor(
  e: Emitter,
  values: ArrayLike<number>,
  shape: readonly number[],
  dtype: DType,
): EmitRef {
  return ownedTensor(e, fromNumbers(dtype, values), shape, dtype);
}

/**
 * A constant tensor of `data`, an array the decomposition made itself and stores as `dtype` does:
 * the graph keeps it without a copy (a quantized BERT-base's shifted weights, 85M values, had
 * been copied again: 0.34 s of its compile on the 2-core VM).
 */
export function ownedTensor(
  e: Emitter,
  data: TensorData,
  shape: readonly number[],
  dtype: DType,
): EmitRef {
  return e.op("Constant", [], { value: { data: handOver(data), shape, dtype } });
}

/**
 * A constant's elements as numbers, half floats decoded (what {@linkcode Emitter.constantOf}
 * gives): a tensor of numbers as it is held (not copied: a quantized weight's millions of bytes
 * are read in one pass), 64-bit integers and half floats converted.
 */
export function constantElements(t: HostTensor | undefined): ArrayLike<number> | undefined {
  if (!t) return undefined;
  if (t.dtype === "f16") return Array.from(t.data as Uint16Array, fromF16Bits);
  if (t.dtype === "bf16") return Array.from(t.data as Uint16Array, fromBf16Bits);
  const data = t.data as ArrayLike<number | bigint>;
  return typeof data[0] === "bigint" ? Array.from(data, Number) : data as ArrayLike<number>;
}

/** Families of ops; later stages (fusion, codegen) dispatch on them. */
export type OpCategory =
  | "elementwise"
  | "reduce"
  | "movement"
  | "matmul"
  | "conv"
  | "pool"
  | "source"
  | "index"
  | "composite"
  | "placement"
  | "custom";

/** The definition of an op. */
export interface OpDef {
  /** The op's name, e.g. `"MatMul"`. */
  readonly name: string;
  /** Family of the op. */
  readonly category: OpCategory;
  /** Smallest and largest input count (`Infinity` for variadic). */
  readonly arity: readonly [number, number];
  /** Whether backends must implement it (otherwise it has a decomposition). */
  readonly primitive: boolean;
  /** Output types from input types and attributes; throws through `ctx.fail`. */
  infer(ctx: InferContext): ValueType[];
  /** The op rewritten into other ops; present exactly when `primitive` is false. */
  decompose?(e: Emitter, inputs: readonly EmitRef[], attrs: Attrs): EmitRef[];
}

/**
 * Everything shape inference sees of a node, with typed attribute accessors that reject wrong
 * attribute types with a clear message.
 */
export class InferContext {
  /** The op being inferred. */
  readonly op: string;
  /** A label for messages, e.g. `node "fc1" (MatMul)`. */
  readonly where: string;
  /** Input types. */
  readonly inputs: readonly ValueType[];
  /** Raw attributes (reads are recorded: see {@linkcode InferContext.unread}). */
  readonly attrs: Attrs;
  #read = new Set<string>();
  #given: Attrs;

  /** Creates a context for one node. */
  constructor(init: { op: string; where: string; inputs: readonly ValueType[]; attrs: Attrs }) {
    this.op = init.op;
    this.where = init.where;
    this.inputs = init.inputs;
    this.#given = init.attrs;
    const read = this.#read;
    this.attrs = new Proxy(init.attrs, {
      get(target, key, receiver) {
        if (typeof key === "string") read.add(key);
        return Reflect.get(target, key, receiver);
      },
    });
  }

  /** The attributes given (with a value) that nothing has read, by accessor or `attrs`, so far. */
  unread(): string[] {
    const given = Object.entries(this.#given).filter(([, v]) => v !== undefined);
    return given.flatMap(([k]) => (this.#read.has(k) ? [] : [k]));
  }

  /** Throws a {@linkcode KilnError} located at this node, listing its input types. */
  fail(what: string, fix: string, code: KilnErrorCode = "invalid-graph"): never {
    const ins = this.inputs.map((t) => `${t.dtype}${formatShape(t.shape)}`).join(", ");
    throw new KilnError(`${this.where}: ${what} (inputs: ${ins || "none"})`, { code, fix });
  }

  /** Input `i`'s type. */
  input(i: number): ValueType {
    return this.inputs[i];
  }

  /** An integer attribute, or `fallback` when absent. */
  int(name: string, fallback?: number): number {
    const v = this.attrs[name] ?? fallback;
    if (typeof v !== "number" || !Number.isInteger(v)) {
      this.fail(
        `attribute ${name} must be an integer, got ${shown(v)}`,
        `set ${name} to an integer`,
        "bad-attribute",
      );
    }
    return v;
  }

  /** A numeric attribute, or `fallback` when absent. */
  float(name: string, fallback?: number): number {
    const v = this.attrs[name] ?? fallback;
    if (typeof v !== "number") {
      this.fail(
        `attribute ${name} must be a number, got ${shown(v)}`,
        `set ${name} to a number`,
        "bad-attribute",
      );
    }
    return v;
  }

  /** An integer-list attribute, or `fallback` when absent. */
  ints(name: string, fallback?: readonly number[]): readonly number[] {
    const v = this.attrs[name] ?? fallback;
    if (!Array.isArray(v) || !v.every((x) => Number.isInteger(x))) {
      this.fail(
        `attribute ${name} must be a list of integers, got ${shown(v)}`,
        `set ${name} to an integer array`,
        "bad-attribute",
      );
    }
    return v;
  }

  /** Whether an attribute is set. */
  has(name: string): boolean {
    return this.attrs[name] !== undefined;
  }

  /** A string attribute restricted to `choices`; the first choice is the default. */
  choice<T extends string>(name: string, choices: readonly T[]): T {
    const v = this.attrs[name] ?? choices[0];
    if (!choices.includes(v as T)) {
      this.fail(
        `attribute ${name} is ${shown(v)}`,
        `use one of ${choices.join(", ")}`,
        "bad-attribute",
      );
    }
    return v as T;
  }

  /** A dtype attribute. */
  dtype(name: string, fallback?: DType): DType {
    const v = this.attrs[name] ?? fallback;
    if (!DTYPES.includes(v as DType)) {
      this.fail(
        `attribute ${name} must be a dtype, got ${shown(v)}`,
        `use one of ${DTYPES.join(", ")}`,
        "bad-attribute",
      );
    }
    return v as DType;
  }

  /** A shape attribute (non-negative integers). */
  shape(name: string): Shape {
    const v = this.attrs[name];
    if (!isValidShape(v)) {
      this.fail(
        `attribute ${name} must be a shape, got ${shown(v)}`,
        `set ${name} to a list of non-negative integers`,
        "bad-attribute",
      );
    }
    return v;
  }

  /** Normalizes `axis` against `rank`. */
  axis(axis: number, rank: number): number {
    return normalizeAxis(axis, rank, this.where);
  }

  /** Normalizes `axes` against `rank`. */
  axes(axes: readonly number[], rank: number): number[] {
    return normalizeAxes(axes, rank, this.where);
  }

  /** Requires every input to share one dtype and returns it. */
  sameDType(): DType {
    const d = this.inputs[0].dtype;
    for (const t of this.inputs) {
      if (t.dtype !== d) {
        this.fail(
          `inputs have different dtypes`,
          `insert a Cast so all inputs are ${d}`,
          "dtype-mismatch",
        );
      }
    }
    return d;
  }

  /** Requires input `i` to be one of `allowed` dtypes. */
  requireDType(i: number, allowed: readonly DType[]): DType {
    const d = this.inputs[i].dtype;
    if (!allowed.includes(d)) {
      this.fail(
        `input ${i} has dtype ${d}, but ${this.op} takes ${allowed.join("/")}`,
        `Cast input ${i} to ${allowed[0]}`,
        "dtype-mismatch",
      );
    }
    return d;
  }

  /** Requires a floating-point input `i`. */
  requireFloat(i: number): DType {
    const d = this.inputs[i].dtype;
    if (!isFloat(d)) {
      this.fail(
        `input ${i} has dtype ${d}, but ${this.op} needs a float`,
        `Cast input ${i} to f32`,
        "dtype-mismatch",
      );
    }
    return d;
  }

  /** Requires input `i` to have rank `rank`. */
  requireRank(i: number, rank: number): Shape {
    const s = this.inputs[i].shape;
    if (s.length !== rank) {
      this.fail(
        `input ${i} must have rank ${rank}, got ${formatShape(s)}`,
        `reshape input ${i} to rank ${rank}`,
        "shape-mismatch",
      );
    }
    return s;
  }
}

const ops = new Map<string, OpDef>();

/** Adds op definitions to the vocabulary; names must be new. */
export function defineOps(defs: readonly OpDef[]): void {
  for (const def of defs) {
    if (ops.has(def.name)) {
      throw new KilnError(`Op "${def.name}" is already defined`, {
        code: "duplicate-name",
        fix: 'give the op a unique name (custom ops can use a prefix such as "my.Op")',
      });
    }
    if (def.primitive === (def.decompose !== undefined)) {
      throw new KilnError(`Op "${def.name}" must be primitive or have a decomposition, not both`, {
        code: "internal",
        fix: "set primitive: true without decompose, or primitive: false with decompose",
      });
    }
    ops.set(def.name, def);
  }
}

/** The definition of `op`; throws an `unknown-op` error that lists close names. */
export function getOp(op: string, where = `op "${op}"`): OpDef {
  const def = ops.get(op);
  if (def) return def;
  const lower = op.toLowerCase();
  const close = [...ops.keys()].filter((k) =>
    k.toLowerCase() === lower || k.toLowerCase().includes(lower)
  );
  throw new KilnError(`${where}: unknown op "${op}"`, {
    code: "unknown-op",
    fix: close.length
      ? `did you mean ${close.slice(0, 3).join(", ")}? Op names are case-sensitive`
      : "use one of kiln's ops (opNames()) or add it with registerOp",
  });
}

/** The names of every defined op. */
export function opNames(): string[] {
  return [...ops.keys()];
}

/**
 * Infers a node's output types, checking its arity first. `where` labels the node in messages.
 */
export function inferNode(
  op: string,
  inputs: readonly ValueType[],
  attrs: Attrs,
  where: string,
): ValueType[] {
  const def = getOp(op, where);
  const [min, max] = def.arity;
  if (inputs.length < min || inputs.length > max) {
    const want = min === max ? `${min}` : max === Infinity ? `at least ${min}` : `${min} to ${max}`;
    throw new KilnError(`${where}: ${op} takes ${want} inputs, got ${inputs.length}`, {
      code: "invalid-graph",
      fix: `pass ${want} inputs to ${op}`,
    });
  }
  const ctx = new InferContext({ op, where, inputs, attrs });
  const outputs = def.infer(ctx);
  // Every attribute of kiln's own ops is checked by its shape rule: one it never reads is not the
  // op's (a misspelt `pad` would leave a conv unpadded). A custom op's attributes are its own.
  const unread = def.category === "custom" ? [] : ctx.unread();
  if (unread.length) {
    const names = unread.join(", "), s = unread.length > 1 ? "s" : "";
    throw new KilnError(`${where}: ${op} has no attribute${s} ${names}`, {
      code: "bad-attribute",
      fix: `remove ${names}, or check the spelling against ${op}'s attributes (kiln's ops take ` +
        "the ONNX operator spec's names)",
    });
  }
  // Before anything is evaluated or allocated: a hostile shape is refused here, in microseconds.
  outputs.forEach((t, i) =>
    checkBudget(t.shape, t.dtype, outputs.length > 1 ? `${where} output ${i}` : where)
  );
  return outputs;
}
