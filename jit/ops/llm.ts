/**
 * The language-model ops of opsets 23 and 24 that are not attention: `RMSNormalization`,
 * `RotaryEmbedding` (ONNX Runtime's com.microsoft form and GroupQueryAttention's rotation map onto
 * it too), `Swish` and `TensorScatter`. Each decomposes as a model spelling it out would (RMS
 * norm into one row kernel, the rotation into the products around it) and follows ONNX's
 * reference (`onnx/reference/ops/op_rotary_embedding.py` and its neighbours).
 *
 * @module
 */
import { formatShape } from "../ir/shape.ts";
import { FLOATS, INTEGERS, like } from "./elementwise.ts";
import {
  constantTensor,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
} from "./registry.ts";

/** The axes from `axis` (negative counts from the end) to the last of a rank-`rank` tensor. */
export const trailing = (axis: number, rank: number): number[] => {
  const from = axis < 0 ? axis + rank : axis;
  return [...Array(rank - from).keys()].map((i) => from + i);
};

const rmsNormalization: OpDef = {
  name: "RMSNormalization",
  category: "composite",
  arity: [2, 2],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape;
    ctx.axis(ctx.int("axis", -1), shape.length);
    ctx.float("epsilon", 1e-5);
    // Statistics in f32 whatever stash_type says, as LayerNormalization's (kiln has no wider float).
    ctx.int("stash_type", 1);
    if (ctx.int("stats", 0) !== 1) return [{ shape, dtype }];
    // kiln's `stats`: 1/σ as a second output (ONNX Runtime's SimplifiedLayerNormalization has it).
    const axes = trailing(ctx.int("axis", -1), shape.length);
    return [{ shape, dtype }, { shape: shape.map((d, i) => (axes.includes(i) ? 1 : d)), dtype }];
  },
  // x / sqrt(mean(x²) over the axes from `axis` on + ε), times the scale.
  decompose: (e, [x, scale], a) => {
    const axes = trailing((a.axis as number | undefined) ?? -1, e.typeOf(x).shape.length);
    const mean = e.op("ReduceMean", [e.op("Mul", [x, x])], { axes, keepdims: 1 });
    const eps = like(e, x, (a.epsilon as number | undefined) ?? 1e-5);
    const inv = e.op("Reciprocal", [e.op("Sqrt", [e.op("Add", [mean, eps])])]);
    const y = e.op("Mul", [e.op("Mul", [x, inv]), scale]);
    return a.stats === 1 ? [y, inv] : [y];
  },
};

const swish: OpDef = {
  name: "Swish",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    ctx.float("alpha", 1);
    return [{ shape: ctx.input(0).shape, dtype: ctx.requireDType(0, FLOATS) }];
  },
  // x · sigmoid(alpha · x).
  decompose: (e, [x], a) => {
    const alpha = (a.alpha as number | undefined) ?? 1;
    const scaled = alpha === 1 ? x : e.op("Mul", [x, like(e, x, alpha)]);
    return [e.op("Mul", [x, e.op("Sigmoid", [scaled])])];
  },
};

/** RotaryEmbedding's layout: x as [batch, sequence, heads, head size], and the rotated width. */
function rotaryLayout(ctx: InferContext): { heads: number; size: number; dim: number } {
  const shape = ctx.input(0).shape, heads = ctx.int("num_heads", 0);
  const four = shape.length === 4;
  if (!four && !(shape.length === 3 && heads > 0 && shape[2] % heads === 0)) {
    ctx.fail(
      `input ${formatShape(shape)} with num_heads ${heads}`,
      "pass a 4-D input [batch, heads, sequence, head size], or a 3-D one with num_heads dividing its last axis",
      "unsupported",
    );
  }
  const size = four ? shape[3] : shape[2] / heads;
  const dim = ctx.int("rotary_embedding_dim", 0) || size;
  if (dim % 2 !== 0 || dim > size) {
    ctx.fail(
      `rotary_embedding_dim ${dim} of heads ${size} wide`,
      "use an even dimension ≤ the head size",
      "unsupported",
    );
  }
  return { heads: four ? shape[1] : heads, size, dim };
}

const rotaryEmbedding: OpDef = {
  name: "RotaryEmbedding",
  category: "composite",
  arity: [3, 4],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape;
    ctx.int("interleaved", 0);
    const { dim } = rotaryLayout(ctx);
    const positions = ctx.inputs.length === 4;
    if (positions) ctx.requireDType(3, INTEGERS);
    const [b, s] = shape.length === 4 ? [shape[0], shape[2]] : shape;
    // The caches per token: [batch or 1, sequence, dim / 2] (gathered at the positions if given).
    for (const i of [1, 2]) {
      const c = ctx.input(i).shape, rows = positions ? [...ctx.input(3).shape, c.at(-1)!] : c;
      const fits = rows.length === 3 && (rows[0] === b || rows[0] === 1) && rows[1] === s &&
        rows[2] === dim / 2 && (!positions || c.length === 2) && ctx.input(i).dtype === dtype;
      if (!fits) {
        ctx.fail(
          `a cache ${formatShape(c)}${
            positions ? ` at positions ${formatShape(ctx.input(3).shape)}` : ""
          } for ${dim / 2} pairs of ${b} × ${s} tokens`,
          "pass caches rotary_embedding_dim / 2 wide, [positions, dim / 2] with position_ids [batch, sequence], else [batch, sequence, dim / 2], of x's dtype",
          "shape-mismatch",
        );
      }
    }
    return [{ shape, dtype }];
  },
  decompose: (e, [x, cosCache, sinCache, positions], a) => {
    const shape = e.typeOf(x).shape, heads = (a.num_heads as number | undefined) ?? 0;
    const four = shape.length === 4;
    // [batch, heads, sequence, size] or [batch, sequence, heads · size] → [b, s, heads, size].
    const x4 = four
      ? e.op("Transpose", [x], { perm: [0, 2, 1, 3] })
      : e.op("Reshape", [x], { shape: [shape[0], shape[1], heads, shape[2] / heads] });
    const at = positions && e.typeOf(positions).dtype !== "i32"
      ? e.op("Cast", [positions], { to: "i32" })
      : positions;
    const rows = [cosCache, sinCache].map((cache) =>
      at ? e.op("Gather", [cache, at], { axis: 0 }) : cache
    );
    const y4 = rotateHeads(e, x4, rows, a.interleaved === 1);
    return [
      four
        ? e.op("Transpose", [y4], { perm: [0, 2, 1, 3] })
        : e.op("Reshape", [y4], { shape: [...shape] }),
    ];
  },
};

/**
 * `x4` ([batch, sequence, heads, head size]) with the first 2·w channels of each head turned by
 * the angles whose cosines and sines `cos` and `sin` hold per token ([batch or 1, sequence, w]):
 * the halves of those channels paired, or (`interleaved`) neighbours. The rest pass unchanged.
 *
 * The channels are viewed as pairs (`[2, w]` halves, or `[w, 2]` neighbours), and each one is
 * `x · cos + partner · ±sin` with the partner read through the pair axis reversed and the sign
 * −1 for the first of a pair: every load a plain strided view. As two halves joined by Concat,
 * each output evaluated both halves' products through bounded loads and chose one (the query's
 * rotation of a 0.5B decoder's decode step: 19 µs for 896 values on the 2-core VM).
 */
function rotateHeads(
  e: Emitter,
  x4: EmitRef,
  [cos, sin]: EmitRef[],
  interleaved: boolean,
): EmitRef {
  const [b, s, h, d] = e.typeOf(x4).shape, half = e.typeOf(cos).shape.at(-1)!, dim = 2 * half;
  const slice = (k: EmitRef, start: number, end: number) =>
    e.op("Slice", [k], { starts: [start], ends: [end], axes: [3] });
  const x = dim < d ? slice(x4, 0, dim) : x4;
  // Pairs on axis `pair` of [b, s, h, 2, w] (halves) or [b, s, h, w, 2] (neighbours).
  const pairs = interleaved ? [half, 2] : [2, half], pair = interleaved ? 4 : 3;
  const x5 = e.op("Reshape", [x], { shape: [b, s, h, ...pairs] });
  const partner = e.op("Slice", [x5], {
    starts: [1],
    ends: [-3],
    axes: [pair],
    steps: [-1],
  });
  // cos and sin over heads and the pair axis; the sign over the pair axis.
  const axes = interleaved ? [2, 4] : [2, 3];
  const [c, n] = [cos, sin].map((k) => e.op("Unsqueeze", [k], { axes }));
  const sign = constantTensor(e, [-1, 1], interleaved ? [2] : [2, 1], e.typeOf(x4).dtype);
  const turned = e.op("Add", [
    e.op("Mul", [x5, c]),
    // The sign on the partner (the sine is shared with the other rotations of the layer).
    e.op("Mul", [e.op("Mul", [partner, sign]), n]),
  ]);
  const rotated = e.op("Reshape", [turned], { shape: [b, s, h, dim] });
  return dim < d ? e.op("Concat", [rotated, slice(x4, dim, d)], { axis: 3 }) : rotated;
}

const tensorScatter: OpDef = {
  name: "TensorScatter",
  category: "composite",
  arity: [2, 3],
  primitive: false,
  infer: (ctx) => {
    const { shape, dtype } = ctx.input(0), rank = shape.length, ushape = ctx.input(1).shape;
    const axis = ctx.axis(ctx.int("axis", -2), rank);
    ctx.choice("mode", ["linear", "circular"]);
    if (ctx.inputs.length === 3) ctx.requireDType(2, INTEGERS);
    const fits = ushape.length === rank &&
      ushape.every((d, i) => (i === axis ? d <= shape[i] : d === shape[i]));
    if (axis < 1 || !fits || ctx.input(1).dtype !== dtype) {
      ctx.fail(
        `an update ${formatShape(ushape)} into a cache ${formatShape(shape)} along axis ${axis}`,
        "pass an update shaped as the cache but along the sequence axis (not 0), at most as long, of its dtype",
        "unsupported",
      );
    }
    return [{ shape, dtype }];
  },
  // Each batch's update written along `axis` from its write index on (modulo the cache's length
  // in circular mode), as a gather: every cache position takes the update's element it
  // receives, or keeps its own. A linear write past the cache's end writes nothing there.
  decompose: (e, [past, update, at], a) => {
    const shape = e.typeOf(past).shape, rank = shape.length, ushape = e.typeOf(update).shape;
    const given = (a.axis as number | undefined) ?? -2, axis = given < 0 ? given + rank : given;
    const [max, length] = [shape[axis], ushape[axis]];
    /** A shape of ones but `n` on axis `at` (broadcasts along the others). */
    const only = (at: number, n: number) => shape.map((_, i) => (i === at ? n : 1));
    const positions = e.op("Reshape", [
      e.op("Range", [], { start: 0, limit: max, delta: 1, dtype: "i32" }),
    ], { shape: only(axis, max) });
    const starts = at
      ? e.op("Reshape", [e.op("Cast", [at], { to: "i32" })], { shape: only(0, shape[0]) })
      : e.scalar(0, "i32");
    let offset = e.op("Sub", [positions, starts]);
    if (a.mode === "circular") offset = e.op("Mod", [offset, e.scalar(max, "i32")]);
    const written = e.op("And", [
      e.op("GreaterOrEqual", [offset, e.scalar(0, "i32")]),
      e.op("Less", [offset, e.scalar(length, "i32")]),
    ]);
    const index = e.op("Expand", [e.op("Where", [written, offset, e.scalar(0, "i32")])], {
      shape: [...shape],
    });
    const taken = e.op("GatherElements", [update, index], { axis });
    return [e.op("Where", [written, taken, past])];
  },
};

defineOps([rmsNormalization, swish, rotaryEmbedding, tensorScatter]);
