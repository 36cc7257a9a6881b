/**
 * Reference kernels of the Fourier transforms (`jit/ops/spectral.ts`): each bin summed directly
 * over the signal's points in float64, e^(∓2πi·jk/L) from `Math.cos` and `Math.sin`.
 *
 * @module
 */
import { binCount } from "../../jit/ops/spectral.ts";
import { sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/**
 * The transform of one signal: `points(j)` gives point j as [re, im]; bins k of `length` points
 * written by `put(k, re, im)`.
 */
function transformLine(
  points: (j: number) => [number, number],
  count: number,
  { length, bins, inverse }: { length: number; bins: number; inverse: boolean },
  put: (k: number, re: number, im: number) => void,
): void {
  const sign = inverse ? 1 : -1, scale = inverse ? 1 / length : 1;
  for (let k = 0; k < bins; k++) {
    let re = 0, im = 0;
    for (let j = 0; j < Math.min(count, length); j++) {
      const [a, b] = points(j), t = (2 * Math.PI * ((j * k) % length)) / length;
      const [c, s] = [Math.cos(t), sign * Math.sin(t)];
      re += a * c - b * s;
      im += a * s + b * c;
    }
    put(k, re * scale, im * scale);
  }
}

/** Kernels of the Fourier transforms, by op name. */
export const spectralKernels: Record<string, Kernel> = {
  DFT: ({ inputs: [x], outputs, ctx }) => {
    const shape = x.shape, rank = shape.length, axis = ctx.int("axis"), v = read(x);
    const length = ctx.int("length"), inverse = ctx.int("inverse", 0) === 1;
    const bins = binCount(length, ctx.int("onesided", 0) === 1);
    const outShape = [...shape];
    outShape[axis] = bins;
    outShape[rank - 1] = 2;
    const [from, to] = [stridesOf(shape), stridesOf(outShape)];
    const out = new Float64Array(sizeOf(outShape));
    // Every line along `axis`: the other axes' coordinates (the last one 0).
    const at = shape.map(() => 0), lines = out.length / (bins * 2);
    for (let line = 0; line < lines; line++) {
      const base = at.reduce((s, c, d) => s + c * from[d], 0);
      const outBase = at.reduce((s, c, d) => s + c * to[d], 0);
      const points = (j: number): [number, number] => {
        const i = base + j * from[axis];
        return [v[i], shape[rank - 1] === 2 ? v[i + 1] : 0];
      };
      transformLine(points, shape[axis], { length, bins, inverse }, (k, re, im) => {
        out[outBase + k * to[axis]] = re;
        out[outBase + k * to[axis] + 1] = im;
      });
      for (let d = rank - 2; d >= 0; d--) {
        if (d === axis) continue;
        if (++at[d] < shape[d]) break;
        at[d] = 0;
      }
    }
    return [written(outputs[0].dtype, out)];
  },
  STFT: ({ inputs: [x, window], outputs, ctx }) => {
    const [batch, , channels] = x.shape, v = read(x), w = window && read(window);
    const step = ctx.int("step"), frame = ctx.int("frame");
    const [, frames, bins] = outputs[0].shape;
    const out = new Float64Array(batch * frames * bins * 2);
    for (let b = 0; b < batch; b++) {
      for (let f = 0; f < frames; f++) {
        const points = (j: number): [number, number] => {
          const i = (b * x.shape[1] + f * step + j) * channels, scale = w ? w[j] : 1;
          return [v[i] * scale, channels === 2 ? v[i + 1] * scale : 0];
        };
        const at = ((b * frames + f) * bins) * 2;
        transformLine(points, frame, { length: frame, bins, inverse: false }, (k, re, im) => {
          out[at + 2 * k] = re;
          out[at + 2 * k + 1] = im;
        });
      }
    }
    return [written(outputs[0].dtype, out)];
  },
};
