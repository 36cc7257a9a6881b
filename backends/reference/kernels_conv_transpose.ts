/**
 * The reference ConvTranspose (`jit/ops/conv_transpose.ts`), computed as its definition reads:
 * every input point adds its value times the kernel into the outputs it reaches.
 *
 * @module
 */
import { sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import { transposedExtent, transposedOf } from "../../jit/ops/conv_transpose.ts";
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
};
