/**
 * The region ops, with their regions known when the graph is decomposed (constants, or small
 * model inputs `OnnxModel` specialises on): `RoiAlign` samples fixed places the regions give (each
 * output point's bilinear samples are (input position, weight) pairs, computed as ONNX Runtime
 * computes them), so it is one gather of the channels-last input and a weighted sum (avg) or a
 * max over the samples' weighted corners (max, ONNX Runtime's); `MaxRoiPool` takes the max of each
 * bin's fixed pixels (the region's corners rounded after `spatial_scale`, bins of its size ÷ the
 * pooled shape, floored and ceiled), padded to the largest bin with −∞; an empty bin is 0.
 *
 * @module
 */
import { formatShape } from "../ir/shape.ts";
import { checkBudget } from "../runtime/budget.ts";
import { KilnError } from "../support/errors.ts";
import { FLOATS, INTEGERS } from "./elementwise.ts";
import { type Attrs, constantTensor, defineOps, type EmitRef, type OpDef } from "./registry.ts";

/** RoiAlign's attributes, defaults filled (the coordinate mode as ONNX's opset 16 default). */
export function roiAttrs(a: Attrs): {
  mode: string;
  oh: number;
  ow: number;
  ratio: number;
  scale: number;
  half: boolean;
} {
  return {
    mode: (a.mode as string | undefined) ?? "avg",
    oh: (a.output_height as number | undefined) ?? 1,
    ow: (a.output_width as number | undefined) ?? 1,
    ratio: (a.sampling_ratio as number | undefined) ?? 0,
    scale: (a.spatial_scale as number | undefined) ?? 1,
    half: (a.coordinate_transformation_mode ?? "half_pixel") === "half_pixel",
  };
}

/** A sample's corner: its flat index into [N·H·W] and its weight. */
export type Corner = [index: number, weight: number];

/**
 * Every output point's samples' corners ([R·OH·OW] lists, row-major), as ONNX Runtime computes
 * them for regions `rois` ([R, 4]) of images `batch` of an input [N, C, H, W].
 */
export function roiCorners(
  rois: readonly number[],
  batch: readonly number[],
  [h, w]: readonly number[],
  a: ReturnType<typeof roiAttrs>,
): Corner[][] {
  const { oh, ow, ratio, scale, half, mode } = a, offset = half ? 0.5 : 0;
  const regions = batch.map((_, i) => {
    const [x1, y1, x2, y2] = rois.slice(4 * i, 4 * i + 4).map((v) => v * scale - offset);
    const rh = half ? y2 - y1 : Math.max(y2 - y1, 1), rw = half ? x2 - x1 : Math.max(x2 - x1, 1);
    const gh = ratio > 0 ? ratio : Math.ceil(rh / oh), gw = ratio > 0 ? ratio : Math.ceil(rw / ow);
    return { x1, y1, rh, rw, gh, gw };
  });
  // Bounded before the loops: a huge output or sampling ratio would run for hours.
  const samples = regions.map(({ gh, gw }) => Number.isFinite(gh * gw) ? Math.max(gh * gw, 0) : 0);
  checkBudget([batch.length, oh, ow, Math.max(1, ...samples) * 4], "f32", "RoiAlign's samples");
  const points: Corner[][] = [];
  regions.forEach(({ x1, y1, rh, rw, gh, gw }, i) => {
    const bh = rh / oh, bw = rw / ow, count = Math.max(gh * gw, 1), base = batch[i] * h * w;
    const scaleBy = mode === "avg" ? 1 / count : 1;
    for (let ph = 0; ph < oh; ph++) {
      for (let pw = 0; pw < ow; pw++) {
        const corners: Corner[] = [];
        for (let iy = 0; iy < gh; iy++) {
          for (let ix = 0; ix < gw; ix++) {
            const yy = y1 + ph * bh + ((iy + 0.5) * bh) / gh;
            const xx = x1 + pw * bw + ((ix + 0.5) * bw) / gw;
            corners.push(...bilinear(yy, xx, h, w, base, scaleBy));
          }
        }
        points.push(corners);
      }
    }
  });
  return points;
}

/** The four corners of a sample at (yy, xx), ONNX Runtime's clamping; weights 0 far outside. */
function bilinear(
  y: number,
  x: number,
  h: number,
  w: number,
  base: number,
  scaleBy: number,
): Corner[] {
  if (y < -1 || y > h || x < -1 || x > w) return [[base, 0], [base, 0], [base, 0], [base, 0]];
  let yy = Math.max(y, 0), xx = Math.max(x, 0);
  let yl = Math.floor(yy), xl = Math.floor(xx), yh = yl + 1, xh = xl + 1;
  if (yl >= h - 1) yh = yl = h - 1, yy = yl;
  if (xl >= w - 1) xh = xl = w - 1, xx = xl;
  const ly = yy - yl, lx = xx - xl, hy = 1 - ly, hx = 1 - lx;
  return [
    [base + yl * w + xl, hy * hx * scaleBy],
    [base + yl * w + xh, hy * lx * scaleBy],
    [base + yh * w + xl, ly * hx * scaleBy],
    [base + yh * w + xh, ly * lx * scaleBy],
  ];
}

/** The typed error of a region op whose regions are computed at run time. */
function unknownRegions(op: string): KilnError {
  return new KilnError(`${op} needs its regions when the graph is compiled`, {
    code: "unsupported",
    fix:
      "give the regions (and batch indices) as constants, or as small model inputs OnnxModel specialises on",
  });
}

const roiAlign: OpDef = {
  name: "RoiAlign",
  category: "composite",
  arity: [3, 3],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), xs = ctx.input(0).shape;
    const [rs, bs] = [ctx.input(1).shape, ctx.input(2).shape];
    ctx.requireDType(2, INTEGERS);
    const a = roiAttrs(ctx.attrs);
    ctx.choice("mode", ["avg", "max"]);
    ctx.choice("coordinate_transformation_mode", ["half_pixel", "output_half_pixel"]);
    if (xs.length !== 4 || rs.join() !== `${rs[0]},4` || bs.join() !== `${rs[0]}`) {
      ctx.fail(
        `RoiAlign of ${formatShape(xs)} with rois ${formatShape(rs)}, batch indices ${
          formatShape(bs)
        }`,
        "pass X [N, C, H, W], rois [R, 4], batch_indices [R] and mode avg or max",
        "bad-input",
      );
    }
    // As ONNX Runtime: an output of no points, or a negative sampling ratio, is refused.
    if (!(a.oh >= 1 && a.ow >= 1 && a.ratio >= 0 && Number.isFinite(a.scale))) {
      ctx.fail(
        `RoiAlign with output ${a.oh}×${a.ow}, sampling_ratio ${a.ratio}, spatial_scale ${a.scale}`,
        "give output_height and output_width of 1 or more, a sampling_ratio of 0 (adaptive) or more, and a finite spatial_scale",
        "bad-attribute",
      );
    }
    return [{ shape: [rs[0], xs[1], a.oh, a.ow], dtype }];
  },
  decompose: (e, [x, roisRef, batchRef], attrs) => {
    const [rois, batch] = [roisRef, batchRef].map((r) => {
      const k = e.constantOf(r);
      return k && Array.from(k);
    });
    if (!rois || !batch) throw unknownRegions("RoiAlign");
    const [n, ch, h, w] = e.typeOf(x).shape, a = roiAttrs(attrs);
    if (batch.some((b) => !(b >= 0 && b < n))) {
      throw new KilnError(`RoiAlign: a batch index out of [0, ${n})`, {
        code: "out-of-range",
        fix: "pass batch indices of the input's batch",
      });
    }
    const points = roiCorners(rois, batch, [h, w], a), r = batch.length;
    const k = Math.max(1, ...points.map((p) => p.length));
    const table = (f: (c: Corner | undefined) => number) =>
      points.flatMap((p) => [...Array(k).keys()].map((j) => f(p[j])));
    const t = e.typeOf(x).dtype;
    const constant = (values: number[], shape: number[], dtype: "i32" | "f32") =>
      constantTensor(e, values, shape, dtype);
    const typed = (k2: EmitRef) => (t === "f32" ? k2 : e.op("Cast", [k2], { to: t }));
    // [N, C, H, W] → [N·H·W, C]: one gather reads every channel of a sample.
    const rows = e.op("Reshape", [e.op("Transpose", [x], { perm: [0, 2, 3, 1] })], {
      shape: [n * h * w, ch],
    });
    const picked = e.op("Gather", [
      rows,
      constant(table((c) => c?.[0] ?? 0), [r, a.oh, a.ow, k], "i32"),
    ], { axis: 0 });
    let v = e.op("Mul", [
      picked,
      typed(constant(table((c) => c?.[1] ?? 0), [r, a.oh, a.ow, k, 1], "f32")),
    ]);
    if (a.mode === "max") {
      v = e.op("Add", [
        v,
        typed(constant(table((c) => (c ? 0 : -Infinity)), [r, a.oh, a.ow, k, 1], "f32")),
      ]);
    }
    const y = e.op(a.mode === "avg" ? "ReduceSum" : "ReduceMax", [v], { axes: [3], keepdims: 0 });
    return [e.op("Transpose", [y], { perm: [0, 3, 1, 2] })];
  },
};

/**
 * MaxRoiPool's bins: for each region (rows of batch, x1, y1, x2, y2 in `rois`) and pooled
 * point, its pixels (flat indices into an [H, W] image), as ONNX Runtime finds them; and each
 * region's image.
 */
export function roiBins(
  rois: readonly number[],
  [n, h, w]: readonly number[],
  [ph, pw]: readonly number[],
  scale: number,
): { bins: number[][]; batches: number[] } {
  const bins: number[][] = [], batches: number[] = [];
  for (let i = 0; i < rois.length / 5; i++) {
    const [b, x1, y1, x2, y2] = rois.slice(5 * i, 5 * i + 5);
    if (!(b >= 0 && b < n)) {
      throw new KilnError(`MaxRoiPool: roi ${i}'s batch ${b} outside [0, ${n})`, {
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
        const hs = clamp(Math.floor(py * bh) + sh, h), he = clamp(Math.ceil((py + 1) * bh) + sh, h);
        const ws = clamp(Math.floor(px * bw) + sw, w), we = clamp(Math.ceil((px + 1) * bw) + sw, w);
        const pixels: number[] = [];
        for (let yy = hs; yy < he; yy++) for (let xx = ws; xx < we; xx++) pixels.push(yy * w + xx);
        bins.push(pixels);
      }
    }
  }
  return { bins, batches };
}

const maxRoiPool: OpDef = {
  name: "MaxRoiPool",
  category: "composite",
  arity: [2, 2],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), xs = ctx.input(0).shape, rs = ctx.input(1).shape;
    const [ph, pw] = ctx.ints("pooled_shape");
    ctx.float("spatial_scale", 1);
    if (xs.length !== 4 || rs.join() !== `${rs[0]},5` || !(ph > 0) || !(pw > 0)) {
      ctx.fail(
        `MaxRoiPool of ${formatShape(xs)} with rois ${formatShape(rs)}`,
        "pass X [N, C, H, W], rois [R, 5] (batch, x1, y1, x2, y2) and a pooled_shape",
        "bad-input",
      );
    }
    return [{ shape: [rs[0], xs[1], ph, pw], dtype }];
  },
  // Each bin a max over gathered pixels, padded to the largest bin with −∞ (index h·w, a column
  // appended to every image); an empty bin 0.
  decompose: (e, [x, roisRef], a) => {
    const known = e.constantOf(roisRef), rois = known && Array.from(known);
    if (!rois) throw unknownRegions("MaxRoiPool");
    const [n, ch, h, w] = e.typeOf(x).shape, [ph, pw] = a.pooled_shape as number[];
    const { bins, batches } = roiBins(
      rois,
      [n, h, w],
      [ph, pw],
      (a.spatial_scale as number | undefined) ?? 1,
    );
    const r = batches.length, t = e.typeOf(x).dtype;
    const most = Math.max(1, ...bins.map((p) => p.length)), per = ph * pw * most;
    const index = new Array(r * per).fill(h * w);
    bins.forEach((p, k) => p.forEach((v, j) => (index[k * most + j] = v)));
    const ints = (values: number[], shape: number[], dtype: "i32" | "bool" = "i32") =>
      constantTensor(e, values, shape, dtype);
    const images = e.op("Gather", [x, ints(batches, [r])], { axis: 0 });
    const flat = e.op("Concat", [
      e.op("Reshape", [images], { shape: [r, ch, h * w] }),
      e.op("Expand", [e.scalar(-Infinity, t)], { shape: [r, ch, 1] }),
    ], { axis: 2 });
    const spread = e.op("Expand", [ints(index, [r, 1, per])], { shape: [r, ch, per] });
    const taken = e.op("Reshape", [e.op("GatherElements", [flat, spread], { axis: 2 })], {
      shape: [r, ch, ph * pw, most],
    });
    const max = e.op("ReduceMax", [taken], { axes: [3], keepdims: 0 });
    const empty = ints(bins.map((p) => (p.length ? 0 : 1)), [r, 1, ph * pw], "bool");
    return [
      e.op("Reshape", [e.op("Where", [empty, e.scalar(0, t), max])], { shape: [r, ch, ph, pw] }),
    ];
  },
};

defineOps([roiAlign, maxRoiPool]);
