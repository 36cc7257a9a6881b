/**
 * The reference Attention (`jit/ops/attention.ts`), as ONNX's reference reads: each query head's
 * scores against the present keys of its key head, scaled, softcapped, biased by the masks, a
 * softmax (0 where every key is masked), the weighted values; in float64, rounded at the end.
 *
 * @module
 */
import { broadcastOffsets, type Shape } from "../../jit/ir/shape.ts";
import { roles } from "../../jit/ops/attention.ts";
import type { Kernel } from "./kernel.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { read, written } from "./tensor_io.ts";

/** Element (b, h, s, c) of a [b, h, s, c] tensor, or of a 3-D [b, s, h·c] one with `heads`. */
function at(t: RefTensor, heads: number) {
  const v = read(t), [, x, y, z] = t.shape;
  if (t.shape.length === 4) {
    return (i: number, h: number, s: number, c: number) => v[((i * x + h) * y + s) * z + c];
  }
  const size = y / heads;
  return (i: number, h: number, s: number, c: number) => v[(i * x + s) * y + h * size + c];
}

/** Kernels by op name. */
export const attentionKernels: Record<string, Kernel> = {
  Attention: ({ inputs, outputs, ctx }) => {
    const r = roles(inputs, ctx.attrs), a = ctx.attrs;
    const [yType, pkType, pvType] = outputs;
    const [b, kvHeads, total, dk] = pkType.shape, dv = pvType.shape[3];
    const four = r.q.shape.length === 4;
    const qHeads = four ? r.q.shape[1] : (a.q_num_heads as number);
    const sq = four ? r.q.shape[2] : r.q.shape[1], past = r.pastKey?.shape[2] ?? 0;
    const q = at(r.q, qHeads), k = at(r.k, kvHeads), v = at(r.v, kvHeads);
    const pk = r.pastKey && at(r.pastKey, kvHeads), pv = r.pastValue && at(r.pastValue, kvHeads);
    const key = (i: number, g: number, j: number, c: number) =>
      j < past ? pk!(i, g, j, c) : k(i, g, j - past, c);
    const value = (i: number, g: number, j: number, c: number) =>
      j < past ? pv!(i, g, j, c) : v(i, g, j - past, c);
    const scale = ctx.has("scale") ? ctx.float("scale") : 1 / Math.sqrt(dk);
    const softcap = ctx.float("softcap", 0), causal = ctx.int("is_causal", 0) === 1;
    const [left, right] = [ctx.int("left_window_size", -1), ctx.int("right_window_size", -1)];
    const valid = r.nonpad && Array.from(read(r.nonpad));
    const maskAt = r.mask && maskReader(r.mask, [b, qHeads, sq]);
    const mode = ctx.int("qk_matmul_output_mode", 0), group = qHeads / kvHeads;
    const y = new Float64Array(b * qHeads * sq * dv),
      qk = new Float64Array(b * qHeads * sq * total);
    for (let i = 0; i < b; i++) {
      for (let h = 0; h < qHeads; h++) {
        const g = Math.floor(h / group);
        for (let s = 0; s < sq; s++) {
          const position = s + (valid ? valid[i] - sq : past);
          const raw: number[] = [], scores: number[] = [];
          for (let j = 0; j < total; j++) {
            let dot = 0;
            for (let c = 0; c < dk; c++) dot += q(i, h, s, c) * key(i, g, j, c);
            let x = dot * scale;
            if (softcap > 0) x = softcap * Math.tanh(x / softcap);
            raw.push(x);
            const hidden = (causal && j > position) || (left >= 0 && j < position - left) ||
              (right >= 0 && j > position + right) || (valid !== undefined && j >= valid[i]);
            scores.push(x + (maskAt ? maskAt(i, h, s, j) : 0) + (hidden ? -Infinity : 0));
          }
          const m = Math.max(...scores),
            ws = scores.map((x) => (m === -Infinity ? 0 : Math.exp(x - m)));
          const sum = ws.reduce((p, x) => p + x, 0),
            weights = ws.map((x) => (m === -Infinity ? 0 : x / sum));
          const chosen = [raw, raw, scores, weights][mode];
          for (let j = 0; j < total; j++) qk[((i * qHeads + h) * sq + s) * total + j] = chosen[j];
          for (let c = 0; c < dv; c++) {
            let acc = 0;
            for (let j = 0; j < total; j++) acc += weights[j] * value(i, g, j, c);
            const o = four
              ? ((i * qHeads + h) * sq + s) * dv + c
              : ((i * sq + s) * qHeads + h) * dv + c;
            y[o] = acc;
          }
        }
      }
    }
    const present = (get: typeof key, d: number, type: typeof pkType) => {
      const out = new Float64Array(b * kvHeads * total * d);
      for (let o = 0; o < out.length; o++) {
        const c = o % d, j = Math.floor(o / d) % total, g = Math.floor(o / (d * total)) % kvHeads;
        out[o] = get(Math.floor(o / (d * total * kvHeads)), g, j, c);
      }
      return written(type.dtype, out);
    };
    const outs = [written(yType.dtype, y), present(key, dk, pkType), present(value, dv, pvType)];
    return outputs.length > 3 ? [...outs, written(outputs[3].dtype, qk)] : outs;
  },
};

/**
 * The mask's bias at (batch, head, query, key), the mask broadcast to [b, h, sq, its keys]: bool
 * as 0 or −∞, −∞ past its keys (ONNX Runtime's attention biases read it too).
 */
export function maskReader(mask: RefTensor, [b, h, sq]: Shape) {
  const keys = mask.shape.at(-1)!, values = read(mask), bool = mask.dtype === "bool";
  const full = [b, h, sq, keys];
  const offsets = broadcastOffsets(mask.shape, full);
  return (i: number, head: number, s: number, j: number) => {
    if (j >= keys) return -Infinity;
    const flat = ((i * h + head) * sq + s) * keys + j;
    const v = values[offsets ? offsets[flat] : flat];
    return bool ? (v ? 0 : -Infinity) : v;
  };
}
