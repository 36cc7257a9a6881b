/**
 * GridSample (2-D) as a kiln op: data [N, C, H, W] sampled at a grid [N, H_out, W_out, 2] of
 * normalized (x, y) coordinates, mapped to pixel coordinates (`align_corners`), those out of range
 * clamped or reflected (`padding_mode`); each output point takes 1 (nearest), 4 (bilinear) or 16
 * (bicubic, Keys' a = −0.75) taps, a tap outside the image reading 0 (zeros), the edge (border)
 * or its reflection (reflection), as ONNX's reference does. It decomposes into data-dependent
 * gathers: GatherElements from the flattened image, weighted and summed.
 *
 * @module
 */
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";
import { isFloat } from "../ir/dtype.ts";

/** GridSample's modes (the first is ONNX's default; opset 20's names are mapped by importers). */
export const GRID_MODES = ["bilinear", "nearest", "bicubic"] as const;
/** GridSample's padding modes (the first is the default). */
export const GRID_PADDINGS = ["zeros", "border", "reflection"] as const;

/** The output type, the inputs' shapes, dtypes and attributes checked. */
function gridType(ctx: InferContext): ValueType {
  const x = ctx.input(0), grid = ctx.input(1);
  ctx.choice("mode", GRID_MODES);
  ctx.choice("padding_mode", GRID_PADDINGS);
  ctx.int("align_corners", 0);
  const [n, c, , , ...rest] = x.shape, [gn, ho, wo, two] = grid.shape;
  if (x.shape.length !== 4 || grid.shape.length !== 4 || two !== 2 || gn !== n || rest.length) {
    ctx.fail(
      `data [${x.shape}] and grid [${grid.shape}]`,
      "sample 2-D: data [N, C, H, W] and a grid [N, H_out, W_out, 2]",
      "shape-mismatch",
    );
  }
  if (!isFloat(x.dtype) || grid.dtype !== x.dtype) {
    ctx.fail(
      `data ${x.dtype} and grid ${grid.dtype}`,
      "give float data and a grid of the same type (cast the grid)",
      "dtype-mismatch",
    );
  }
  return { shape: [n, c, ho, wo], dtype: x.dtype };
}

/** Keys' cubic convolution weights (a = −0.75) of the 4 taps around fraction `t`. */
function cubicWeights(e: Emitter, t: EmitRef): EmitRef[] {
  const k = (v: number) => e.scalar(v, e.typeOf(t).dtype);
  const a = -0.75;
  const mul = (x: EmitRef, y: EmitRef) => e.op("Mul", [x, y]);
  const poly = (x: EmitRef, near: boolean) =>
    near
      ? e.op("Add", [mul(mul(e.op("Sub", [mul(k(a + 2), x), k(a + 3)]), x), x), k(1)])
      : e.op("Sub", [
        mul(e.op("Add", [mul(e.op("Sub", [mul(k(a), x), k(5 * a)]), x), k(8 * a)]), x),
        k(4 * a),
      ]);
  return [
    poly(e.op("Add", [t, k(1)]), false),
    poly(t, true),
    poly(e.op("Sub", [k(1), t]), true),
    poly(e.op("Sub", [k(2), t]), false),
  ];
}

/** The sampling geometry: pixel coordinates of every output point, and how taps read. */
function geometry(e: Emitter, x: EmitRef, grid: EmitRef, a: Attrs) {
  const t = e.typeOf(x).dtype, k = (v: number) => e.scalar(v, t);
  const corners = a.align_corners === 1, padding = a.padding_mode ?? "zeros";
  const coordinate = (i: number) =>
    e.op("Squeeze", [e.op("Slice", [grid], { starts: [i], ends: [i + 1], axes: [3] })], {
      axes: [3],
    });
  const denorm = (g: EmitRef, size: number) =>
    corners
      ? e.op("Mul", [e.op("Add", [g, k(1)]), k((size - 1) / 2)])
      : e.op("Div", [e.op("Sub", [e.op("Mul", [e.op("Add", [g, k(1)]), k(size)]), k(1)]), k(2)]);
  const lo = corners ? 0 : -0.5, hi = (size: number) => (corners ? size - 1 : size - 0.5);
  /** Reflects `v` into [l, u] by its nearer border, as many times as it takes. */
  const reflect = (v: EmitRef, l: number, u: number) => {
    const range = u - l;
    if (range <= 0) return e.op("Mul", [v, k(0)]);
    const below = e.op("Less", [v, k(l)]);
    const d = e.op("Where", [below, e.op("Sub", [k(l), v]), e.op("Sub", [v, k(u)])]);
    const times = e.op("Floor", [e.op("Div", [d, k(range)])]);
    const r = e.op("Sub", [d, e.op("Mul", [times, k(range)])]);
    const even = e.op("Equal", [e.op("Mod", [times, k(2)], { fmod: 1 }), k(0)]);
    const fromLow = e.op("Add", [k(l), r]), fromHigh = e.op("Sub", [k(u), r]);
    const inside = e.op("And", [e.op("Not", [below]), e.op("Not", [e.op("Greater", [v, k(u)])])]);
    const moved = e.op("Where", [
      below,
      e.op("Where", [even, fromLow, fromHigh]),
      e.op("Where", [even, fromHigh, fromLow]),
    ]);
    return e.op("Where", [inside, v, moved]);
  };
  const place = (g: EmitRef, size: number) => {
    let v = denorm(g, size);
    if (a.mode === "nearest") v = e.op("Round", [v]);
    if (padding === "border") v = e.op("Clip", [v], { min: 0, max: size - 1 });
    if (padding === "reflection") v = reflect(v, lo, hi(size));
    return v;
  };
  /** Tap index along an axis of `size` and its validity (zeros padding reads 0 outside). */
  const tap = (i: EmitRef, size: number): { at: EmitRef; ok?: EmitRef } => {
    const clip = (v: EmitRef) => e.op("Clip", [v], { min: 0, max: size - 1 });
    if (padding === "border") return { at: clip(i) };
    if (padding === "reflection") return { at: clip(e.op("Floor", [reflect(i, lo, hi(size))])) };
    const ok = e.op("And", [e.op("Not", [e.op("Less", [i, k(0)])]), e.op("Less", [i, k(size)])]);
    return { at: clip(i), ok };
  };
  return { k, place, tap, coordinate };
}

/** GridSample's decomposition. */
function gridSample(e: Emitter, x: EmitRef, grid: EmitRef, a: Attrs): EmitRef {
  const [n, ch, h, w] = e.typeOf(x).shape, [, ho, wo] = e.typeOf(grid).shape;
  const { k, place, tap, coordinate } = geometry(e, x, grid, a);
  const px = place(coordinate(0), w), py = place(coordinate(1), h);
  const flat = e.op("Reshape", [x], { shape: [n, ch, h * w] });
  const perPoint = (v: EmitRef) => e.op("Reshape", [v], { shape: [n, 1, ho * wo] });
  /** The image at integer pixel coordinates (float tensors `ix`, `iy`), per channel. */
  const pixel = (ix: EmitRef, iy: EmitRef): EmitRef => {
    const tx = tap(ix, w), ty = tap(iy, h);
    const index = e.op("Cast", [e.op("Add", [e.op("Mul", [ty.at, k(w)]), tx.at])], { to: "i32" });
    const spread = e.op("Expand", [perPoint(index)], { shape: [n, ch, ho * wo] });
    const v = e.op("GatherElements", [flat, spread], { axis: 2 });
    const ok = tx.ok && ty.ok ? e.op("And", [tx.ok, ty.ok]) : tx.ok ?? ty.ok;
    return ok ? e.op("Where", [perPoint(ok), v, k(0)]) : v;
  };
  let y: EmitRef;
  if (a.mode === "nearest") y = pixel(px, py);
  else {
    const x0 = e.op("Floor", [px]), y0 = e.op("Floor", [py]);
    const fx = e.op("Sub", [px, x0]), fy = e.op("Sub", [py, y0]);
    const cubic = a.mode === "bicubic", offsets = cubic ? [-1, 0, 1, 2] : [0, 1];
    const wxs = cubic ? cubicWeights(e, fx) : [e.op("Sub", [k(1), fx]), fx];
    const wys = cubic ? cubicWeights(e, fy) : [e.op("Sub", [k(1), fy]), fy];
    let sum: EmitRef | undefined;
    offsets.forEach((oy, j) => {
      offsets.forEach((ox, i) => {
        const v = pixel(e.op("Add", [x0, k(ox)]), e.op("Add", [y0, k(oy)]));
        const term = e.op("Mul", [v, perPoint(e.op("Mul", [wxs[i], wys[j]]))]);
        sum = sum ? e.op("Add", [sum, term]) : term;
      });
    });
    y = sum!;
  }
  return e.op("Reshape", [y], { shape: [n, ch, ho, wo] });
}

const gridOps: OpDef[] = [{
  name: "GridSample",
  category: "composite",
  arity: [2, 2],
  primitive: false,
  infer: (ctx) => [gridType(ctx)],
  decompose: (e, [x, grid], a) => [gridSample(e, x, grid, a)],
}];

defineOps(gridOps);
