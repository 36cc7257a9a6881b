/**
 * Elementwise ops: unary math, NumPy-broadcast binary arithmetic and comparisons, `Where`,
 * `Cast`, and the activations. Activations and the derived comparisons are *not* primitive: each
 * has a decomposition into primitives below, which is what legalization uses for a backend that
 * lacks a fused kernel for them. NaN behaviour is part of each rule (Relu and Max keep NaN, as
 * PyTorch and ONNX Runtime do).
 *
 * @module
 */
import { byteSize, type DType, DTYPES } from "../ir/dtype.ts";
import { formatShape, tryBroadcast } from "../ir/shape.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** Dtypes that support arithmetic. */
export const NUMERIC: readonly DType[] = DTYPES.filter((d) => d !== "bool");
/** Floating-point dtypes. */
export const FLOATS: readonly DType[] = ["f32", "f16", "f64"];
/** Integer dtypes (bool excluded). */
export const INTEGERS: readonly DType[] = ["i64", "i32", "u32", "i16", "u16", "i8", "u8"];

/** The unsigned integer types (BitShift's). */
const UNSIGNED: readonly DType[] = ["u32", "u16", "u8"];
/** Signed dtypes (where negation is meaningful). */

/**
 * `xs` combined by `f` as a balanced tree: a left fold over thousands of inputs (a Max of 20,000)
 * is a chain as deep as the input count, which fusion walks again for every link.
 */
function pairwise(xs: readonly EmitRef[], f: (a: EmitRef, b: EmitRef) => EmitRef): EmitRef {
  let level = [...xs];
  while (level.length > 1) {
    const next: EmitRef[] = [];
    for (let i = 0; i + 1 < level.length; i += 2) next.push(f(level[i], level[i + 1]));
    if (level.length % 2) next.push(level[level.length - 1]);
    level = next;
  }
  return level[0];
}

export const SIGNED: readonly DType[] = ["f32", "f16", "f64", "i64", "i32", "i16", "i8"];

/** The broadcast shape of every input, or a located `shape-mismatch` error. */
export function broadcastInputs(ctx: InferContext): number[] {
  const out = tryBroadcast(ctx.inputs.map((t) => t.shape));
  if (!out) {
    ctx.fail(
      `shapes ${ctx.inputs.map((t) => formatShape(t.shape)).join(" and ")} do not broadcast`,
      "make each dimension equal or 1 (NumPy broadcasting), e.g. with Reshape/Unsqueeze",
      "shape-mismatch",
    );
  }
  return out;
}

function unary(name: string, dtypes: readonly DType[], out?: DType): OpDef {
  return {
    name,
    category: "elementwise",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => [{ shape: ctx.input(0).shape, dtype: out ?? ctx.requireDType(0, dtypes) }],
  };
}

function binary(name: string, dtypes: readonly DType[], out?: DType): OpDef {
  return {
    name,
    category: "elementwise",
    arity: [2, 2],
    primitive: true,
    infer: (ctx) => {
      const d = ctx.sameDType();
      ctx.requireDType(0, dtypes);
      return [{ shape: broadcastInputs(ctx), dtype: out ?? d }];
    },
  };
}

/** A composite's rewrite into other ops: one result. */
type Decompose = (e: Emitter, x: readonly EmitRef[], attrs: Attrs) => EmitRef;

/** An elementwise op that legalization rewrites into others (`decompose`). */
export function composite(
  name: string,
  arity: readonly [number, number],
  infer: (ctx: InferContext) => ValueType[],
  decompose: Decompose,
): OpDef {
  return {
    name,
    category: "elementwise",
    arity,
    primitive: false,
    infer,
    decompose: (e, x, attrs) => [decompose(e, x, attrs)],
  };
}

/** The type rule of an op whose result is its first input's type, one of `dtypes`. */
export const sameAsInput = (dtypes: readonly DType[]) => (ctx: InferContext): ValueType[] => [
  { shape: ctx.input(0).shape, dtype: ctx.requireDType(0, dtypes) },
];

/** A scalar constant of `x`'s dtype. */
export function like(e: Emitter, x: EmitRef, value: number): EmitRef {
  return e.scalar(value, e.typeOf(x).dtype);
}

function max2(e: Emitter, a: EmitRef, b: EmitRef): EmitRef {
  return e.op("Where", [e.op("Or", [e.op("Greater", [a, b]), isNaN(e, a)]), a, b]);
}

function min2(e: Emitter, a: EmitRef, b: EmitRef): EmitRef {
  return e.op("Where", [e.op("Or", [e.op("Less", [a, b]), isNaN(e, a)]), a, b]);
}

/** IsNaN for floats, constant false for integers. */
function isNaN(e: Emitter, x: EmitRef): EmitRef {
  const t = e.typeOf(x);
  if (FLOATS.includes(t.dtype)) return e.op("IsNaN", [x]);
  return e.op("Equal", [e.scalar(0, "bool"), e.scalar(1, "bool")]);
}

function clip(e: Emitter, x: EmitRef, lo: number | undefined, hi: number | undefined): EmitRef {
  let y = x;
  if (lo !== undefined) y = e.op("Where", [e.op("Less", [y, like(e, x, lo)]), like(e, x, lo), y]);
  if (hi !== undefined) {
    y = e.op("Where", [e.op("Greater", [y, like(e, x, hi)]), like(e, x, hi), y]);
  }
  return y;
}

function sigmoid(e: Emitter, x: EmitRef): EmitRef {
  const one = like(e, x, 1);
  return e.op("Div", [one, e.op("Add", [one, e.op("Exp", [e.op("Neg", [x])])])]);
}

function hardSigmoid(e: Emitter, x: EmitRef, alpha: number, beta: number): EmitRef {
  return clip(e, e.op("Add", [e.op("Mul", [x, like(e, x, alpha)]), like(e, x, beta)]), 0, 1);
}

function tanh(e: Emitter, x: EmitRef): EmitRef {
  // 1 - 2 / (exp(2x) + 1) saturates to ±1 instead of producing inf/inf.
  const one = like(e, x, 1);
  const ex = e.op("Exp", [e.op("Mul", [x, like(e, x, 2)])]);
  return e.op("Sub", [one, e.op("Div", [like(e, x, 2), e.op("Add", [ex, one])])]);
}

/** A numeric attribute, or `fallback` where it is unset (`withNumbers` refuses other values). */
export const num = (v: unknown, fallback: number): number => typeof v === "number" ? v : fallback;

/**
 * `rule`, with the numeric attributes `names` checked first where they are set: a string there
 * (`tensor.leakyRelu("0.1")`) had been taken as unset, its default computed without a word.
 */
export const withNumbers =
  (names: readonly string[], rule: (ctx: InferContext) => ValueType[]) =>
  (ctx: InferContext): ValueType[] => {
    for (const name of names) if (ctx.has(name)) ctx.float(name);
    return rule(ctx);
  };

const elementwiseOps: OpDef[] = [
  binary("Add", NUMERIC),
  binary("Sub", NUMERIC),
  binary("Mul", NUMERIC),
  binary("Div", NUMERIC),
  binary("Pow", NUMERIC),
  {
    ...binary("Mod", NUMERIC),
    infer: (ctx) => {
      const d = ctx.sameDType();
      ctx.requireDType(0, NUMERIC);
      const fmod = ctx.int("fmod", 0);
      if (FLOATS.includes(d) && fmod !== 1) {
        ctx.fail(
          "Mod of floats needs fmod = 1",
          "set fmod: 1 (ONNX requires it for floats)",
          "bad-attribute",
        );
      }
      return [{ shape: broadcastInputs(ctx), dtype: d }];
    },
  },
  binary("Equal", DTYPES, "bool"),
  binary("Greater", NUMERIC, "bool"),
  binary("Less", NUMERIC, "bool"),
  // Logical on bool, bitwise on integers (ONNX's BitwiseAnd/Or/Not).
  binary("And", ["bool", ...INTEGERS]),
  binary("Or", ["bool", ...INTEGERS]),
  unary("Neg", SIGNED),
  unary("Abs", NUMERIC),
  unary("Sqrt", FLOATS),
  unary("Exp", FLOATS),
  unary("Log", FLOATS),
  unary("Erf", FLOATS),
  unary("Sin", FLOATS),
  unary("Cos", FLOATS),
  unary("Floor", FLOATS),
  unary("Ceil", FLOATS),
  unary("Round", FLOATS),
  unary("Not", ["bool", ...INTEGERS]),
  unary("IsNaN", FLOATS, "bool"),
  {
    name: "Cast",
    category: "elementwise",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => [{ shape: ctx.input(0).shape, dtype: ctx.dtype("to") }],
  },
  {
    // The same 32 bits read as another type: f32 ↔ i32/u32 only, so every backend knows the
    // source from the target (bf16 rounding and other bit tricks are integer arithmetic on it).
    name: "Bitcast",
    category: "elementwise",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => {
      const from = ctx.requireDType(0, ["f32", "i32", "u32"]);
      const to = ctx.dtype("to");
      if (!["f32", "i32", "u32"].includes(to) || (from === "f32") === (to === "f32")) {
        ctx.fail(
          `cannot reinterpret ${from} as ${to}`,
          "Bitcast between f32 and i32/u32 only; use Cast to convert values",
          "dtype-mismatch",
        );
      }
      return [{ shape: ctx.input(0).shape, dtype: to }];
    },
  },
  {
    name: "Where",
    category: "elementwise",
    arity: [3, 3],
    primitive: true,
    infer: (ctx) => {
      ctx.requireDType(0, ["bool"]);
      if (ctx.input(1).dtype !== ctx.input(2).dtype) {
        ctx.fail(
          "the two branches have different dtypes",
          "Cast both branches to one dtype",
          "dtype-mismatch",
        );
      }
      return [{ shape: broadcastInputs(ctx), dtype: ctx.input(1).dtype }];
    },
  },
  composite("Reciprocal", [1, 1], sameAsInput(FLOATS), (e, [x]) => e.op("Div", [like(e, x, 1), x])),
  composite("Relu", [1, 1], sameAsInput(SIGNED), (e, [x]) => {
    const zero = like(e, x, 0);
    return e.op("Where", [e.op("Less", [x, zero]), zero, x]);
  }),
  composite("LeakyRelu", [1, 1], withNumbers(["alpha"], sameAsInput(FLOATS)), (e, [x], a) => {
    const scaled = e.op("Mul", [x, like(e, x, num(a.alpha, 0.01))]);
    return e.op("Where", [e.op("Less", [x, like(e, x, 0)]), scaled, x]);
  }),
  composite("Sigmoid", [1, 1], sameAsInput(FLOATS), (e, [x]) => sigmoid(e, x)),
  composite("Tanh", [1, 1], sameAsInput(FLOATS), (e, [x]) => tanh(e, x)),
  // Mish: x · tanh(softplus(x)), softplus as x itself past 20 (where exp(x) would overflow).
  composite("Mish", [1, 1], sameAsInput(FLOATS), (e, [x]) => {
    const soft = e.op("Log", [e.op("Add", [e.op("Exp", [x]), like(e, x, 1)])]);
    const safe = e.op("Where", [e.op("Greater", [x, like(e, x, 20)]), x, soft]);
    return e.op("Mul", [x, e.op("Tanh", [safe])]);
  }),
  composite("Gelu", [1, 1], (ctx) => {
    ctx.choice("approximate", ["none", "tanh"]);
    return sameAsInput(FLOATS)(ctx);
  }, (e, [x], a) => {
    const half = e.op("Mul", [x, like(e, x, 0.5)]);
    if (a.approximate === "tanh") {
      const cube = e.op("Mul", [e.op("Mul", [x, x]), x]);
      const inner = e.op("Add", [x, e.op("Mul", [cube, like(e, x, 0.044715)])]);
      const t = tanh(e, e.op("Mul", [inner, like(e, x, Math.sqrt(2 / Math.PI))]));
      return e.op("Mul", [half, e.op("Add", [like(e, x, 1), t])]);
    }
    const erf = e.op("Erf", [e.op("Mul", [x, like(e, x, Math.SQRT1_2)])]);
    return e.op("Mul", [half, e.op("Add", [like(e, x, 1), erf])]);
  }),
  composite(
    "HardSigmoid",
    [1, 1],
    withNumbers(["alpha", "beta"], sameAsInput(FLOATS)),
    (e, [x], a) => hardSigmoid(e, x, num(a.alpha, 0.2), num(a.beta, 0.5)),
  ),
  composite(
    "HardSwish",
    [1, 1],
    sameAsInput(FLOATS),
    (e, [x]) => e.op("Mul", [x, hardSigmoid(e, x, 1 / 6, 0.5)]),
  ),
  composite("Clip", [1, 1], (ctx) => {
    if (ctx.has("min")) ctx.float("min");
    if (ctx.has("max")) ctx.float("max");
    return sameAsInput(NUMERIC)(ctx);
  }, (e, [x], a) => clip(e, x, a.min as number | undefined, a.max as number | undefined)),
  composite(
    "Max",
    [1, Infinity],
    (ctx) => [{ shape: broadcastInputs(ctx), dtype: ctx.sameDType() }],
    (e, xs) => pairwise(xs, (a, b) => max2(e, a, b)),
  ),
  composite(
    "Min",
    [1, Infinity],
    (ctx) => [{ shape: broadcastInputs(ctx), dtype: ctx.sameDType() }],
    (e, xs) => pairwise(xs, (a, b) => min2(e, a, b)),
  ),
  // Xor: of bools, inequality; of integers, bitwise: (a | b) & ~(a & b) (kiln's And, Or and Not
  // are bitwise on integers).
  composite(
    "Xor",
    [2, 2],
    (ctx) => binary("", ["bool", ...INTEGERS]).infer(ctx),
    (e, [a, b]) =>
      e.typeOf(a).dtype === "bool"
        ? e.op("Not", [e.op("Equal", [a, b])])
        : e.op("And", [e.op("Or", [a, b]), e.op("Not", [e.op("And", [a, b])])]),
  ),
  // BitShift of unsigned integers: a product or quotient by 2^y, 0 where y passes the width.
  composite("BitShift", [2, 2], (ctx) => {
    ctx.choice("direction", ["LEFT", "RIGHT"]);
    return binary("", UNSIGNED).infer(ctx);
  }, (e, [x, y], a) => {
    const t = e.typeOf(x).dtype, bits = 8 * byteSize(t);
    const factor = e.op("Pow", [like(e, x, 2), e.op("Min", [y, like(e, y, bits - 1)])]);
    const shifted = e.op(a.direction === "RIGHT" ? "Div" : "Mul", [x, factor]);
    return e.op("Where", [e.op("Less", [y, like(e, y, bits)]), shifted, like(e, x, 0)]);
  }),
  composite(
    "Sum",
    [1, Infinity],
    (ctx) => [{ shape: broadcastInputs(ctx), dtype: ctx.sameDType() }],
    (e, xs) => pairwise(xs, (a, b) => e.op("Add", [a, b])),
  ),
  // The inputs' sum over their count: a balanced tree of adds (ONNX's importer folded a chain).
  composite(
    "Mean",
    [1, Infinity],
    (ctx) => {
      ctx.requireDType(0, FLOATS);
      return [{ shape: broadcastInputs(ctx), dtype: ctx.sameDType() }];
    },
    (e, xs) =>
      e.op("Div", [pairwise(xs, (a, b) => e.op("Add", [a, b])), like(e, xs[0], xs.length)]),
  ),
  // f32 values rounded to the nearest bfloat16 (ties to even), NaN kept: a cast to bf16, which
  // kiln holds as f32 (`BoundaryDType`). Integer arithmetic on the bits: add 0x7fff and the kept
  // part's lowest bit, then clear the low half.
  composite("RoundToBf16", [1, 1], sameAsInput(["f32"]), (e, [x]) => {
    const u32 = (v: number) => e.scalar(v, "u32");
    const bits = e.op("Bitcast", [x], { to: "u32" });
    const odd = e.op("Mod", [e.op("Div", [bits, u32(65536)]), u32(2)]);
    const up = e.op("Add", [e.op("Add", [bits, u32(0x7fff)]), odd]);
    const kept = e.op("Sub", [up, e.op("Mod", [up, u32(65536)])]);
    return e.op("Where", [e.op("IsNaN", [x]), x, e.op("Bitcast", [kept], { to: "f32" })]);
  }),
  // The upper (or lower) triangle of the last two axes from diagonal k, zeros elsewhere: a select
  // by the two positions' difference (no [rows, cols] mask stored).
  composite("Trilu", [1, 1], (ctx) => {
    const dtype = ctx.requireDType(0, [...NUMERIC, "bool"]), shape = ctx.input(0).shape;
    if (shape.length < 2) {
      ctx.fail(
        "Trilu of a tensor of rank < 2",
        "give it a matrix or a batch of them",
        "shape-mismatch",
      );
    }
    ctx.int("k", 0);
    ctx.int("upper", 1);
    return [{ shape, dtype }];
  }, (e, [x], a) => {
    const { shape, dtype } = e.typeOf(x), [rows, cols] = shape.slice(-2);
    const at = (n: number, to: number[]) =>
      e.op("Reshape", [e.op("Range", [], { start: 0, limit: n, dtype: "i32" })], { shape: to });
    const offset = e.op("Sub", [at(cols, [1, cols]), at(rows, [rows, 1])]);
    const k = e.scalar((a.k as number | undefined) ?? 0, "i32");
    const outside = (a.upper ?? 1) !== 0 ? e.op("Less", [offset, k]) : e.op("Greater", [offset, k]);
    return e.op("Where", [outside, e.scalar(0, dtype), x]);
  }),
  composite(
    "GreaterOrEqual",
    [2, 2],
    (ctx) => binary("", NUMERIC, "bool").infer(ctx),
    (e, [a, b]) => e.op("Or", [e.op("Greater", [a, b]), e.op("Equal", [a, b])]),
  ),
  composite(
    "LessOrEqual",
    [2, 2],
    (ctx) => binary("", NUMERIC, "bool").infer(ctx),
    (e, [a, b]) => e.op("Or", [e.op("Less", [a, b]), e.op("Equal", [a, b])]),
  ),
];

defineOps(elementwiseOps);
