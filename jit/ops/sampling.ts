/**
 * Ops that sample at computed places, beside GridSample: `AffineGrid` (the grid GridSample reads:
 * a constant base grid of normalized coordinates times θᵀ) and `DeformConv` (2-D, opset 19: each
 * kernel tap of each output point samples the input bilinearly at its place plus its learned
 * offset, 0 outside the image as ONNX's reference does, times its mask where given; the samples
 * are the im2col columns, which meet the kernel in one grouped MatMul).
 *
 * @module
 */
import { formatShape, type Shape } from "../ir/shape.ts";
import { FLOATS, like } from "./elementwise.ts";
import {
  type Attrs,
  constantTensor,
  defineOps,
  type EmitRef,
  type Emitter,
  type OpDef,
} from "./registry.ts";

/** Normalized coordinates of `n` points along an axis, as AffineGrid places them. */
export function gridCoordinates(n: number, alignCorners: boolean): number[] {
  return [...Array(n).keys()].map((i) =>
    alignCorners ? (n === 1 ? -1 : -1 + (2 * i) / (n - 1)) : (2 * i + 1) / n - 1
  );
}

/**
 * The base grid of `size`'s spatial axes: each point (row-major over (D,) H, W) as x, y(, z), 1,
 * x along the last axis.
 */
export function baseGrid(size: readonly number[], alignCorners: boolean): Float32Array {
  const spatial = size.length - 2, dims = size.slice(2);
  const axes = dims.map((d) => gridCoordinates(d, alignCorners));
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
  return base;
}

const affineGrid: OpDef = {
  name: "AffineGrid",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const theta = ctx.input(0), size = ctx.ints("size");
    ctx.int("align_corners", 0);
    const spatial = size.length - 2, [n] = theta.shape;
    const want = spatial === 2 ? [n, 2, 3] : [n, 3, 4];
    if ((spatial !== 2 && spatial !== 3) || theta.shape.join() !== want.join() || size[0] !== n) {
      ctx.fail(
        `theta ${formatShape(theta.shape)} for size [${size}]`,
        "give size [N, C, H, W] with theta [N, 2, 3], or [N, C, D, H, W] with [N, 3, 4]",
        "shape-mismatch",
      );
    }
    return [{ shape: [n, ...size.slice(2), spatial], dtype: ctx.requireDType(0, ["f32"]) }];
  },
  decompose: (e, [theta], a) => {
    const size = a.size as readonly number[], spatial = size.length - 2;
    const base = baseGrid(size, a.align_corners === 1);
    const count = base.length / (spatial + 1);
    const points = constantTensor(e, base, [count, spatial + 1], "f32");
    const grid = e.op("MatMul", [points, e.op("Transpose", [theta], { perm: [0, 2, 1] })]);
    return [e.op("Reshape", [grid], { shape: [size[0], ...size.slice(2), spatial] })];
  },
};

/** DeformConv's window, every attribute given. */
export interface DeformWindow {
  /** Groups of the convolution's channels. */
  readonly group: number;
  /** Groups of channels that share an offset. */
  readonly groups: number;
  /** Strides along H and W. */
  readonly strides: readonly number[];
  /** Dilations along H and W. */
  readonly dilations: readonly number[];
  /** Pads: top, left, bottom, right. */
  readonly pads: readonly number[];
  /** The kernel's extent along H and W. */
  readonly kernel: readonly number[];
}

/** DeformConv's window from its attributes, defaults filled (the kernel's extent from `kernel`). */
export function deformWindow(a: Attrs, kernel: readonly number[]): DeformWindow {
  const list = (name: string, fallback: number[]) =>
    (a[name] as readonly number[] | undefined) ?? fallback;
  return {
    group: (a.group as number | undefined) ?? 1,
    groups: (a.offset_group as number | undefined) ?? 1,
    strides: list("strides", [1, 1]),
    dilations: list("dilations", [1, 1]),
    pads: list("pads", [0, 0, 0, 0]),
    kernel: list("kernel_shape", [...kernel]),
  };
}

/** DeformConv's output extent along spatial axis `i` of data `xs`. */
function deformExtent(xs: Shape, w: DeformWindow, i: number): number {
  const reach = (w.kernel[i] - 1) * w.dilations[i] + 1;
  return Math.floor((xs[2 + i] + w.pads[i] + w.pads[2 + i] - reach) / w.strides[i]) + 1;
}

const deformConv: OpDef = {
  name: "DeformConv",
  category: "composite",
  arity: [3, 5],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS);
    const [xs, ws, os] = [0, 1, 2].map((i) => ctx.input(i).shape);
    const bias = ctx.inputs[3]?.shape, mask = ctx.inputs[4]?.shape;
    const w = deformWindow(ctx.attrs, ws.slice(2)), [n, ch] = xs, [m, perGroup, kh, kw] = ws;
    const taps = kh * kw, out = [0, 1].map((i) => deformExtent(xs, w, i));
    const fits = xs.length === 4 && ws.length === 4 && os.length === 4 &&
      w.kernel.join() === `${kh},${kw}` && ch === perGroup * w.group && m % w.group === 0 &&
      ch % w.groups === 0 && os.join() === `${n},${w.groups * taps * 2},${out[0]},${out[1]}` &&
      (!mask || mask.join() === `${n},${w.groups * taps},${out[0]},${out[1]}`) &&
      (!bias || bias.join() === `${m}`) && ctx.inputs.every((t) => t.dtype === dtype);
    if (!fits) {
      ctx.fail(
        `DeformConv of ${formatShape(xs)} with kernel ${formatShape(ws)}, offsets ${
          formatShape(os)
        }, group ${w.group}, offset_group ${w.groups}`,
        "kiln runs 2-D DeformConv: data [N, C, H, W], kernel [M, C / group, kH, kW], offsets [N, offset_group·kH·kW·2, H_out, W_out] and a mask of half their channels",
        "shape-mismatch",
      );
    }
    return [{ shape: [n, m, ...out], dtype }];
  },
  decompose: (e, [x, weights, offset, bias, mask], a) => {
    const [m, perGroup, kh, kw] = e.typeOf(weights).shape;
    const [n, , oh, ow] = e.typeOf(offset).shape, w = deformWindow(a, [kh, kw]);
    const sampled = deformSamples(e, [x, offset, mask], w);
    // Columns [N, group, (C / group)·taps, points] in the kernel's order (channel, then tap).
    const columns = e.op("Reshape", [sampled], {
      shape: [n, w.group, perGroup * kh * kw, oh * ow],
    });
    const matrix = e.op("Reshape", [weights], {
      shape: [w.group, m / w.group, perGroup * kh * kw],
    });
    let y = e.op("Reshape", [e.op("MatMul", [matrix, columns])], { shape: [n, m, oh, ow] });
    if (bias) y = e.op("Add", [y, e.op("Reshape", [bias], { shape: [m, 1, 1] })]);
    return [y];
  },
};

/**
 * The bilinear samples of `x` at each tap's place plus its offset ([N, groups, C / groups,
 * taps · points]), times the mask where given.
 */
function deformSamples(
  e: Emitter,
  [x, offset, mask]: (EmitRef | undefined)[],
  w: DeformWindow,
): EmitRef {
  const [n, ch, h, wd] = e.typeOf(x!).shape, [oh, ow] = e.typeOf(offset!).shape.slice(2);
  const [kh, kw] = w.kernel, taps = kh * kw, points = oh * ow, span = taps * points;
  const k = (v: number) => like(e, x!, v), groups = w.groups;
  // Each tap's place at each output point (tap-major, then row-major points), before offsets.
  const baseY = new Float32Array(span), baseX = new Float32Array(span);
  for (let tap = 0; tap < taps; tap++) {
    for (let p = 0; p < points; p++) {
      const i = Math.floor(p / ow), j = p % ow;
      baseY[tap * points + p] = -w.pads[0] + i * w.strides[0] +
        Math.floor(tap / kw) * w.dilations[0];
      baseX[tap * points + p] = -w.pads[1] + j * w.strides[1] + (tap % kw) * w.dilations[1];
    }
  }
  const t = e.typeOf(x!).dtype;
  const shifts = e.op("Reshape", [offset!], { shape: [n, groups, taps, 2, points] });
  const place = (axis: number, base: Float32Array) => {
    const values = constantTensor(e, base, [span], "f32");
    return e.op("Add", [
      e.op("Reshape", [e.op("Slice", [shifts], { starts: [axis], ends: [axis + 1], axes: [3] })], {
        shape: [n, groups, span],
      }),
      t === "f32" ? values : e.op("Cast", [values], { to: t }),
    ]);
  };
  const py = place(0, baseY), px = place(1, baseX);
  const y0 = e.op("Floor", [py]), x0 = e.op("Floor", [px]);
  const fy = e.op("Sub", [py, y0]), fx = e.op("Sub", [px, x0]);
  const image = e.op("Reshape", [x!], { shape: [n, groups, ch / groups, h * wd] });
  const spread = (v: EmitRef) => e.op("Reshape", [v], { shape: [n, groups, 1, span] });
  /** The input at integer places `iy`, `ix` ([N, groups, span]), 0 outside, per channel. */
  const pixel = (iy: EmitRef, ix: EmitRef): EmitRef => {
    const inside = (v: EmitRef, size: number) =>
      e.op("And", [e.op("Not", [e.op("Less", [v, k(0)])]), e.op("Less", [v, k(size)])]);
    const at = e.op("Add", [
      e.op("Mul", [e.op("Clip", [iy], { min: 0, max: h - 1 }), k(wd)]),
      e.op("Clip", [ix], { min: 0, max: wd - 1 }),
    ]);
    const index = e.op("Expand", [spread(e.op("Cast", [at], { to: "i32" }))], {
      shape: [n, groups, ch / groups, span],
    });
    const v = e.op("GatherElements", [image, index], { axis: 3 });
    return e.op("Where", [spread(e.op("And", [inside(iy, h), inside(ix, wd)])), v, k(0)]);
  };
  const one = (f: EmitRef) => e.op("Sub", [k(1), f]);
  const y1 = e.op("Add", [y0, k(1)]), x1 = e.op("Add", [x0, k(1)]);
  const corners: [EmitRef, EmitRef, EmitRef][] = [
    [y0, x0, e.op("Mul", [one(fy), one(fx)])],
    [y0, x1, e.op("Mul", [one(fy), fx])],
    [y1, x0, e.op("Mul", [fy, one(fx)])],
    [y1, x1, e.op("Mul", [fy, fx])],
  ];
  const sampled = corners
    .map(([iy, ix, weight]) => e.op("Mul", [pixel(iy, ix), spread(weight)]))
    .reduce((s, v) => e.op("Add", [s, v]));
  if (!mask) return sampled;
  return e.op("Mul", [sampled, spread(e.op("Reshape", [mask], { shape: [n, groups, span] }))]);
}

defineOps([affineGrid, deformConv]);
