/**
 * The language-model ops of opsets 23 to 25: Attention (with its nonpad_kv_seqlen and windows) as
 * a composition of kiln ops, so it fuses as a model spelling it out does (into one attention
 * group) and runs on every backend; RMSNormalization, RotaryEmbedding, Swish and TensorScatter
 * map onto kiln ops of their names (`jit/ops/llm.ts`). Each follows ONNX's reference (`onnx/reference/ops/op_attention.py` and
 * its neighbours), which ONNX's own cases check.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { byteSize, type DType, isFloat } from "../../jit/ir/dtype.ts";
import { scalar } from "./composite.ts";
import {
  attrs,
  constant,
  type Converter,
  dtypeAttr,
  type Known,
  type NodeContext,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** Refuses what kiln does not import of a node (code `unsupported`). */
export function fail(c: NodeContext, what: string, fix: string): never {
  throw new KilnError(`${c.label}: ${what}`, { code: "unsupported", fix });
}

/** RMSNormalization, RotaryEmbedding, Swish and TensorScatter: kiln ops (`jit/ops/llm.ts`). */
function mapped(
  name: string,
  read: (c: NodeContext) => Record<string, number | string | undefined>,
) {
  return (c: NodeContext): Known[] => c.emit(name, c.inputs(), read(c));
}

/**
 * Attention (opset 23): softmax(Q·Kᵀ·scale [softcapped] + bias)·V over heads, for 3-D inputs
 * ([batch, sequence, heads · head size]) or 4-D ones ([batch, heads, sequence, head size]), with
 * a past key and value before the new ones, grouped-query heads (each K/V head serving
 * `q_num_heads / kv_num_heads` consecutive query heads), a boolean or additive mask (padded with
 * masked keys to the keys' length) and a causal mask aligned to the last query. A row whose bias
 * masks every key has weights 0 (the reference's), not the NaN of a softmax of −∞ alone.
 */
/**
 * Attention's inputs checked and brought to [batch, heads, sequence, size]: Q, and K and V with
 * their past concatenated before them (the present key and value the node outputs).
 */
function attentionInputs(c: NodeContext) {
  const op = opOf(c), a = attrs(c);
  const [q0, k0, v0] = [c.required(0), c.required(1), c.required(2)];
  const [mask0, pastKey, pastValue, nonpad] = [c.input(3), c.input(4), c.input(5), c.input(6)];
  const { shape: qShape, dtype } = typeOf(q0);
  const rank = qShape.length;
  let qHeads = a.int("q_num_heads"), kvHeads = a.int("kv_num_heads");
  // Opset 25: a window of keys around each query's position (-1: unbounded on that side).
  const window = { left: a.int("left_window_size", -1)!, right: a.int("right_window_size", -1)! };
  if (window.left < -1 || window.right < -1) {
    fail(
      c,
      `window sizes ${window.left} and ${window.right}`,
      "use -1 (unbounded) or sizes of 0 and up",
    );
  }
  if ((pastKey === undefined) !== (pastValue === undefined)) {
    fail(
      c,
      "a past key without a past value, or the reverse",
      "pass both past_key and past_value, or neither",
    );
  }
  if (nonpad && pastKey) {
    fail(
      c,
      "nonpad_kv_seqlen with a past key and value",
      "pass one kind of cache: past_key and past_value, or nonpad_kv_seqlen",
    );
  }
  /** A 3-D input [batch, sequence, heads · size] as [batch, heads, sequence, size]. */
  const split = (x: Known, heads: number) => {
    const [b, s, hidden] = typeOf(x).shape;
    if (hidden % heads !== 0) {
      fail(
        c,
        `${hidden} channels over ${heads} heads`,
        "pass head counts that divide Q's, K's and V's last axes",
      );
    }
    const perHead = op("Reshape", [x], { shape: [b, s, heads, hidden / heads] });
    return op("Transpose", [perHead], { perm: [0, 2, 1, 3] });
  };
  let q = q0, k = k0, v = v0;
  if (rank === 3) {
    if (!qHeads || !kvHeads) {
      fail(
        c,
        "3-D inputs without q_num_heads and kv_num_heads",
        "set both attributes, or pass 4-D inputs",
      );
    }
    [q, k, v] = [split(q0, qHeads!), split(k0, kvHeads!), split(v0, kvHeads!)];
  } else if (rank !== 4 || typeOf(k0).shape.length !== 4 || typeOf(v0).shape.length !== 4) {
    fail(c, `Q of rank ${rank}`, "pass Q, K and V all 3-D or all 4-D");
  } else if (c.opset >= 25 && (qHeads !== undefined || kvHeads !== undefined)) {
    fail(
      c,
      "head counts with 4-D inputs",
      "leave q_num_heads and kv_num_heads out for 4-D inputs (opset 25)",
    );
  }
  const presentKey = pastKey ? op("Concat", [pastKey, k], { axis: 2 }) : k;
  const presentValue = pastValue ? op("Concat", [pastValue, v], { axis: 2 }) : v;
  const past = pastKey ? typeOf(pastKey).shape[2] : 0;
  qHeads = typeOf(q).shape[1];
  kvHeads = typeOf(presentKey).shape[1];
  if (qHeads % kvHeads !== 0) {
    fail(
      c,
      `${qHeads} query heads over ${kvHeads} key heads`,
      "use a key head count that divides the query heads'",
    );
  }
  return { q, presentKey, presentValue, rank, dtype, mask0, nonpad, window, past };
}

function attention(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c);
  const { q, presentKey, presentValue, rank, dtype, mask0, nonpad, window, past } = attentionInputs(
    c,
  );
  const [batch, qHeads, sq, dq] = typeOf(q).shape;
  const [, kvHeads, skv] = typeOf(presentKey).shape;
  const causal = a.int("is_causal", 0) === 1;
  const softcap = a.float("softcap", 0)!;
  const mode = a.int("qk_matmul_output_mode", 0)!;
  // Grouped-query attention: query head i reads key and value head ⌊i / group⌋.
  const group = qHeads / kvHeads;
  const share = (x: Known) =>
    group === 1 ? x : op("Gather", [
      x,
      constant(
        Array.from({ length: qHeads! }, (_, i) => Math.floor(i / group)),
        [qHeads!],
        "i32",
      ),
    ], { axis: 1 });
  const scale = a.float("scale") ?? 1 / Math.sqrt(dq);
  // The reference scales Q and K by √scale, each rounded to its type: so do f16 inputs (a scale
  // of the products lands a float16 step off). Others scale the products, which fuses into the
  // matmul's epilogue (√scale on Q and K took two kernels of their own).
  const halfRoot = dtype === "f16" ? scalar(Math.sqrt(scale), dtype) : undefined;
  const scaled = (x: Known) => (halfRoot ? op("Mul", [x, halfRoot]) : x);
  const keysT = op("Transpose", [scaled(share(presentKey))], { perm: [0, 1, 3, 2] });
  const products = op("MatMul", [scaled(q), keysT]);
  let qk = halfRoot ? products : op("Mul", [products, scalar(scale, dtype)]);
  if (softcap > 0) {
    const cap = scalar(softcap, dtype);
    qk = op("Mul", [op("Tanh", [op("Div", [qk, cap])]), cap]);
  }
  const bias = attentionBias(c, dtype, {
    mask: mask0,
    causal,
    window,
    sq,
    skv,
    past,
    nonpad,
    batch,
  });
  const scores = bias ? op("Add", [qk, bias]) : qk;
  // The softmax in the precision asked for, and its product with V in the wider of that and the
  // inputs' type, as numpy promotes them in the reference (kiln rounds f16 after every op).
  const precision = dtypeAttr(c, "softmax_precision", { dtype, i64: false });
  const target = precision.dtype;
  if (!isFloat(target) || precision.bf16) {
    fail(c, `softmax_precision of ${target}`, "use FLOAT, FLOAT16 or DOUBLE, or leave it unset");
  }
  const product = byteSize(target) >= byteSize(dtype) ? target : dtype;
  const cast = (x: Known, to: DType) => (typeOf(x).dtype === to ? x : op("Cast", [x], { to }));
  let weights = op("Softmax", [cast(scores, target)], { axis: -1 });
  if (mask0 || nonpad || window.left >= 0 || window.right >= 0) {
    const none = op("Equal", [
      op("ReduceMax", [bias!], { axes: [-1], keepdims: 1 }),
      scalar(-Infinity, dtype),
    ]);
    weights = op("Where", [none, scalar(0, target), weights]);
  }
  const values = share(presentValue);
  let y = cast(op("MatMul", [cast(weights, product), cast(values, product)]), dtype);
  if (rank === 3) {
    const heads = op("Transpose", [y], { perm: [0, 2, 1, 3] });
    y = op("Reshape", [heads], { shape: [batch, sq, qHeads * typeOf(y).shape[3]] });
  }
  const outputs = [y, presentKey, presentValue];
  if ((c.node.output[3] ?? "") !== "") {
    const chosen = [qk, qk, scores, weights][mode] ??
      fail(c, `qk_matmul_output_mode ${mode}`, "use a mode of 0 to 3");
    outputs.push(typeOf(chosen).dtype === dtype ? chosen : cast(chosen, dtype));
  }
  return outputs;
}

/**
 * The bias added to the scores, `undefined` without any mask: a boolean mask as 0 (attend) or
 * −∞, a float mask as it is, padded with −∞ to the keys' length; then −∞ for the keys after a
 * query's position (causal), outside its window (opset 25) and past its batch's valid keys
 * (nonpad_kv_seqlen, opset 24).
 */
function attentionBias(
  c: NodeContext,
  dtype: DType,
  o: {
    mask?: Known;
    causal: boolean;
    window: { left: number; right: number };
    sq: number;
    skv: number;
    past: number;
    nonpad?: Known;
    batch: number;
  },
): Known | undefined {
  const op = opOf(c);
  let bias: Known | undefined;
  if (o.mask) {
    const { shape, dtype: maskType } = typeOf(o.mask);
    let mask = maskType === "bool"
      ? op("Where", [o.mask, scalar(0, dtype), scalar(-Infinity, dtype)])
      : o.mask;
    const short = o.skv - shape[shape.length - 1];
    if (short > 0) {
      const fill = constant(
        new Array(shape.slice(0, -1).reduce((n, d) => n * d, short)).fill(-Infinity),
        [...shape.slice(0, -1), short],
        dtype,
      );
      mask = op("Concat", [mask, fill], { axis: -1 });
    }
    bias = mask;
  }
  const range = (start: number, n: number) =>
    op("Range", [], { start, limit: start + n, delta: 1, dtype: "i32" });
  const keys = range(0, o.skv);
  const allowedBias = (allowed: Known) =>
    op("Where", [allowed, scalar(0, dtype), scalar(-Infinity, dtype)]);
  const add = (x: Known | undefined, y: Known) => (x ? op("Add", [x, y]) : y);
  // Valid keys per batch, [batch, 1, 1, 1] (nonpad_kv_seqlen, opset 24).
  const valid = o.nonpad
    ? op("Reshape", [op("Cast", [o.nonpad], { to: "i32" })], { shape: [o.batch, 1, 1, 1] })
    : undefined;
  // Masks from positions, not [queries, keys] constants: the importer folds them where they are
  // small, and past that they stay index arithmetic the scores' kernel computes (a constant of
  // 4096 queries by 4096 keys would be 64 MB). A query's position is its index plus the keys
  // before it: the past's, or with nonpad_kv_seqlen (an external cache) its batch's valid keys
  // less the queries, so that the last query sits at the last valid key.
  const offset = valid ? op("Sub", [valid, scalar(o.sq, "i32")]) : scalar(o.past, "i32");
  const queries = op("Add", [op("Unsqueeze", [range(0, o.sq)], { axes: [1] }), offset]);
  if (o.causal) bias = add(bias, allowedBias(op("LessOrEqual", [keys, queries])));
  const { left, right } = o.window;
  if (left >= 0 || right >= 0) {
    // Keys from `left` before the query's position to `right` after it.
    const lo = left >= 0
      ? op("GreaterOrEqual", [keys, op("Sub", [queries, scalar(left, "i32")])])
      : undefined;
    const hi = right >= 0
      ? op("LessOrEqual", [keys, op("Add", [queries, scalar(right, "i32")])])
      : undefined;
    bias = add(bias, allowedBias(lo && hi ? op("And", [lo, hi]) : (lo ?? hi)!));
  }
  // Keys past a batch's nonpad_kv_seqlen are padding.
  if (valid) bias = add(bias, allowedBias(op("Less", [keys, valid])));
  return bias;
}

/** Converters of the language-model ops of opsets 23 and 24. */
export const LLM_CONVERTERS: Record<string, Converter> = {
  Attention: attention,
  RMSNormalization: mapped("RMSNormalization", (c) => ({
    axis: attrs(c).int("axis", -1),
    epsilon: attrs(c).float("epsilon", 1e-5),
    stash_type: attrs(c).int("stash_type", 1),
  })),
  RotaryEmbedding: mapped("RotaryEmbedding", (c) => ({
    interleaved: attrs(c).int("interleaved", 0),
    num_heads: attrs(c).int("num_heads", 0),
    rotary_embedding_dim: attrs(c).int("rotary_embedding_dim", 0),
  })),
  Swish: mapped("Swish", (c) => ({ alpha: attrs(c).float("alpha", 1) })),
  TensorScatter: mapped("TensorScatter", (c) => ({
    axis: attrs(c).int("axis", -2),
    mode: attrs(c).string("mode", "linear"),
  })),
};
