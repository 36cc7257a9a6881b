/**
 * The reference kernel of GridSample (`jit/ops/grid_sample.ts`): every output point computed on
 * its own in float64, from its grid coordinates through the op's rules (denormalization, the
 * padding mode's clamp or reflection, the taps and their weights), as ONNX's reference computes.
 *
 * @module
 */
import type { Kernel } from "./kernel.ts";
import { roundHalfEven } from "./scalar_math.ts";
import { read, written } from "./tensor_io.ts";

/** Keys' cubic convolution weights (a = −0.75) of the 4 taps around fraction `t`. */
function cubicWeights(t: number): number[] {
  const a = -0.75;
  const near = (x: number) => ((a + 2) * x - (a + 3)) * x * x + 1;
  const far = (x: number) => ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return [far(t + 1), near(t), near(1 - t), far(2 - t)];
}

/** Reflects `v` into [l, u] by its nearer border, as many times as it takes. */
function reflect(v: number, l: number, u: number): number {
  const range = u - l;
  if (range <= 0) return 0;
  if (v >= l && v <= u) return v;
  const below = v < l, d = below ? l - v : v - u;
  const times = Math.floor(d / range), r = d - times * range, even = times % 2 === 0;
  return below === even ? l + r : u - r;
}

/** The sampling rules of one GridSample node over an axis of `size` pixels. */
function axisRules(mode: string, padding: string, corners: boolean, size: number) {
  const lo = corners ? 0 : -0.5, hi = corners ? size - 1 : size - 0.5;
  const clip = (v: number) => Math.min(Math.max(v, 0), size - 1);
  return {
    /** The pixel coordinate of normalized `g`. */
    place(g: number): number {
      let v = corners ? (g + 1) * (size - 1) / 2 : ((g + 1) * size - 1) / 2;
      if (mode === "nearest") v = roundHalfEven(v);
      if (padding === "border") v = clip(v);
      if (padding === "reflection") v = reflect(v, lo, hi);
      return v;
    },
    /** The pixel a tap at integer `i` reads, or −1 for none (zeros padding, outside). */
    tap(i: number): number {
      if (padding === "border") return clip(i);
      if (padding === "reflection") return clip(Math.floor(reflect(i, lo, hi)));
      return i >= 0 && i < size ? i : -1;
    },
  };
}

/** Kernels of GridSample, by op name. */
export const gridSampleKernels: Record<string, Kernel> = {
  GridSample: ({ inputs: [x, grid], outputs, ctx }) => {
    const v = read(x), g = read(grid), [n, ch, h, w] = x.shape, [, ho, wo] = grid.shape;
    const mode = ctx.choice("mode", ["bilinear", "nearest", "bicubic"]);
    const padding = ctx.choice("padding_mode", ["zeros", "border", "reflection"]);
    const corners = ctx.int("align_corners", 0) === 1;
    const ax = axisRules(mode, padding, corners, w), ay = axisRules(mode, padding, corners, h);
    const offsets = mode === "bicubic" ? [-1, 0, 1, 2] : mode === "bilinear" ? [0, 1] : [0];
    const out = new Float64Array(n * ch * ho * wo);
    for (let b = 0; b < n; b++) {
      for (let p = 0; p < ho * wo; p++) {
        const px = ax.place(g[(b * ho * wo + p) * 2]), py = ay.place(g[(b * ho * wo + p) * 2 + 1]);
        const [x0, y0] = mode === "nearest" ? [px, py] : [Math.floor(px), Math.floor(py)];
        const [fx, fy] = [px - x0, py - y0];
        const weights = (f: number) =>
          mode === "bicubic" ? cubicWeights(f) : mode === "bilinear" ? [1 - f, f] : [1];
        const [wx, wy] = [weights(fx), weights(fy)];
        for (let c = 0; c < ch; c++) {
          let sum = 0;
          offsets.forEach((oy, j) => {
            offsets.forEach((ox, i) => {
              const tx = ax.tap(x0 + ox), ty = ay.tap(y0 + oy);
              const pixel = tx < 0 || ty < 0 ? 0 : v[((b * ch + c) * h + ty) * w + tx];
              sum += pixel * (wx[i] * wy[j]);
            });
          });
          out[(b * ch + c) * ho * wo + p] = sum;
        }
      }
    }
    return [written(outputs[0].dtype, out)];
  },
};
