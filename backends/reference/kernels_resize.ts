/**
 * The reference kernel of Resize (`jit/ops/resize.ts`): each output element summed at once over
 * the product of its axes' taps in float64 (the decomposition goes axis by axis), by the same
 * ONNX rules (`jit/ops/resize_taps.ts`). An axis whose weights are all 0 or 1 (nearest) picks its
 * source, as the decomposition's gather does, so an infinity beside it stays out.
 *
 * @module
 */
import { axisTaps, resamples, resizePlan } from "../../jit/ops/resize.ts";
import type { Taps } from "../../jit/ops/resize_taps.ts";
import { sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Axis `d`'s taps at position `i`: a pick where the axis picks, else its weighted sources. */
function sources(taps: Taps[] | undefined, picks: boolean, i: number): [number[], number[]] {
  if (!taps) return [[i], [1]];
  const t = taps[i];
  if (!picks) return [t.idx, t.w];
  return [[t.idx[t.w.findIndex((w) => w !== 0)] ?? 0], [1]];
}

/** Kernels of Resize, by op name. */
export const resizeKernels: Record<string, Kernel> = {
  Resize: ({ inputs: [x], outputs, attrs }) => {
    const plan = resizePlan(attrs), shape = x.shape, v = read(x), rank = shape.length;
    const taps = shape.map((
      _,
      d,
    ) => (resamples(plan, shape, d) ? axisTaps(plan, shape, d) : undefined));
    const picks = taps.map((t) =>
      !t || plan.mode === "nearest" || t.every((p) => p.w.every((w) => w === 0 || w === 1))
    );
    const sizes = plan.sizes, out = new Float64Array(sizeOf(sizes));
    const strides = stridesOf(shape);
    const at = sizes.map(() => 0);
    for (let o = 0; o < out.length; o++) {
      if (taps.some((t, d) => t?.[at[d]].outside)) out[o] = plan.extrapolation;
      else {
        // The sum over every combination of the axes' sources.
        const per = at.map((i, d) => sources(taps[d], picks[d], i));
        let sum = 0;
        const walk = (d: number, offset: number, weight: number) => {
          if (d === rank) return void (sum += weight * v[offset]);
          const [idx, w] = per[d];
          idx.forEach((s, t) => walk(d + 1, offset + s * strides[d], weight * w[t]));
        };
        walk(0, 0, 1);
        out[o] = sum;
      }
      for (let d = rank - 1; d >= 0 && ++at[d] === sizes[d]; d--) at[d] = 0;
    }
    return [written(outputs[0].dtype, out)];
  },
};
