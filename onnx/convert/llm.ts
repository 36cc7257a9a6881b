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
import {
  attrs,
  type Converter,
  dtypeAttr,
  type Known,
  type NodeContext,
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
 * Attention (opsets 23 to 25): kiln's op (`jit/ops/attention.ts`), its optional inputs named by
 * attributes (which are present), its softmax precision as a kiln type.
 */
function attention(c: NodeContext): Known[] {
  const a = attrs(c);
  const [mask, pastKey, pastValue, nonpad] = [3, 4, 5, 6].map((i) => c.input(i));
  if (
    c.opset >= 25 && typeOf(c.required(0)).shape.length === 4 &&
    (a.int("q_num_heads") !== undefined || a.int("kv_num_heads") !== undefined)
  ) {
    fail(
      c,
      "head counts with 4-D inputs",
      "leave q_num_heads and kv_num_heads out for 4-D inputs (opset 25)",
    );
  }
  if ((pastKey === undefined) !== (pastValue === undefined)) {
    fail(
      c,
      "a past key without a past value, or the reverse",
      "pass both past_key and past_value, or neither",
    );
  }
  const dtype = typeOf(c.required(0)).dtype;
  const precision = dtypeAttr(c, "softmax_precision", { dtype, i64: false });
  if (precision.bf16) {
    fail(c, "softmax_precision of bfloat16", "use FLOAT, FLOAT16 or DOUBLE, or leave it unset");
  }
  const given = [mask, pastKey, pastValue, nonpad].filter((k): k is Known => k !== undefined);
  const qkOutput = (c.node.output[3] ?? "") !== "";
  return c.emit("Attention", [c.required(0), c.required(1), c.required(2), ...given], {
    mask: mask ? 1 : 0,
    past: pastKey ? 1 : 0,
    nonpad: nonpad ? 1 : 0,
    q_num_heads: a.int("q_num_heads"),
    kv_num_heads: a.int("kv_num_heads"),
    is_causal: a.int("is_causal", 0),
    softcap: a.float("softcap", 0),
    scale: a.float("scale"),
    qk_matmul_output_mode: a.int("qk_matmul_output_mode", 0),
    softmax_precision: precision.dtype,
    left_window_size: a.int("left_window_size", -1),
    right_window_size: a.int("right_window_size", -1),
    qk_output: qkOutput ? 1 : 0,
  }, qkOutput ? 4 : 3);
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
