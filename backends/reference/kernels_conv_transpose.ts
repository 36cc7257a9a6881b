/**
 * The reference ConvTranspose (`jit/ops/conv_transpose.ts`), computed as its definition reads:
 * every input point adds its value times the kernel into the outputs it reaches.
 *
 * @module
 */
import { sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import { col2ImGeometry, transposedExtent, transposedOf } from "../../jit/ops/conv_transpose.ts";
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Kernels by op name. */
export const convTransposeKernels: Record<string, Kernel> = {
  ConvTranspose: ({ inputs: [xt, wt, bt], outputs, ctx }) => {
    const [n, cin, ...spatial] = xt.shape, [, coutg, ...kernel] = wt.shape;
    const t = transposedOf(ctx.attrs, spatial.length, kernel);
    const out = transposedExtent(spatial, t), m = coutg * t.group, cing = cin / t.group;
    const plane = sizeOf(out), points = sizeOf(spatial), taps = sizeOf(kernel);
    const is = stridesOf(spatial), ks = stridesOf(kernel), os = stridesOf(out);
    const x = read(xt), w = read(wt), b = bt ? read(bt) : undefined;
    const y = new Float64Array(n * m * plane);
    for (let img = 0; img < n; img++) {
      for (let ci = 0; ci < cin; ci++) {
        const g = Math.floor(ci / cing);
        for (let p = 0; p < points; p++) {
          const v = x[(img * cin + ci) * points + p];
          for (let t2 = 0; t2 < taps; t2++) {
            let at = 0;
            for (let d = 0; d < spatial.length && at >= 0; d++) {
              const o = (Math.floor(p / is[d]) % spatial[d]) * t.strides[d] - t.pads[d] +
                (Math.floor(t2 / ks[d]) % kernel[d]) * t.dilations[d];
              at = o >= 0 && o < out[d] ? at + o * os[d] : -1;
            }
            if (at < 0) continue;
            for (let oc = 0; oc < coutg; oc++) {
              const ch = g * coutg + oc;
              y[(img * m + ch) * plane + at] += v * w[(ci * coutg + oc) * taps + t2];
            }
          }
        }
      }
    }
    if (b) y.forEach((_, i) => (y[i] += b[Math.floor(i / plane) % m]));
    return [written(outputs[0].dtype, y)];
  },
  // Each patch entry added at its place in the image (places outside it dropped).
  Col2Im: ({ inputs: [xt], outputs, ctx }) => {
    const g = col2ImGeometry(ctx.attrs), [n, rows, blocks] = xt.shape, x = read(xt);
    const size = g.block.reduce((p, k) => p * k, 1), channels = rows / size;
    const plane = g.image.reduce((p, d) => p * d, 1), y = new Float64Array(n * channels * plane);
    const bs = stridesOf(g.block), gs = stridesOf(g.grid), is = stridesOf(g.image);
    for (let b = 0; b < n; b++) {
      for (let r = 0; r < rows; r++) {
        const c = Math.floor(r / size), o = r % size;
        for (let l = 0; l < blocks; l++) {
          let at = 0;
          for (let d = 0; d < g.image.length && at >= 0; d++) {
            const q = (Math.floor(l / gs[d]) % g.grid[d]) * g.strides[d] - g.pads[d] +
              (Math.floor(o / bs[d]) % g.block[d]) * g.dilations[d];
            at = q >= 0 && q < g.image[d] ? at + q * is[d] : -1;
          }
          if (at >= 0) y[(b * channels + c) * plane + at] += x[(b * rows + r) * blocks + l];
        }
      }
    }
    return [written(outputs[0].dtype, y)];
  },
};
