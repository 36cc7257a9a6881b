/**
 * `IntegerConv`: the exact i32 convolution of two integer tensors (i16 or narrower: the
 * importer's zero-point-shifted 8-bit values), Conv's attributes and shapes, whose elementwise
 * products are at most the attribute `bound` in magnitude (the input's at most `max_a`).
 *
 * A backend whose code generator has integer dot products (WebAssembly's `i32x4.dot_i16x8_s`)
 * runs it as one integer implicit GEMM, its patches gathered as the float convolutions' are
 * (fusion asks {@linkcode nativeIntegerConv}); elsewhere it decomposes into float convolutions: each product of
 * two shifted 8-bit values is an integer of at most 255² = 65025, exact in f32, and so is every
 * partial sum while it stays under 2^24 whatever the order, so a longer patch is split by
 * channels into the groups of one grouped convolution, summed in i32. With constant weights the
 * slices are as few as the weights' actual magnitudes allow, not as the type's bound asks. Where
 * no slices sum exactly (a window of more taps than one f32 sum holds, or a grouped convolution
 * whose channels need slices) it is a product of gathered patches in i32 (`patchProduct`).
 *
 * @module
 */
import { sizeOf } from "../ir/shape.ts";
import {
  boundAttr,
  exactTerms,
  fewestParts,
  I16_BOUND,
  NARROW,
  tiledOperands,
} from "./integer_matmul.ts";
import { convShape, resolveWindow } from "./nn.ts";
import {
  type Attrs,
  constantTensor,
  defineOps,
  type EmitRef,
  type Emitter,
  InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/**
 * Whether fusion should build an IntegerConv of input `x` and weights `w` as one integer conv
 * kernel (where the backends have integer `dots`): operands the integer tiles take over a K of
 * channels × kernel points (`tiledOperands`), and one set of weights for every row (a 2-D conv
 * of one group).
 */
export function nativeIntegerConv(
  x: ValueType,
  w: ValueType,
  attrs: Attrs,
  dots: true | "bytes" = true,
): boolean {
  const k = sizeOf(w.shape.slice(1));
  if (x.shape.length !== 4 || Number(attrs.group ?? 1) !== 1) return false;
  return tiledOperands(x, w, k, dots);
}

/** `x` as f32: a constant's values converted here, once, else a Cast in the graph. */
function asFloat(e: Emitter, x: EmitRef): EmitRef {
  const known = e.constantOf(x);
  if (!known) return e.op("Cast", [x], { to: "f32" });
  return constantTensor(e, Float32Array.from(known), [...e.typeOf(x).shape], "f32");
}

/**
 * The float decomposition of the exact i32 convolution of `x` [N, C, ...] by `w`
 * [M, C/group, ...], integer tensors whose products are at most `bound` (`x` at most `maxA`):
 * channels in slices whose patches sum exactly (as few as constant weights' magnitudes allow),
 * the slices' convolutions summed in i32. Those no slices sum exactly take i32 arithmetic.
 */
function exactConv(e: Emitter, ints: EmitRef[], attrs: Attrs, bound: number, maxA: number) {
  const [x, w] = ints.map((t) => asFloat(e, t));
  const ws = e.typeOf(w).shape, [m, channels] = ws;
  const taps = sizeOf(ws.slice(2)), per = Math.floor(exactTerms(bound) / taps);
  // Channel slices the type bound asks for, or (constant weights) as few as their sums need.
  let parts = per < 1 ? Infinity : Math.ceil(channels / per);
  const data = parts > 1 ? e.constantOf(w) : undefined;
  if (data) {
    // Each channel's |w| over its taps, [channels, m] as the contraction runs.
    const sums = new Float64Array(channels * m);
    for (let o = 0; o < m; o++) {
      for (let c = 0; c < channels; c++) {
        let sum = 0;
        for (let t = 0; t < taps; t++) sum += Math.abs(data[(o * channels + c) * taps + t]);
        sums[c * m + o] = sum;
      }
    }
    parts = fewestParts(channels, m, sums, maxA, Math.min(parts, channels + 1));
  }
  const i32 = (t: EmitRef) => e.op("Cast", [t], { to: "i32" });
  if (parts === 1) return i32(e.op("Conv", [x, w], attrs));
  if (parts > channels || Number(attrs.group ?? 1) !== 1) return patchProduct(e, ints, attrs);
  // The slices as the groups of one grouped convolution (channels zero-padded to a multiple of
  // `parts`), summed in i32: one kernel of parts × M output channels, where a kernel a slice
  // kept the H200's small-spatial convolutions on a handful of tiles each (0.5 ms apiece).
  const pad = Math.ceil(channels / parts) * parts - channels;
  const xs = pad ? e.op("Pad", [x], { pads: [0, pad], axes: [1], mode: "constant", value: 0 }) : x;
  const y = e.op("Conv", [xs, groupedWeight(e, w, parts, data)], { ...attrs, group: parts });
  const [n, , ...outSpatial] = e.typeOf(y).shape;
  const sums = i32(e.op("Reshape", [y], { shape: [n, parts, m, ...outSpatial] }));
  return e.op("ReduceSum", [sums], { axes: [1], keepdims: 0 });
}

/**
 * The exact i32 convolution of `x` by `w` as a product of patches (im2col): x zero-padded and
 * flattened over its spatial axes, each output's window gathered by a constant table of
 * positions, times the weights as one i32 matmul per group. Exact whatever the bounds (a product
 * of i32 sums wraps as ONNX Runtime's int32 sums do); float slices are faster where they hold.
 */
function patchProduct(e: Emitter, [x, w]: EmitRef[], attrs: Attrs): EmitRef {
  const [n, c, ...spatial] = e.typeOf(x).shape, [m, cg, ...taps] = e.typeOf(w).shape;
  const group = Number(attrs.group ?? 1);
  const ctx = new InferContext({
    op: "IntegerConv",
    where: "IntegerConv",
    inputs: [e.typeOf(x), e.typeOf(w)],
    attrs,
  });
  const win = resolveWindow(ctx, spatial, taps);
  const i32 = (t: EmitRef) => e.op("Cast", [t], { to: "i32" });
  const axes = spatial.map((_, i) => 2 + i);
  const padded = spatial.map((s, i) => s + win.padsBegin[i] + win.padsEnd[i]);
  const xp = win.padsBegin.some((p) => p) || win.padsEnd.some((p) => p)
    ? e.op("Pad", [i32(x)], {
      pads: [...win.padsBegin, ...win.padsEnd],
      axes,
      mode: "constant",
      value: 0,
    })
    : i32(x);
  const flat = e.op("Reshape", [xp], { shape: [n, c, sizeOf(padded)] });
  const outputs = sizeOf(win.out), count = sizeOf(taps);
  const table = new Int32Array(outputs * count);
  for (let o = 0; o < outputs; o++) {
    for (let t = 0; t < count; t++) {
      // Each spatial axis, last fastest: the output's window start plus the tap's offset.
      let at = 0;
      for (let i = 0, os = o, ts = t, stride = 1; i < spatial.length; i++) {
        const axis = spatial.length - 1 - i;
        const oi = os % win.out[axis], ti = ts % taps[axis];
        os = Math.floor(os / win.out[axis]);
        ts = Math.floor(ts / taps[axis]);
        at += (oi * win.strides[axis] + ti * win.dilations[axis]) * stride;
        stride *= padded[axis];
      }
      table[o * count + t] = at;
    }
  }
  const positions = constantTensor(e, table, [outputs, count], "i32");
  // [N, C, O, T] → [N, G, O, C/G · T], against the weights as [G, C/G · T, M/G].
  const patches = e.op("Gather", [flat, positions], { axis: 2 });
  const grouped = e.op("Reshape", [patches], { shape: [n, group, cg, outputs, count] });
  const rows = e.op("Reshape", [e.op("Transpose", [grouped], { perm: [0, 1, 3, 2, 4] })], {
    shape: [n, group, outputs, cg * count],
  });
  const wg = e.op("Reshape", [i32(w)], { shape: [group, m / group, cg * count] });
  const sums = e.op("MatMul", [rows, e.op("Transpose", [wg], { perm: [0, 2, 1] })]);
  const byChannel = e.op("Transpose", [sums], { perm: [0, 1, 3, 2] });
  return e.op("Reshape", [byChannel], { shape: [n, m, ...win.out] });
}

/**
 * Weights `w` [M, C, ...] as `parts` groups of their channels [parts · M, ⌈C / parts⌉, ...]
 * (zero past C): constant weights (`data`) reordered here, others through a view. Read through
 * the view, a constant's grouped conv took 467 ms on one wasm thread where the same weights as a
 * constant took 10.6 (512 → 256 channels at 14×14, 3×3, two groups).
 */
function groupedWeight(e: Emitter, w: EmitRef, parts: number, data?: ArrayLike<number>): EmitRef {
  const ws = e.typeOf(w).shape, [m, channels] = ws, taps = sizeOf(ws.slice(2));
  const size = Math.ceil(channels / parts), pad = size * parts - channels;
  const shape = [parts * m, size, ...ws.slice(2)];
  if (data) {
    const out = new Float32Array(parts * m * size * taps);
    for (let p = 0; p < parts; p++) {
      for (let o = 0; o < m; o++) {
        for (let c = 0; c < size && p * size + c < channels; c++) {
          const from = (o * channels + p * size + c) * taps, to = ((p * m + o) * size + c) * taps;
          for (let t = 0; t < taps; t++) out[to + t] = data[from + t];
        }
      }
    }
    return constantTensor(e, out, shape, "f32");
  }
  const padded = pad
    ? e.op("Pad", [w], { pads: [0, pad], axes: [1], mode: "constant", value: 0 })
    : w;
  const spatial = ws.slice(2).map((_, i) => 3 + i);
  const split = e.op("Reshape", [padded], { shape: [m, parts, size, ...ws.slice(2)] });
  return e.op("Reshape", [e.op("Transpose", [split], { perm: [1, 0, 2, ...spatial] })], { shape });
}

/** Conv's own attributes of an IntegerConv's (the bounds left out). */
export function integerConvAttrs({ bound: _b, max_a: _m, ...conv }: Attrs): Attrs {
  return conv;
}

const integerConvOps: OpDef[] = [{
  name: "IntegerConv",
  category: "conv",
  arity: [2, 2],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, NARROW);
    ctx.requireDType(1, NARROW);
    boundAttr(ctx, "bound", "the largest |x·w| product");
    boundAttr(ctx, "max_a", "the largest |x|");
    return [{ shape: convShape(ctx, [0, 1]), dtype: "i32" }];
  },
  decompose: (e, ins, attrs) => [
    exactConv(
      e,
      [...ins],
      integerConvAttrs(attrs),
      Number(attrs.bound ?? I16_BOUND),
      Number(attrs.max_a ?? I16_BOUND),
    ),
  ],
}];

defineOps(integerConvOps);
