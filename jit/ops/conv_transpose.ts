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
import { type Attrs, defineOps, type EmitRef, type Emitter, type OpDef } from "./registry.ts";

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
    const at = e.op("Constant", [], {
      value: { data: Int32Array.from(reversed), shape: [k[i]], dtype: "i32" },
    });
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

defineOps([convTranspose]);
