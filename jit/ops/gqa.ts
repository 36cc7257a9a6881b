/**
 * `GroupQueryAttention` (ONNX Runtime's, the attention of onnxruntime-genai's language models),
 * without a shared KV buffer: the new keys and values written after each sequence's valid past
 * ones (the present outputs), `kv_num_heads` of them shared by `num_heads / kv_num_heads` query
 * heads each; a query at position p sees keys up to p and up to its sequence's last valid one
 * (`seqlens_k`), and past `local_window_size` back where that is set; rotary embedding from the
 * caches where `do_rotary` is. After a past, as ONNX Runtime does, sequence b's present holds its
 * first `seqlens_k[b] + 1 − S` past entries, then its S new ones, then zeros,
 * `total_sequence_length` of them: a batch of sequences of different lengths decodes together.
 * `shared_buffer` (ONNX Runtime's past and present in one buffer, as a generation binds them): a
 * present as long as its past keeps the past's entries after the new ones, where ONNX Runtime
 * leaves that buffer's, rather than zeros; a donated past is then written one entry a step.
 *
 * Inputs, where the attributes say so (1 where given): the query (packed with the new keys and
 * values where `packed`), key and value, `past` key and value, seqlens_k, the cos and sin caches
 * (`do_rotary`), `positions` (position ids), `attention_bias`.
 *
 * @module
 */
import { formatShape } from "../ir/shape.ts";
import { heads, weigh } from "./ort_attention.ts";
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

/** GroupQueryAttention's inputs by role, from the present ones and the flags. */
export function gqaRoles<T>(xs: readonly T[], a: Attrs) {
  const rest = [...xs], q = rest.shift()!;
  const [k, v] = a.packed === 1 ? [] : rest.splice(0, 2);
  const [pastKey, pastValue] = a.past === 1 ? rest.splice(0, 2) : [];
  const seqlens = rest.shift()!;
  const caches = a.do_rotary === 1 ? rest.splice(0, 2) : undefined;
  const positions = a.positions === 1 ? rest.shift() : undefined;
  const bias = a.attention_bias === 1 ? rest.shift() : undefined;
  return { q, k, v, pastKey, pastValue, seqlens, caches, positions, bias };
}

/**
 * The size of a head: the query's width over `n` heads, or over n + 2·kv heads where it is
 * `packed` with the new keys and values.
 */
export const headSize = (width: number, [n, kv]: number[], packed: boolean): number =>
  width / (packed ? n + 2 * kv : n);

/** The sizes GroupQueryAttention works in, checked. */
function gqaLayout(ctx: InferContext) {
  const r = gqaRoles(ctx.inputs, ctx.attrs);
  const n = ctx.int("num_heads"), kv = ctx.int("kv_num_heads");
  const [b, s, width] = r.q.shape, packed = ctx.int("packed", 0) === 1;
  const h = headSize(width, [n, kv], packed);
  const past = r.pastKey?.shape[2] ?? 0, total = ctx.int("total_sequence_length", past + s);
  const fits = n > 0 && kv > 0 && n % kv === 0 && Number.isInteger(h) && r.q.shape.length === 3 &&
    (packed || r.k?.shape.join() === [b, s, kv * h].join()) && total >= s &&
    (past ? !(s > 1 && b > 1) : total === s) &&
    [r.pastKey, r.pastValue].every((t) => !t || t.shape.join() === [b, kv, past, h].join());
  if (!fits) {
    ctx.fail(
      `GroupQueryAttention of ${n} heads over ${kv}, query ${formatShape(r.q.shape)}, ` +
        `${s} new tokens after ${past}, batch ${b}, total ${total}`,
      "kiln runs heads that kv_num_heads divides, a total_sequence_length of the new tokens " +
        "for a first prompt and at least that after a past (no shared buffer), and several new " +
        "tokens after a past for one sequence at a time (as ONNX Runtime does)",
      "unsupported",
    );
  }
  return { b, s, n, kv, h, past, total };
}

/** GroupQueryAttention's types: y [B, S, N·h], present key and value [B, kv, total, h]. */
function gqaInfer(ctx: InferContext): ValueType[] {
  const { b, s, n, kv, h, total } = gqaLayout(ctx), dtype = ctx.requireFloat(0);
  // Read by the decomposition; checked here (a misspelt one is refused).
  ctx.int("local_window_size", -1);
  ctx.int("rotary_interleaved", 0);
  ctx.int("shared_buffer", 0);
  ctx.float("softcap", 0);
  ctx.float("scale", 1);
  const present = { shape: [b, kv, total, h], dtype };
  return [{ shape: [b, s, n * h], dtype }, present, present];
}

/**
 * After a past, sequence b's present: its valid past (the first `start[b]` entries), its new
 * entries, zeros. Where each slot comes from is the same for keys and values: built once.
 */
function appender(
  e: Emitter,
  start: EmitRef,
  o: { b: number; kv: number; s: number },
  past: number,
  total: number,
  sharedBuffer: boolean,
) {
  const { b, kv, s } = o;
  const slots = constantTensor(e, [...Array(total).keys()], [1, 1, total, 1], "i32");
  const valid = e.op("Reshape", [start], { shape: [b, 1, 1, 1] });
  // A present as long as the past (a buffer shared by past and present) keeps each past entry
  // where it is: no gather.
  const pastAt = total === past ? undefined : constantTensor(
    e,
    [...Array(total).keys()].map((j) => Math.min(j, past - 1)),
    [total],
    "i32",
  );
  const newAt = e.op("Min", [
    e.op("Max", [e.op("Sub", [slots, valid]), e.scalar(0, "i32")]),
    e.scalar(s - 1, "i32"),
  ]);
  const inPast = e.op("Less", [slots, valid]);
  const inNew = e.op("Less", [slots, e.op("Add", [valid, e.scalar(s, "i32")])]);
  const kept = sharedBuffer && !pastAt ? e.op("Or", [inPast, e.op("Not", [inNew])]) : undefined;
  return (pastState: EmitRef | undefined, fresh: EmitRef) => {
    const heads4 = heads(e, fresh, kv);
    if (!pastState) return heads4;
    // Kept in place (a shared buffer), the one new token is the Where's own broadcast: computed
    // only at the slots written (`rareBranch`), not stored by a kernel of its own to expand.
    if (kept && s === 1) return e.op("Where", [kept, pastState, heads4]);
    const fromPast = pastAt ? e.op("Gather", [pastState, pastAt], { axis: 2 }) : pastState;
    const wide = [b, kv, total, e.typeOf(heads4).shape[3]];
    // One new token (a decode step) is every slot's pick: a broadcast of it, where a gather read
    // it through a slot index that a kernel of its own computed each step.
    const fromNew = s === 1
      ? e.op("Expand", [heads4], { shape: wide })
      : e.op("GatherElements", [heads4, e.op("Expand", [newAt], { shape: wide })], { axis: 2 });
    if (kept) return e.op("Where", [kept, pastState, fromNew]);
    const zero = e.scalar(0, e.typeOf(heads4).dtype);
    return e.op("Where", [inPast, fromPast, e.op("Where", [inNew, fromNew, zero])]);
  };
}

/** The bias hiding what a query may not see: later keys, keys past its sequence, the window. */
function visibility(
  e: Emitter,
  positions: EmitRef,
  lengths: EmitRef,
  a: Attrs,
  o: { b: number; s: number; total: number },
  dtype: ValueType["dtype"],
): EmitRef {
  const { b, s, total } = o, window = (a.local_window_size as number | undefined) ?? -1;
  const keys = constantTensor(e, [...Array(total).keys()], [1, 1, 1, total], "i32");
  const queryAt = e.op("Reshape", [positions], { shape: [b, 1, s, 1] });
  let visible = e.op("And", [
    e.op("Not", [e.op("Greater", [keys, queryAt])]),
    e.op("Not", [e.op("Greater", [keys, e.op("Reshape", [lengths], { shape: [b, 1, 1, 1] })])]),
  ]);
  if (window > 0) {
    const from = e.op("Greater", [keys, e.op("Sub", [queryAt, e.scalar(window, "i32")])]);
    visible = e.op("And", [visible, from]);
  }
  return e.op("Where", [visible, e.scalar(0, dtype), e.scalar(-Infinity, dtype)]);
}

/** GroupQueryAttention, as the module says. */
const groupQueryAttention: OpDef = {
  name: "GroupQueryAttention",
  category: "composite",
  arity: [2, 11],
  primitive: false,
  infer: gqaInfer,
  decompose: (e, xs, a) => {
    const r = gqaRoles(xs, a), n = a.num_heads as number, kv = a.kv_num_heads as number;
    const [b, s, width] = e.typeOf(r.q).shape, packed = a.packed === 1;
    const h = headSize(width, [n, kv], packed);
    let [q, k, v] = packed
      ? e.opN("Split", [r.q], { axis: 2, split: [n * h, kv * h, kv * h] }, 3)
      : [r.q, r.k!, r.v!];
    const past = r.pastKey ? e.typeOf(r.pastKey).shape[2] : 0;
    const total = (a.total_sequence_length as number | undefined) ?? past + s;
    // Positions of the new tokens: 0… for a first prompt, after the past otherwise.
    const steps = constantTensor(e, [...Array(s).keys()], [1, s], "i32");
    const lengths = e.op("Reshape", [e.op("Cast", [r.seqlens], { to: "i32" })], { shape: [b, 1] });
    const start = e.op("Sub", [lengths, past ? e.scalar(s - 1, "i32") : lengths]);
    const positions = e.op("Add", [start, steps]); // [B, S]
    if (r.caches) {
      const at = r.positions ? e.op("Cast", [r.positions], { to: "i32" }) : positions;
      // The caches' width sets how many channels of each head turn.
      const rotate = (x: EmitRef, count: number) =>
        e.op("RotaryEmbedding", [x, ...r.caches!, at], {
          num_heads: count,
          interleaved: a.rotary_interleaved === 1 ? 1 : 0,
          rotary_embedding_dim: 2 * e.typeOf(r.caches![0]).shape.at(-1)!,
        });
      [q, k] = [rotate(q, n), rotate(k, kv)];
    }
    const append = past
      ? appender(e, start, { b, kv, s }, past, total, a.shared_buffer === 1)
      : (_: EmitRef | undefined, fresh: EmitRef) => heads(e, fresh, kv);
    const [presentKey, presentValue] = [append(r.pastKey, k), append(r.pastValue, v)];
    // Each of the kv heads serves n / kv query heads: [B, kv, T, h] → [B, n, T, h].
    const shared = (state: EmitRef) =>
      e.op("Reshape", [
        e.op("Expand", [e.op("Unsqueeze", [state], { axes: [2] })], {
          shape: [b, kv, n / kv, total, h],
        }),
      ], { shape: [b, n, total, h] });
    const hidden = visibility(e, positions, lengths, a, { b, s, total }, e.typeOf(q).dtype);
    const bias = r.bias ? e.op("Add", [hidden, r.bias]) : hidden;
    const weights = [heads(e, q, n), shared(presentKey), shared(presentValue)];
    const scale = (a.scale as number | undefined) ?? 1 / Math.sqrt(h);
    const y = weigh(e, weights, scale, bias, (a.softcap as number | undefined) ?? 0);
    return [y, presentKey, presentValue];
  },
};

defineOps([groupQueryAttention]);
