/**
 * ONNX's normalizations beyond kiln's LayerNormalization and BatchNormalization: LpNormalization
 * (the kiln op of that name, `jit/ops/sum_reductions.ts`; its attributes checked here) and
 * GroupNormalization, a composition that fuses (moments over each group's channels, then the
 * per-channel scale and bias).
 *
 * @module
 */
import { sizeOf } from "../../jit/ir/shape.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import {
  attrs,
  type Converter,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** (Σ |x|^p)^(1/p) over `axes`, kept as size-1 axes. */
export function lpNorm(op: OpFn, x: Known, p: number, axes: number[]): Known {
  const t = typeOf(x).dtype, keep = { axes, keepdims: 1 };
  if (p === 1) return op("ReduceSum", [op("Abs", [x])], keep);
  if (p === 2) return op("Sqrt", [op("ReduceSum", [op("Mul", [x, x])], keep)]);
  const sum = op("ReduceSum", [op("Pow", [op("Abs", [x]), scalar(p, t)])], keep);
  return op("Pow", [sum, scalar(1 / p, t)]);
}

/** LpNormalization: x over its p-norm along `axis` (p 1 or 2). */
function lpNormalization(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0), rank = typeOf(x).shape.length;
  const p = a.int("p", 2)!, given = a.int("axis", -1)!, axis = given < 0 ? given + rank : given;
  if ((p !== 1 && p !== 2) || axis < 0 || axis >= rank) {
    throw new KilnError(
      `${c.label}: LpNormalization with p ${p} along axis ${given} of rank ${rank}`,
      {
        code: "bad-input",
        fix: "ONNX's LpNormalization takes p 1 or 2 and an axis of the input",
      },
    );
  }
  return [op("LpNormalization", [x], { axis, p })];
}

/**
 * GroupNormalization: each group of channels normalized by its own mean and variance, then scaled
 * and shifted per channel (opset 21: scale and bias of [C]) or per group (opset 18: of
 * [num_groups]). At opset 21 the moments of f16 data are taken in f32 (`stash_type` 1, its
 * default; kiln holds bfloat16 data as f32 already) and the normalized values cast back before
 * the scale and bias, as ONNX's function does.
 */
function groupNormalization(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0), scale = c.required(1);
  const bias = c.required(2), shape = typeOf(x).shape, dtype = typeOf(x).dtype;
  const groups = a.int("num_groups"), channels = shape[1] ?? 0;
  const perChannel = c.opset >= 21, width = perChannel ? channels : groups;
  const fits = (k: Known) => typeOf(k).shape.join() === `${width}`;
  if (!groups || shape.length < 2 || channels % groups !== 0 || !fits(scale) || !fits(bias)) {
    throw new KilnError(
      `${c.label}: GroupNormalization of [${shape}] in ${groups} groups, scale [${
        typeOf(scale).shape
      }], bias [${typeOf(bias).shape}]`,
      {
        code: "shape-mismatch",
        fix: `num_groups must divide the channels; scale and bias are [${
          perChannel ? "C" : "num_groups"
        }] at opset ${c.opset}`,
      },
    );
  }
  const stash = a.int("stash_type", 1)!, narrow = dtype === "f16";
  const wide = perChannel && narrow && stash === 1 ? op("Cast", [x], { to: "f32" }) : x;
  const t = typeOf(wide).dtype, per = sizeOf(shape) / shape[0] / groups;
  const grouped = op("Reshape", [wide], { shape: [shape[0], groups, per] });
  const keep = { axes: [2], keepdims: 1 };
  const mean = op("ReduceMean", [grouped], keep);
  const d = op("Sub", [grouped, mean]);
  const variance = op("ReduceMean", [op("Mul", [d, d])], keep);
  const eps = scalar(a.float("epsilon", 1e-5)!, t);
  let y = op("Div", [d, op("Sqrt", [op("Add", [variance, eps])])]);
  if (wide !== x) y = op("Cast", [y], { to: dtype });
  // Scale and bias as [G, 1] against [N, G, per], or as [C, 1, …] against [N, C, spatial…].
  const spread = (k: Known) =>
    op("Reshape", [k], {
      shape: perChannel ? [channels, ...shape.slice(2).map(() => 1)] : [groups, 1],
    });
  if (perChannel) y = op("Reshape", [y], { shape });
  y = op("Add", [op("Mul", [y, spread(scale)]), spread(bias)]);
  return [perChannel ? y : op("Reshape", [y], { shape })];
}

/** Converters by ONNX op type. */
export const NORMALIZATION_CONVERTERS: Record<string, Converter<Known>> = {
  LpNormalization: lpNormalization,
  GroupNormalization: groupNormalization,
};
