/**
 * Scalar semantics of every elementwise primitive, shared by the per-op reference kernels and the
 * kernel-IR interpreter so both compute exactly the same thing. {@linkcode roundTo} gives the
 * effect of storing a number in a dtype (f32/f16 rounding, integer wrap-around).
 *
 * @module
 */
import { type DType, fromF16Bits, isInt, toF16Bits } from "../../jit/dtype.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { castValue, erf, intMod, roundHalfEven } from "./scalar_math.ts";

/** A scalar function of an op's arguments. */
export type ScalarFn = (args: readonly number[]) => number;

/** The number a value becomes when stored as `dtype`. */
export function roundTo(dtype: DType, v: number): number {
  switch (dtype) {
    case "f32":
      return Math.fround(v);
    case "f16":
      return fromF16Bits(toF16Bits(v));
    case "i32":
      return v | 0;
    case "u32":
      return v >>> 0;
    case "i8":
      return ((v | 0) << 24) >> 24;
    case "u8":
      return (v | 0) & 255;
    case "bool":
      return v !== 0 ? 1 : 0;
  }
}

/**
 * The scalar function of elementwise op `op` producing `dtype` (before rounding to it).
 * Returns `undefined` for ops that are not elementwise primitives.
 */
export function scalarOp(op: string, dtype: DType, attrs: Attrs = {}): ScalarFn | undefined {
  const int = isInt(dtype);
  switch (op) {
    case "Add":
      return ([a, b]) => a + b;
    case "Sub":
      return ([a, b]) => a - b;
    case "Mul":
      return int ? ([a, b]) => Math.imul(a, b) : ([a, b]) => a * b;
    case "Div":
      return ([a, b]) => a / b;
    case "Pow":
      return ([a, b]) => Math.pow(a, b);
    case "Mod":
      return attrs.fmod === 1 ? ([a, b]) => (b === 0 && int ? 0 : a % b) : ([a, b]) => intMod(a, b);
    case "Equal":
      return ([a, b]) => +(a === b);
    case "Greater":
      return ([a, b]) => +(a > b);
    case "Less":
      return ([a, b]) => +(a < b);
    case "And":
      return ([a, b]) => +(a !== 0 && b !== 0);
    case "Or":
      return ([a, b]) => +(a !== 0 || b !== 0);
    case "Where":
      return ([c, a, b]) => (c !== 0 ? a : b);
    case "Neg":
      return ([x]) => -x;
    case "Abs":
      return ([x]) => Math.abs(x);
    case "Sqrt":
      return ([x]) => Math.sqrt(x);
    case "Exp":
      return ([x]) => Math.exp(x);
    case "Log":
      return ([x]) => Math.log(x);
    case "Erf":
      return ([x]) => erf(x);
    case "Sin":
      return ([x]) => Math.sin(x);
    case "Cos":
      return ([x]) => Math.cos(x);
    case "Floor":
      return ([x]) => Math.floor(x);
    case "Ceil":
      return ([x]) => Math.ceil(x);
    case "Round":
      return ([x]) => roundHalfEven(x);
    case "Not":
      return ([x]) => +(x === 0);
    case "IsNaN":
      return ([x]) => +Number.isNaN(x);
    case "Cast":
      return ([x]) => castValue(x, dtype);
  }
  return undefined;
}
