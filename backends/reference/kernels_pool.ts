/**
 * Reference kernels of the pools ONNX defines through others (`jit/ops/pool_composites.ts`):
 * MaxUnpool, LpPool, GlobalLpPool and MaxPoolIndices, computed directly.
 *
 * @module
 */
import { resolveWindow } from "../../jit/ops/nn.ts";
import { lpWindow, unpoolSizes, windowOf } from "../../jit/ops/pool_composites.ts";
import type { Kernel } from "./kernel.ts";
import { forEachWindow } from "./kernels_nn.ts";
import { read, writer } from "./tensor_io.ts";

/** Kernels by op name. */
export const poolKernels: Record<string, Kernel> = {
  // Each output point reads the window that covers it, kept where its index names the point.
  MaxUnpool: ({ inputs, outputs, ctx }) => {
    const [xt, it] = inputs, [n, c, h, w] = xt.shape;
    const strides = ctx.ints("strides", ctx.ints("kernel_shape").map(() => 1));
    const pads = ctx.ints("pads", [0, 0, 0, 0]);
    const a = { kernel: ctx.ints("kernel_shape"), strides, pads };
    const given = ctx.has("output_shape") ? ctx.ints("output_shape") : undefined;
    const { natural, out: [oh, ow] } = unpoolSizes(xt.shape, a, given);
    const x = read(xt), ids = Array.from(it.data as ArrayLike<number | bigint>, Number);
    const y = writer(outputs[0].dtype, n * c * oh * ow);
    for (let plane = 0; plane < n * c; plane++) {
      for (let r = 0; r < oh; r++) {
        for (let q = 0; q < ow; q++) {
          const wr = Math.floor((r + pads[0]) / strides[0]),
            wq = Math.floor((q + pads[1]) / strides[1]);
          const at = (plane * h + wr) * w + wq;
          const inside = wr < h && wq < w;
          const hit = inside && ids[at] === plane * natural[0] * natural[1] + r * natural[1] + q;
          y.out[(plane * oh + r) * ow + q] = hit ? x[at] : 0;
        }
      }
    }
    return [y.finish()];
  },
  // (Σ over each window of |x|^p)^(1/p), padding adding nothing; 1-D as 2-D over a height of 1.
  LpPool: ({ inputs, outputs, ctx }) => {
    const xt = inputs[0], spatial = xt.shape.length - 2, p = ctx.int("p", 2);
    const [n, c] = xt.shape, [h, w] = spatial === 1 ? [1, xt.shape[2]] : xt.shape.slice(2);
    const win = windowOf(ctx, lpWindow(ctx.attrs, spatial), [h, w]);
    const [oh, ow] = win.out, x = read(xt);
    const y = writer(outputs[0].dtype, n * c * oh * ow);
    for (let plane = 0; plane < n * c; plane++) {
      forEachWindow(win, (o, rows, cols) => {
        let sum = 0;
        for (const r of rows) {
          for (const q of cols) {
            if (r >= 0 && r < h && q >= 0 && q < w) {
              sum += Math.abs(x[(plane * h + r) * w + q]) ** p;
            }
          }
        }
        y.out[plane * oh * ow + o] = sum ** (1 / p);
      });
    }
    return [y.finish()];
  },
  // The first largest tap of each window (a NaN first of all; padding reads −∞), as a flat index.
  MaxPoolIndices: ({ inputs: [xt], outputs, ctx }) => {
    const [n, c, h, w] = xt.shape;
    const win = resolveWindow(ctx, [h, w], ctx.ints("kernel_shape"));
    const columnMajor = ctx.int("storage_order", 0) === 1;
    const [oh, ow] = win.out, x = read(xt);
    const y = writer(outputs[0].dtype, n * c * oh * ow);
    for (let plane = 0; plane < n * c; plane++) {
      forEachWindow(win, (o, rows, cols) => {
        let best = -Infinity, at = [rows[0], cols[0]];
        for (const r of rows) {
          for (const q of cols) {
            const v = r >= 0 && r < h && q >= 0 && q < w ? x[(plane * h + r) * w + q] : -Infinity;
            if (!Number.isNaN(best) && (v > best || Number.isNaN(v))) [best, at] = [v, [r, q]];
          }
        }
        const within = columnMajor ? at[0] + at[1] * h : at[0] * w + at[1];
        y.out[plane * oh * ow + o] = plane * h * w + within;
      });
    }
    return [y.finish()];
  },
  GlobalLpPool: ({ inputs: [xt], outputs, ctx }) => {
    const p = ctx.int("p", 2), x = read(xt), plane = x.length / (xt.shape[0] * xt.shape[1]);
    const y = writer(outputs[0].dtype, x.length / plane);
    for (let c = 0; c < y.out.length; c++) {
      let sum = 0;
      for (let i = 0; i < plane; i++) sum += Math.abs(x[c * plane + i]) ** p;
      y.out[c] = sum ** (1 / p);
    }
    return [y.finish()];
  },
};
