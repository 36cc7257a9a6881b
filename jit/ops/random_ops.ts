/**
 * Ops that draw at random through `RandomUniform`: `Bernoulli` (1 with probability p: a uniform
 * draw below p), `Multinomial` (`sample_size` class indices a row, each draw u counting the
 * classes whose cumulative softmax probability lies below it, clamped to the last class) and
 * `Dropout` in training mode (ONNX's mask: a uniform draw ≥ ratio; the output x · mask / (1 −
 * ratio)). The compile writes them out before anything else (`jit/passes/random_inputs.ts`), so
 * their draws become inputs the executable fills on every run, like any RandomUniform's.
 *
 * @module
 */
import { FLOATS } from "./elementwise.ts";
import { type Attrs, defineOps, type EmitRef, type Emitter, type OpDef } from "./registry.ts";
import type { DType } from "../ir/dtype.ts";

/** A RandomUniform of `shape`, seeded as the node is. */
function uniform(e: Emitter, shape: readonly number[], a: Attrs): EmitRef {
  return e.op("RandomUniform", [], { shape, ...(a.seed === undefined ? {} : { seed: a.seed }) });
}

/** `k` as `dtype`. */
const as = (e: Emitter, k: EmitRef, dtype: DType) =>
  e.typeOf(k).dtype === dtype ? k : e.op("Cast", [k], { to: dtype });

const bernoulli: OpDef = {
  name: "Bernoulli",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, FLOATS);
    if (ctx.has("seed")) ctx.float("seed");
    return [{ shape: ctx.input(0).shape, dtype: ctx.dtype("dtype", ctx.input(0).dtype) }];
  },
  decompose: (e, [p], a) => {
    const draw = e.op("Less", [uniform(e, e.typeOf(p).shape, a), as(e, p, "f32")]);
    return [as(e, draw, (a.dtype as DType | undefined) ?? e.typeOf(p).dtype)];
  },
};

const multinomial: OpDef = {
  name: "Multinomial",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, FLOATS);
    const [batch] = ctx.input(0).shape, samples = ctx.int("sample_size", 1);
    if (ctx.input(0).shape.length !== 2 || !(samples >= 1)) {
      ctx.fail(
        "Multinomial of other than [batch, classes]",
        "pass 2-D logits and a sample_size of 1 or more",
        "shape-mismatch",
      );
    }
    if (ctx.has("seed")) ctx.float("seed");
    return [{ shape: [batch, samples], dtype: ctx.dtype("dtype", "i32") }];
  },
  decompose: (e, [x], a) => {
    const [batch, classes] = e.typeOf(x).shape,
      samples = (a.sample_size as number | undefined) ?? 1;
    const cumulative = e.op("CumSum", [e.op("Softmax", [as(e, x, "f32")], { axis: 1 })], {
      axis: 1,
    });
    const u = uniform(e, [batch, samples, 1], a);
    const below = e.op("Less", [e.op("Unsqueeze", [cumulative], { axes: [1] }), u]);
    const counted = e.op("ReduceSum", [e.op("Cast", [below], { to: "i32" })], {
      axes: [2],
      keepdims: 0,
    });
    const index = e.op("Min", [counted, e.scalar(classes - 1, "i32")]);
    return [as(e, index, (a.dtype as DType | undefined) ?? "i32")];
  },
};

const dropout: OpDef = {
  name: "Dropout",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape;
    const ratio = ctx.float("ratio", 0.5);
    if (!(ratio >= 0 && ratio < 1)) {
      ctx.fail(`ratio ${ratio}`, "use a ratio in [0, 1)", "bad-attribute");
    }
    if (ctx.has("seed")) ctx.float("seed");
    const y = { shape, dtype };
    return ctx.int("mask", 0) === 1 ? [y, { shape, dtype: "bool" }] : [y];
  },
  decompose: (e, [x], a) => {
    const { shape, dtype } = e.typeOf(x), ratio = (a.ratio as number | undefined) ?? 0.5;
    const mask = e.op("Not", [e.op("Less", [uniform(e, shape, a), e.scalar(ratio, "f32")])]);
    // Multiplied, not selected: a NaN dropped stays NaN, as in ONNX's reference (0 · NaN).
    const kept = e.op("Mul", [x, e.op("Cast", [mask], { to: dtype })]);
    const y = e.op("Mul", [kept, e.scalar(1 / (1 - ratio), dtype)]);
    return a.mask === 1 ? [y, mask] : [y];
  },
};

defineOps([bernoulli, multinomial, dropout]);
