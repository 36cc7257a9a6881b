/**
 * ONNX Runtime's attention ops as kiln runs them: `MultiHeadAttention` (projected query, key and
 * value, after a past of keys and values where a decoder has one; ONNX Runtime's Attention, whose
 * packed projection the importer writes before it, maps onto it) and `GroupQueryAttention`
 * (`gqa.ts`). Attention becomes scores → softmax → values in kiln ops, which fusion recognizes as
 * any attention; masks add ONNX Runtime's `mask_filter_value` (-10000 unless set) where a key is
 * hidden, as its kernels do, so a row with every key hidden weighs them alike instead of giving
 * NaN.
 *
 * MultiHeadAttention's optional inputs follow q, k and v where the attributes say so (1 where
 * given, in this order): `bias` (of q, k and v, concatenated), `mask` (key_padding_mask, in any
 * of ONNX Runtime's `mask_index` formats), `attention_bias` and `past` (past key, past value).
 *
 * @module
 */
import type { DType } from "../ir/dtype.ts";
import { formatShape } from "../ir/shape.ts";
import {
  type Attrs,
  constantTensor,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
} from "./registry.ts";

/** [B, S, N·h] → [B, N, S, h]. */
export function heads(e: Emitter, x: EmitRef, n: number): EmitRef {
  const [b, s, d] = e.typeOf(x).shape;
  const split = e.op("Reshape", [x], { shape: [b, s, n, d / n] });
  return e.op("Transpose", [split], { perm: [0, 2, 1, 3] });
}

/**
 * softmax(Q·Kᵀ·scale, softcapped where `softcap` is set, + bias)·V over head-split queries,
 * keys and values ([B, N, S or T, h]): [B, S, N·hv].
 */
export function weigh(
  e: Emitter,
  [q, k, v]: EmitRef[],
  scale: number,
  bias: EmitRef | undefined,
  softcap = 0,
): EmitRef {
  const t = e.typeOf(q).dtype, [b, n, s] = e.typeOf(q).shape, hv = e.typeOf(v).shape[3];
  const keysT = e.op("Transpose", [k], { perm: [0, 1, 3, 2] });
  let scores = e.op("Mul", [e.op("MatMul", [q, keysT]), e.scalar(scale, t)]);
  if (softcap > 0) {
    const cap = e.scalar(softcap, t);
    scores = e.op("Mul", [e.op("Tanh", [e.op("Div", [scores, cap])]), cap]);
  }
  if (bias) scores = e.op("Add", [scores, bias]);
  const out = e.op("MatMul", [e.op("Softmax", [scores], { axis: -1 }), v]);
  const back = e.op("Transpose", [out], { perm: [0, 2, 1, 3] });
  return e.op("Reshape", [back], { shape: [b, s, n * hv] });
}

/**
 * Which of the `mask_index` formats a mask of `shape` is, for B × S queries over L keys: [B] key
 * counts or [2B] ends then starts (`counts`), 0/1 of [B, L] or [B, S, L] (`flags`), or of
 * [B, 1, M, M] (`square`); `undefined` for none.
 */
export function maskFormat(
  shape: readonly number[],
  [b, s, l]: readonly number[],
): "counts" | "flags" | "square" | undefined {
  if (shape.length === 1 && (shape[0] === b || shape[0] === 2 * b)) return "counts";
  const flags = shape.length === 2 ? [b, l] : shape.length === 3 ? [b, s, l] : undefined;
  if (flags?.join() === shape.join()) return "flags";
  if (shape.length === 4 && shape[1] === 1 && shape[2] >= s && shape[3] >= l) return "square";
  return undefined;
}

/** The additive mask of `mask` for B × S queries over L keys, as [B, 1, S or 1, L]. */
function maskBias(e: Emitter, mask: EmitRef, [b, s, l]: number[], filter: number): EmitRef {
  const shape = e.typeOf(mask).shape, t = "f32";
  const fill = (hidden: EmitRef) => e.op("Where", [hidden, e.scalar(filter, t), e.scalar(0, t)]);
  const asInt = (k: EmitRef) => e.op("Cast", [k], { to: "i32" });
  const format = maskFormat(shape, [b, s, l]);
  if (format === "counts") {
    const positions = constantTensor(e, [...Array(l).keys()], [1, l], "i32");
    const part = (from: number) => {
      const slice = e.op("Slice", [asInt(mask)], { starts: [from], ends: [from + b], axes: [0] });
      return e.op("Reshape", [slice], { shape: [b, 1] });
    };
    let hidden = e.op("Not", [e.op("Less", [positions, part(0)])]);
    if (shape[0] === 2 * b) hidden = e.op("Or", [hidden, e.op("Less", [positions, part(b)])]);
    return e.op("Reshape", [fill(hidden)], { shape: [b, 1, 1, l] });
  }
  const hidden = (k: EmitRef) => e.op("Equal", [asInt(k), e.scalar(0, "i32")]);
  if (format === "square") {
    return fill(hidden(e.op("Slice", [mask], { starts: [0, 0], ends: [s, l], axes: [2, 3] })));
  }
  const rows = shape.length === 2 ? 1 : s;
  return e.op("Reshape", [fill(hidden(mask))], { shape: [b, 1, rows, l] });
}

/** The biases the scores take: the mask's, the causal one, and `attention_bias`; or none. */
function scoreBias(
  e: Emitter,
  [b, s, l]: number[],
  { mask, extra }: { mask?: EmitRef; extra?: EmitRef },
  a: Attrs,
  dtype: DType,
): EmitRef | undefined {
  const filter = (a.mask_filter_value as number | undefined) ?? -10000;
  const parts: EmitRef[] = [];
  if (mask) parts.push(maskBias(e, mask, [b, s, l], filter));
  if (a.unidirectional === 1) {
    // Query i (of the last S of L positions) sees keys up to L - S + i.
    const causal = new Float32Array(s * l);
    for (let i = 0; i < s; i++) for (let j = l - s + i + 1; j < l; j++) causal[i * l + j] = filter;
    parts.push(constantTensor(e, causal, [1, 1, s, l], "f32"));
  }
  if (extra) parts.push(extra);
  if (!parts.length) return undefined;
  const sum = parts.reduce((x, y) => e.op("Add", [x, y]));
  return e.typeOf(sum).dtype === dtype ? sum : e.op("Cast", [sum], { to: dtype });
}

/** MultiHeadAttention's inputs by role, from the present ones and the flags. */
export function mhaRoles<T>(xs: readonly T[], a: Attrs) {
  const [q, k, v, ...rest] = xs;
  const bias = a.bias === 1 ? rest.shift() : undefined;
  const mask = a.mask === 1 ? rest.shift() : undefined;
  const extra = a.attention_bias === 1 ? rest.shift() : undefined;
  const [pastKey, pastValue] = a.past === 1 ? rest : [];
  return { q, k, v, bias, mask, extra, pastKey, pastValue };
}

/** MultiHeadAttention's checks and types: y [B, S, Dv], present key and value [B, N, P + L, ·]. */
function mhaInfer(ctx: InferContext) {
  const r = mhaRoles(ctx.inputs, ctx.attrs), n = ctx.int("num_heads");
  const flags = ["bias", "mask", "attention_bias"].map((f) => ctx.int(f, 0));
  const given = 3 + flags.reduce((x, y) => x + y, 0) + 2 * ctx.int("past", 0);
  // Read by the decomposition; checked here (a misspelt one is refused).
  ctx.float("mask_filter_value", -10000);
  ctx.int("unidirectional", 0);
  ctx.float("scale", 1);
  const [b, s, d] = r.q.shape, [, l, dv] = r.v.shape, past = r.pastKey?.shape[2] ?? 0;
  const fits = ctx.inputs.length === given && r.q.shape.length === 3 &&
    r.k.shape.length === 3 && r.v.shape.length === 3 && r.k.shape[2] === d && n > 0 &&
    d % n === 0 && dv % n === 0 && r.k.shape[1] === l &&
    (!r.pastKey || (r.pastKey.shape.join() === [b, n, past, d / n].join() &&
      r.pastValue?.shape.join() === [b, n, past, dv / n].join()));
  if (!fits) {
    ctx.fail(
      `query ${formatShape(r.q.shape)}, key ${formatShape(r.k.shape)}, value ` +
        `${formatShape(r.v.shape)} over ${n} heads` + (past ? ` after a past of ${past}` : ""),
      "give query [B, S, D], key [B, L, D], value [B, L, Dv], num_heads dividing D and Dv, " +
        "and past key and value [B, num_heads, P, head size]",
      "shape-mismatch",
    );
  }
  if (r.mask && !maskFormat(r.mask.shape, [b, s, past + l])) {
    ctx.fail(
      `an attention mask of ${formatShape(r.mask.shape)} for ${b} × ${s} queries over ` +
        `${past + l} keys`,
      "give mask_index as [B], [2B], [B, L], [B, S, L] or [B, 1, M, M]",
      "shape-mismatch",
    );
  }
  const dtype = ctx.requireFloat(0), total = past + l;
  return [
    { shape: [b, s, dv], dtype },
    { shape: [b, n, total, d / n], dtype },
    { shape: [b, n, total, dv / n], dtype },
  ];
}

/** MultiHeadAttention (ONNX Runtime's), as the module says. */
const multiHeadAttention: OpDef = {
  name: "MultiHeadAttention",
  category: "composite",
  arity: [3, 8],
  primitive: false,
  infer: mhaInfer,
  decompose: (e, xs, a) => {
    const r = mhaRoles(xs, a), n = a.num_heads as number;
    let [q, k, v] = [r.q, r.k, r.v];
    if (r.bias) {
      const d = e.typeOf(q).shape[2], dv = e.typeOf(v).shape[2];
      const [bq, bk, bv] = e.opN("Split", [r.bias], { axis: 0, split: [d, d, dv] }, 3);
      [q, k, v] = [e.op("Add", [q, bq]), e.op("Add", [k, bk]), e.op("Add", [v, bv])];
    }
    const past = r.pastKey ? e.typeOf(r.pastKey).shape[2] : 0;
    const [b, s, d] = e.typeOf(q).shape, l = e.typeOf(k).shape[1] + past;
    const bias = scoreBias(e, [b, s, l], r, a, e.typeOf(q).dtype);
    // A past [B, N, P, h] goes before the new keys and values.
    const state = (pastState: EmitRef | undefined, fresh: EmitRef) =>
      pastState ? e.op("Concat", [pastState, fresh], { axis: 2 }) : fresh;
    const keys = state(r.pastKey, heads(e, k, n)), values = state(r.pastValue, heads(e, v, n));
    const scale = (a.scale as number | undefined) ?? 1 / Math.sqrt(d / n);
    return [weigh(e, [heads(e, q, n), keys, values], scale, bias), keys, values];
  },
};

defineOps([multiHeadAttention]);
