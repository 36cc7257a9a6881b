/**
 * The kernel IR's ALU ops in WebAssembly: each op on scalars (f32 for f32/f16, f64 for f64, i32
 * for integers and bool, rounded to its dtype as if stored), and on f32x4 vectors where an
 * expression has a vector lowering (bool as all-ones/zero lane masks). The loops around them are
 * `shaders/wasm/codegen.ts`'s; f32 transcendentals call the module's vector library (`shaders/wasm/math.ts`), f64
 * ones the host's (the reference backend's own functions, so f64 results are the same bits).
 *
 * @module
 */
import { type DType, intRange } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import type { Alu, AluOp, AluOperands, Expr } from "../../jit/ir/kernel_ir.ts";
import type { MathFunction } from "./math.ts";
import type { Wasm, WasmModule } from "./encoder.ts";

/** Whether `d` is a float in generated code (f32 for f32/f16, f64 for f64). */
export const isFloat = (d: DType): boolean => d === "f32" || d === "f16" || d === "f64";

/** Whether kernel values of `d` live in f64 (scalar code only: f64 has no vector path here). */
export const isWide = (d: DType): boolean => d === "f64";

/** log2 of the bytes an element of `d` takes in the arena (8 for f64, a 32-bit word otherwise). */
export const elementShift = (d: DType): number => (isWide(d) ? 3 : 2);

/** Locals holding evaluated expressions, by structural id (`ExprTable` ids). */
export type Memo = Map<number, number>;

/** `1 / x` when dividing by `x` is exactly multiplying by it (x a power of two in range). */
export function exactReciprocal(e: Expr): number | undefined {
  if (e.kind !== "const" || e.value === 0 || !Number.isFinite(e.value)) return undefined;
  const exponent = Math.log2(Math.abs(e.value));
  return Number.isInteger(exponent) && Math.abs(exponent) < 126 ? 1 / e.value : undefined;
}

/**
 * The math function taking `e` to a power where it is Pow of an f32 (or f16) value by the
 * constant 2 or 3: a product instead of the host's pow per value (see `shaders/wasm/math.ts`).
 */
export function powerFunction(e: Expr): "vsquare" | "vcube" | undefined {
  if (e.kind !== "alu" || e.op !== "Pow" || (e.dtype !== "f32" && e.dtype !== "f16")) {
    return undefined;
  }
  const [x, y] = e.args;
  if (x.dtype !== e.dtype || y.kind !== "const") return undefined;
  return y.value === 2 ? "vsquare" : y.value === 3 ? "vcube" : undefined;
}

/** Vector functions of the in-module math library, by IR op. */
export const MATH = {
  Exp: "vexp",
  Log: "vlog",
  Erf: "verf",
  Sin: "vsin",
  Cos: "vcos",
} as const satisfies Partial<Record<AluOp, MathFunction>>;
/** f32 → f32 ops with an f32x4 lowering (pow and fmod call the host per lane). */
const VECTOR_F32 = new Set([
  "Add",
  "Sub",
  "Mul",
  "Div",
  "Neg",
  "Abs",
  "Sqrt",
  "Floor",
  "Ceil",
  "Round",
  "Exp",
  "Log",
  "Erf",
  "Sin",
  "Cos",
  "Pow",
  "Mod",
]);
/** f32 comparisons giving lane masks. */
const VECTOR_MASK = new Set(["Equal", "Greater", "Less", "IsNaN"]);
/** Logic on lane masks. */
const VECTOR_LOGIC = new Set(["And", "Or", "Not"]);
/** i32 → i32 ops with an i32x4 lowering (wrapping at 32 bits, as the scalar ones do). */
const VECTOR_I32 = new Set(["Add", "Sub", "Mul"]);
/**
 * Integer types that live in i32 lanes: the arena holds each of their values as an i32 word.
 * (u32 compares and converts unsigned; i64 is two words.)
 */
const LANE_INTS: ReadonlySet<DType> = new Set(["i32", "i16", "i8", "u16", "u8"]);

/** What the lowering needs of the function being generated (a `KernelFunction` is one). */
export interface AluContext {
  /** The module being built. */
  readonly m: WasmModule;
  /** The encoder (value types). */
  readonly wasm: Wasm;
  /** A new local of value type `type`: its index. */
  readonly local: (type: number) => number;
}

/** What a scalar lowering sees: the operands as encoder expressions, and their kind. */
interface ScalarArgs extends AluOperands<number> {
  /** Whether the operands are floats. */
  readonly fl: boolean;
  /** The operands' float instructions (f64 for f64 operands, else f32). */
  readonly F: FloatOps;
  /** Whether the operands are u32. */
  readonly u: boolean;
}

/** The instructions of one float type (the names f32 and f64 share). */
type FloatOps = Pick<
  WasmModule["f32"] | WasmModule["f64"],
  | "add"
  | "sub"
  | "mul"
  | "div"
  | "neg"
  | "abs"
  | "sqrt"
  | "floor"
  | "ceil"
  | "nearest"
  | "eq"
  | "ne"
  | "gt"
  | "lt"
  | "const"
>;

/** A vector lowering's argument builder: a fresh f32x4 expression of argument `i` per call. */
type Arg = (i: number) => number;

/**
 * How an expression lives in a vector: f32 lanes, a lane mask (bool), i32 lanes (the integers
 * of {@linkcode LANE_INTS}), or not at all.
 */
export type VectorKind = "f32" | "mask" | "i32" | undefined;

/** The scalar and vector lowerings (each returns an encoder expression). */
export interface AluLowering {
  /** A constant of dtype `d`. */
  constant(value: number, d: DType): number;
  /** `x` rounded to dtype `d` (f16, i8, u8, bool), as a store would. */
  round(x: number, d: DType): number;
  /** Scalar op `op` on arguments `a` of dtypes `d`, giving `out`. */
  alu(op: AluOp, a: number[], d: DType[], out: DType, e?: Expr): number;
  /** How `e` lives in a vector. */
  vectorKind(e: Expr): VectorKind;
  /** The f32x4 lowering of `e`, its arguments' vectors built by `a(i)` (fresh per call). */
  valu(e: Alu, a: (i: number) => number): number;
  /** An f32x4 of four scalars `f(0)` … `f(3)`. */
  lanes(f: (lane: number) => number): number;
}

/** The lowerings for one function. */
export function aluLowering(c: AluContext): AluLowering {
  const h = helpers(c);
  const cast = casting(c, h);
  const scalar = scalarLowerings(c, h, cast);
  const alu = (op: AluOp, a: number[], d: DType[], out: DType, e?: Expr): number => {
    // Scalar code calls the vector function on a splat, so a tail agrees with its vector body.
    const power = e && powerFunction(e);
    if (power) return c.m.f32x4.extract_lane(c.m.call(power, [c.m.f32x4.splat(a[0])], h.v128), 0);
    const operand = d[0] ?? out;
    const F = isWide(operand) ? c.m.f64 : c.m.f32;
    return scalar[op]({ a, d, out, F, fl: isFloat(operand), u: d[0] === "u32" });
  };
  const vectorKind = vectorKinds();
  const { lanes, valu } = vectorLowerings(c, h, vectorKind);
  return { constant: h.constant, round: rounding(c, h), alu, vectorKind, valu, lanes };
}

/** What every lowering of one function shares: types, locals, constants, host calls. */
function helpers({ m, wasm }: AluContext) {
  const f64 = wasm.f64, f32 = wasm.f32, i32 = wasm.i32, v128 = wasm.v128;
  const f4 = m.f32x4;
  const get = (l: number, type: number) => m.local.get(l, type);
  const ic = (n: number) => m.i32.const(n | 0);
  const call1 = (name: string, x: number) => m.f32.demote(m.call(name, [m.f64.promote(x)], f64));
  const call2 = (name: string, x: number, y: number) =>
    m.f32.demote(m.call(name, [m.f64.promote(x), m.f64.promote(y)], f64));
  /** A host function of f64 operands (f32 ones widened, the result narrowed back). */
  const host = (name: string, wide: boolean, ...xs: number[]) =>
    wide ? m.call(name, xs, f64) : xs.length === 1 ? call1(name, xs[0]) : call2(name, xs[0], xs[1]);
  const constant = (value: number, d: DType) =>
    isWide(d)
      ? m.f64.const(value)
      : isFloat(d)
      ? m.f32.const(value)
      : ic(value >>> 0 === value ? value : value | 0);

  return { f64, f32, i32, v128, f4, get, ic, call1, call2, host, constant };
}

/** The shared helpers of one function's lowerings. */
type Helpers = ReturnType<typeof helpers>;

/** Rounding to a narrow dtype (f16, i16, u16, i8, u8, bool), as a store would. */
function rounding(c: AluContext, h: Helpers): (x: number, d: DType) => number {
  const { m } = c;
  const { v128, ic } = h;
  return (x: number, d: DType): number => {
    switch (d) {
      case "f16":
        return m.f32x4.extract_lane(m.call("vf16", [m.f32x4.splat(x)], v128), 0);
      case "i16":
        return m.i32.shr_s(m.i32.shl(x, ic(16)), ic(16));
      case "u16":
        return m.i32.and(x, ic(65535));
      case "i8":
        return m.i32.shr_s(m.i32.shl(x, ic(24)), ic(24));
      case "u8":
        return m.i32.and(x, ic(255));
      case "bool":
        return m.i32.ne(x, ic(0));
      default:
        return x;
    }
  };
}

/** Casts between dtypes; integer targets saturate (the reference's castValue). */
function casting(c: AluContext, h: Helpers): (x: number, from: DType, to: DType) => number {
  const { m, local } = c;
  const { i32, get, ic } = h;
  return (x: number, from: DType, to: DType): number => {
    const F = isWide(from) ? m.f64 : m.f32;
    if (to === "bool") return isFloat(from) ? F.ne(x, F.const(0)) : m.i32.ne(x, ic(0));
    if (isFloat(to)) {
      const T = isWide(to) ? m.f64 : m.f32;
      if (isWide(from) !== isWide(to) && isFloat(from)) {
        return isWide(to) ? m.f64.promote(x) : m.f32.demote(x);
      }
      return isFloat(from) ? x : from === "u32" ? T.convert_u.i32(x) : T.convert_s.i32(x);
    }
    const clampS = (v: number, lo: number, hi: number) => {
      const t = local(i32);
      return m.block(null, [
        m.local.set(t, v),
        m.select(
          m.i32.lt_s(get(t, i32), ic(lo)),
          ic(lo),
          m.select(m.i32.gt_s(get(t, i32), ic(hi)), ic(hi), get(t, i32)),
        ),
      ], i32);
    };
    // Integer targets saturate (the reference's castValue): i32 and u32 by the truncation itself.
    const [lo, hi] = intRange(to)!;
    if (isFloat(from)) {
      const wide = isWide(from);
      if (to === "u32") return wide ? m.i32.trunc_u_sat.f64(x) : m.i32.trunc_u_sat.f32(x);
      const t = wide ? m.i32.trunc_s_sat.f64(x) : m.i32.trunc_s_sat.f32(x);
      return to === "i32" ? t : clampS(t, lo, hi);
    }
    if (from === to) return x;
    if (from === "u32") {
      const t = local(i32), top = Math.min(hi, 2147483647);
      return m.block(null, [
        m.local.set(t, x),
        m.select(m.i32.gt_u(get(t, i32), ic(top)), ic(top), get(t, i32)),
      ], i32);
    }
    if (to === "u32") return clampS(x, 0, 2147483647);
    return to === "i32" ? x : clampS(x, lo, hi);
  };
}

/** Per ALU op, its scalar lowering (f32 or f64 for floats, i32 for every other dtype). */
function scalarLowerings(
  c: AluContext,
  h: Helpers,
  cast: (x: number, from: DType, to: DType) => number,
): Record<AluOp, (args: ScalarArgs) => number> {
  const { m, wasm, local } = c;
  const { f64, f32, i32, get, ic, call2, host } = h;
  const tmp = (v: number) => {
    const l = local(i32);
    return { set: m.local.set(l, v), get: () => get(l, i32) };
  };
  const math = (op: keyof typeof MATH) => ({ a, d }: ScalarArgs) =>
    isWide(d[0])
      ? m.call(op.toLowerCase(), [a[0]], f64)
      : m.f32x4.extract_lane(m.call(MATH[op], [m.f32x4.splat(a[0])], wasm.v128), 0);
  return {
    Add: ({ a, fl, F }) => fl ? F.add(a[0], a[1]) : m.i32.add(a[0], a[1]),
    Sub: ({ a, fl, F }) => fl ? F.sub(a[0], a[1]) : m.i32.sub(a[0], a[1]),
    Mul: ({ a, fl, F }) => fl ? F.mul(a[0], a[1]) : m.i32.mul(a[0], a[1]),
    // Integer divisors are never zero here (see `jit/ir/integer_rules.ts`); the most negative value
    // divided by −1, which traps, wraps instead.
    Div: ({ a, fl, u, F }) => {
      if (fl) return F.div(a[0], a[1]);
      if (u) return m.i32.div_u(a[0], a[1]);
      const x = tmp(a[0]), y = tmp(a[1]);
      const minusOne = m.i32.eq(y.get(), ic(-1));
      const q = m.i32.div_s(x.get(), m.select(minusOne, ic(1), y.get()));
      return m.block(null, [x.set, y.set, m.select(minusOne, m.i32.sub(ic(0), x.get()), q)], i32);
    },
    Pow: ({ a, fl, d }) =>
      fl ? host("pow", isWide(d[0]), a[0], a[1]) : m.i32.trunc_s_sat.f32(
        call2("pow", m.f32.convert_s.i32(a[0]), m.f32.convert_s.i32(a[1])),
      ),
    // The truncated remainder (fmod); rem_s does not trap at the most negative value by −1.
    Mod: ({ a, fl, u, d }) =>
      fl
        ? host("fmod", isWide(d[0]), a[0], a[1])
        : u
        ? m.i32.rem_u(a[0], a[1])
        : m.i32.rem_s(a[0], a[1]),
    Equal: ({ a, fl, F }) => fl ? F.eq(a[0], a[1]) : m.i32.eq(a[0], a[1]),
    Greater: ({ a, fl, u, F }) =>
      fl ? F.gt(a[0], a[1]) : u ? m.i32.gt_u(a[0], a[1]) : m.i32.gt_s(a[0], a[1]),
    Less: ({ a, fl, u, F }) =>
      fl ? F.lt(a[0], a[1]) : u ? m.i32.lt_u(a[0], a[1]) : m.i32.lt_s(a[0], a[1]),
    // Logical on bool, bitwise on integers (u8 is re-rounded after Not like any op).
    And: ({ a, out }) =>
      out === "bool"
        ? m.i32.and(m.i32.ne(a[0], ic(0)), m.i32.ne(a[1], ic(0)))
        : m.i32.and(a[0], a[1]),
    Or: ({ a, out }) =>
      out === "bool"
        ? m.i32.or(m.i32.ne(a[0], ic(0)), m.i32.ne(a[1], ic(0)))
        : m.i32.or(a[0], a[1]),
    Not: ({ a, out }) => out === "bool" ? m.i32.eqz(a[0]) : m.i32.xor(a[0], ic(-1)),
    Where: ({ a }) => m.select(m.i32.ne(a[0], ic(0)), a[1], a[2]),
    Neg: ({ a, fl, F }) => fl ? F.neg(a[0]) : m.i32.sub(ic(0), a[0]),
    Abs: ({ a, fl, F }) => {
      if (fl) return F.abs(a[0]);
      const x = tmp(a[0]);
      return m.block(null, [
        x.set,
        m.select(m.i32.lt_s(x.get(), ic(0)), m.i32.sub(ic(0), x.get()), x.get()),
      ], i32);
    },
    Sqrt: ({ a, F }) => F.sqrt(a[0]),
    Floor: ({ a, F }) => F.floor(a[0]),
    Ceil: ({ a, F }) => F.ceil(a[0]),
    Round: ({ a, F }) => F.nearest(a[0]),
    Exp: math("Exp"),
    Log: math("Log"),
    Erf: math("Erf"),
    Sin: math("Sin"),
    Cos: math("Cos"),
    IsNaN: ({ a, d, F }) => {
      const t = isWide(d[0]) ? f64 : f32, l = local(t);
      return m.block(null, [m.local.set(l, a[0]), F.ne(get(l, t), get(l, t))], i32);
    },
    Cast: ({ a, d, out }) => cast(a[0], d[0], out),
    Bitcast: ({ a, out }) => isFloat(out) ? m.f32.reinterpret(a[0]) : m.i32.reinterpret(a[0]),
  } satisfies Record<AluOp, (args: ScalarArgs) => number>;
}

/** How each expression lives in a vector, memoized per function. */
function vectorKinds(): (e: Expr) => VectorKind {
  const kinds = new Map<Expr, VectorKind>();
  /** How `e` lives in a vector: f32 lanes, an all-ones/zero lane mask (bool), or not at all. */
  const vectorKind = (e: Expr): VectorKind => {
    if (kinds.has(e)) return kinds.get(e);
    // f16 values live in f32 lanes too (the arena widens them), rounded after every op.
    const lanesF32 = e.dtype === "f32" || e.dtype === "f16";
    const lanesI32 = LANE_INTS.has(e.dtype);
    // A bool buffer holds 0/1 words: loaded four at a time, they become a lane mask.
    const leaf = lanesF32 ? "f32" : lanesI32 ? "i32" : e.dtype === "bool" ? "mask" : undefined;
    let k: VectorKind;
    // A sum: a tile's f32 or i32 sums in the scratch, or a scalar accumulator splat.
    if (e.kind === "const" || e.kind === "load") k = leaf;
    else if (e.kind !== "alu") k = lanesF32 ? "f32" : e.dtype === "i32" ? "i32" : undefined;
    else {
      const args = e.args.map(vectorKind);
      const all = (want: string) => args.every((a) => a === want);
      if (lanesF32 && VECTOR_F32.has(e.op) && all("f32")) k = "f32";
      else if (e.dtype === "i32" && VECTOR_I32.has(e.op) && all("i32")) k = "i32";
      else if (VECTOR_MASK.has(e.op) && all("f32")) k = "mask";
      else if (e.op !== "IsNaN" && VECTOR_MASK.has(e.op) && all("i32")) k = "mask";
      else if (VECTOR_LOGIC.has(e.op) && all("mask")) k = "mask";
      else if (e.op === "Where" && args[0] === "mask" && args[1] === args[2]) k = args[1];
      else if (e.op === "Cast" && lanesF32 && args[0] !== undefined) k = "f32";
      // Integers from f32 lanes (truncated and saturated) or from narrower integers' lanes.
      else if (e.op === "Cast" && lanesI32 && (args[0] === "i32" || args[0] === "f32")) k = "i32";
    }
    kinds.set(e, k);
    return k;
  };
  return vectorKind;
}

/** The f32x4 lowerings: of four scalars (`lanes`), and of an expression (`valu`). */
function vectorLowerings(
  c: AluContext,
  h: Helpers,
  vectorKind: (e: Expr) => VectorKind,
): Pick<AluLowering, "lanes" | "valu"> {
  const { m } = c;
  const { v128, f4, call2 } = h;
  const lanes = (f: (lane: number) => number) =>
    [1, 2, 3].reduce((v, l) => f4.replace_lane(v, l, f(l)), f4.splat(f(0)));
  const ints = (e: Alu) => vectorKind(e.args[0]) === "i32";
  const lane = (x: number, l: number) => f4.extract_lane(x, l);
  const vmath = (op: keyof typeof MATH) => (_e: Alu, a: Arg) => m.call(MATH[op], [a(0)], v128);
  const perLane = (name: string) => (_e: Alu, a: Arg) =>
    lanes((l) => call2(name, lane(a(0), l), lane(a(1), l)));
  /**
   * Per ALU op: its f32x4 lowering (`vectorKind` decides which expressions take it). Encoder
   * expressions are a tree: every use of an argument builds a fresh node through `a(i)`.
   */
  const vector = {
    Add: (_e, a) => f4.add(a(0), a(1)),
    Sub: (_e, a) => f4.sub(a(0), a(1)),
    Mul: (_e, a) => f4.mul(a(0), a(1)),
    Div: (e, a) => {
      const r = exactReciprocal(e.args[1]);
      return r === undefined ? f4.div(a(0), a(1)) : f4.mul(a(0), f4.splat(m.f32.const(r)));
    },
    Neg: (_e, a) => f4.neg(a(0)),
    Abs: (_e, a) => f4.abs(a(0)),
    Sqrt: (_e, a) => f4.sqrt(a(0)),
    Floor: (_e, a) => f4.floor(a(0)),
    Ceil: (_e, a) => f4.ceil(a(0)),
    Round: (_e, a) => f4.nearest(a(0)),
    Exp: vmath("Exp"),
    Log: vmath("Log"),
    Erf: vmath("Erf"),
    Sin: vmath("Sin"),
    Cos: vmath("Cos"),
    Pow: (e, a) => {
      const power = powerFunction(e);
      return power ? m.call(power, [a(0)], v128) : perLane("pow")(e, a);
    },
    Mod: perLane("fmod"),
    // Comparisons of i32 lanes (integers of up to 32 signed bits) or of f32 lanes.
    Equal: (e, a) => ints(e) ? m.i32x4.eq(a(0), a(1)) : f4.eq(a(0), a(1)),
    Greater: (e, a) => ints(e) ? m.i32x4.gt_s(a(0), a(1)) : f4.gt(a(0), a(1)),
    Less: (e, a) => ints(e) ? m.i32x4.lt_s(a(0), a(1)) : f4.lt(a(0), a(1)),
    IsNaN: (_e, a) => f4.ne(a(0), a(0)),
    And: (_e, a) => m.v128.and(a(0), a(1)),
    Or: (_e, a) => m.v128.or(a(0), a(1)),
    Not: (_e, a) => m.v128.not(a(0)),
    Where: (_e, a) => m.v128.bitselect(a(1), a(2), a(0)),
    Cast: (e, a) => {
      const from = vectorKind(e.args[0]);
      if (from === "i32") return f4.convert_i32x4_s(a(0));
      return from === "mask" ? m.v128.and(a(0), f4.splat(m.f32.const(1))) : a(0);
    },
    // Never chosen (integers do not live in vectors), but a v128 is the same bits either way.
    Bitcast: (_e, a) => a(0),
  } satisfies Record<AluOp, (e: Alu, a: Arg) => number>;
  const valu = (e: Alu, a: Arg): number => {
    if (vectorKind(e) === "i32") return integerLanes(c, h, vectorKind, e, a);
    const v = vector[e.op](e, a);
    return e.dtype === "f16" ? m.call("vf16", [v], v128) : v;
  };
  return { lanes, valu };
}

/**
 * The i32x4 lowering of `e`, an integer of i32 lanes: Add, Sub and Mul wrap at 32 bits and casts
 * saturate to the type's range, as the scalar lowerings do (a cast from f32 truncates first).
 */
function integerLanes(
  c: AluContext,
  h: Helpers,
  vectorKind: (e: Expr) => VectorKind,
  e: Alu,
  a: Arg,
): number {
  const { m } = c;
  const { ic } = h;
  const i4 = m.i32x4;
  switch (e.op) {
    case "Add":
      return i4.add(a(0), a(1));
    case "Sub":
      return i4.sub(a(0), a(1));
    case "Mul":
      return i4.mul(a(0), a(1));
    case "Where":
      return m.v128.bitselect(a(1), a(2), a(0));
    case "Cast": {
      const from = e.args[0].dtype, [lo, hi] = intRange(e.dtype)!;
      const fromFloat = vectorKind(e.args[0]) === "f32";
      const v = fromFloat ? i4.trunc_sat_f32x4_s(a(0)) : a(0);
      const [flo, fhi] = fromFloat ? [-(2 ** 31), 2 ** 31 - 1] : intRange(from)!;
      if (flo >= lo && fhi <= hi) return v;
      return i4.min_s(i4.max_s(v, i4.splat(ic(lo))), i4.splat(ic(hi)));
    }
    default:
      // `vectorKinds` gives i32 lanes to the ops above alone.
      throw new KilnError(`wasm: no i32x4 lowering for ${e.op}`, {
        code: "internal",
        fix: "report this kernel (kiln explain shows it); compile for another backend meanwhile",
      });
  }
}
