/**
 * GridSample maps to kiln's op (`jit/ops/grid_sample.ts`, its sampling and padding rules). RoiAlign
 * samples fixed places the regions give and MaxRoiPool takes the max of each bin's fixed pixels;
 * DeformConv and AffineGrid map onto kiln ops of their names (`jit/ops/sampling.ts`).
 *
 * @module
 */
import { checkBudget } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import {
  attrs,
  constant,
  constInts,
  constNumbers,
  type Known,
  type NodeContext,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** ONNX's mode names (opset 20 renamed bilinear and bicubic) as kiln's GridSample takes them. */
const GRID_MODE_NAMES: Record<string, string> = { linear: "bilinear", cubic: "bicubic" };

/** Converts a GridSample node: kiln's op (`jit/ops/grid_sample.ts`), the grid cast to the data's type. */
export function gridSample(c: NodeContext): Known[] {
  const op = opOf(c);
  const x = c.required(0), given = c.required(1), t = typeOf(x).dtype;
  // Coordinates are computed in the data's float type (the grid's may differ).
  const grid = typeOf(given).dtype === t ? given : op("Cast", [given], { to: t });
  const a = attrs(c);
  const mode = a.string("mode", "bilinear")!;
  return [op("GridSample", [x, grid], {
    mode: GRID_MODE_NAMES[mode] ?? mode,
    padding_mode: a.string("padding_mode", "zeros")!,
    align_corners: a.flag("align_corners", false) ? 1 : 0,
  })];
}

/**
 * RoiAlign with its regions given at import (constant, or specialised on by `OnnxModel`: they
 * are small inputs): each output point's bilinear samples are fixed (input position, weight)
 * pairs, computed here as ONNX Runtime computes them, so the op is one gather of the
 * channels-last input and a weighted sum (avg) or max over the samples' weighted corners.
 */
export function roiAlign(c: NodeContext): Known[] {
  const op = opOf(c);
  const a = attrs(c);
  const x = c.required(0);
  const rois = constNumbers(c, 1, "rois") ?? [], batch = constInts(c, 2, "batch_indices") ?? [];
  const [n, ch, h, w] = typeOf(x).shape;
  const oh = a.int("output_height", 1)!, ow = a.int("output_width", 1)!;
  const ratio = a.int("sampling_ratio", 0)!, scale = a.float("spatial_scale", 1)!;
  const mode = a.string("mode", "avg")!;
  const half = a.string(
    "coordinate_transformation_mode",
    c.opset >= 16 ? "half_pixel" : "output_half_pixel",
  ) ===
    "half_pixel";
  const r = batch.length;
  if (typeOf(x).shape.length !== 4 || rois.length !== 4 * r || (mode !== "avg" && mode !== "max")) {
    throw new KilnError(
      `${c.label}: RoiAlign of [${typeOf(x).shape}] with ${rois.length / 4} rois`,
      {
        code: "bad-input",
        fix: "pass X [N, C, H, W], rois [R, 4], batch_indices [R] and mode avg or max",
      },
    );
  }
  if (batch.some((b) => !(b >= 0 && b < n))) {
    throw new KilnError(`${c.label}: batch index out of [0, ${n})`, {
      code: "out-of-range",
      fix: "pass batch indices of the input's batch",
    });
  }
  // As ONNX Runtime: an output of no points, or a negative sampling ratio, is refused (a
  // negative output_height made a [R, C, -6, W] output).
  if (!(oh >= 1 && ow >= 1 && ratio >= 0 && Number.isFinite(scale))) {
    throw new KilnError(
      `${c.label}: RoiAlign with output ${oh}×${ow}, sampling_ratio ${ratio}, spatial_scale ${scale}`,
      {
        code: "bad-attribute",
        fix: "give output_height and output_width of 1 or more, a sampling_ratio of 0 (adaptive) " +
          "or more, and a finite spatial_scale",
      },
    );
  }
  const offset = half ? 0.5 : 0;
  // Region i: its corner, size and sampling grid, as ONNX Runtime computes them.
  const regions = [...Array(r).keys()].map((i) => {
    const [x1, y1, x2, y2] = rois.slice(4 * i, 4 * i + 4).map((v) => v * scale - offset);
    const rh = half ? y2 - y1 : Math.max(y2 - y1, 1), rw = half ? x2 - x1 : Math.max(x2 - x1, 1);
    const gh = ratio > 0 ? ratio : Math.ceil(rh / oh), gw = ratio > 0 ? ratio : Math.ceil(rw / ow);
    return { x1, y1, rh, rw, gh, gw };
  });
  // Every output point's samples are listed here: bounded before the loops (a huge output size
  // or sampling ratio would run for hours and exhaust the heap).
  const samples = regions.map(({ gh, gw }) => Number.isFinite(gh * gw) ? Math.max(gh * gw, 0) : 0);
  checkBudget([r, oh, ow, Math.max(1, ...samples) * 4], "f32", c.label);
  // Per output point (roi, ph, pw): its samples' corners as (flat index into [N·H·W], weight).
  const points: [number, number][][] = [];
  for (let i = 0; i < r; i++) {
    const { x1, y1, rh, rw, gh, gw } = regions[i];
    const bh = rh / oh, bw = rw / ow;
    const count = Math.max(gh * gw, 1);
    for (let ph = 0; ph < oh; ph++) {
      for (let pw = 0; pw < ow; pw++) {
        const corners: [number, number][] = [];
        for (let iy = 0; iy < gh; iy++) {
          for (let ix = 0; ix < gw; ix++) {
            let yy = y1 + ph * bh + ((iy + 0.5) * bh) / gh;
            let xx = x1 + pw * bw + ((ix + 0.5) * bw) / gw;
            const base = batch[i] * h * w;
            if (yy < -1 || yy > h || xx < -1 || xx > w) {
              for (let k = 0; k < 4; k++) corners.push([base, 0]);
              continue;
            }
            yy = Math.max(yy, 0);
            xx = Math.max(xx, 0);
            let yl = Math.floor(yy), xl = Math.floor(xx), yh = yl + 1, xh = xl + 1;
            if (yl >= h - 1) yh = yl = h - 1, yy = yl;
            if (xl >= w - 1) xh = xl = w - 1, xx = xl;
            const ly = yy - yl, lx = xx - xl, hy = 1 - ly, hx = 1 - lx;
            const scaleBy = mode === "avg" ? 1 / count : 1;
            corners.push(
              [base + yl * w + xl, hy * hx * scaleBy],
              [base + yl * w + xh, hy * lx * scaleBy],
              [base + yh * w + xl, ly * hx * scaleBy],
              [base + yh * w + xh, ly * lx * scaleBy],
            );
          }
        }
        points.push(corners);
      }
    }
  }
  const k = Math.max(1, ...points.map((p) => p.length));
  const index: number[] = [], weight: number[] = [], pad: number[] = [];
  for (const p of points) {
    for (let j = 0; j < k; j++) {
      index.push(p[j]?.[0] ?? 0);
      weight.push(p[j]?.[1] ?? 0);
      pad.push(p[j] ? 0 : -Infinity);
    }
  }
  // [N, C, H, W] → [N·H·W, C]: one gather reads every channel of a sample.
  const rows = op("Reshape", [op("Transpose", [x], { perm: [0, 2, 3, 1] })], {
    shape: [n * h * w, ch],
  });
  const picked = op("Gather", [rows, constant(index, [r, oh, ow, k], "i32")], { axis: 0 });
  const t = typeOf(x).dtype;
  let v = op("Mul", [picked, constant(weight, [r, oh, ow, k, 1], t)]);
  if (mode === "max") v = op("Add", [v, constant(pad, [r, oh, ow, k, 1], t)]);
  const y = op(mode === "avg" ? "ReduceSum" : "ReduceMax", [v], { axes: [3], keepdims: 0 });
  return [op("Transpose", [y], { perm: [0, 3, 1, 2] })];
}

/** DeformConv (2-D, opset 19): kiln's op (`jit/ops/sampling.ts`), its attributes mapped. */
export function deformConv(c: NodeContext): Known[] {
  const a = attrs(c);
  return c.emit("DeformConv", c.inputs(), {
    group: a.int("group", 1),
    offset_group: a.int("offset_group", 1),
    kernel_shape: a.ints("kernel_shape"),
    strides: a.ints("strides"),
    dilations: a.ints("dilations"),
    pads: a.ints("pads"),
  });
}

/**
 * MaxRoiPool with its regions given at import (constant, or specialised on by `OnnxModel`): each
 * bin's pixels are fixed, found as ONNX Runtime finds them (the region's corners rounded after
 * `spatial_scale`, bins of its size ÷ the pooled shape, floored and ceiled), so each bin is a max
 * over gathered pixels, padded to the largest bin with −∞; an empty bin is 0.
 */
export function maxRoiPool(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0);
  c.required(1); // a typed error when left out
  const rois = constNumbers(c, 1, "rois")!, [n, ch, h, w] = typeOf(x).shape;
  const [ph, pw] = a.ints("pooled_shape") ?? [], scale = a.float("spatial_scale", 1)!;
  const r = rois.length / 5, t = typeOf(x).dtype;
  if (typeOf(x).shape.length !== 4 || !Number.isInteger(r) || !(ph > 0) || !(pw > 0)) {
    throw new KilnError(
      `${c.label}: MaxRoiPool of [${typeOf(x).shape}] with ${rois.length} roi values`,
      {
        code: "bad-input",
        fix: "pass X [N, C, H, W], rois [R, 5] (batch, x1, y1, x2, y2) and a pooled_shape",
      },
    );
  }
  const bins: number[][] = [], batches: number[] = [];
  for (let i = 0; i < r; i++) {
    const [b, x1, y1, x2, y2] = rois.slice(5 * i, 5 * i + 5);
    if (!(b >= 0 && b < n)) {
      throw new KilnError(`${c.label}: roi ${i}'s batch ${b} outside [0, ${n})`, {
        code: "out-of-range",
        fix: "give each roi the batch index of an input image",
      });
    }
    batches.push(b);
    const [sw, sh, ew, eh] = [x1, y1, x2, y2].map((v) => Math.round(v * scale));
    const bh = Math.max(eh - sh + 1, 1) / ph, bw = Math.max(ew - sw + 1, 1) / pw;
    const clamp = (v: number, size: number) => Math.min(Math.max(v, 0), size);
    for (let py = 0; py < ph; py++) {
      for (let px = 0; px < pw; px++) {
        const [hs, he] = [
          clamp(Math.floor(py * bh) + sh, h),
          clamp(Math.ceil((py + 1) * bh) + sh, h),
        ];
        const [ws, we] = [
          clamp(Math.floor(px * bw) + sw, w),
          clamp(Math.ceil((px + 1) * bw) + sw, w),
        ];
        const pixels: number[] = [];
        for (let yy = hs; yy < he; yy++) for (let xx = ws; xx < we; xx++) pixels.push(yy * w + xx);
        bins.push(pixels);
      }
    }
  }
  // Index h·w is the −∞ column appended to every image: padding, and the whole of an empty bin.
  const most = Math.max(1, ...bins.map((p) => p.length)), per = ph * pw * most;
  const index = new Array(r * per).fill(h * w);
  bins.forEach((p, k) => p.forEach((v, j) => (index[k * most + j] = v)));
  const images = op("Gather", [x, constant(batches, [r], "i32")], { axis: 0 });
  const flat = op("Concat", [
    op("Reshape", [images], { shape: [r, ch, h * w] }),
    op("Expand", [scalar(-Infinity, t)], { shape: [r, ch, 1] }),
  ], { axis: 2 });
  const spread = op("Expand", [constant(index, [r, 1, per], "i32")], { shape: [r, ch, per] });
  const taken = op("Reshape", [op("GatherElements", [flat, spread], { axis: 2 })], {
    shape: [r, ch, ph * pw, most],
  });
  const max = op("ReduceMax", [taken], { axes: [3], keepdims: 0 });
  const empty = constant(bins.map((p) => (p.length ? 0 : 1)), [r, 1, ph * pw], "bool");
  return [op("Reshape", [op("Where", [empty, scalar(0, t), max])], { shape: [r, ch, ph, pw] })];
}

/** AffineGrid: kiln's op (`jit/ops/sampling.ts`), the output size as an attribute. */
export function affineGrid(c: NodeContext): Known[] {
  c.required(1); // a typed error when left out
  return c.emit("AffineGrid", [c.required(0)], {
    size: constInts(c, 1, "size"),
    align_corners: attrs(c).flag("align_corners", false) ? 1 : 0,
  });
}
