/**
 * Pooling ops ONNX defines through others, 2-D: `MaxUnpool` (windows that tile: a nearest
 * upsampling of values and indices and one comparison, no scatter, so the indices may be computed
 * at run time), `LpPool` (a depthwise all-ones convolution of |x|^p: padding adds nothing to a
 * sum; 1-D through a height of 1).
 *
 * @module
 */
import { formatShape, type Shape } from "../ir/shape.ts";
import { FLOATS, INTEGERS } from "./elementwise.ts";
import { axisConstant } from "./movement.ts";
import { resolveWindow, type Window } from "./nn.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  InferContext,
  type OpDef,
} from "./registry.ts";

/** A constant i32 tensor of `values` in the decomposition. */
const ints = (e: Emitter, values: readonly number[], shape: Shape) =>
  e.op("Constant", [], { value: { data: Int32Array.from(values), shape, dtype: "i32" } });

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

/** LpPool's attributes as one 2-D window (1-D over a height of 1). */
function lpWindow(a: Attrs, spatial: number): Attrs {
  const lift = (xs: unknown, fill: number) =>
    spatial === 1 && Array.isArray(xs) ? [fill, ...xs] : xs as readonly number[] | undefined;
  const pads = a.pads as readonly number[] | undefined;
  return {
    kernel_shape: lift(a.kernel_shape, 1),
    strides: lift(a.strides, 1),
    dilations: lift(a.dilations, 1),
    pads: spatial === 1 && pads ? [0, pads[0], 0, pads[1]] : pads,
  };
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
    const ones = e.op("Constant", [], {
      value: {
        data: new Float32Array(channels * taps).fill(1),
        shape: [channels, 1, ...kernel],
        dtype: "f32",
      },
    });
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
function windowOf(ctx: InferContext, attrs: Attrs, plane: Shape): Window {
  const inner = new InferContext({ op: ctx.op, where: ctx.where, inputs: ctx.inputs, attrs });
  return resolveWindow(inner, plane, inner.ints("kernel_shape"));
}

defineOps([maxUnpool, lpPool]);
