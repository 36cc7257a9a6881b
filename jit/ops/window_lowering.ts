/**
 * Forms of primitive ops that fusion runs through others, so code generators see one form each:
 * Pad's edge, reflect and wrap modes (slices and a concat, `padByConcat`), and the window ops
 * over other than two spatial axes: a 1-D Conv, MaxPool or AveragePool as a 2-D one over a height
 * of 1, a 3-D Conv as a sum over its kernel's depth taps of 2-D convs over batches of depth slices.
 * The reference backend runs every form directly.
 *
 * @module
 */
import { padByConcat } from "./movement.ts";
import { resolveWindow } from "./nn.ts";
import {
  type Attrs,
  type EmitRef,
  type Emitter,
  InferContext,
  type ValueType,
} from "./registry.ts";

/** A decomposition: what an op's `decompose` is. */
type Lowering = (e: Emitter, inputs: readonly EmitRef[], attrs: Attrs) => EmitRef[];

/** How fusion runs primitive `op` on `inputs` through other forms, or `undefined` (as it is). */
export function loweringOf(
  op: string,
  inputs: readonly ValueType[],
  attrs: Attrs,
): Lowering | undefined {
  if (op === "Pad") return (attrs.mode ?? "constant") !== "constant" ? padByConcat : undefined;
  const rank = inputs[0]?.shape.length;
  if (op !== "Conv" && op !== "MaxPool" && op !== "AveragePool") return undefined;
  if (rank === 3) return (e, ins, a) => [lifted(e, op, ins, a)];
  if (rank === 5 && op === "Conv") return (e, ins, a) => [conv3d(e, ins, a)];
  return undefined;
}

/** 1-D window attributes as 2-D ones over a height of 1 (pads `[b, e]` → `[0, b, 0, e]`). */
export function as2d(w: Attrs): Attrs {
  const one = (xs: unknown, fill: number) =>
    Array.isArray(xs) ? [fill, ...(xs as number[])] : undefined;
  const pads = w.pads as readonly number[] | undefined;
  return {
    ...w,
    kernel_shape: one(w.kernel_shape, 1),
    strides: one(w.strides, 1),
    dilations: one(w.dilations, 1),
    pads: pads ? [0, pads[0], 0, pads[1]] : undefined,
  };
}

/** A 1-D window op through an axis of size 1 inserted at 2 (in data and kernel), removed after. */
function lifted(e: Emitter, op: string, ins: readonly EmitRef[], attrs: Attrs): EmitRef {
  const up = (k: EmitRef) => e.op("Unsqueeze", [k], { axes: [2] });
  const y = e.op(op, ins.map((k, i) => (i < 2 ? up(k) : k)), as2d(attrs));
  return e.op("Squeeze", [y], { axes: [2] });
}

/**
 * A 3-D Conv as a sum over the kernel's depth of 2-D convs: for depth tap `kd`, the input's depth
 * positions `od·stride + kd·dilation` (after the depth padding) become a batch of 2-D images,
 * convolved with that tap's 2-D kernel; the taps' results add up.
 */
function conv3d(e: Emitter, [x, w, b]: readonly EmitRef[], attrs: Attrs): EmitRef {
  const xs = e.typeOf(x).shape, ws = e.typeOf(w).shape;
  const ctx = new InferContext({
    op: "Conv",
    where: "Conv",
    inputs: [e.typeOf(x), e.typeOf(w)],
    attrs,
  });
  const win = resolveWindow(ctx, xs.slice(2), ws.slice(2));
  const [n, channels] = xs, [m] = ws;
  const [od, oh, ow] = win.out;
  const padded = e.op("Pad", [x], {
    pads: [win.padsBegin[0], win.padsEnd[0]],
    axes: [2],
    mode: "constant",
    value: 0,
  });
  const plane = {
    kernel_shape: ws.slice(3),
    strides: win.strides.slice(1),
    dilations: win.dilations.slice(1),
    pads: [win.padsBegin[1], win.padsBegin[2], win.padsEnd[1], win.padsEnd[2]],
    group: attrs.group ?? 1,
  };
  let sum: EmitRef | undefined;
  for (let kd = 0; kd < ws[2]; kd++) {
    const start = kd * win.dilations[0];
    const slab = e.op("Slice", [padded], {
      starts: [start],
      ends: [start + win.strides[0] * (od - 1) + 1],
      axes: [2],
      steps: [win.strides[0]],
    }); // [N, C, OD, H, W]
    const images = e.op("Reshape", [e.op("Transpose", [slab], { perm: [0, 2, 1, 3, 4] })], {
      shape: [n * od, channels, xs[3], xs[4]],
    });
    const tap = e.op("Squeeze", [
      e.op("Slice", [w], { starts: [kd], ends: [kd + 1], axes: [2] }),
    ], { axes: [2] });
    const y = e.op("Conv", [images, tap], plane); // [N·OD, M, OH, OW]
    sum = sum ? e.op("Add", [sum, y]) : y;
  }
  const back = e.op("Transpose", [e.op("Reshape", [sum!], { shape: [n, od, m, oh, ow] })], {
    perm: [0, 2, 1, 3, 4],
  });
  return b ? e.op("Add", [back, e.op("Reshape", [b], { shape: [m, 1, 1, 1] })]) : back;
}
