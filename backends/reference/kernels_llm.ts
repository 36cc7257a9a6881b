/**
 * Reference kernels of the language-model ops (`jit/ops/llm.ts`): RMSNormalization, Swish,
 * RotaryEmbedding and TensorScatter, computed as ONNX's reference defines them.
 *
 * @module
 */
import { sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import { trailing } from "../../jit/ops/llm.ts";
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Kernels by op name. */
export const llmKernels: Record<string, Kernel> = {
  RMSNormalization: ({ inputs: [x, scale], outputs, ctx }) => {
    const axes = trailing(ctx.int("axis", -1), x.shape.length), eps = ctx.float("epsilon", 1e-5);
    const row = sizeOf(axes.map((a) => x.shape[a])), v = read(x), s = read(scale);
    const out = new Float64Array(v.length), invs = new Float64Array(v.length / row);
    for (let at = 0; at < v.length; at += row) {
      let sum = 0;
      for (let i = 0; i < row; i++) sum += v[at + i] ** 2;
      const inv = invs[at / row] = 1 / Math.sqrt(sum / row + eps);
      // The scale broadcasts against the normalized axes (trailing-aligned).
      for (let i = 0; i < row; i++) out[at + i] = v[at + i] * inv * s[i % s.length];
    }
    const y = written(outputs[0].dtype, out);
    return outputs.length > 1 ? [y, written(outputs[1].dtype, invs)] : [y];
  },
  Swish: ({ inputs: [x], outputs, ctx }) => {
    const alpha = ctx.float("alpha", 1);
    return [written(outputs[0].dtype, Array.from(read(x), (v) => v / (1 + Math.exp(-alpha * v))))];
  },
  RotaryEmbedding: ({ inputs: [x, cos, sin, positions], outputs, ctx }) => {
    const shape = x.shape, four = shape.length === 4, interleaved = ctx.int("interleaved", 0) === 1;
    const [b, s] = four ? [shape[0], shape[2]] : shape;
    const heads = four ? shape[1] : ctx.int("num_heads", 0),
      size = four ? shape[3] : shape[2] / heads;
    const half = cos.shape.at(-1)!, v = read(x), c = read(cos), n = read(sin);
    const ids = positions
      ? Array.from(positions.data as ArrayLike<number | bigint>, Number)
      : undefined;
    const out = Float64Array.from(v);
    for (let bi = 0; bi < b; bi++) {
      for (let si = 0; si < s; si++) {
        // The caches' row of this token: at its position, or its own (batch 1 broadcasts).
        const row = ids
          ? ids[(ids.length === s ? 0 : bi * s) + si]
          : (cos.shape[0] === 1 ? 0 : bi) * s + si;
        for (let h = 0; h < heads; h++) {
          const base = four
            ? ((bi * heads + h) * s + si) * size
            : ((bi * s + si) * heads + h) * size;
          for (let j = 0; j < half; j++) {
            const [p, q] = interleaved
              ? [base + 2 * j, base + 2 * j + 1]
              : [base + j, base + half + j];
            const [cj, sj] = [c[row * half + j], n[row * half + j]];
            out[p] = cj * v[p] - sj * v[q];
            out[q] = sj * v[p] + cj * v[q];
          }
        }
      }
    }
    return [written(outputs[0].dtype, out)];
  },
  TensorScatter: ({ inputs: [past, update, at], outputs, ctx }) => {
    const shape = past.shape, axis = ctx.axis(ctx.int("axis", -2), shape.length);
    const circular = ctx.choice("mode", ["linear", "circular"]) === "circular";
    const out = Array.from(read(past)), u = read(update), us = stridesOf(update.shape);
    const ps = stridesOf(shape), starts = at ? Array.from(read(at)) : [];
    for (let i = 0; i < u.length; i++) {
      const coords = update.shape.map((d, a) => Math.floor(i / us[a]) % d);
      let p = coords[axis] + (starts[coords[0]] ?? 0);
      if (circular) p %= shape[axis];
      if (p >= shape[axis]) continue;
      out[coords.reduce((o, c, a) => o + (a === axis ? p : c) * ps[a], 0)] = u[i];
    }
    return [written(outputs[0].dtype, out)];
  },
};
