/**
 * The attention ops of ONNX Runtime's `com.microsoft` domain onto kiln's: MultiHeadAttention and
 * GroupQueryAttention (`jit/ops/ort_attention.ts`, `gqa.ts`), EmbedLayerNormalization
 * (`jit/ops/normalization.ts`) and RotaryEmbedding. ONNX Runtime's Attention (the input projected
 * by packed Q, K and V weights, after a stacked past of keys and values where GPT-2's decoding has
 * one) is its projection, then MultiHeadAttention. The converters map inputs (flagging the
 * optional ones given) and attributes, and refuse the forms kiln does not run.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { fail } from "./llm.ts";
import {
  attrs,
  constant,
  constInts,
  type Converter,
  type Known,
  type NodeContext,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** Attention: input·weights (+ bias) split into Q, K and V, then attention over `num_heads`. */
function attention(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0), w = c.required(1);
  const n = a.int("num_heads")!, total = typeOf(w).shape[1];
  const past = c.input(4);
  if (c.input(6) || a.int("do_rotary", 0) || a.int("past_present_share_buffer", 0)) {
    fail(c, "Attention with a shared past buffer or rotary embedding", "export without them");
  }
  const sizes = a.ints("qkv_hidden_sizes") ?? [total / 3, total / 3, total / 3];
  if (
    !n || typeOf(x).shape.length !== 3 || sizes.reduce((p, v) => p + v, 0) !== total ||
    (past && (typeOf(past).shape.length !== 5 || sizes[0] !== sizes[2]))
  ) {
    throw new KilnError(
      `${c.label}: Attention of [${typeOf(x).shape}] by weights [${typeOf(w).shape}]` +
        (past ? ` after a past [${typeOf(past).shape}]` : ""),
      {
        code: "shape-mismatch",
        fix: "give input [B, S, D], weights [D, Q + K + V], num_heads, and a past of " +
          "[2, B, num_heads, P, head size] with equal Q, K and V sizes",
      },
    );
  }
  let qkv = op("MatMul", [x, w]);
  const bias = c.input(2), mask = c.input(3), extra = c.input(5);
  if (bias) qkv = op("Add", [qkv, bias]);
  const parts = c.emit("Split", [qkv], { axis: 2, split: sizes }, 3);
  // A past [2, B, N, P, h] is the past key and value stacked; so is the present.
  const half = (i: number) =>
    op("Squeeze", [op("Slice", [past!], { starts: [i], ends: [i + 1], axes: [0] })], {
      axes: [0],
    });
  const ins = [...parts, ...[mask, extra].filter((k) => k !== undefined)];
  const [y, presentKey, presentValue] = c.emit(
    "MultiHeadAttention",
    past ? [...ins, half(0), half(1)] : ins,
    { ...mhaAttrs(c, n), mask: +!!mask, attention_bias: +!!extra, past: +!!past },
    3,
  );
  if (!c.node.output[1]) return [y];
  const stacked = op("Concat", [
    op("Unsqueeze", [presentKey], { axes: [0] }),
    op("Unsqueeze", [presentValue], { axes: [0] }),
  ], { axis: 0 });
  return [y, stacked];
}

/** The attributes ONNX Runtime's attention ops share with kiln's MultiHeadAttention. */
function mhaAttrs(c: NodeContext, n: number) {
  const a = attrs(c);
  return {
    num_heads: n,
    scale: a.float("scale"),
    mask_filter_value: a.float("mask_filter_value", -10000),
    unidirectional: a.int("unidirectional", 0),
  };
}

/** MultiHeadAttention (kiln's op) over query [B, S, D], key [B, L, D] and value [B, L, Dv]. */
function multiHeadAttention(c: NodeContext): Known[] {
  const q = c.required(0), k = c.input(1), v = c.input(2);
  const pastKey = c.input(6), pastValue = c.input(7);
  if (
    !k || !v || typeOf(k).shape.length !== 3 || !pastKey !== !pastValue || c.input(8) || c.input(9)
  ) {
    fail(
      c,
      "MultiHeadAttention with packed or 4-D key and value, or a shared past buffer",
      "give query [B, S, D], key [B, L, D] and value [B, L, Dv] (a past of both)",
    );
  }
  const [bias, mask, extra] = [c.input(3), c.input(4), c.input(5)];
  const given = [bias, mask, extra, pastKey, pastValue].filter((x) => x !== undefined);
  return c.emit("MultiHeadAttention", [q, k, v, ...given], {
    ...mhaAttrs(c, attrs(c).int("num_heads")!),
    bias: +!!bias,
    mask: +!!mask,
    attention_bias: +!!extra,
    past: +!!pastKey,
  }, 3);
}

/**
 * EmbedLayerNormalization (kiln's op, `jit/ops/normalization.ts`): segments where both their ids
 * and table are given, the mask and position ids where given.
 */
function embedLayerNormalization(c: NodeContext): Known[] {
  const a = attrs(c), [segments, segmentTable] = [c.input(1), c.input(4)];
  const [mask, positions] = [c.input(7), c.input(8)];
  a.int("mask_index_type"); // whether output 1 exists: kiln gives it whenever it is named
  const ins = [0, 2, 3, 5, 6].map((i) => c.required(i));
  if (segments && segmentTable) ins.push(segments, segmentTable);
  if (mask) ins.push(mask);
  if (positions) ins.push(positions);
  return c.emit("EmbedLayerNormalization", ins, {
    epsilon: a.float("epsilon", 1e-12),
    segments: +!!(segments && segmentTable),
    mask: +!!mask,
    positions: +!!positions,
  }, 3);
}

/**
 * GroupQueryAttention (kiln's op, `jit/ops/gqa.ts`): the inputs given, flagged, and the total
 * sequence length read from its constant.
 */
function groupQueryAttention(c: NodeContext): Known[] {
  const a = attrs(c);
  if (a.int("smooth_softmax", 0) || a.int("qk_output", 0) || c.input(11)) {
    fail(
      c,
      "GroupQueryAttention with smooth_softmax, head_sink or qk_output",
      "export without them",
    );
  }
  const [k, v, pastKey, pastValue] = [1, 2, 3, 4].map((i) => c.input(i));
  const rotary = a.int("do_rotary", 0) === 1, positions = c.input(9), bias = c.input(10);
  const packed = !k || !v, past = !!pastKey && !!pastValue;
  const ins = [c.required(0), ...(packed ? [] : [k, v]), ...(past ? [pastKey!, pastValue!] : [])];
  ins.push(c.required(5), ...(rotary ? [c.required(7), c.required(8)] : []));
  if (rotary && positions) ins.push(positions);
  if (bias) ins.push(bias);
  const given = constInts(c, 6, "total_sequence_length")?.[0];
  return c.emit("GroupQueryAttention", ins, {
    num_heads: a.int("num_heads"),
    kv_num_heads: a.int("kv_num_heads"),
    local_window_size: a.int("local_window_size", -1),
    softcap: a.float("softcap", 0),
    scale: a.float("scale"),
    rotary_interleaved: a.int("rotary_interleaved", 0),
    total_sequence_length: given,
    packed: +packed,
    past: +past,
    do_rotary: +rotary,
    positions: +(rotary && !!positions),
    attention_bias: +!!bias,
    // ONNX Runtime decides this by the buffers a run binds; a model says it to kiln (see gqa.ts).
    shared_buffer: a.int("past_present_share_buffer", 0),
  }, 3);
}

/**
 * RotaryEmbedding (ONNX Runtime's): input [B, S, hidden] or [B, N, S, h] turned as ONNX's own
 * (`rotateHeads`) at `position_ids` ([B, S], or one offset for every sequence).
 */
function msRotaryEmbedding(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0), ids = c.required(1);
  const caches = [c.required(2), c.required(3)], shape = typeOf(x).shape;
  const half = typeOf(caches[0]).shape[1], given = a.int("rotary_embedding_dim", 0)!;
  a.float("scale"); // unused by ONNX Runtime's kernels
  if (a.int("is_packed_batching", 0) || (given && given !== 2 * half)) {
    fail(
      c,
      "RotaryEmbedding with packed batching, or a rotary_embedding_dim apart from the caches'",
      "export the unpacked form",
    );
  }
  const four = shape.length === 4, s = four ? shape[2] : shape[1];
  const heads = four ? shape[1] : a.int("num_heads", 0) || shape[2] / (2 * half);
  // One offset for every sequence, or a position per token.
  const steps = constant([...Array(s).keys()], [1, s], "i32");
  const at = typeOf(ids).shape.length === 1
    ? op("Add", [op("Cast", [ids], { to: "i32" }), steps])
    : op("Cast", [ids], { to: "i32" });
  return [op("RotaryEmbedding", [x, ...caches, at], {
    num_heads: four ? 0 : heads,
    interleaved: a.int("interleaved", 0),
    rotary_embedding_dim: 2 * half,
  })];
}

/** Converters of `com.microsoft` attention ops, by op type. */
export const MS_ATTENTION_CONVERTERS: Record<string, Converter<Known>> = {
  Attention: attention,
  MultiHeadAttention: multiHeadAttention,
  EmbedLayerNormalization: embedLayerNormalization,
  GroupQueryAttention: groupQueryAttention,
  RotaryEmbedding: msRotaryEmbedding,
};
