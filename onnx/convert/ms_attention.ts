/**
 * The attention ops of ONNX Runtime's `com.microsoft` domain that its transformer optimizer writes
 * into BERT- and GPT-style models: Attention (the input projected by packed Q, K and V weights,
 * after a past of keys and values where GPT-2's decoding has one),
 * MultiHeadAttention (projected query, key and value) and EmbedLayerNormalization (word, position
 * and segment embeddings summed and layer-normalized, with the mask's token counts); and
 * GroupQueryAttention, the attention of onnxruntime-genai's language models (a KV cache of fewer
 * heads, rotary embedding), and RotaryEmbedding on its own. Attention
 * becomes scores → softmax → values in kiln ops, which kiln fuses as it fuses any attention;
 * masks add ONNX Runtime's `mask_filter_value` (-10000 unless set) where a key is hidden, as its
 * kernels do, so a row with every key hidden weighs them alike instead of giving NaN.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import { fail } from "./llm.ts";
import {
  attrs,
  constant,
  constInts,
  type Converter,
  expanded,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** [B, S, N·h] → [B, N, S, h]. */
function heads(op: OpFn, x: Known, n: number): Known {
  const [b, s, d] = typeOf(x).shape;
  const split = op("Reshape", [x], { shape: [b, s, n, d / n] });
  return op("Transpose", [split], { perm: [0, 2, 1, 3] });
}

/**
 * softmax(Q·Kᵀ·scale, softcapped where `softcap` is set, + bias)·V over head-split queries,
 * keys and values ([B, N, S or T, h]): [B, S, N·hv].
 */
function weigh(
  op: OpFn,
  [q, k, v]: Known[],
  scale: number,
  bias: Known | undefined,
  softcap = 0,
): Known {
  const t = typeOf(q).dtype, [b, n, s] = typeOf(q).shape, hv = typeOf(v).shape[3];
  let scores = op("Mul", [
    op("MatMul", [q, op("Transpose", [k], { perm: [0, 1, 3, 2] })]),
    scalar(scale, t),
  ]);
  if (softcap > 0) {
    scores = op("Mul", [op("Tanh", [op("Div", [scores, scalar(softcap, t)])]), scalar(softcap, t)]);
  }
  if (bias) scores = op("Add", [scores, bias]);
  const out = op("MatMul", [op("Softmax", [scores], { axis: -1 }), v]);
  return op("Reshape", [op("Transpose", [out], { perm: [0, 2, 1, 3] })], { shape: [b, s, n * hv] });
}

/**
 * `weigh` over `n` heads: [B, S, N·h] in, [B, S, N·hv] out, and with
 * `present` the keys and values attended (after `past`'s), stacked as Attention's present.
 */
function attend(
  op: OpFn,
  [q, k, v]: Known[],
  n: number,
  scale: number | undefined,
  bias: Known | undefined,
  past?: Known,
  present = false,
): Known[] {
  const d = typeOf(q).shape[2];
  // A past [2, B, N, P, h] goes before the new keys and values; [2, B, N, P + S, h] is present.
  const state = (i: number, fresh: Known) =>
    past
      ? op("Concat", [
        op("Squeeze", [op("Slice", [past], { starts: [i], ends: [i + 1], axes: [0] })], {
          axes: [0],
        }),
        fresh,
      ], { axis: 2 })
      : fresh;
  const [keyHeads, valueHeads] = [state(0, heads(op, k, n)), state(1, heads(op, v, n))];
  const y = weigh(op, [heads(op, q, n), keyHeads, valueHeads], scale ?? 1 / Math.sqrt(d / n), bias);
  if (!present) return [y];
  const stacked = op("Concat", [
    op("Unsqueeze", [keyHeads], { axes: [0] }),
    op("Unsqueeze", [valueHeads], { axes: [0] }),
  ], { axis: 0 });
  return [y, stacked];
}

/**
 * The additive mask of `mask` (`mask_index` formats: [B] key counts, [2B] ends then starts, raw
 * 0/1 of [B, L], [B, S, L] or [B, 1, M, M]) for B × S queries over L keys, as [B, 1, S or 1, L].
 */
function maskBias(c: NodeContext, mask: Known, [b, s, l]: number[], filter: number): Known {
  const op = opOf(c), shape = typeOf(mask).shape;
  const t = "f32", fill = (hidden: Known) => op("Where", [hidden, scalar(filter, t), scalar(0, t)]);
  const positions = constant([...Array(l).keys()], [1, l], "i32");
  const asInt = (k: Known) => op("Cast", [k], { to: "i32" });
  if (shape.length === 1 && (shape[0] === b || shape[0] === 2 * b)) {
    const part = (from: number) =>
      op("Reshape", [op("Slice", [asInt(mask)], { starts: [from], ends: [from + b], axes: [0] })], {
        shape: [b, 1],
      });
    let hidden = op("Not", [op("Less", [positions, part(0)])]);
    if (shape[0] === 2 * b) hidden = op("Or", [hidden, op("Less", [positions, part(b)])]);
    return op("Reshape", [fill(hidden)], { shape: [b, 1, 1, l] });
  }
  const hidden = (k: Known) => op("Equal", [asInt(k), scalar(0, "i32")]);
  if (shape.length === 2) return op("Reshape", [fill(hidden(mask))], { shape: [b, 1, 1, l] });
  if (shape.length === 3) return op("Reshape", [fill(hidden(mask))], { shape: [b, 1, s, l] });
  if (shape.length === 4 && shape[1] === 1 && shape[2] >= s && shape[3] >= l) {
    const part = op("Slice", [mask], { starts: [0, 0], ends: [s, l], axes: [2, 3] });
    return fill(hidden(part));
  }
  throw new KilnError(
    `${c.label}: an attention mask of [${shape}] for ${b} × ${s} queries over ${l} keys`,
    {
      code: "shape-mismatch",
      fix: "give mask_index as [B], [2B], [B, L], [B, S, L] or [B, 1, M, M]",
    },
  );
}

/** The biases a node adds to its scores: its mask's, causal ones, and `attention_bias`. */
function scoreBias(
  c: NodeContext,
  [b, s, l]: number[],
  mask: Known | undefined,
  extra: Known | undefined,
  dtype: string,
): Known | undefined {
  const op = opOf(c), a = attrs(c), filter = a.float("mask_filter_value", -10000)!;
  const parts: Known[] = [];
  if (mask) parts.push(maskBias(c, mask, [b, s, l], filter));
  if (a.int("unidirectional", 0) === 1) {
    // Query i (of the last S of L positions) sees keys up to L - S + i.
    const causal = new Float32Array(s * l);
    for (let i = 0; i < s; i++) for (let j = l - s + i + 1; j < l; j++) causal[i * l + j] = filter;
    parts.push(constant(causal, [1, 1, s, l], "f32"));
  }
  if (extra) parts.push(extra);
  if (!parts.length) return undefined;
  const sum = parts.reduce((x, y) => op("Add", [x, y]));
  return typeOf(sum).dtype === dtype ? sum : op("Cast", [sum], { to: dtype });
}

/** Attention: input·weights (+ bias) split into Q, K and V, then attention over `num_heads`. */
function attention(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0), w = c.required(1);
  const n = a.int("num_heads")!, [b, s] = typeOf(x).shape, total = typeOf(w).shape[1];
  const past = c.input(4), pastLength = past ? typeOf(past).shape[3] : 0;
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
  const bias = c.input(2);
  if (bias) qkv = op("Add", [qkv, bias]);
  const parts = c.emit("Split", [qkv], { axis: 2, split: sizes }, 3);
  const scores = scoreBias(c, [b, s, pastLength + s], c.input(3), c.input(5), typeOf(x).dtype);
  return attend(op, parts, n, a.float("scale"), scores, past, !!c.node.output[1]);
}

/** MultiHeadAttention over query [B, S, D], key [B, L, D] and value [B, L, Dv]. */
function multiHeadAttention(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), n = a.int("num_heads")!;
  const q = c.required(0), k = c.input(1), v = c.input(2);
  const pastKey = c.input(6), pastValue = c.input(7);
  if (
    !k || !v || typeOf(k).shape.length !== 3 || !pastKey !== !pastValue || c.input(8) ||
    c.input(9) || (pastKey && typeOf(k).shape[2] !== typeOf(v).shape[2])
  ) {
    fail(
      c,
      "MultiHeadAttention with packed or 4-D key and value, or a shared past buffer",
      "give query [B, S, D], key [B, L, D] and value [B, L, Dv] (a past of both, Dv = D)",
    );
  }
  const bias = c.input(3);
  let [qq, kk, vv] = [q, k, v];
  if (bias) {
    const d = typeOf(q).shape[2], dv = typeOf(v).shape[2];
    const [bq, bk, bv] = c.emit("Split", [bias], { axis: 0, split: [d, d, dv] }, 3);
    [qq, kk, vv] = [op("Add", [q, bq]), op("Add", [k, bk]), op("Add", [v, bv])];
  }
  const [b, s] = typeOf(q).shape, l = typeOf(k).shape[1] + (pastKey ? typeOf(pastKey).shape[2] : 0);
  const scores = scoreBias(c, [b, s, l], c.input(4), c.input(5), typeOf(q).dtype);
  // The past keys and values ([B, N, P, h] each) stacked as Attention's past.
  const past = pastKey && op("Concat", [
    op("Unsqueeze", [pastKey], { axes: [0] }),
    op("Unsqueeze", [pastValue!], { axes: [0] }),
  ], { axis: 0 });
  const wanted = !!(c.node.output[1] || c.node.output[2]);
  const [y, present] = attend(op, [qq, kk, vv], n, a.float("scale"), scores, past, wanted);
  if (!present) return [y];
  const half = (i: number) =>
    op("Squeeze", [op("Slice", [present], { starts: [i], ends: [i + 1], axes: [0] })], {
      axes: [0],
    });
  return [y, half(0), half(1)];
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
  return expanded(c, "EmbedLayerNormalization", ins, {
    epsilon: a.float("epsilon", 1e-12),
    segments: +!!(segments && segmentTable),
    mask: +!!mask,
    positions: +!!positions,
  }, 3);
}

/** Rotary embedding of `x` ([B, S, heads·h]) at `positions` ([B, S] into the caches' rows). */
function rotate(
  op: OpFn,
  x: Known,
  heads: number,
  caches: Known[],
  positions: Known,
  interleaved: boolean,
): Known {
  // The caches' width sets how many channels of each head turn.
  return op("RotaryEmbedding", [x, ...caches, positions], {
    num_heads: heads,
    interleaved: interleaved ? 1 : 0,
    rotary_embedding_dim: 2 * typeOf(caches[0]).shape.at(-1)!,
  });
}

/**
 * GroupQueryAttention without a shared KV buffer: the new keys and values written after each
 * sequence's valid past ones (the present outputs), `kv_num_heads` of them shared by
 * `num_heads / kv_num_heads` query heads each; a query at position p sees keys up to p and up to
 * its sequence's last valid one (`seqlens_k`), and past `local_window_size` back where that is
 * set; rotary embedding from the caches where `do_rotary` is. After a past, as ONNX Runtime does,
 * sequence b's present holds its first `seqlens_k[b] + 1 − S` past entries, then its S new ones,
 * then zeros, `total_sequence_length` of them: a batch of sequences of different lengths decodes
 * together.
 */
function groupQueryAttention(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c);
  const n = a.int("num_heads")!, kv = a.int("kv_num_heads")!;
  const window = a.int("local_window_size", -1)!, softcap = a.float("softcap", 0)!;
  if (a.int("smooth_softmax", 0) || a.int("qk_output", 0) || c.input(11)) {
    fail(
      c,
      "GroupQueryAttention with smooth_softmax, head_sink or qk_output",
      "export without them",
    );
  }
  let q = c.required(0), k = c.input(1), v = c.input(2);
  const [b, s, width] = typeOf(q).shape;
  const h = k ? width / n : width / (n + 2 * kv);
  if (!k || !v) {
    [q, k, v] = c.emit("Split", [q], { axis: 2, split: [n * h, kv * h, kv * h] }, 3);
  }
  const pastKey = c.input(3), pastValue = c.input(4), seqlens = c.required(5);
  const past = pastKey ? typeOf(pastKey).shape[2] : 0;
  const given = constInts(c, 6, "total_sequence_length")?.[0];
  const total = past ? given ?? past + s : s;
  if (
    !n || !kv || n % kv !== 0 || (!past && given !== undefined && given !== s) || total < s ||
    (past && s > 1 && b > 1)
  ) {
    throw new KilnError(
      `${c.label}: GroupQueryAttention of ${n} heads over ${kv}, ${s} new tokens after ${past}, ` +
        `batch ${b}, total ${given}`,
      {
        code: "unsupported",
        fix: "kiln runs heads that kv_num_heads divides, a total_sequence_length of the new " +
          "tokens for a first prompt and at least that after a past (no shared buffer), and " +
          "several new tokens after a past for one sequence at a time (as ONNX Runtime does)",
      },
    );
  }
  // Positions of the new tokens: 0… for a first prompt, after the past otherwise.
  const steps = constant([...Array(s).keys()], [1, s], "i32");
  const lengths = op("Reshape", [op("Cast", [seqlens], { to: "i32" })], { shape: [b, 1] });
  const start = op("Sub", [lengths, past ? scalar(s - 1, "i32") : lengths]);
  const positions = op("Add", [start, steps]); // [B, S]
  if (a.int("do_rotary", 0)) {
    const caches = [c.required(7), c.required(8)],
      interleaved = a.int("rotary_interleaved", 0) === 1;
    const at = c.input(9) ? op("Cast", [c.input(9)!], { to: "i32" }) : positions;
    q = rotate(op, q, n, caches, at, interleaved);
    k = rotate(op, k, kv, caches, at, interleaved);
  }
  // After a past, sequence b's present: its valid past (the first `start[b]` entries), its new
  // entries, zeros. Where each slot comes from is the same for keys and values: built once.
  let append = (_pastState: Known | undefined, fresh: Known) => heads(op, fresh, kv);
  if (past) {
    const slots = constant([...Array(total).keys()], [1, 1, total, 1], "i32");
    const valid = op("Reshape", [start], { shape: [b, 1, 1, 1] });
    const pastAt = constant(
      [...Array(total).keys()].map((j) => Math.min(j, past - 1)),
      [total],
      "i32",
    );
    const newAt = op("Min", [
      op("Max", [op("Sub", [slots, valid]), scalar(0, "i32")]),
      scalar(s - 1, "i32"),
    ]);
    const inPast = op("Less", [slots, valid]);
    const inNew = op("Less", [slots, op("Add", [valid, scalar(s, "i32")])]);
    append = (pastState, fresh) => {
      const heads4 = heads(op, fresh, kv);
      if (!pastState) return heads4;
      const fromPast = op("Gather", [pastState, pastAt], { axis: 2 });
      const fromNew = op("GatherElements", [
        heads4,
        op("Expand", [newAt], { shape: [b, kv, total, typeOf(heads4).shape[3]] }),
      ], { axis: 2 });
      const zero = scalar(0, typeOf(heads4).dtype);
      return op("Where", [inPast, fromPast, op("Where", [inNew, fromNew, zero])]);
    };
  }
  const [presentKey, presentValue] = [append(pastKey, k), append(pastValue, v)];
  // Each of the kv heads serves n / kv query heads: [B, kv, T, h] → [B, n, T, h].
  const shared = (state: Known) =>
    op("Reshape", [
      op("Expand", [op("Unsqueeze", [state], { axes: [2] })], { shape: [b, kv, n / kv, total, h] }),
    ], { shape: [b, n, total, h] });
  const t = typeOf(q).dtype;
  const keys = constant([...Array(total).keys()], [1, 1, 1, total], "i32");
  const queryAt = op("Reshape", [positions], { shape: [b, 1, s, 1] });
  let visible = op("And", [
    op("Not", [op("Greater", [keys, queryAt])]),
    op("Not", [op("Greater", [keys, op("Reshape", [lengths], { shape: [b, 1, 1, 1] })])]),
  ]);
  if (window > 0) {
    visible = op("And", [
      visible,
      op("Greater", [keys, op("Sub", [queryAt, scalar(window, "i32")])]),
    ]);
  }
  const hidden = op("Where", [visible, scalar(0, t), scalar(-Infinity, t)]);
  const bias = c.input(10) ? op("Add", [hidden, c.input(10)!]) : hidden;
  const weights = [heads(op, q, n), shared(presentKey), shared(presentValue)];
  const y = weigh(op, weights, a.float("scale") ?? 1 / Math.sqrt(h), bias, softcap);
  return [y, presentKey, presentValue];
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
