/**
 * int64 that is never silently wrapped, at import. kiln holds int64 values in 32 bits; int64
 * arithmetic that can leave that range on values known only at run time is computed in 64 bits
 * (see {@linkcode int64Widths} and `jit/passes/int64.ts`), but a constant expression folds in 32
 * bits as it is imported: 100000 · 100000 would fold to 1410065408. Each such folded op gets a
 * shadow, the same op in f32 on the same inputs, whose result differs from the 32-bit one by
 * about 2^32 exactly where that one wrapped (and by rounding, far less than 2^31, where it did
 * not): the difference is a typed error at import. Constants that carry INT64_MAX or INT64_MIN
 * ("to the end" in Slice bounds) are kept apart from arithmetic the same way.
 *
 * @module
 */
import { carriedInputs, grows } from "../../jit/passes/int64.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { isSaturated } from "../wire/proto.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { constant, type Known, type OpFn, typeOf } from "./node_context.ts";

const scalar = (v: number): Known => constant([v], [], "f32");

/**
 * `ins` at the widths `op` computes int64 in: 64 bits (kiln's `i64`, lowered by each compile)
 * where it can leave the 32-bit range kiln holds int64 in (a sum or product of values not all
 * constant) or where it carries a value already held in 64 bits; else 32 bits, a value held in 64
 * narrowed, with `check` told where it did not fit. `one` emits an op.
 */
export function int64Widths(
  op: string,
  ins: readonly Known[],
  one: OpFn,
  check: (bad: Known) => void,
): readonly Known[] {
  const wide = (k: Known) => typeOf(k).dtype === "i64";
  const dynamic = ins.some((k) => k.i64) && !ins.every((k) => k.kind === "const");
  if (!ins.some(wide) && !(grows(op) && dynamic)) return ins;
  const carries = op === "Cast" ? [0] : carriedInputs(op);
  const carried = (i: number) => carries === "all" || (carries?.includes(i) ?? false);
  const widen = op !== "Cast" &&
    (ins.some((k, i) => carried(i) && wide(k)) || (grows(op) && dynamic));
  return ins.map((k, i) => {
    if (widen && carried(i) && typeOf(k).dtype === "i32") {
      return { ...one("Cast", [k], { to: "i64" }), i64: true };
    }
    if (!wide(k) || carried(i)) return k;
    // Read in 32 bits: the value comes back as it was, or it did not fit.
    const narrow = one("Cast", [k], { to: "i32" });
    check(one("Not", [one("Equal", [one("Cast", [narrow], { to: "i64" }), k])]));
    return { ...narrow, i64: true };
  });
}

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
  if (!grows(name)) return undefined;
  const wide = (k: Known) => op("Cast", [k], { to: "f32" });
  const shadow = op(name, ins.map(wide), attrs);
  const drift = op("Abs", [op("Sub", [wide(y), shadow])]);
  return op("Greater", [drift, scalar(2 ** 31)]);
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

/** Ops with a positions input (its index below): their values come from the other inputs. */
const POSITIONS: Readonly<Record<string, number>> = {
  Gather: 1,
  GatherElements: 1,
  GatherND: 1,
  ScatterElements: 1,
  ScatterND: 1,
};

/**
 * Whether op `name`'s integer results on `ins` are int64 values: where a value input is (the
 * positions a gather or scatter reads by do not make int32 data int64).
 */
export function carriesI64(name: string, ins: readonly Known[]): boolean {
  return ins.some((k, i) => k.i64 && POSITIONS[name] !== i);
}

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
