/**
 * Pooling ops ONNX defines through others, 2-D: `MaxUnpool` (windows that tile: a nearest
 * upsampling of values and indices and one comparison, no scatter, so the indices may be computed
 * at run time), `LpPool` (a depthwise all-ones convolution of |x|^p: padding adds nothing to a
 * sum; 1-D through a height of 1) and `MaxPoolIndices` (MaxPool's second output, 2-D: each
 * window's taps as strided slices of the input padded with −∞, stacked; ArgMax picks the first
 * largest tap, ONNX Runtime's order, and its input position becomes a flat index into
 * [N, C, H, W], row-major or with `storage_order` 1 column-major within each image; padding is
 * never an index).
 *
 * @module
 */
import { formatShape, type Shape } from "../ir/shape.ts";
import { FLOATS, INTEGERS } from "./elementwise.ts";
import { axisConstant } from "./movement.ts";
import { as2d } from "./window_lowering.ts";
import { resolveWindow, type Window } from "./nn.ts";
import {
  type Attrs,
  constantTensor,
  defineOps,
  type EmitRef,
  type Emitter,
  InferContext,
  type OpDef,
} from "./registry.ts";

/** A constant i32 tensor of `values` in the decomposition. */
const ints = (e: Emitter, values: readonly number[], shape: Shape) =>
  constantTensor(e, values, shape, "i32");

/** The flat index of each image's first element in [N, C, plane] (an [N, C, 1, 1] constant). */
const imageStarts = (e: Emitter, n: number, ch: number, plane: number) =>
  ints(e, [...Array(n * ch).keys()].map((i) => i * plane), [n, ch, 1, 1]);

/** MaxUnpool's unpooled size (what the indices count in) and output size, [H, W] each. */
export function unpoolSizes(
  shape: Shape,
  a: { kernel: readonly number[]; strides: readonly number[]; pads: readonly number[] },
  outputShape?: readonly number[],
): { natural: number[]; out: number[] } {
  const natural = [0, 1].map((i) =>
    (shape[2 + i] - 1) * a.strides[i] + a.kernel[i] - a.pads[i] - a.pads[2 + i]
  );
  return { natural, out: outputShape ? [...outputShape.slice(-2)] : natural };
}

/** MaxUnpool's window attributes, defaults filled. */
function unpoolWindow(a: Attrs) {
  const kernel = (a.kernel_shape as readonly number[] | undefined) ?? [];
  return {
    kernel,
    strides: (a.strides as readonly number[] | undefined) ?? kernel.map(() => 1),
    pads: (a.pads as readonly number[] | undefined) ?? [0, 0, 0, 0],
  };
}

const maxUnpool: OpDef = {
  name: "MaxUnpool",
  category: "composite",
  arity: [2, 2],
  primitive: false,
  infer: (ctx) => {
    const { shape, dtype } = ctx.input(0);
    ctx.requireDType(1, INTEGERS);
    const w = unpoolWindow(ctx.attrs);
    if (
      shape.length !== 4 || w.kernel.length !== 2 || w.kernel.some((k, i) => k !== w.strides[i]) ||
      ctx.input(1).shape.join() !== shape.join()
    ) {
      ctx.fail(
        `MaxUnpool of ${formatShape(shape)} with kernel [${w.kernel}] and strides [${w.strides}]`,
        "kiln unpools 2-D windows that tile the input (kernel_shape equal to strides), indices of the input's shape",
        "unsupported",
      );
    }
    const given = ctx.has("output_shape") ? ctx.ints("output_shape") : undefined;
    const { out } = unpoolSizes(shape, w, given);
    return [{ shape: [shape[0], shape[1], ...out], dtype }];
  },
  decompose: (e, [x, indices], a) => {
    const xs = e.typeOf(x).shape, w = unpoolWindow(a), [n, ch] = xs;
    const { natural, out } = unpoolSizes(xs, w, a.output_shape as readonly number[] | undefined);
    const up = (k: EmitRef, fill: number) => {
      // [N, C, H, W] → [N, C, H·s, W·s], then cut or padded to the output from the pads' start.
      let t = e.op("Unsqueeze", [k], { axes: [3, 5] });
      t = e.op("Expand", [t], { shape: [n, ch, xs[2], w.strides[0], xs[3], w.strides[1]] });
      t = e.op("Reshape", [t], { shape: [n, ch, xs[2] * w.strides[0], xs[3] * w.strides[1]] });
      out.forEach((size, i) => {
        const have = e.typeOf(t).shape[2 + i], begin = w.pads[i];
        const keep = Math.min(size, have - begin);
        t = e.op("Slice", [t], { starts: [begin], ends: [begin + keep], axes: [2 + i] });
        if (keep < size) {
          t = e.op("Pad", [t], { pads: [0, size - keep], axes: [2 + i], value: fill });
        }
      });
      return t;
    };
    const values = up(x, 0);
    const at = up(e.op("Cast", [indices], { to: "i32" }), -1);
    // Indices count in the unpooled shape the pool saw (`natural`); an output_shape past it only
    // pads (ONNX's reference), and the padding's `at` is −1, so it never matches.
    const [oh, ow] = out, nw = natural[1];
    const rows = axisConstant(e, [...Array(oh).keys()].map((y) => y * nw), {
      dtype: "i32",
      rank: 4,
      axis: 2,
    });
    const cols = axisConstant(e, [...Array(ow).keys()], { dtype: "i32", rank: 4, axis: 3 });
    const flat = e.op("Add", [e.op("Add", [imageStarts(e, n, ch, natural[0] * nw), rows]), cols]);
    const zero = e.scalar(0, e.typeOf(x).dtype);
    return [e.op("Where", [e.op("Equal", [at, flat]), values, zero])];
  },
};

/** LpPool's window attributes as one 2-D window (1-D over a height of 1, as fusion lifts 1-D pools). */
export function lpWindow(a: Attrs, spatial: number): Attrs {
  const w = {
    kernel_shape: a.kernel_shape,
    strides: a.strides,
    dilations: a.dilations,
    pads: a.pads,
  };
  return spatial === 1 ? as2d(w) : w;
}

const lpPool: OpDef = {
  name: "LpPool",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape;
    const spatial = shape.length - 2, kernel = ctx.ints("kernel_shape");
    ctx.int("p", 2);
    if (spatial < 1 || spatial > 2 || kernel.length !== spatial) {
      ctx.fail(
        `LpPool of ${formatShape(shape)} with kernel [${kernel}]`,
        "kiln runs LpPool over 1 or 2 spatial axes with a kernel_shape for each",
        "unsupported",
      );
    }
    const plane = spatial === 1 ? [1, ...shape.slice(2)] : shape.slice(2);
    const win = windowOf(ctx, lpWindow(ctx.attrs, spatial), plane);
    return [{ shape: [...shape.slice(0, 2), ...win.out.slice(2 - spatial)], dtype }];
  },
  decompose: (e, [x], a) => {
    const { shape, dtype } = e.typeOf(x), spatial = shape.length - 2;
    const p = (a.p as number | undefined) ?? 2;
    const w = lpWindow(a, spatial), kernel = w.kernel_shape as readonly number[];
    const flat = spatial === 1 ? e.op("Unsqueeze", [x], { axes: [2] }) : x;
    const powered = p === 1
      ? e.op("Abs", [flat])
      : p === 2
      ? e.op("Mul", [flat, flat])
      : e.op("Pow", [e.op("Abs", [flat]), e.scalar(p, dtype)]);
    const taps = kernel.reduce((m, k) => m * k, 1), channels = shape[1];
    const ones = constantTensor(e, new Float32Array(channels * taps).fill(1), [
      channels,
      1,
      ...kernel,
    ], "f32");
    const weights = dtype === "f32" ? ones : e.op("Cast", [ones], { to: dtype });
    const sums = e.op("Conv", [powered, weights], { ...w, group: channels });
    const y = p === 1
      ? sums
      : p === 2
      ? e.op("Sqrt", [sums])
      : e.op("Pow", [sums, e.scalar(1 / p, dtype)]);
    return [spatial === 1 ? e.op("Squeeze", [y], { axes: [2] }) : y];
  },
};

/** The window of 2-D `attrs` over `plane`, resolved as the pools resolve theirs. */
export function windowOf(ctx: InferContext, attrs: Attrs, plane: Shape): Window {
  const inner = new InferContext({ op: ctx.op, where: ctx.where, inputs: ctx.inputs, attrs });
  return resolveWindow(inner, plane, inner.ints("kernel_shape"));
}

/** MaxPoolIndices' window over an [N, C, H, W] input. */
function indexWindow(ctx: InferContext): Window {
  const shape = ctx.input(0).shape;
  ctx.int("storage_order", 0);
  return resolveWindow(ctx, shape.slice(2), ctx.ints("kernel_shape"));
}

const maxPoolIndices: OpDef = {
  name: "MaxPoolIndices",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, FLOATS);
    const shape = ctx.input(0).shape;
    if (shape.length !== 4) {
      ctx.fail(
        `MaxPool's indices of ${formatShape(shape)}`,
        "kiln gives MaxPool's Indices output for 2-D pools (export the model without it)",
        "unsupported",
      );
    }
    return [{ shape: [shape[0], shape[1], ...indexWindow(ctx).out], dtype: "i32" }];
  },
  decompose: (e, [x], attrs) => {
    const shape = e.typeOf(x).shape;
    const ctx = new InferContext({ op: "MaxPool", where: "MaxPool", inputs: [e.typeOf(x)], attrs });
    const win = indexWindow(ctx);
    const tap = e.op("ArgMax", [stackedTaps(e, x, win)], { axis: 4, keepdims: 0 }); // [N, C, OH, OW]
    const [n, ch, h, w] = shape, [oh, ow] = win.out, [kh, kw] = win.kernel;
    const table = (f: (t: number) => number) =>
      ints(e, [...Array(kh * kw).keys()].map(f), [kh * kw]);
    const along = (values: number[], axis: number) =>
      axisConstant(e, values, { dtype: "i32", rank: 4, axis });
    const row = e.op("Add", [
      along([...Array(oh).keys()].map((o) => o * win.strides[0] - win.padsBegin[0]), 2),
      e.op("Gather", [table((t) => Math.floor(t / kw) * win.dilations[0]), tap], { axis: 0 }),
    ]);
    const col = e.op("Add", [
      along([...Array(ow).keys()].map((o) => o * win.strides[1] - win.padsBegin[1]), 3),
      e.op("Gather", [table((t) => (t % kw) * win.dilations[1]), tap], { axis: 0 }),
    ]);
    const within = attrs.storage_order === 1
      ? e.op("Add", [row, e.op("Mul", [col, e.scalar(h, "i32")])])
      : e.op("Add", [e.op("Mul", [row, e.scalar(w, "i32")]), col]);
    return [e.op("Add", [imageStarts(e, n, ch, h * w), within])];
  },
};

/** Each window's taps of `x` (padded with −∞, past the end too in ceil mode), stacked on axis 4. */
function stackedTaps(e: Emitter, x: EmitRef, win: Window): EmitRef {
  const shape = e.typeOf(x).shape;
  const reach = (i: number) =>
    (win.out[i] - 1) * win.strides[i] + (win.kernel[i] - 1) * win.dilations[i] + 1;
  let padded = x;
  for (const i of [0, 1]) {
    const end = Math.max(win.padsEnd[i], reach(i) - shape[2 + i] - win.padsBegin[i]);
    padded = e.op("Pad", [padded], {
      pads: [win.padsBegin[i], end],
      axes: [2 + i],
      mode: "constant",
      value: -Infinity,
    });
  }
  const taps: EmitRef[] = [];
  for (let i = 0; i < win.kernel[0]; i++) {
    for (let j = 0; j < win.kernel[1]; j++) {
      const starts = [i * win.dilations[0], j * win.dilations[1]];
      const slab = e.op("Slice", [padded], {
        starts,
        ends: [0, 1].map((a) => starts[a] + win.strides[a] * (win.out[a] - 1) + 1),
        axes: [2, 3],
        steps: win.strides,
      });
      taps.push(e.op("Unsqueeze", [slab], { axes: [4] }));
    }
  }
  return taps.length === 1 ? taps[0] : e.op("Concat", taps, { axis: 4 });
}

defineOps([maxUnpool, lpPool, maxPoolIndices]);
