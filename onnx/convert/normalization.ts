/**
 * ONNX's normalizations beyond kiln's LayerNormalization and BatchNormalization: LpNormalization
 * (the kiln op of that name, `jit/ops/sum_reductions.ts`) and GroupNormalization (`jit/ops/nn.ts`),
 * their attributes and inputs mapped here.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import {
  attrs,
  type Converter,
  type Known,
  type NodeContext,
  opOf,
  typeOf,
} from "../import/node_context.ts";

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
 * GroupNormalization (kiln's op): opset 21's scale and bias are per channel, as kiln's; opset 18's
 * are per group, spread here to the group's channels.
 */
function groupNormalization(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0);
  const shape = typeOf(x).shape, groups = a.int("num_groups"), channels = shape[1] ?? 0;
  const perChannel = c.opset >= 21, width = perChannel ? channels : groups;
  let [scale, bias] = [c.required(1), c.required(2)];
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
  if (!perChannel) {
    const spread = (k: Known) =>
      op("Reshape", [
        op("Expand", [op("Reshape", [k], { shape: [groups, 1] })], {
          shape: [groups, channels / groups],
        }),
      ], { shape: [channels] });
    [scale, bias] = [spread(scale), spread(bias)];
  }
  const epsilon = a.float("epsilon", 1e-5), stash = a.int("stash_type", 1);
  return [op("GroupNormalization", [x, scale, bias], {
    num_groups: groups,
    epsilon,
    stash_type: perChannel ? stash : 0,
  })];
}

/** Converters by ONNX op type. */
export const NORMALIZATION_CONVERTERS: Record<string, Converter<Known>> = {
  LpNormalization: lpNormalization,
  GroupNormalization: groupNormalization,
};
