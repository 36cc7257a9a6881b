/**
 * GridSample maps to kiln's op (`jit/ops/grid_sample.ts`, its sampling and padding rules). RoiAlign
 * samples fixed places the regions give and MaxRoiPool takes the max of each bin's fixed pixels;
 * DeformConv and AffineGrid map onto kiln ops of their names (`jit/ops/sampling.ts`).
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import {
  asConstant,
  attrs,
  constant,
  constInts,
  constNumbers,
  type Known,
  NeedsValue,
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
 * RoiAlign (kiln's op, `jit/ops/roi.ts`): its regions must be known when the model is compiled
 * (constant, or specialised on by `OnnxModel`: they are small inputs); the coordinate mode's
 * default is the opset's.
 */
export function roiAlign(c: NodeContext): Known[] {
  const a = attrs(c);
  for (const [i, what] of [[1, "rois"], [2, "batch_indices"]] as const) {
    if (c.required(i).kind === "value") throw new NeedsValue(c, what);
  }
  return c.emit("RoiAlign", [c.required(0), asConstant(c.required(1)), asConstant(c.required(2))], {
    mode: a.string("mode", "avg"),
    output_height: a.int("output_height", 1),
    output_width: a.int("output_width", 1),
    sampling_ratio: a.int("sampling_ratio", 0),
    spatial_scale: a.float("spatial_scale", 1),
    coordinate_transformation_mode: a.string(
      "coordinate_transformation_mode",
      c.opset >= 16 ? "half_pixel" : "output_half_pixel",
    ),
  });
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
