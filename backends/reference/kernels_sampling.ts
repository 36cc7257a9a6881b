/**
 * Reference kernels of AffineGrid and DeformConv (`jit/ops/sampling.ts`) and RoiAlign
 and MaxRoiPool
 * (`jit/ops/roi.ts`), computed point by point.
 *
 * @module
 */
import { baseGrid, deformWindow } from "../../jit/ops/sampling.ts";
import { roiAttrs, roiBins, roiCorners } from "../../jit/ops/roi.ts";
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Kernels by op name. */
export const samplingKernels: Record<string, Kernel> = {
  // Each point's (x, y[, z], 1) times θᵀ.
  AffineGrid: ({ inputs: [theta], outputs, ctx }) => {
    const size = ctx.ints("size"), spatial = size.length - 2, width = spatial + 1;
    const base = baseGrid(size, ctx.int("align_corners", 0) === 1), t = read(theta);
    const count = base.length / width, out = new Float64Array(size[0] * count * spatial);
    for (let b = 0; b < size[0]; b++) {
      for (let p = 0; p < count; p++) {
        for (let r = 0; r < spatial; r++) {
          let s = 0;
          for (let j = 0; j < width; j++) {
            s += base[p * width + j] * t[(b * spatial + r) * width + j];
          }
          out[(b * count + p) * spatial + r] = s;
        }
      }
    }
    return [written(outputs[0].dtype, out)];
  },
  DeformConv: ({ inputs: [xt, wt, ot, bt, mt], outputs, ctx }) => {
    const [n, ch, h, wd] = xt.shape, [m, perGroup, kh, kw] = wt.shape, [, , oh, ow] = ot.shape;
    const win = deformWindow(ctx.attrs, [kh, kw]), taps = kh * kw;
    const x = read(xt), w = read(wt), off = read(ot), b = bt ? read(bt) : undefined;
    const mask = mt ? read(mt) : undefined, perOffset = ch / win.groups;
    /** Input channel `c` of image `img` at (y, x) bilinearly, 0 outside. */
    const sample = (img: number, c: number, y: number, xx: number) => {
      const y0 = Math.floor(y), x0 = Math.floor(xx), fy = y - y0, fx = xx - x0;
      const at = (r: number, q: number) =>
        r >= 0 && r < h && q >= 0 && q < wd ? x[((img * ch + c) * h + r) * wd + q] : 0;
      return at(y0, x0) * (1 - fy) * (1 - fx) + at(y0, x0 + 1) * (1 - fy) * fx +
        at(y0 + 1, x0) * fy * (1 - fx) + at(y0 + 1, x0 + 1) * fy * fx;
    };
    const out = new Float64Array(n * m * oh * ow);
    for (let img = 0; img < n; img++) {
      for (let oc = 0; oc < m; oc++) {
        const g = Math.floor(oc / (m / win.group));
        for (let i = 0; i < oh; i++) {
          for (let j = 0; j < ow; j++) {
            let s = b ? b[oc] : 0;
            for (let cl = 0; cl < perGroup; cl++) {
              const c = g * perGroup + cl, og = Math.floor(c / perOffset);
              for (let tap = 0; tap < taps; tap++) {
                const plane = (k: number) => ((img * 2 * win.groups * taps + k) * oh + i) * ow + j;
                const dy = off[plane(og * taps * 2 + tap * 2)];
                const dx = off[plane(og * taps * 2 + tap * 2 + 1)];
                const y = -win.pads[0] + i * win.strides[0] +
                  Math.floor(tap / kw) * win.dilations[0] + dy;
                const xx = -win.pads[1] + j * win.strides[1] + (tap % kw) * win.dilations[1] + dx;
                const scale = mask
                  ? mask[((img * win.groups + og) * taps + tap) * oh * ow + i * ow + j]
                  : 1;
                s += sample(img, c, y, xx) * scale * w[((oc * perGroup) + cl) * taps + tap];
              }
            }
            out[((img * m + oc) * oh + i) * ow + j] = s;
          }
        }
      }
    }
    return [written(outputs[0].dtype, out)];
  },
  // Each output point from its samples' corners: their weighted sum, or (max) the largest.
  RoiAlign: ({ inputs: [xt, rt, bt], outputs, ctx }) => {
    const [, ch, h, w] = xt.shape, a = roiAttrs(ctx.attrs), x = read(xt), plane = h * w;
    const points = roiCorners(Array.from(read(rt)), Array.from(read(bt)), [h, w], a);
    const per = a.oh * a.ow, r = points.length / per, out = new Float64Array(r * ch * per);
    points.forEach((corners, p) => {
      const roi = Math.floor(p / per), at = p % per;
      for (let c = 0; c < ch; c++) {
        const values = corners.map(([i, weight]) =>
          weight * x[(Math.floor(i / plane) * ch + c) * plane + (i % plane)]
        );
        out[(roi * ch + c) * per + at] = a.mode === "avg"
          ? values.reduce((s, v) => s + v, 0)
          : Math.max(...values);
      }
    });
    return [written(outputs[0].dtype, out)];
  },
  // Each bin's largest pixel, 0 for an empty bin.
  MaxRoiPool: ({ inputs: [xt, rt], outputs, ctx }) => {
    const [n, ch, h, w] = xt.shape, [ph, pw] = ctx.ints("pooled_shape"), x = read(xt);
    const { bins, batches } = roiBins(
      Array.from(read(rt)),
      [n, h, w],
      [ph, pw],
      ctx.float("spatial_scale", 1),
    );
    const per = ph * pw, out = new Float64Array(batches.length * ch * per);
    bins.forEach((pixels, k) => {
      const roi = Math.floor(k / per), at = k % per;
      for (let c = 0; c < ch; c++) {
        const base = (batches[roi] * ch + c) * h * w;
        out[(roi * ch + c) * per + at] = pixels.length
          ? Math.max(...pixels.map((p) => x[base + p]))
          : 0;
      }
    });
    return [written(outputs[0].dtype, out)];
  },
};
