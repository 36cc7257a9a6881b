/**
 * GridSample maps to kiln's op (`jit/ops/grid_sample.ts`, its sampling and padding rules). RoiAlign
 * samples fixed places the regions give, MaxRoiPool takes the max of each bin's fixed pixels, and
 * DeformConv samples each kernel tap at its learned offset and meets the samples with the kernel
 * in a MatMul. AffineGrid, the grid GridSample reads, is a constant base grid times θᵀ.
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

/**
 * DeformConv (2-D, opset 19): each kernel tap of each output point samples the input bilinearly
 * at its place plus its learned offset (0 outside the image, as GridSample's zeros padding with
 * aligned corners, which ONNX's reference uses), times its mask where given; the samples are the
 * im2col columns, which meet the kernel in one grouped MatMul.
 */
export function deformConv(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c);
  const x = c.required(0), weights = c.required(1), offset = c.required(2);
  const bias = c.input(3), mask = c.input(4);
  const xs = typeOf(x).shape, ws = typeOf(weights).shape, os = typeOf(offset).shape;
  const t = typeOf(x).dtype, k = (v: number) => scalar(v, t);
  const group = a.int("group", 1)!, groups = a.int("offset_group", 1)!;
  const kernel = a.ints("kernel_shape") ?? ws.slice(2);
  const strides = a.ints("strides") ?? [1, 1], dilations = a.ints("dilations") ?? [1, 1];
  const pads = a.ints("pads") ?? [0, 0, 0, 0];
  const [n, ch, h, w] = xs, [m, perGroup, kh, kw] = ws, [oh, ow] = os.slice(2);
  const taps = kh * kw, points = oh * ow, span = taps * points;
  const extent = (i: number) =>
    Math.floor(
      (xs[2 + i] + pads[i] + pads[2 + i] - (kernel[i] - 1) * dilations[i] - 1) / strides[i],
    ) +
    1;
  if (
    xs.length !== 4 || ws.length !== 4 || os.length !== 4 || kernel.join() !== `${kh},${kw}` ||
    ch !== perGroup * group || m % group !== 0 || ch % groups !== 0 ||
    os.join() !== `${n},${groups * taps * 2},${extent(0)},${extent(1)}` ||
    (mask && typeOf(mask).shape.join() !== `${n},${groups * taps},${oh},${ow}`) ||
    (bias && typeOf(bias).shape.join() !== `${m}`)
  ) {
    throw new KilnError(
      `${c.label}: DeformConv of [${xs}] with kernel [${ws}], offsets [${os}], group ${group}, ` +
        `offset_group ${groups}`,
      {
        code: "shape-mismatch",
        fix: "kiln runs 2-D DeformConv: data [N, C, H, W], kernel [M, C / group, kH, kW], " +
          "offsets [N, offset_group·kH·kW·2, H_out, W_out] and a mask of half their channels",
      },
    );
  }
  // Each tap's place at each output point (tap-major, then row-major points), before offsets.
  const baseY = new Float32Array(span), baseX = new Float32Array(span);
  for (let tap = 0; tap < taps; tap++) {
    for (let p = 0; p < points; p++) {
      const i = Math.floor(p / ow), j = p % ow;
      baseY[tap * points + p] = -pads[0] + i * strides[0] + Math.floor(tap / kw) * dilations[0];
      baseX[tap * points + p] = -pads[1] + j * strides[1] + (tap % kw) * dilations[1];
    }
  }
  const shifts = op("Reshape", [offset], { shape: [n, groups, taps, 2, points] });
  const place = (axis: number, base: Float32Array) =>
    op("Add", [
      op("Reshape", [op("Slice", [shifts], { starts: [axis], ends: [axis + 1], axes: [3] })], {
        shape: [n, groups, span],
      }),
      constant(base, [span], t),
    ]);
  const py = place(0, baseY), px = place(1, baseX);
  const y0 = op("Floor", [py]), x0 = op("Floor", [px]);
  const fy = op("Sub", [py, y0]), fx = op("Sub", [px, x0]);
  const image = op("Reshape", [x], { shape: [n, groups, ch / groups, h * w] });
  const spread = (v: Known) => op("Reshape", [v], { shape: [n, groups, 1, span] });
  /** The input at integer places `iy`, `ix` ([N, groups, span]), 0 outside, per channel. */
  const pixel = (iy: Known, ix: Known): Known => {
    const inside = (v: Known, size: number) =>
      op("And", [op("Not", [op("Less", [v, k(0)])]), op("Less", [v, k(size)])]);
    const at = op("Add", [
      op("Mul", [op("Clip", [iy], { min: 0, max: h - 1 }), k(w)]),
      op("Clip", [ix], { min: 0, max: w - 1 }),
    ]);
    const index = op("Expand", [spread(op("Cast", [at], { to: "i32" }))], {
      shape: [n, groups, ch / groups, span],
    });
    const v = op("GatherElements", [image, index], { axis: 3 });
    return op("Where", [spread(op("And", [inside(iy, h), inside(ix, w)])), v, k(0)]);
  };
  const one = (f: Known) => op("Sub", [k(1), f]);
  const y1 = op("Add", [y0, k(1)]), x1 = op("Add", [x0, k(1)]);
  const corners: [Known, Known, Known][] = [
    [y0, x0, op("Mul", [one(fy), one(fx)])],
    [y0, x1, op("Mul", [one(fy), fx])],
    [y1, x0, op("Mul", [fy, one(fx)])],
    [y1, x1, op("Mul", [fy, fx])],
  ];
  let sampled = corners
    .map(([iy, ix, weight]) => op("Mul", [pixel(iy, ix), spread(weight)]))
    .reduce((s, v) => op("Add", [s, v]));
  if (mask) {
    sampled = op("Mul", [sampled, spread(op("Reshape", [mask], { shape: [n, groups, span] }))]);
  }
  // Columns [N, group, (C / group)·taps, points] in the kernel's order (channel, then tap).
  const columns = op("Reshape", [sampled], { shape: [n, group, perGroup * taps, points] });
  const matrix = op("Reshape", [weights], { shape: [group, m / group, perGroup * taps] });
  let y = op("Reshape", [op("MatMul", [matrix, columns])], { shape: [n, m, oh, ow] });
  if (bias) y = op("Add", [y, op("Reshape", [bias], { shape: [m, 1, 1] })]);
  return [y];
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

/** Normalized coordinates of `n` points along an axis, as AffineGrid places them. */
function coordinates(n: number, alignCorners: boolean): number[] {
  return [...Array(n).keys()].map((i) =>
    alignCorners ? (n === 1 ? -1 : -1 + (2 * i) / (n - 1)) : (2 * i + 1) / n - 1
  );
}

/** AffineGrid: each output point's (x, y[, z], 1) times θᵀ, θ of [N, 2, 3] or [N, 3, 4]. */
export function affineGrid(c: NodeContext): Known[] {
  const op = opOf(c), theta = c.required(0);
  c.required(1); // a typed error when left out
  const size = constInts(c, 1, "size")!;
  const align = attrs(c).flag("align_corners", false);
  const spatial = size.length - 2, [n] = typeOf(theta).shape;
  const want = spatial === 2 ? [n, 2, 3] : [n, 3, 4];
  if ((spatial !== 2 && spatial !== 3) || typeOf(theta).shape.join() !== want.join()) {
    throw new KilnError(`${c.label}: theta [${typeOf(theta).shape}] for size [${size}]`, {
      code: "shape-mismatch",
      fix: "give size [N, C, H, W] with theta [N, 2, 3], or [N, C, D, H, W] with [N, 3, 4]",
    });
  }
  // Points in row-major order of (D,) H, W; each row x, y(, z), 1 (x along the last axis).
  const dims = size.slice(2), axes = dims.map((d) => coordinates(d, align));
  const count = dims.reduce((p, d) => p * d, 1), width = spatial + 1;
  const base = new Float32Array(count * width);
  for (let i = 0; i < count; i++) {
    let rest = i;
    for (let d = spatial - 1; d >= 0; d--) {
      base[i * width + (spatial - 1 - d)] = axes[d][rest % dims[d]];
      rest = Math.floor(rest / dims[d]);
    }
    base[i * width + spatial] = 1;
  }
  const grid = op("MatMul", [
    constant(base, [count, width], "f32"),
    op("Transpose", [theta], { perm: [0, 2, 1] }),
  ]);
  return [op("Reshape", [grid], { shape: [n, ...dims, spatial] })];
}
