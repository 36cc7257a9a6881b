/**
 * GridSample maps to kiln's op (`jit/ops/grid_sample.ts`, its sampling and padding rules). RoiAlign
 * samples fixed places the regions give and MaxRoiPool takes the max of each bin's fixed pixels;
 * DeformConv and AffineGrid map onto kiln ops of their names (`jit/ops/sampling.ts`).
 *
 * @module
 */
import {
  asConstant,
  attrs,
  constInts,
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

/** MaxRoiPool (kiln's op, `jit/ops/roi.ts`): its regions must be known when the model is compiled. */
export function maxRoiPool(c: NodeContext): Known[] {
  const a = attrs(c), rois = c.required(1);
  if (rois.kind === "value") throw new NeedsValue(c, "rois");
  return c.emit("MaxRoiPool", [c.required(0), asConstant(rois)], {
    pooled_shape: a.ints("pooled_shape"),
    spatial_scale: a.float("spatial_scale", 1),
  });
}

/** AffineGrid: kiln's op (`jit/ops/sampling.ts`), the output size as an attribute. */
export function affineGrid(c: NodeContext): Known[] {
  c.required(1); // a typed error when left out
  return c.emit("AffineGrid", [c.required(0)], {
    size: constInts(c, 1, "size"),
    align_corners: attrs(c).flag("align_corners", false) ? 1 : 0,
  });
}
