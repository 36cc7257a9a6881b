/**
 * Integer semantics that every code generator shares, written once as kernel IR rewrites: fusion
 * passes each ALU node it builds through {@linkcode withIntegerRules}. ONNX (and kiln's
 * reference) give `x / 0 = 0` and `x mod 0 = 0`, and Mod without `fmod` takes the divisor's sign
 * (Python's `%`). After the rewrite an integer Div or Mod in kernel IR never sees a zero divisor,
 * and Mod is the truncated remainder (C's `%`, `fmod`): what the targets' own integer division
 * and remainder compute, so each generator lowers them to those alone. Each generator once wrote
 * the zero and sign rules itself, in its own way.
 *
 * What stays with each generator is what its instructions do differently: WebAssembly traps on
 * the most negative value divided by −1 (WGSL defines it), and float-to-integer casts saturate in
 * one instruction on WebAssembly (`trunc_sat`) and in a helper on WGSL.
 *
 * @module
 */
import { type DType, isFloat } from "./dtype.ts";
import type { Alu, Expr } from "./kernel_ir.ts";

const node = (
  op: Alu["op"],
  args: readonly Expr[],
  dtype: DType,
  attrs?: Alu["attrs"],
): Expr => ({ kind: "alu", op, args, dtype, ...(attrs ? { attrs } : {}) });
const constant = (value: number, dtype: DType): Expr => ({ kind: "const", value, dtype });

/** Unsigned integer types small enough that f32 holds each of their values exactly. */
const SMALL_UNSIGNED: Partial<Record<DType, number>> = { u8: 255, u16: 65535 };

/**
 * `alu` with the shared integer rules applied: Div and Mod of integers guard their divisor, and
 * a float cast to a small unsigned type and back (quantization's round trip) is float arithmetic.
 */
export function withIntegerRules(alu: Alu): Expr {
  const { op, args, dtype } = alu;
  const inner = args[0];
  if (
    op === "Cast" && isFloat(dtype) && inner?.kind === "alu" && inner.op === "Cast" &&
    SMALL_UNSIGNED[inner.dtype] !== undefined && inner.args[0].dtype === dtype
  ) {
    // The cast truncates and saturates (NaN to 0): below 1 (NaN aside, which compares false) it
    // is +0, above the top the top, else the floor. Vector code lowers each of these ops, and
    // not the integer lanes between (DynamicQuantizeLinear's output dequantized: 7.8 ns a point
    // on the per-element path).
    const x = inner.args[0], top = constant(SMALL_UNSIGNED[inner.dtype]!, dtype);
    const zero = node("Or", [
      node("Less", [x, constant(1, dtype)], "bool"),
      node("IsNaN", [x], "bool"),
    ], "bool");
    const clamped = node("Where", [
      node("Greater", [x, top], "bool"),
      top,
      node("Floor", [x], dtype),
    ], dtype);
    return node("Where", [zero, constant(0, dtype), clamped], dtype);
  }
  if ((op !== "Div" && op !== "Mod") || isFloat(dtype) || dtype === "bool") return alu;
  const [a, b] = args;
  const zero = constant(0, dtype);
  const byZero = node("Equal", [b, zero], "bool");
  const safe = node("Where", [byZero, constant(1, dtype), b], dtype);
  let result = node(op, [a, safe], dtype, op === "Mod" ? { fmod: 1 } : undefined);
  if (
    op === "Mod" && alu.attrs?.fmod !== 1 && (dtype === "i32" || dtype === "i16" || dtype === "i8")
  ) {
    // A nonzero remainder whose sign differs from the divisor's moves by one divisor.
    const r = result;
    const negative = (x: Expr) => node("Less", [x, zero], "bool");
    const differs = node("And", [
      node("Not", [node("Equal", [r, zero], "bool")], "bool"),
      node("Not", [node("Equal", [negative(r), negative(b)], "bool")], "bool"),
    ], "bool");
    result = node("Where", [differs, node("Add", [r, b], dtype), r], dtype);
  }
  return node("Where", [byZero, zero, result], dtype);
}
