/**
 * Reference kernels of ONNX Runtime's transformer ops that kiln runs as its own
 * (`jit/ops/normalization.ts`, `jit/ops/ort_attention.ts`), computed from their definitions in
 * float64: EmbedLayerNormalization's gathered sum normalized by LayerNormalization's own
 * reference; MultiHeadAttention and GroupQueryAttention query by query, their masks and presents
 * read from the definitions, not from the decompositions' index arithmetic.
 *
 * @module
 */
import type { InferContext } from "../../jit/ops/mod.ts";
import { gqaRoles, headSize } from "../../jit/ops/gqa.ts";
import { maskFormat, mhaRoles } from "../../jit/ops/ort_attention.ts";
import { type Kernel, runKernel } from "./kernel.ts";
import { reduceKernels } from "./kernels_reduce.ts";
import { maskReader } from "./kernels_attention.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { read, written } from "./tensor_io.ts";

/** EmbedLayerNormalization's inputs by role, from the flags that say which are given. */
function embedRoles(inputs: readonly RefTensor[], ctx: InferContext) {
  const [ids, words, table, gamma, beta, ...rest] = inputs;
  const segment = ctx.int("segments", 0) ? rest.splice(0, 2) : undefined;
  const mask = ctx.int("mask", 0) ? rest.shift() : undefined;
  return { ids, words, table, gamma, beta, segment, mask, positions: rest.shift() };
}

/** softmax(scores)·values for one query: `value(j, c)` over `dv` channels into `out` at `at`. */
function weighted(
  scores: number[],
  value: (j: number, c: number) => number,
  dv: number,
  [out, at]: [Float64Array, number],
): void {
  const m = Math.max(...scores), ws = scores.map((x) => Math.exp(x - m));
  const sum = ws.reduce((p, x) => p + x, 0);
  for (let c = 0; c < dv; c++) {
    let acc = 0;
    for (let j = 0; j < scores.length; j++) acc += (ws[j] / sum) * value(j, c);
    out[at + c] = acc;
  }
}

/** Whether key `j` is hidden from query `q` of batch `i` by an ONNX Runtime `mask_index`. */
function maskHides(mask: RefTensor, [b, s, l]: number[]) {
  const v = read(mask), shape = mask.shape, format = maskFormat(shape, [b, s, l]);
  const zero = (at: number) => Math.trunc(v[at]) === 0;
  if (format === "counts") {
    return (i: number, _q: number, j: number) =>
      j >= Math.trunc(v[i]) || (shape[0] === 2 * b && j < Math.trunc(v[b + i]));
  }
  if (format === "square") {
    return (i: number, q: number, j: number) => zero((i * shape[2] + q) * shape[3] + j);
  }
  if (shape.length === 2) return (i: number, _q: number, j: number) => zero(i * l + j);
  return (i: number, q: number, j: number) => zero((i * s + q) * l + j);
}

/** MultiHeadAttention, query by query (see `jit/ops/ort_attention.ts`). */
const multiHeadAttention: Kernel = ({ inputs, outputs, ctx }) => {
  const r = mhaRoles(inputs, ctx.attrs), n = ctx.int("num_heads"), f = Math.fround;
  const [b, s, d] = r.q.shape, [, l, dv] = r.v.shape, past = r.pastKey?.shape[2] ?? 0;
  const total = past + l, h = d / n, hv = dv / n;
  const [q, k, v] = [r.q, r.k, r.v].map(read), bias = r.bias ? read(r.bias) : undefined;
  const [pk, pv] = [r.pastKey, r.pastValue].map((t) => t && read(t));
  const shift = (from: number) => (c: number) => bias ? bias[from + c] : 0;
  const [qb, kb, vb] = [shift(0), shift(d), shift(2 * d)];
  const key = (i: number, g: number, j: number, c: number) =>
    j < past
      ? pk![((i * n + g) * past + j) * h + c]
      : f(k[(i * l + j - past) * d + g * h + c] + kb(g * h + c));
  const value = (i: number, g: number, j: number, c: number) =>
    j < past
      ? pv![((i * n + g) * past + j) * hv + c]
      : f(v[(i * l + j - past) * dv + g * hv + c] + vb(g * hv + c));
  const scale = ctx.has("scale") ? ctx.float("scale") : 1 / Math.sqrt(h);
  const filter = ctx.float("mask_filter_value", -10000), causal = ctx.int("unidirectional", 0);
  const hides = r.mask && maskHides(r.mask, [b, s, total]),
    extra = r.extra ? maskReader(r.extra, [b, n, s]) : () => 0;
  const y = new Float64Array(b * s * dv);
  for (let i = 0; i < b; i++) {
    for (let g = 0; g < n; g++) {
      for (let t = 0; t < s; t++) {
        const scores = Array.from({ length: total }, (_, j) => {
          let dot = 0;
          for (let c = 0; c < h; c++) {
            dot += f(q[(i * s + t) * d + g * h + c] + qb(g * h + c)) * key(i, g, j, c);
          }
          const masked = (hides?.(i, t, j) ? filter : 0) +
            (causal && j > total - s + t ? filter : 0);
          return dot * scale + masked + extra(i, g, t, j);
        });
        weighted(scores, (j, c) => value(i, g, j, c), hv, [y, (i * s + t) * dv + g * hv]);
      }
    }
  }
  const present = (get: typeof key, size: number) =>
    Float64Array.from({ length: b * n * total * size }, (_, o) => {
      const c = o % size, j = Math.floor(o / size) % total, g = Math.floor(o / (size * total)) % n;
      return get(Math.floor(o / (size * total * n)), g, j, c);
    });
  return outputs.map((o, i) => written(o.dtype, [y, present(key, h), present(value, hv)][i]));
};

/**
 * Channels of one head rotated at a cache row: pairs (j, half + j), or (2j, 2j + 1) interleaved,
 * over the caches' width; in place.
 */
function rotated(
  head: Float64Array,
  [cos, sin]: ArrayLike<number>[],
  row: number,
  half: number,
  interleaved: boolean,
) {
  for (let j = 0; j < half; j++) {
    const [p, q] = interleaved ? [2 * j, 2 * j + 1] : [j, half + j];
    const [c, n] = [cos[row * half + j], sin[row * half + j]];
    [head[p], head[q]] = [c * head[p] - n * head[q], n * head[p] + c * head[q]];
  }
  return head;
}

/** GroupQueryAttention, query by query (see `jit/ops/gqa.ts`). */
const groupQueryAttention: Kernel = ({ inputs, outputs, ctx }) => {
  const r = gqaRoles(inputs, ctx.attrs), n = ctx.int("num_heads"), kv = ctx.int("kv_num_heads");
  const [b, s, width] = r.q.shape, packed = ctx.int("packed", 0) === 1;
  const h = headSize(width, [n, kv], packed), total = outputs[1].shape[2];
  const past = r.pastKey?.shape[2] ?? 0, lengths = read(r.seqlens);
  const [q, k, v] = [r.q, r.k, r.v].map((t) => t && read(t));
  const caches = r.caches?.map(read), half = r.caches?.[0].shape.at(-1) ?? 0;
  const ids = r.positions && read(r.positions),
    interleaved = ctx.int("rotary_interleaved", 0) === 1;
  const start = (i: number) => (past ? lengths[i] - (s - 1) : 0);
  // One buffer for past and present: the past's entries after the new ones stay (see gqa.ts).
  const shared = ctx.int("shared_buffer", 0) === 1;
  // Head `g` of token `t` of one of the new parts (0 query, 1 key, 2 value), rotated where asked.
  const fresh = (part: number, i: number, t: number, g: number) => {
    const [src, stride, from] = packed
      ? [q!, width, [0, n * h, (n + kv) * h][part]]
      : [[q!, k!, v!][part], (part ? kv : n) * h, 0];
    const head = Float64Array.from(
      { length: h },
      (_, c) => src[(i * s + t) * stride + from + g * h + c],
    );
    if (!caches || part === 2) return head;
    const row = ids ? ids[i * s + t] : start(i) + t;
    return rotated(head, caches, row, half, interleaved);
  };
  const [pk, pv] = [r.pastKey, r.pastValue].map((t) => t && read(t));
  const present = (part: number, state: ArrayLike<number> | undefined) => {
    const out = new Float64Array(b * kv * total * h);
    for (let i = 0; i < b; i++) {
      for (let g = 0; g < kv; g++) {
        for (let j = 0; j < total; j++) {
          const at = ((i * kv + g) * total + j) * h, from = j - start(i);
          if (past && from < 0) {
            const p = Math.min(j, past - 1);
            for (let c = 0; c < h; c++) out[at + c] = state![((i * kv + g) * past + p) * h + c];
          } else if (from < s) out.set(fresh(part, i, from, g), at);
          else if (shared && past === total) {
            for (let c = 0; c < h; c++) out[at + c] = state![((i * kv + g) * past + j) * h + c];
          }
        }
      }
    }
    return out;
  };
  const [keys, values] = [present(1, pk), present(2, pv)];
  const scale = ctx.has("scale") ? ctx.float("scale") : 1 / Math.sqrt(h);
  const softcap = ctx.float("softcap", 0), window = ctx.int("local_window_size", -1);
  const extra = r.bias ? maskReader(r.bias, [b, n, s]) : () => 0;
  const y = new Float64Array(b * s * n * h);
  for (let i = 0; i < b; i++) {
    for (let hd = 0; hd < n; hd++) {
      const g = Math.floor(hd / (n / kv)), base = (i * kv + g) * total * h;
      for (let t = 0; t < s; t++) {
        const query = fresh(0, i, t, hd), position = start(i) + t;
        const scores = Array.from({ length: total }, (_, j) => {
          let dot = 0;
          for (let c = 0; c < h; c++) dot += query[c] * keys[base + j * h + c];
          let x = dot * scale;
          if (softcap > 0) x = softcap * Math.tanh(x / softcap);
          const seen = j <= position && j <= lengths[i] && (window <= 0 || j > position - window);
          return x + (seen ? 0 : -Infinity) + extra(i, hd, t, j);
        });
        weighted(scores, (j, c) => values[base + j * h + c], h, [y, ((i * s + t) * n + hd) * h]);
      }
    }
  }
  return outputs.map((o, i) => written(o.dtype, [y, keys, values][i]));
};

/** Kernels by op name. */
export const ortKernels: Record<string, Kernel> = {
  MultiHeadAttention: multiHeadAttention,
  GroupQueryAttention: groupQueryAttention,
  EmbedLayerNormalization: ({ inputs, outputs, ctx }) => {
    const r = embedRoles(inputs, ctx), [b, s] = r.ids.shape, d = r.words.shape[1];
    const [ids, words, table] = [r.ids, r.words, r.table].map(read);
    const positions = r.positions && read(r.positions), p = r.positions?.shape[0] ?? 1;
    const [segIds, segTable] = r.segment ? r.segment.map(read) : [];
    const f = Math.fround, sum = new Float64Array(b * s * d);
    for (let t = 0; t < b * s; t++) {
      const at = positions ? positions[p === 1 ? t % s : t] : t % s;
      for (let c = 0; c < d; c++) {
        let v = f(words[ids[t] * d + c] + table[at * d + c]);
        if (segTable) v = f(v + segTable[segIds[t] * d + c]);
        sum[t * d + c] = v;
      }
    }
    const dtype = outputs[0].dtype, x = { data: written(dtype, sum), shape: [b, s, d], dtype };
    const attrs = { axis: -1, epsilon: ctx.float("epsilon", 1e-12) };
    const y = runKernel(
      reduceKernels.LayerNormalization,
      "LayerNormalization",
      [
        [x, r.gamma, r.beta],
        attrs,
      ],
      [x.shape, dtype],
      ctx.where,
    );
    const counts = new Int32Array(b), mask = r.mask && read(r.mask);
    for (let t = 0; mask && t < b * s; t++) counts[Math.floor(t / s)] += Math.trunc(mask[t]);
    return [y.data, counts, x.data];
  },
};
