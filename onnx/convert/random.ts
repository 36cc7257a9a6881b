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

/** The converters of this file, by ONNX op type. */
export const RANDOM_CONVERTERS: Readonly<Record<string, Converter>> = {
  RandomUniform: draw(false, false),
  RandomNormal: draw(true, false),
  RandomUniformLike: draw(false, true),
  RandomNormalLike: draw(true, true),
  // Kiln ops (`jit/ops/random_ops.ts`): the output type as the node's `dtype` says, else as its
  // input's (Bernoulli) or int64 (Multinomial).
  Bernoulli: (c) => {
    const p = c.required(0);
    const { dtype, i64 } = dtypeAttr(c, "dtype", { dtype: typeOf(p).dtype, i64: p.i64 ?? false });
    const [y] = c.emit("Bernoulli", [p], { dtype, ...seedOf(c) });
    return [{ ...y, i64 }];
  },
  Multinomial: (c) => {
    const { dtype, i64 } = dtypeAttr(c, "dtype", { dtype: "i32", i64: false });
    const sample_size = attrs(c).int("sample_size", 1);
    const [y] = c.emit("Multinomial", [c.required(0)], { sample_size, dtype, ...seedOf(c) });
    return [{ ...y, i64 }];
  },
};

/** Training-mode Dropout with a known `ratio` (kiln's op): its output and, where asked, the mask. */
export function trainingDropout(c: NodeContext, ratio: number): Known[] {
  const mask = c.node.output[1] ? 1 : 0;
  return c.emit("Dropout", [c.required(0)], { ratio, mask, ...seedOf(c) }, mask ? 2 : 1);
}
