/**
 * `Attention` (ONNX's, opsets 23 to 25): softmax(Q·Kᵀ·scale [softcapped] + bias)·V over heads,
 * for 3-D inputs ([batch, sequence, heads · head size]) or 4-D ones ([batch, heads, sequence,
 * head size]), with a past key and value before the new ones, grouped-query heads (each K/V head
 * serving `q_num_heads / kv_num_heads` consecutive query heads), a boolean or additive mask
 * (padded with masked keys to the keys' length), a causal mask aligned to the last query, a window
 * of keys around each query (opset 25) and each batch's valid keys (nonpad_kv_seqlen, opset 24). A
 * row whose bias masks every key has weights 0 (the reference's), not the NaN of a softmax of −∞
 * alone. The decomposition is the form fusion recognizes (scores → weights → weighted values:
 * one attention group), its masks index arithmetic rather than queries × keys constants.
 *
 * Which optional inputs are present: attributes `mask`, `past` and `nonpad` (1 where given, the
 * inputs then in ONNX's order); `qk_output` 1 adds the fourth output.
 *
 * @module
 */
import { byteSize, type DType, isFloat } from "../ir/dtype.ts";
import { formatShape, type Shape } from "../ir/shape.ts";
import { FLOATS } from "./elementwise.ts";
import {
  type Attrs,
  constantTensor,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** Attention's inputs by role, from the present ones and the attributes that say which they are. */
export function roles<T>(xs: readonly T[], a: Attrs): {
  q: T;
  k: T;
  v: T;
  mask?: T;
  pastKey?: T;
  pastValue?: T;
  nonpad?: T;
} {
  let i = 3;
  const next = (present: unknown) => (present === 1 ? xs[i++] : undefined);
  const mask = next(a.mask), pastKey = next(a.past), pastValue = a.past === 1 ? xs[i++] : undefined;
  return { q: xs[0], k: xs[1], v: xs[2], mask, pastKey, pastValue, nonpad: next(a.nonpad) };
}

/** The shapes Attention works in: [batch, heads, sequence, size] for Q and the present K and V. */
function layout(ctx: InferContext) {
  const r = roles(ctx.inputs, ctx.attrs), rank = r.q.shape.length;
  const heads = (t: ValueType, n: number) => {
    const [b, s, hidden] = t.shape;
    if (!(n > 0) || hidden % n !== 0) {
      ctx.fail(
        `${hidden} channels over ${n} heads`,
        "pass head counts that divide Q's, K's and V's last axes",
        "unsupported",
      );
    }
    return [b, n, s, hidden / n];
  };
  const three = rank === 3 && r.k.shape.length === 3 && r.v.shape.length === 3;
  const four = rank === 4 && r.k.shape.length === 4 && r.v.shape.length === 4;
  if (!three && !four) {
    ctx.fail(`Q of rank ${rank}`, "pass Q, K and V all 3-D or all 4-D", "unsupported");
  }
  const qn = ctx.int("q_num_heads", 0), kvn = ctx.int("kv_num_heads", 0);
  if (three && (!qn || !kvn)) {
    ctx.fail(
      "3-D inputs without q_num_heads and kv_num_heads",
      "set both attributes, or pass 4-D inputs",
      "unsupported",
    );
  }
  const q = three ? heads(r.q, qn) : r.q.shape, k = three ? heads(r.k, kvn) : r.k.shape;
  const v = three ? heads(r.v, kvn) : r.v.shape;
  const past = r.pastKey?.shape[2] ?? 0;
  return { rank, q, k, v, past, total: past + k[2], r };
}

/** Attention's output types, its inputs and attributes checked. */
function attentionInfer(ctx: InferContext): ValueType[] {
  const dtype = ctx.requireDType(0, FLOATS);
  const { rank, q, k, v, past, total, r } = layout(ctx);
  const [b, qHeads, sq] = q, kvHeads = k[1];
  if ((r.pastKey === undefined) !== (r.pastValue === undefined) || (r.nonpad && r.pastKey)) {
    ctx.fail(
      "a past key without a past value, or a past with nonpad_kv_seqlen",
      "pass both past_key and past_value, or neither, and one kind of cache",
      "unsupported",
    );
  }
  if (qHeads % kvHeads !== 0) {
    ctx.fail(
      `${qHeads} query heads over ${kvHeads} key heads`,
      "use a key head count that divides the query heads'",
      "unsupported",
    );
  }
  const [left, right] = [ctx.int("left_window_size", -1), ctx.int("right_window_size", -1)];
  if (left < -1 || right < -1) {
    ctx.fail(
      `window sizes ${left} and ${right}`,
      "use -1 (unbounded) or sizes of 0 and up",
      "unsupported",
    );
  }
  const mode = ctx.int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) {
    ctx.fail(`qk_matmul_output_mode ${mode}`, "use a mode of 0 to 3", "unsupported");
  }
  const precision = ctx.dtype("softmax_precision", dtype);
  if (!isFloat(precision)) {
    ctx.fail(
      `softmax_precision of ${precision}`,
      "use FLOAT, FLOAT16 or DOUBLE, or leave it unset",
      "unsupported",
    );
  }
  ctx.int("is_causal", 0);
  ctx.float("softcap", 0);
  if (ctx.has("scale")) ctx.float("scale");
  const fits = (t: Shape | undefined, want: number[]) => !t || t.join() === want.join();
  if (
    !fits(r.pastKey?.shape, [b, kvHeads, past, k[3]]) ||
    !fits(r.pastValue?.shape, [b, kvHeads, past, v[3]]) || k[0] !== b || v[2] !== k[2]
  ) {
    ctx.fail(
      `Q ${formatShape(q)}, K ${formatShape(k)}, V ${formatShape(v)} after a past of ${past}`,
      "pass K and V of one sequence length, past key and value [batch, kv heads, past, size]",
      "shape-mismatch",
    );
  }
  const m = r.mask?.shape, scores = [b, qHeads, sq, total];
  const broadcasts = !m ||
    (m.length <= 4 && m.at(-1)! <= total &&
      m.slice(0, -1).every((d, i) => d === 1 || d === scores[4 - m.length + i]));
  if (!broadcasts) {
    ctx.fail(
      `a mask ${formatShape(m!)} for scores ${formatShape(scores)}`,
      "pass a mask that broadcasts to [batch, heads, queries, keys], at most as many keys",
      "shape-mismatch",
    );
  }
  const y = rank === 3 ? [b, sq, qHeads * v[3]] : [b, qHeads, sq, v[3]];
  const out: ValueType[] = [
    { shape: y, dtype },
    { shape: [b, kvHeads, total, k[3]], dtype },
    { shape: [b, kvHeads, total, v[3]], dtype },
  ];
  if (ctx.int("qk_output", 0) === 1) out.push({ shape: [b, qHeads, sq, total], dtype });
  return out;
}

/** A 3-D input [batch, sequence, heads · size] as [batch, heads, sequence, size]. */
function split(e: Emitter, x: EmitRef, heads: number): EmitRef {
  const [b, s, hidden] = e.typeOf(x).shape;
  const perHead = e.op("Reshape", [x], { shape: [b, s, heads, hidden / heads] });
  return e.op("Transpose", [perHead], { perm: [0, 2, 1, 3] });
}

const attention: OpDef = {
  name: "Attention",
  category: "composite",
  arity: [3, 7],
  primitive: false,
  infer: attentionInfer,
  decompose: (e, xs, a) => {
    const r = roles(xs, a), three = e.typeOf(r.q).shape.length === 3;
    const q = three ? split(e, r.q, a.q_num_heads as number) : r.q;
    const k = three ? split(e, r.k, a.kv_num_heads as number) : r.k;
    const v = three ? split(e, r.v, a.kv_num_heads as number) : r.v;
    const presentKey = r.pastKey ? e.op("Concat", [r.pastKey, k], { axis: 2 }) : k;
    const presentValue = r.pastValue ? e.op("Concat", [r.pastValue, v], { axis: 2 }) : v;
    const past = r.pastKey ? e.typeOf(r.pastKey).shape[2] : 0;
    const { y, qk } = attend(e, {
      q,
      presentKey,
      presentValue,
      mask: r.mask,
      nonpad: r.nonpad,
      past,
    }, a);
    const [batch, qHeads, sq] = e.typeOf(q).shape;
    const out = three
      ? e.op("Reshape", [e.op("Transpose", [y], { perm: [0, 2, 1, 3] })], {
        shape: [batch, sq, qHeads * e.typeOf(y).shape[3]],
      })
      : y;
    return [out, presentKey, presentValue, ...(a.qk_output === 1 ? [qk] : [])];
  },
};

/** The attention of [b, heads, s, size] operands; `qk` the output `qk_matmul_output_mode` picks. */
function attend(
  e: Emitter,
  o: {
    q: EmitRef;
    presentKey: EmitRef;
    presentValue: EmitRef;
    mask?: EmitRef;
    nonpad?: EmitRef;
    past: number;
  },
  a: Attrs,
): { y: EmitRef; qk: EmitRef } {
  const { dtype } = e.typeOf(o.q), [batch, qHeads, sq, dq] = e.typeOf(o.q).shape;
  const [, kvHeads, skv] = e.typeOf(o.presentKey).shape;
  const group = qHeads / kvHeads;
  // Grouped-query attention: query head i reads key and value head ⌊i / group⌋.
  const share = (x: EmitRef) =>
    group === 1 ? x : e.op("Gather", [
      x,
      constantTensor(
        e,
        Array.from({ length: qHeads }, (_, i) => Math.floor(i / group)),
        [qHeads],
        "i32",
      ),
    ], { axis: 1 });
  const scale = (a.scale as number | undefined) ?? 1 / Math.sqrt(dq);
  // The reference scales Q and K by √scale, each rounded to its type: so do f16 inputs (a scale
  // of the products lands a float16 step off). Others scale the products, which fuses into the
  // matmul's epilogue (√scale on Q and K took two kernels of their own).
  const halfRoot = dtype === "f16" ? e.scalar(Math.sqrt(scale), dtype) : undefined;
  const scaled = (x: EmitRef) => (halfRoot ? e.op("Mul", [x, halfRoot]) : x);
  const keysT = e.op("Transpose", [scaled(share(o.presentKey))], { perm: [0, 1, 3, 2] });
  const products = e.op("MatMul", [scaled(o.q), keysT]);
  let qk = halfRoot ? products : e.op("Mul", [products, e.scalar(scale, dtype)]);
  const softcap = (a.softcap as number | undefined) ?? 0;
  if (softcap > 0) {
    const cap = e.scalar(softcap, dtype);
    qk = e.op("Mul", [e.op("Tanh", [e.op("Div", [qk, cap])]), cap]);
  }
  const window = {
    left: (a.left_window_size as number | undefined) ?? -1,
    right: (a.right_window_size as number | undefined) ?? -1,
  };
  const bias = attentionBias(e, dtype, { ...o, causal: a.is_causal === 1, window, sq, skv, batch });
  const scores = bias ? e.op("Add", [qk, bias]) : qk;
  // The softmax in the precision asked for, and its product with V in the wider of that and the
  // inputs' type, as numpy promotes them in the reference (kiln rounds f16 after every op).
  const target = (a.softmax_precision as DType | undefined) ?? dtype;
  const product = byteSize(target) >= byteSize(dtype) ? target : dtype;
  const cast = (
    x: EmitRef,
    to: DType,
  ) => (e.typeOf(x).dtype === to ? x : e.op("Cast", [x], { to }));
  let weights = e.op("Softmax", [cast(scores, target)], { axis: -1 });
  if (o.mask || o.nonpad || window.left >= 0 || window.right >= 0) {
    const none = e.op("Equal", [
      e.op("ReduceMax", [bias!], { axes: [-1], keepdims: 1 }),
      e.scalar(-Infinity, dtype),
    ]);
    weights = e.op("Where", [none, e.scalar(0, target), weights]);
  }
  const y = cast(
    e.op("MatMul", [cast(weights, product), cast(share(o.presentValue), product)]),
    dtype,
  );
  const chosen = [qk, qk, scores, weights][(a.qk_matmul_output_mode as number | undefined) ?? 0];
  return { y, qk: cast(chosen, dtype) };
}

/**
 * The bias added to the scores, `undefined` without any mask: a boolean mask as 0 (attend) or
 * −∞, a float mask as it is, padded with −∞ to the keys' length; then −∞ for the keys after a
 * query's position (causal), outside its window (opset 25) and past its batch's valid keys
 * (nonpad_kv_seqlen, opset 24).
 */
function attentionBias(
  e: Emitter,
  dtype: DType,
  o: {
    mask?: EmitRef;
    causal: boolean;
    window: { left: number; right: number };
    sq: number;
    skv: number;
    past: number;
    nonpad?: EmitRef;
    batch: number;
  },
): EmitRef | undefined {
  let bias: EmitRef | undefined;
  if (o.mask) {
    const { shape, dtype: maskType } = e.typeOf(o.mask);
    let mask = maskType === "bool"
      ? e.op("Where", [o.mask, e.scalar(0, dtype), e.scalar(-Infinity, dtype)])
      : o.mask;
    const short = o.skv - shape[shape.length - 1];
    if (short > 0) {
      const fill = e.op("Expand", [e.scalar(-Infinity, dtype)], {
        shape: [...shape.slice(0, -1), short],
      });
      mask = e.op("Concat", [mask, fill], { axis: -1 });
    }
    bias = mask;
  }
  const range = (start: number, n: number) =>
    e.op("Range", [], { start, limit: start + n, delta: 1, dtype: "i32" });
  const keys = range(0, o.skv);
  const allowedBias = (allowed: EmitRef) =>
    e.op("Where", [allowed, e.scalar(0, dtype), e.scalar(-Infinity, dtype)]);
  const add = (x: EmitRef | undefined, y: EmitRef) => (x ? e.op("Add", [x, y]) : y);
  // Valid keys per batch, [batch, 1, 1, 1] (nonpad_kv_seqlen, opset 24).
  const valid = o.nonpad
    ? e.op("Reshape", [e.op("Cast", [o.nonpad], { to: "i32" })], { shape: [o.batch, 1, 1, 1] })
    : undefined;
  // Without run-time positions, a small mask is a constant (what the importer folded before this
  // op was kiln's: the scores' kernel reads it, as it always did).
  if (
    !valid && (o.causal || o.window.left >= 0 || o.window.right >= 0) && o.sq * o.skv <= FOLDED_MASK
  ) {
    return add(bias, foldedMask(e, dtype, o));
  }
  // Larger masks from positions, not [queries, keys] constants (4096 queries by 4096 keys would
  // be 64 MB): a query's position is its index plus the keys before it: the past's, or with
  // nonpad_kv_seqlen (an external cache) its batch's valid keys less the queries, so that the
  // last query sits at the last valid key.
  const offset = valid ? e.op("Sub", [valid, e.scalar(o.sq, "i32")]) : e.scalar(o.past, "i32");
  const queries = e.op("Add", [e.op("Unsqueeze", [range(0, o.sq)], { axes: [1] }), offset]);
  if (o.causal) bias = add(bias, allowedBias(e.op("LessOrEqual", [keys, queries])));
  const { left, right } = o.window;
  if (left >= 0 || right >= 0) {
    // Keys from `left` before the query's position to `right` after it.
    const lo = left >= 0
      ? e.op("GreaterOrEqual", [keys, e.op("Sub", [queries, e.scalar(left, "i32")])])
      : undefined;
    const hi = right >= 0
      ? e.op("LessOrEqual", [keys, e.op("Add", [queries, e.scalar(right, "i32")])])
      : undefined;
    bias = add(bias, allowedBias(lo && hi ? e.op("And", [lo, hi]) : (lo ?? hi)!));
  }
  // Keys past a batch's nonpad_kv_seqlen are padding.
  if (valid) bias = add(bias, allowedBias(e.op("Less", [keys, valid])));
  return bias;
}

/** Most elements of a causal or window mask written as a constant (the importer's fold limit). */
const FOLDED_MASK = 1 << 20;

/** The causal and window masks as a [queries, keys] constant of 0 and −∞ in `dtype`. */
function foldedMask(
  e: Emitter,
  dtype: DType,
  o: {
    causal: boolean;
    window: { left: number; right: number };
    sq: number;
    skv: number;
    past: number;
  },
): EmitRef {
  const { left, right } = o.window, values = new Array<number>(o.sq * o.skv);
  for (let s = 0; s < o.sq; s++) {
    const position = s + o.past;
    for (let j = 0; j < o.skv; j++) {
      const hidden = (o.causal && j > position) || (left >= 0 && j < position - left) ||
        (right >= 0 && j > position + right);
      values[s * o.skv + j] = hidden ? -Infinity : 0;
    }
  }
  return constantTensor(e, values, [o.sq, o.skv], dtype);
}

defineOps([attention]);
