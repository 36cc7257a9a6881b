/**
 * GridSample (2-D) as data-dependent gathers: the grid's normalized coordinates are mapped to
 * pixel coordinates (`align_corners`), out-of-range ones clamped or reflected (`padding_mode`),
 * and each output point gathers its 1 (nearest), 4 (bilinear) or 16 (bicubic) taps from the
 * flattened image with GatherElements, weighted and summed. A tap outside the image reads 0
 * (zeros), the edge (border) or its reflection (reflection), as ONNX's reference does.
 *
 * @module
 */
import { KilnError } from "../jit/errors.ts";
import { scalar } from "./convert_composite.ts";
import { attrs, type Known, type NodeContext, type OpFn, opOf, typeOf } from "./node_context.ts";

/** Keys' cubic convolution weights (a = −0.75) of the 4 taps around fraction `t`. */
function cubicWeights(op: OpFn, t: Known): Known[] {
  const k = (v: number) => scalar(v, "f32");
  const a = -0.75;
  const poly = (x: Known, near: boolean) =>
    near
      ? op("Add", [
        op("Mul", [op("Mul", [op("Sub", [op("Mul", [k(a + 2), x]), k(a + 3)]), x]), x]),
        k(1),
      ])
      : op("Sub", [
        op("Mul", [
          op("Add", [op("Mul", [op("Sub", [op("Mul", [k(a), x]), k(5 * a)]), x]), k(8 * a)]),
          x,
        ]),
        k(4 * a),
      ]);
  const one = (x: Known) => op("Sub", [k(1), x]);
  return [
    poly(op("Add", [t, k(1)]), false),
    poly(t, true),
    poly(one(t), true),
    poly(op("Sub", [k(2), t]), false),
  ];
}

/** Converts a GridSample node. */
export function gridSample(c: NodeContext): Known[] {
  const op = opOf(c);
  const k = (v: number) => scalar(v, "f32");
  const [x, grid] = [c.required(0), c.required(1)];
  const xs = typeOf(x).shape, gs = typeOf(grid).shape;
  if (xs.length !== 4 || gs.length !== 4 || gs[3] !== 2 || gs[0] !== xs[0]) {
    throw new KilnError(`${c.label}: data [${xs}] and grid [${gs}]`, {
      code: "unsupported",
      fix: "kiln samples 2-D: data [N, C, H, W] and a grid [N, H_out, W_out, 2]",
    });
  }
  const a = attrs(c);
  const mode = a.string("mode", "bilinear")!;
  const padding = a.string("padding_mode", "zeros")!;
  const corners = a.int("align_corners", 0) === 1;
  const kind = mode === "bilinear" || mode === "linear"
    ? "linear"
    : mode === "bicubic" || mode === "cubic"
    ? "cubic"
    : mode === "nearest"
    ? "nearest"
    : undefined;
  if (!kind || !["zeros", "border", "reflection"].includes(padding)) {
    throw new KilnError(`${c.label}: mode "${mode}", padding_mode "${padding}"`, {
      code: "bad-attribute",
      fix: "use mode bilinear/nearest/bicubic and padding_mode zeros/border/reflection",
    });
  }
  const [n, ch, h, w] = xs, [, ho, wo] = gs;
  const coordinate = (i: number) =>
    op("Squeeze", [op("Slice", [grid], { starts: [i], ends: [i + 1], axes: [3] })], { axes: [3] });
  // Pixel coordinates of every output point, [N, H_out, W_out].
  const denorm = (g: Known, size: number) =>
    corners
      ? op("Mul", [op("Add", [g, k(1)]), k((size - 1) / 2)])
      : op("Div", [op("Sub", [op("Mul", [op("Add", [g, k(1)]), k(size)]), k(1)]), k(2)]);
  const lo = corners ? 0 : -0.5;
  const hi = (size: number) => (corners ? size - 1 : size - 0.5);
  /** Reflects `v` into [lo, hi] by its nearer border, as many times as it takes. */
  const reflect = (v: Known, l: number, u: number) => {
    const range = u - l;
    if (range <= 0) return op("Mul", [v, k(0)]);
    const below = op("Less", [v, k(l)]);
    const d = op("Where", [below, op("Sub", [k(l), v]), op("Sub", [v, k(u)])]);
    const times = op("Floor", [op("Div", [d, k(range)])]);
    const r = op("Sub", [d, op("Mul", [times, k(range)])]);
    const even = op("Equal", [op("Mod", [times, k(2)], { fmod: 1 }), k(0)]);
    const fromLow = op("Add", [k(l), r]), fromHigh = op("Sub", [k(u), r]);
    const inside = op("And", [op("Not", [below]), op("Not", [op("Greater", [v, k(u)])])]);
    const moved = op("Where", [
      below,
      op("Where", [even, fromLow, fromHigh]),
      op("Where", [even, fromHigh, fromLow]),
    ]);
    return op("Where", [inside, v, moved]);
  };
  const place = (g: Known, size: number) => {
    let v = denorm(g, size);
    if (kind === "nearest") v = op("Round", [v]);
    if (padding === "border") v = op("Clip", [v], { min: 0, max: size - 1 });
    if (padding === "reflection") v = reflect(v, lo, hi(size));
    return v;
  };
  const px = place(coordinate(0), w), py = place(coordinate(1), h);
  /** Tap index along an axis of `size` and its validity (zeros padding reads 0 outside). */
  const tap = (i: Known, size: number): { at: Known; ok?: Known } => {
    if (padding === "border") return { at: op("Clip", [i], { min: 0, max: size - 1 }) };
    if (padding === "reflection") {
      return {
        at: op("Clip", [op("Floor", [reflect(i, lo, hi(size))])], { min: 0, max: size - 1 }),
      };
    }
    const ok = op("And", [op("Not", [op("Less", [i, k(0)])]), op("Less", [i, k(size)])]);
    return { at: op("Clip", [i], { min: 0, max: size - 1 }), ok };
  };
  const flat = op("Reshape", [x], { shape: [n, ch, h * w] });
  /** The image at integer pixel coordinates (float tensors `ix`, `iy`), per channel. */
  const pixel = (ix: Known, iy: Known): Known => {
    const tx = tap(ix, w), ty = tap(iy, h);
    const index = op("Cast", [op("Add", [op("Mul", [ty.at, k(w)]), tx.at])], { to: "i32" });
    const spread = op("Expand", [op("Reshape", [index], { shape: [n, 1, ho * wo] })], {
      shape: [n, ch, ho * wo],
    });
    let v = op("GatherElements", [flat, spread], { axis: 2 });
    const ok = tx.ok && ty.ok ? op("And", [tx.ok, ty.ok]) : tx.ok ?? ty.ok;
    if (ok) v = op("Where", [op("Reshape", [ok], { shape: [n, 1, ho * wo] }), v, k(0)]);
    return v;
  };
  const perPoint = (t: Known) => op("Reshape", [t], { shape: [n, 1, ho * wo] });
  let y: Known;
  if (kind === "nearest") y = pixel(px, py);
  else {
    const x0 = op("Floor", [px]), y0 = op("Floor", [py]);
    const fx = op("Sub", [px, x0]), fy = op("Sub", [py, y0]);
    const offsets = kind === "linear" ? [0, 1] : [-1, 0, 1, 2];
    const wxs = kind === "linear" ? [op("Sub", [k(1), fx]), fx] : cubicWeights(op, fx);
    const wys = kind === "linear" ? [op("Sub", [k(1), fy]), fy] : cubicWeights(op, fy);
    let sum: Known | undefined;
    offsets.forEach((oy, j) => {
      offsets.forEach((ox, i) => {
        const v = pixel(op("Add", [x0, k(ox)]), op("Add", [y0, k(oy)]));
        const term = op("Mul", [v, perPoint(op("Mul", [wxs[i], wys[j]]))]);
        sum = sum ? op("Add", [sum, term]) : term;
      });
    });
    y = sum!;
  }
  return [op("Reshape", [y], { shape: [n, ch, ho, wo] })];
}
