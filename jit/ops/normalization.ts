/**
 * Normalizations by per-channel or per-axis moments: `BatchNormalization` (inference, with the
 * given statistics, and training, with the batch's own and the blended running statistics as
 * outputs), `MeanVarianceNormalization`, `InstanceNormalization` and ONNX Runtime's
 * `EmbedLayerNormalization` (BERT's embeddings summed and normalized). LayerNormalization lives
 * with the row reductions (`reduce.ts`), GroupNormalization in `nn.ts`.
 *
 * @module
 */
import { formatShape } from "../ir/shape.ts";
import { FLOATS } from "./elementwise.ts";
import {
  constantTensor,
  defineOps,
  type EmitRef,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** The shape `[1, C, 1, …]` that lines a per-channel vector up with an NC… tensor. */
function channelShape(rank: number, c: number): number[] {
  return [...Array(rank).keys()].map((i) => (i === 1 ? c : 1));
}

/** BatchNormalization's types: y as x; in training mode the running mean and variance too. */
function batchNormInfer(ctx: InferContext): ValueType[] {
  const dtype = ctx.requireFloat(0);
  const shape = ctx.input(0).shape;
  if (shape.length < 2) {
    ctx.fail("input 0 needs a channel axis (rank ≥ 2)", "pass an N×C×… tensor", "shape-mismatch");
  }
  ctx.float("epsilon", 1e-5);
  ctx.float("momentum", 0.9);
  const training = ctx.int("training_mode", 0);
  for (let i = 1; i < 5; i++) {
    const p = ctx.input(i);
    if (p.shape.length !== 1 || p.shape[0] !== shape[1] || p.dtype !== dtype) {
      ctx.fail(
        `input ${i} must be ${dtype}[${shape[1]}] (one value per channel)`,
        "pass per-channel scale, bias, mean and variance",
        "shape-mismatch",
      );
    }
  }
  const running = { shape: [shape[1]], dtype };
  return training ? [{ shape, dtype }, running, running] : [{ shape, dtype }];
}

/**
 * BatchNormalization. Inference: x normalized by the given mean and variance. Training mode: by
 * the batch's own mean and (population) variance per channel, and the running statistics blend
 * them into the given ones with `momentum`, as ONNX's reference does.
 */
const batchNormalization: OpDef = {
  name: "BatchNormalization",
  category: "composite",
  arity: [5, 5],
  primitive: false,
  infer: batchNormInfer,
  decompose: (e, [x, scale, bias, mean, variance], attrs) => {
    const t = e.typeOf(x);
    const shape = channelShape(t.shape.length, t.shape[1]);
    const r = (v: EmitRef) => e.op("Reshape", [v], { shape });
    const eps = e.scalar((attrs.epsilon as number | undefined) ?? 1e-5, t.dtype);
    if (!attrs.training_mode) {
      const inv = e.op("Div", [r(scale), e.op("Sqrt", [e.op("Add", [r(variance), eps])])]);
      return [e.op("Add", [e.op("Mul", [e.op("Sub", [x, r(mean)]), inv]), r(bias)])];
    }
    const axes = [0, ...[...Array(t.shape.length - 2).keys()].map((i) => 2 + i)];
    const batchMean = e.op("ReduceMean", [x], { axes, keepdims: 1 });
    const d = e.op("Sub", [x, batchMean]);
    const batchVar = e.op("ReduceMean", [e.op("Mul", [d, d])], { axes, keepdims: 1 });
    const norm = e.op("Div", [d, e.op("Sqrt", [e.op("Add", [batchVar, eps])])]);
    const y = e.op("Add", [e.op("Mul", [norm, r(scale)]), r(bias)]);
    const m = (attrs.momentum as number | undefined) ?? 0.9;
    const blend = (running: EmitRef, batch: EmitRef) =>
      e.op("Add", [
        e.op("Mul", [running, e.scalar(m, t.dtype)]),
        e.op("Mul", [e.op("Reshape", [batch], { shape: [t.shape[1]] }), e.scalar(1 - m, t.dtype)]),
      ]);
    return [y, blend(mean, batchMean), blend(variance, batchVar)];
  },
};

/** MeanVarianceNormalization: (x − mean) / (√variance + 1e-9) over `axes` (default N, H, W). */
const meanVarianceNormalization: OpDef = {
  name: "MeanVarianceNormalization",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape;
    const axes = ctx.ints("axes", [0, 2, 3]);
    if (axes.some((a) => a < -shape.length || a >= shape.length)) {
      ctx.fail(
        `axes [${axes}] of ${formatShape(shape)}`,
        "give axes of the input (the default [0, 2, 3] needs rank 4)",
        "shape-mismatch",
      );
    }
    return [{ shape, dtype }];
  },
  decompose: (e, [x], attrs) => {
    const keep = { axes: (attrs.axes as readonly number[] | undefined) ?? [0, 2, 3], keepdims: 1 };
    const d = e.op("Sub", [x, e.op("ReduceMean", [x], keep)]);
    const variance = e.op("ReduceMean", [e.op("Mul", [d, d])], keep);
    const eps = e.scalar(1e-9, e.typeOf(x).dtype);
    return [e.op("Div", [d, e.op("Add", [e.op("Sqrt", [variance]), eps])])];
  },
};

/**
 * InstanceNormalization: each (image, channel)'s spatial values normalized by their own moments,
 * then scaled and shifted per channel (a GroupNormalization with a group a channel, written so
 * that the mean and the variance share one row kernel).
 */
const instanceNormalization: OpDef = {
  name: "InstanceNormalization",
  category: "composite",
  arity: [3, 3],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape;
    ctx.float("epsilon", 1e-5);
    const fits = (i: number) =>
      ctx.input(i).shape.join() === `${shape[1]}` && ctx.input(i).dtype === dtype;
    if (shape.length < 3 || !fits(1) || !fits(2)) {
      ctx.fail(
        `InstanceNormalization of ${formatShape(shape)} with scale ${
          formatShape(ctx.input(1).shape)
        }`,
        `give x as N×C×spatial and scale and bias as ${dtype}[C]`,
        "shape-mismatch",
      );
    }
    return [{ shape, dtype }];
  },
  decompose: (e, [x, scale, bias], a) => {
    const { shape, dtype } = e.typeOf(x);
    const axes = { axes: shape.slice(2).map((_, i) => 2 + i), keepdims: 1 };
    const d = e.op("Sub", [x, e.op("ReduceMean", [x], axes)]);
    const variance = e.op("ReduceMean", [e.op("Mul", [d, d])], axes);
    const eps = e.scalar((a.epsilon as number | undefined) ?? 1e-5, dtype);
    const norm = e.op("Div", [d, e.op("Sqrt", [e.op("Add", [variance, eps])])]);
    // Per channel: [C] → [C, 1, …] against [N, C, spatial…].
    const perChannel = (k: EmitRef) =>
      e.op("Reshape", [k], { shape: [shape[1], ...shape.slice(2).map(() => 1)] });
    return [e.op("Add", [e.op("Mul", [norm, perChannel(scale)]), perChannel(bias)])];
  },
};

/**
 * EmbedLayerNormalization (ONNX Runtime's, BERT's embeddings): word + position (+ segment)
 * embeddings gathered by their ids and layer-normalized over the hidden axis; the second output
 * each sequence's count of unmasked tokens (0 without a mask), the third the sum before the
 * normalization. Inputs: ids [B, S], word, position tables [·, D], gamma, beta [D], then where
 * the attributes say so (1 where given) the `segments` ids and table, the `mask` [B, S] and the
 * `positions` ([B or 1, S]; 0… without them).
 */
const embedLayerNormalization: OpDef = {
  name: "EmbedLayerNormalization",
  category: "composite",
  arity: [5, 9],
  primitive: false,
  infer: (ctx) => {
    const [b, s] = ctx.input(0).shape, d = ctx.input(1).shape[1];
    const given = 5 + 2 * ctx.int("segments", 0) + ctx.int("mask", 0) + ctx.int("positions", 0);
    if (ctx.inputs.length !== given || ctx.input(0).shape.length !== 2) {
      ctx.fail(
        `ids of ${formatShape(ctx.input(0).shape)} and ${ctx.inputs.length} inputs`,
        "give ids [B, S] and the inputs segments, mask and positions name",
        "shape-mismatch",
      );
    }
    const dtype = ctx.requireFloat(1);
    ctx.float("epsilon", 1e-12);
    return [{ shape: [b, s, d], dtype }, { shape: [b], dtype: "i32" }, {
      shape: [b, s, d],
      dtype,
    }];
  },
  decompose: (e, [ids, words, table, gamma, beta, ...rest], a) => {
    const [b, s] = e.typeOf(ids).shape;
    const segment = a.segments === 1 ? rest.splice(0, 2) : undefined;
    const mask = a.mask === 1 ? rest.shift() : undefined;
    const positions = a.positions === 1
      ? rest.shift()!
      : constantTensor(e, [...Array(s).keys()], [1, s], "i32");
    const gather = (t: EmitRef, at: EmitRef) => e.op("Gather", [t, at], { axis: 0 });
    let sum = e.op("Add", [gather(words, ids), gather(table, positions)]);
    if (segment) sum = e.op("Add", [sum, gather(segment[1], segment[0])]);
    const epsilon = (a.epsilon as number | undefined) ?? 1e-12;
    const y = e.op("LayerNormalization", [sum, gamma, beta], { axis: -1, epsilon });
    const counts = mask
      ? e.op("ReduceSum", [e.op("Cast", [mask], { to: "i32" })], { axes: [1], keepdims: 0 })
      : constantTensor(e, new Array(b).fill(0), [b], "i32");
    return [y, counts, sum];
  },
};

defineOps([
  batchNormalization,
  meanVarianceNormalization,
  instanceNormalization,
  embedLayerNormalization,
]);
