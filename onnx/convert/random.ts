/**
 * ONNX's random ops: RandomUniform, RandomNormal, their `*Like` forms, Bernoulli and Multinomial
 * (a uniform draw located in the classes' cumulative probabilities). Each becomes
 * kiln's `RandomUniform`/`RandomNormal` (drawn anew on every run, from the node's `seed` when it
 * has one; see `jit/passes/random_inputs.ts`), with the comparison or cast around it as ordinary ops that
 * fuse. A seeded draw is numpy's `np.random.seed(seed)` stream (`jit/support/random.ts`), so training
 * Dropout's mask is the one ONNX's reference draws; its Bernoulli draws from numpy's global state,
 * which no seed reproduces.
 *
 * @module
 */
import type { Attrs } from "../../jit/ops/mod.ts";
import { scalar } from "./composite.ts";
import { int } from "../wire/proto.ts";
import {
  attribute,
  attrs,
  type Converter,
  dtypeAttr,
  type Known,
  type NodeContext,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** The seed attribute, when the node has one (a FLOAT on the random ops, an INT on Dropout). */
function seedOf(c: NodeContext): Attrs {
  const a = attribute(c, "seed");
  if (!a) return {};
  return { seed: a.type === 2 ? int(a.i) : a.f ?? 0 };
}

/**
 * `k` (drawn f32 numbers, or a comparison of them) as the node's `dtype` attribute says, else as
 * `like` is typed (f32 without one).
 */
function as(c: NodeContext, k: Known, like?: Known): Known {
  const { dtype, i64 } = dtypeAttr(c, "dtype", {
    dtype: like ? typeOf(like).dtype : "f32",
    i64: like?.i64 ?? false,
  });
  return { ...(dtype === typeOf(k).dtype ? k : opOf(c)("Cast", [k], { to: dtype })), i64 };
}

/** RandomUniform/RandomNormal over `shape` (the attribute, or the `*Like` input's). */
function draw(normal: boolean, like: boolean): Converter {
  return (c) => {
    const a = attrs(c);
    const x = like ? c.required(0) : undefined;
    const shape = x ? typeOf(x).shape : a.ints("shape");
    const params = normal
      ? { mean: a.float("mean", 0), scale: a.float("scale", 1) }
      : { low: a.float("low", 0), high: a.float("high", 1) };
    const k = opOf(c)(normal ? "RandomNormal" : "RandomUniform", [], {
      shape,
      ...params,
      ...seedOf(c),
    });
    return [as(c, k, x)];
  };
}

/**
 * Multinomial: `sample_size` class indices a row, drawn with the probabilities of the softmax of
 * its unnormalized log-probabilities: each draw u counts the classes whose cumulative probability
 * lies below u (clamped to the last class, where rounding leaves the total under 1).
 */
function multinomial(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0);
  const [batch, classes] = typeOf(x).shape, samples = a.int("sample_size", 1)!;
  const logits = typeOf(x).dtype === "f32" ? x : op("Cast", [x], { to: "f32" });
  const cumulative = op("CumSum", [op("Softmax", [logits], { axis: 1 })], { axis: 1 });
  const u = op("RandomUniform", [], { shape: [batch, samples, 1], ...seedOf(c) });
  const below = op("Less", [op("Unsqueeze", [cumulative], { axes: [1] }), u]);
  const counted = op("ReduceSum", [op("Cast", [below], { to: "i32" })], { axes: [2], keepdims: 0 });
  const index = op("Min", [counted, scalar(classes - 1, "i32")]);
  const { dtype, i64 } = dtypeAttr(c, "dtype", { dtype: "i32", i64: false });
  return [{ ...(dtype === "i32" ? index : op("Cast", [index], { to: dtype })), i64 }];
}

/** The converters of this file, by ONNX op type. */
export const RANDOM_CONVERTERS: Readonly<Record<string, Converter>> = {
  RandomUniform: draw(false, false),
  RandomNormal: draw(true, false),
  RandomUniformLike: draw(false, true),
  RandomNormalLike: draw(true, true),
  Bernoulli: (c) => {
    // 1 with probability p: a uniform draw below p.
    const p = c.required(0);
    const op = opOf(c);
    const u = op("RandomUniform", [], { shape: typeOf(p).shape, ...seedOf(c) });
    const pf = typeOf(p).dtype === "f32" ? p : op("Cast", [p], { to: "f32" });
    return [as(c, op("Less", [u, pf]), p)];
  },
  Multinomial: multinomial,
};

/**
 * Training-mode Dropout with a known `ratio`: ONNX's mask is a uniform draw ≥ ratio, the output
 * `x · mask / (1 − ratio)`.
 */
export function trainingDropout(c: NodeContext, ratio: number): Known[] {
  const x = c.required(0);
  const op = opOf(c);
  const { shape, dtype } = typeOf(x);
  const u = op("RandomUniform", [], { shape, ...seedOf(c) });
  const mask = op("Not", [op("Less", [u, scalar(ratio, "f32")])]);
  // Multiplied, not selected: a NaN dropped stays NaN, as in ONNX's reference (0 · NaN).
  const kept = op("Mul", [x, op("Cast", [mask], { to: dtype })]);
  const y = op("Mul", [kept, scalar(1 / (1 - ratio), dtype)]);
  return c.node.output[1] ? [y, mask] : [y];
}
