/**
 * Scalar semantics of every elementwise primitive, shared by the per-op reference kernels and the
 * kernel-IR interpreter so both compute exactly the same thing. {@linkcode roundTo} gives the
 * effect of storing a number in a dtype (f32/f16 rounding, integer wrap-around).
 *
 * @module
 */
import { type DType, fromF16Bits, isInt, toF16Bits } from "../../jit/ir/dtype.ts";
import { type AluOp, isAluOp } from "../../jit/ir/kernel_ir.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { castValue, erf, intMod, pow, roundHalfEven } from "./scalar_math.ts";

/** A scalar function of an op's arguments. */
export type ScalarFn = (args: readonly number[]) => number;

/** The number a value becomes when stored as `dtype`. */
export function roundTo(dtype: DType, v: number): number {
  switch (dtype) {
    case "f64":
      return v;
    case "f32":
      return Math.fround(v);
    case "f16":
      return fromF16Bits(toF16Bits(v));
    case "i32":
      return v | 0;
    case "u32":
      return v >>> 0;
    case "i16":
      return ((v | 0) << 16) >> 16;
    case "u16":
      return (v | 0) & 0xffff;
    case "i8":
      return ((v | 0) << 24) >> 24;
    case "u8":
      return (v | 0) & 255;
    case "bool":
      return v !== 0 ? 1 : 0;
    case "i64":
      // Lowered before any backend runs it (see `jit/passes/int64.ts`); as f64 holds it.
      return Math.trunc(v);
  }
}

/** One 32-bit word seen as a float and as an unsigned integer, for Bitcast. */
const BITS = (() => {
  const word = new ArrayBuffer(4);
  return { f32: new Float32Array(word), u32: new Uint32Array(word) };
})();

/** Per ALU op: its scalar function for a result of `dtype`. */
const SCALAR = {
  Add: () => ([a, b]) => a + b,
  Sub: () => ([a, b]) => a - b,
  Mul: (dtype) => isInt(dtype) ? ([a, b]) => Math.imul(a, b) : ([a, b]) => a * b,
  Div: () => ([a, b]) => a / b,
  Pow: () => ([a, b]) => pow(a, b),
  Mod: (dtype, attrs) =>
    attrs.fmod === 1 ? ([a, b]) => (b === 0 && isInt(dtype) ? 0 : a % b) : ([a, b]) => intMod(a, b),
  Equal: () => ([a, b]) => +(a === b),
  Greater: () => ([a, b]) => +(a > b),
  Less: () => ([a, b]) => +(a < b),
  // Logical on bool, bitwise on integers (stored back to the dtype: u32 and u8 wrap).
  And: (dtype) => dtype === "bool" ? ([a, b]) => +(a !== 0 && b !== 0) : ([a, b]) => a & b,
  Or: (dtype) => dtype === "bool" ? ([a, b]) => +(a !== 0 || b !== 0) : ([a, b]) => a | b,
  Not: (dtype) => dtype === "bool" ? ([x]) => +(x === 0) : ([x]) => ~x,
  Where: () => ([c, a, b]) => (c !== 0 ? a : b),
  Neg: () => ([x]) => -x,
  Abs: () => ([x]) => Math.abs(x),
  Sqrt: () => ([x]) => Math.sqrt(x),
  Exp: () => ([x]) => Math.exp(x),
  Log: () => ([x]) => Math.log(x),
  Erf: () => ([x]) => erf(x),
  Sin: () => ([x]) => Math.sin(x),
  Cos: () => ([x]) => Math.cos(x),
  Floor: () => ([x]) => Math.floor(x),
  Ceil: () => ([x]) => Math.ceil(x),
  Round: () => ([x]) => roundHalfEven(x),
  IsNaN: () => ([x]) => +Number.isNaN(x),
  Cast: (dtype) => ([x]) => castValue(x, dtype),
  // Bitcast is f32 ↔ i32/u32 only, so a float result means integer bits in, and the reverse.
  Bitcast: (dtype) =>
    dtype === "f32"
      ? ([x]) => ((BITS.u32[0] = x), BITS.f32[0])
      : ([x]) => ((BITS.f32[0] = x), BITS.u32[0]),
} satisfies Record<AluOp, (dtype: DType, attrs: Attrs) => ScalarFn>;

/**
 * The scalar function of elementwise op `op` producing `dtype` (before rounding to it).
 * Returns `undefined` for ops that are not elementwise primitives.
 */
export function scalarOp(op: string, dtype: DType, attrs: Attrs = {}): ScalarFn | undefined {
  return isAluOp(op) ? SCALAR[op](dtype, attrs) : undefined;
}
