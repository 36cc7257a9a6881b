/**
 * int64 that is never silently wrapped. kiln holds int64 values in 32 bits (no backend it targets
 * has 64-bit integer arithmetic worth using, and WGSL has none), so an int64 sum or product that
 * leaves the 32-bit range would wrap: 100000 · 100000 gave 1410065408. Each int64 op that can
 * leave the range gets a shadow: the same op in f32 on the same inputs, whose result differs from
 * the 32-bit one by about 2^32 exactly where the 32-bit result wrapped (and by rounding, far less
 * than 2^31, where it did not). The difference becomes a check: folded at import (a typed error
 * there) or a check output the executable asserts after every run (see `jit/runtime/checks.ts`).
 *
 * @module
 */
import { isFloat } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { isSaturated } from "../wire/proto.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { constant, type Known, type OpFn, typeOf } from "./node_context.ts";

/** Ops whose 32-bit integer result can wrap where the int64 result would not. */
const WRAPS = new Set([
  "Add",
  "Sub",
  "Mul",
  "Neg",
  "Abs",
  "Div",
  "ReduceSum",
  "ReduceProd",
  "ReduceSumSquare",
  "CumSum",
  "MatMul",
  "Gemm",
]);

const scalar = (v: number, dtype: "f32" | "f64" = "f32"): Known => constant([v], [], dtype);

/**
 * Where int64 op `op` on `ins` (giving `y`, held in 32 bits) can wrap: a boolean value true at
 * each element whose 32-bit result wrapped; `undefined` for ops that cannot wrap.
 */
export function int64Wrapped(
  op: OpFn,
  name: string,
  ins: readonly Known[],
  attrs: Attrs,
  y: Known,
): Known | undefined {
  if (!WRAPS.has(name)) return undefined;
  const wide = (k: Known) => op("Cast", [k], { to: "f32" });
  const shadow = op(name, ins.map(wide), attrs);
  const drift = op("Abs", [op("Sub", [wide(y), shadow])]);
  return op("Greater", [drift, scalar(2 ** 31)]);
}

/**
 * Where a Cast of `x` to int64 leaves the 32-bit range kiln holds int64 in (`3e9` saturated to
 * 2147483647): `undefined` for integer sources, which always fit.
 */
export function castWrapped(op: OpFn, x: Known): Known | undefined {
  const dtype = typeOf(x).dtype;
  if (!isFloat(dtype)) return undefined;
  const kind = dtype === "f64" ? "f64" : "f32";
  const wide = dtype === kind ? x : op("Cast", [x], { to: kind });
  const high = op("Not", [op("Less", [wide, scalar(2 ** 31, kind)])]);
  const low = op("Less", [wide, scalar(-(2 ** 31), kind)]);
  // NaN compares false on both sides: Cast leaves NaN undefined, as ONNX does.
  return op("Or", [op("And", [high, op("Equal", [wide, wide])]), low]);
}

/**
 * Ops that move or clamp values and so keep a saturated INT64_MAX/INT64_MIN sentinel meaning "to
 * the end" (exporters build Slice bounds with them); any other op reading one computes on a
 * number kiln does not hold.
 */
const KEEPS_SENTINELS = new Set([
  "Identity",
  "Reshape",
  "Unsqueeze",
  "Squeeze",
  "Flatten",
  "Concat",
  "Slice",
  "Split",
  "Gather",
  "Expand",
  "Transpose",
  "Min",
  "Max",
  "Where",
]);

/**
 * Whether folded op `name` on `ins` may carry a saturated sentinel on (true), does not meet one
 * (false); a typed error where it would compute on one.
 */
export function carriesSentinel(name: string, ins: readonly Known[], label: string): boolean {
  const saturated = ins.some((k) => k.kind === "const" && isSaturated(k.tensor.data));
  if (!saturated || KEEPS_SENTINELS.has(name)) return saturated;
  throw sentinelError(label);
}

/** The error of INT64_MAX or INT64_MIN used as a number (kiln holds int64 in 32 bits). */
export function sentinelError(label: string): KilnError {
  return new KilnError(
    `${label}: computes with INT64_MAX or INT64_MIN, which kiln holds in 32 bits only as a "to the end" bound`,
    {
      code: "out-of-range",
      fix: "use these values only as Slice bounds, or values within [-2^31, 2^31) as numbers",
    },
  );
}
