/**
 * Reference kernels of ONNX Runtime's transformer ops that kiln runs as its own
 * (`jit/ops/normalization.ts`, `jit/ops/ort_attention.ts`), computed from their definitions in
 * float64: EmbedLayerNormalization's gathered sum normalized by LayerNormalization's own
 * reference.
 *
 * @module
 */
import { InferContext } from "../../jit/ops/mod.ts";
import type { Kernel } from "./kernel.ts";
import { reduceKernels } from "./kernels_reduce.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { read, written } from "./tensor_io.ts";

/** EmbedLayerNormalization's inputs by role, from the flags that say which are given. */
function embedRoles(inputs: readonly RefTensor[], ctx: InferContext) {
  const [ids, words, table, gamma, beta, ...rest] = inputs;
  const segment = ctx.int("segments", 0) ? rest.splice(0, 2) : undefined;
  const mask = ctx.int("mask", 0) ? rest.shift() : undefined;
  return { ids, words, table, gamma, beta, segment, mask, positions: rest.shift() };
}

/** Kernels by op name. */
export const ortKernels: Record<string, Kernel> = {
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
    const norm = new InferContext({
      op: "LayerNormalization",
      where: ctx.where,
      inputs: [],
      attrs,
    });
    const normArgs = { inputs: [x, r.gamma, r.beta], attrs, outputs: [outputs[0]], ctx: norm };
    const [y] = reduceKernels.LayerNormalization(normArgs);
    const counts = new Int32Array(b), mask = r.mask && read(r.mask);
    for (let t = 0; mask && t < b * s; t++) counts[Math.floor(t / s)] += Math.trunc(mask[t]);
    return [y, counts, x.data];
  },
};
