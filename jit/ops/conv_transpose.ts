/**
 * `ConvTranspose` (1 to 3 spatial axes) and `Col2Im`, both as convolutions: the transposed one of
 * the stride-dilated, re-padded input with the flipped, group-transposed kernel; Col2Im as a
 * transposed convolution of the blocks' grid with a one-hot kernel in C groups (patch entry o of
 * channel c lands at its offset in the kernel), uncropped, then cut to the image from the start
 * padding. Attributes come resolved: explicit pads, every list given.
 *
 * @module
 */
import { formatShape, type Shape } from "../ir/shape.ts";
import { FLOATS } from "./elementwise.ts";
import {
  type Attrs,
  constantTensor,
  defineOps,
  type EmitRef,
  type Emitter,
  type OpDef,
} from "./registry.ts";

/** A transposed convolution's parameters, every one given. */
export interface TransposedConv {
  /** Groups of channels. */
  readonly group: number;
  /** The kernel's spatial extent. */
  readonly kernel: readonly number[];
  /** Strides, one per spatial axis. */
  readonly strides: readonly number[];
  /** Dilations, one per spatial axis. */
  readonly dilations: readonly number[];
  /** Extra output at each axis's end. */
  readonly outputPadding: readonly number[];
  /** Cropping: every axis's start, then every axis's end. */
  readonly pads: readonly number[];
}

/** The parameters of a ConvTranspose node's attributes over `spatial` axes, defaults filled. */
export function transposedOf(a: Attrs, spatial: number, kernel: readonly number[]): TransposedConv {
  const list = (name: string, fill: number, n = spatial) =>
    (a[name] as readonly number[] | undefined) ?? Array(n).fill(fill);
  return {
    group: (a.group as number | undefined) ?? 1,
    kernel,
    strides: list("strides", 1),
    dilations: list("dilations", 1),
    outputPadding: list("output_padding", 0),
    pads: list("pads", 0, 2 * spatial),
  };
}

/** The output extent of a transposed convolution of `spatial` input extents. */
export function transposedExtent(spatial: Shape, t: TransposedConv): number[] {
  const n = spatial.length;
  return spatial.map((d, i) =>
    t.strides[i] * (d - 1) + t.outputPadding[i] + (t.kernel[i] - 1) * t.dilations[i] + 1 -
    t.pads[i] - t.pads[n + i]
  );
}

/**
 * The transposed convolution of data `x` with kernel `w` ([C_in, C_out / group, k…]) as a
 * convolution of the stride-dilated, re-padded input with the flipped, group-transposed kernel.
 */
export function transposedConv(
  e: Emitter,
  [data, weights, bias]: readonly (EmitRef | undefined)[],
  { group, kernel, strides, dilations, outputPadding, pads }: TransposedConv,
): EmitRef {
  let x = data!, w = weights!;
  const spatial = kernel.length, cin = e.typeOf(x).shape[1], coutPerGroup = e.typeOf(w).shape[1];
  // The input, stride-dilated (s - 1 zeros between elements) and re-padded for a plain conv.
  for (let i = 0; i < spatial; i++) {
    const axis = 2 + i, s = strides[i], n = e.typeOf(x).shape[axis];
    if (s > 1) {
      const shape = e.typeOf(x).shape;
      x = e.op("Unsqueeze", [x], { axes: [axis + 1] });
      x = e.op("Pad", [x], { pads: [0, s - 1], axes: [axis + 1], mode: "constant", value: 0 });
      x = e.op("Reshape", [x], {
        shape: [...shape.slice(0, axis), n * s, ...shape.slice(axis + 1)],
      });
    }
    const reach = (kernel[i] - 1) * dilations[i];
    const before = reach - pads[i];
    const after = reach - pads[spatial + i] + outputPadding[i] - (s > 1 ? s - 1 : 0);
    if (before !== 0 || after !== 0) {
      x = e.op("Pad", [x], { pads: [before, after], axes: [axis], mode: "constant", value: 0 });
    }
  }
  // [C_in, C_out/g, k…] → [C_out, C_in/g, k…], each kernel flipped.
  const k = kernel;
  w = e.op("Reshape", [w], { shape: [group, cin / group, coutPerGroup, ...k] });
  w = e.op("Transpose", [w], { perm: [0, 2, 1, ...k.map((_, i) => 3 + i)] });
  w = e.op("Reshape", [w], { shape: [group * coutPerGroup, cin / group, ...k] });
  for (let i = 0; i < spatial; i++) {
    const reversed = [...Array(k[i]).keys()].reverse();
    const at = constantTensor(e, reversed, [k[i]], "i32");
    w = e.op("Gather", [w, at], { axis: 2 + i });
  }
  const conv = {
    kernel_shape: k,
    strides: k.map(() => 1),
    dilations,
    pads: k.map(() => 0).concat(k.map(() => 0)),
    group,
  };
  return e.op("Conv", bias ? [x, w, bias] : [x, w], conv);
}

const convTranspose: OpDef = {
  name: "ConvTranspose",
  category: "composite",
  arity: [2, 3],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.sameDType();
    ctx.requireDType(0, FLOATS);
    const xs = ctx.input(0).shape, ws = ctx.input(1).shape, spatial = xs.length - 2;
    const t = transposedOf(ctx.attrs, spatial, ws.slice(2));
    // The kernel's extents are the weight's; a kernel_shape given must say the same.
    const kernel = ctx.ints("kernel_shape", t.kernel);
    if (kernel.join() !== t.kernel.join()) {
      ctx.fail(
        `kernel_shape [${kernel}] for a kernel ${formatShape(ws)}`,
        "leave kernel_shape out, or give the kernel's spatial extents",
        "bad-attribute",
      );
    }
    const cin = xs[1], m = ws[1] * t.group;
    const lists = [t.strides, t.dilations, t.outputPadding].every((l) => l.length === spatial) &&
      t.pads.length === 2 * spatial;
    if (
      spatial < 1 || spatial > 3 || ws.length !== xs.length || cin !== ws[0] ||
      cin % t.group !== 0 || !lists
    ) {
      ctx.fail(
        `data ${formatShape(xs)} and kernel ${formatShape(ws)} with group ${t.group}`,
        "the kernel must be [C_in, C_out / group, k…] with C_in the data's channels, 1 to 3 spatial axes, one stride, dilation and output padding per axis",
        "shape-mismatch",
      );
    }
    if (ctx.inputs.length === 3 && ctx.input(2).shape.join() !== `${m}`) {
      ctx.fail(
        `bias ${formatShape(ctx.input(2).shape)}`,
        `give one bias per output channel (${m})`,
        "shape-mismatch",
      );
    }
    const out = transposedExtent(xs.slice(2), t);
    if (out.some((d) => d < 1)) {
      ctx.fail(`pads [${t.pads}] leave an empty output`, "use smaller pads", "bad-attribute");
    }
    return [{ shape: [xs[0], m, ...out], dtype }];
  },
  decompose: (e, ins, a) => {
    const xs = e.typeOf(ins[0]).shape;
    return [
      transposedConv(e, ins, transposedOf(a, xs.length - 2, e.typeOf(ins[1]).shape.slice(2))),
    ];
  },
};

/** Col2Im's geometry: the image, blocks, strides, dilations and pads, and the blocks' grid. */
export function col2ImGeometry(a: Attrs): {
  image: readonly number[];
  block: readonly number[];
  strides: readonly number[];
  dilations: readonly number[];
  pads: readonly number[];
  grid: number[];
} {
  const image = (a.image_shape as readonly number[] | undefined) ?? [];
  const block = (a.block_shape as readonly number[] | undefined) ?? [];
  const n = image.length,
    list = (name: string, fill: number, k = n) =>
      (a[name] as readonly number[] | undefined) ?? Array(k).fill(fill);
  const strides = list("strides", 1),
    dilations = list("dilations", 1),
    pads = list("pads", 0, 2 * n);
  const grid = image.map((d, i) =>
    Math.floor((d + pads[i] + pads[n + i] - dilations[i] * (block[i] - 1) - 1) / strides[i]) + 1
  );
  return { image, block, strides, dilations, pads, grid };
}

const col2Im: OpDef = {
  name: "Col2Im",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const { shape, dtype } = ctx.input(0);
    const g = col2ImGeometry(ctx.attrs), n = g.image.length;
    const size = g.block.reduce((p, k) => p * k, 1), channels = shape[1] / size;
    const blocks = g.grid.reduce((p, k) => p * k, 1);
    if (
      shape.length !== 3 || g.block.length !== n || n < 1 || n > 3 || !Number.isInteger(channels) ||
      g.grid.some((k) => k < 1) || blocks !== shape[2] || g.strides.length !== n ||
      g.dilations.length !== n || g.pads.length !== 2 * n || !FLOATS.includes(dtype)
    ) {
      ctx.fail(
        `Col2Im of ${dtype} ${formatShape(shape)} into [${g.image}] by blocks [${g.block}]`,
        `give float data [N, C·${size}, L] with L the ${
          g.grid.join("×")
        } blocks the image, strides, dilations and pads make (1 to 3 image axes)`,
        "shape-mismatch",
      );
    }
    return [{ shape: [shape[0], channels, ...g.image], dtype }];
  },
  // A transposed convolution of the blocks' grid with a one-hot kernel in C groups, uncropped,
  // then cut to the image from the start padding (zeros past it).
  decompose: (e, [x], a) => {
    const { shape, dtype } = e.typeOf(x), g = col2ImGeometry(a);
    const size = g.block.reduce((p, k) => p * k, 1), zeros = g.block.map(() => 0);
    // Kernel [C·∏block, 1, …block]: input channel c·∏block + o has a 1 at block offset o.
    const ones = new Float32Array(shape[1] * size);
    for (let ch = 0; ch < shape[1]; ch++) ones[ch * size + (ch % size)] = 1;
    const kernel = constantTensor(e, ones, [shape[1], 1, ...g.block], "f32");
    const w = dtype === "f32" ? kernel : e.op("Cast", [kernel], { to: dtype });
    const blocksGrid = e.op("Reshape", [x], { shape: [shape[0], shape[1], ...g.grid] });
    let y = transposedConv(e, [blocksGrid, w], {
      group: shape[1] / size,
      kernel: g.block,
      strides: g.strides,
      dilations: g.dilations,
      outputPadding: zeros,
      pads: [...zeros, ...zeros],
    });
    g.image.forEach((d, i) => {
      const axis = 2 + i, full = e.typeOf(y).shape[axis], start = g.pads[i];
      y = e.op("Slice", [y], { starts: [start], ends: [Math.min(full, start + d)], axes: [axis] });
      const short = d - (Math.min(full, start + d) - start);
      if (short > 0) {
        y = e.op("Pad", [y], { pads: [0, short], axes: [axis], mode: "constant", value: 0 });
      }
    });
    return [y];
  },
};

defineOps([convTranspose, col2Im]);
