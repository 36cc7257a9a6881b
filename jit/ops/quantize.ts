/**
 * The quantization ops: `QuantizeLinear` and `DequantizeLinear` (8-bit and 4-bit types, scales
 * per tensor, per axis or per block), and `DynamicQuantizeLinear`: x (f32) quantized to uint8
 * with a scale and zero point computed from its own range (widened to hold 0), as ONNX defines
 * it: scale = (max − min) / 255, zero point = saturate(round(−min / scale)), y = saturate(round(x
 * / scale) + zero point), rounding half to even. Its range (`RangeWithZero`) is taken in two
 * steps for a large tensor (`splitOf`: rows first, then the row results): one reduction of a
 * whole activation ran on one GPU workgroup (1.1 ms for BERT-base's [128, 3072] on the H200, 96
 * of them a run) and one wasm thread; by rows it spreads. Min and max are exact in any order. A
 * small tensor keeps one step (a second kernel cost quant_dynamic's [2, 1024] a tenth of its run
 * on wasm).
 *
 * @module
 */
import type { DType } from "../ir/dtype.ts";
import { formatShape, type Shape, sizeOf } from "../ir/shape.ts";
import { splitOf } from "./reduce.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
} from "./registry.ts";

const dynamicQuantizeLinear: OpDef = {
  name: "DynamicQuantizeLinear",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, ["f32"]);
    const shape = ctx.input(0).shape;
    return [{ shape, dtype: "u8" }, { shape: [], dtype: "f32" }, { shape: [], dtype: "u8" }];
  },
  decompose: (e, [x]) => {
    const [lo, hi] = e.opN("RangeWithZero", [x], {}, 2);
    const f = (v: number) => e.scalar(v, "f32");
    const zero = f(0);
    const scale = e.op("Div", [e.op("Sub", [hi, lo]), f(255)]);
    const zp = e.op("Cast", [
      e.op("Clip", [e.op("Round", [e.op("Sub", [zero, e.op("Div", [lo, scale])])])], {
        min: 0,
        max: 255,
      }),
    ], { to: "u8" });
    const q: EmitRef = e.op("Add", [
      e.op("Round", [e.op("Div", [x, scale])]),
      e.op("Cast", [zp], { to: "f32" }),
    ]);
    return [e.op("Cast", [e.op("Clip", [q], { min: 0, max: 255 })], { to: "u8" }), scale, zp];
  },
};

/**
 * `[min(0, min x), max(0, max x)]`: DynamicQuantizeLinear's range, taken by rows first where x is
 * large. Where fusion may combine a kernel's values into a scalar as they go
 * (`FuseOptions.combinedRanges`), both bounds become outputs of the kernel that computes x (their
 * words combined by atomics on WebGPU), not kernels of their own.
 */
const rangeWithZero: OpDef = {
  name: "RangeWithZero",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, ["f32"]);
    return [{ shape: [], dtype: "f32" }, { shape: [], dtype: "f32" }];
  },
  decompose: (e, [x]) => {
    const shape = e.typeOf(x).shape;
    const split = splitOf(shape, [...shape.keys()]);
    const parts = split?.view ? e.op("Reshape", [x], { shape: split.view }) : x;
    const all = { axes: split?.second ?? [...shape.keys()], keepdims: 0 };
    const rows = (reduce: string) =>
      split ? e.op(reduce, [parts], { axes: split.first, keepdims: 1 }) : x;
    // Both rows' reductions before either whole one: fusion joins reductions of one value into
    // one kernel only until a reader stores the first one's result.
    const [rowsMax, rowsMin] = [rows("ReduceMax"), rows("ReduceMin")];
    const zero = e.scalar(0, "f32");
    const hi = e.op("Max", [e.op("ReduceMax", [rowsMax], all), zero]);
    return [e.op("Min", [e.op("ReduceMin", [rowsMin], all), zero]), hi];
  },
};

/** Value ranges of the quantized types (u8, i8); `bits: 4` narrows them to int4's and uint4's. */
export function quantRange(dtype: DType, bits: number): [number, number] {
  if (bits === 4) return dtype === "i8" ? [-8, 7] : [0, 15];
  return dtype === "i8" ? [-128, 127] : [0, 255];
}

/**
 * A scale or zero point of shape `ks` against x's `shape`, checked: per tensor (one value), per
 * axis (1-D along `axis`) or, with `block`, per block along `axis` (x's rank, ceil(size / block)
 * on the axis). Other shapes broadcast as NumPy's do.
 */
function checkScaleShape(ctx: InferContext, ks: Shape, shape: Shape, axis: number, block: number) {
  if (block) {
    if (ks.length !== shape.length || ks[axis] !== Math.ceil(shape[axis] / block)) {
      ctx.fail(
        `blocks of ${block} along axis ${axis} of ${formatShape(shape)} with ${formatShape(ks)}`,
        "give the scale and zero point the input's shape, ceil(size / block_size) on axis",
        "shape-mismatch",
      );
    }
  } else if (ks.length === 1 && ks[0] !== 1 && ks[0] !== shape[axis]) {
    ctx.fail(
      `${ks[0]} scales along axis ${axis} of ${formatShape(shape)}`,
      "give one scale per element of the axis (or one for the tensor)",
      "shape-mismatch",
    );
  }
}

/** QuantizeLinear's and DequantizeLinear's shared checks; their axis, normalized. */
function scaleAxis(ctx: InferContext): number {
  const shape = ctx.input(0).shape, rank = shape.length;
  const block = ctx.int("block_size", 0);
  const given = ctx.int("axis", 1);
  // The axis matters only to scales that are not one for the tensor (ONNX's default of 1 stands
  // beside a per-tensor scale of a 1-D x).
  if (!block && sizeOf(ctx.input(1).shape) === 1) return 0;
  const axis = rank ? ctx.axis(given, rank) : 0;
  for (let i = 1; i < ctx.inputs.length; i++) {
    checkScaleShape(ctx, ctx.input(i).shape, shape, axis, block);
  }
  if (ctx.inputs.length > 2 && ctx.input(2).shape.join() !== ctx.input(1).shape.join()) {
    ctx.fail("the zero point's shape differs from the scale's", "give them one shape");
  }
  return axis;
}

/** `k` (a scale or zero point) spread to broadcast against `shape` along `axis`. */
function spread(e: Emitter, k: EmitRef, shape: Shape, axis: number, block: number): EmitRef {
  const ks = e.typeOf(k).shape;
  if (!block) {
    if (ks.length !== 1 || shape.length === 0) return k;
    return e.op("Reshape", [k], { shape: shape.map((_, i) => (i === axis ? ks[0] : 1)) });
  }
  // Each entry repeated over its block's elements, the last block cut to the axis.
  const wide = [...ks.slice(0, axis + 1), block, ...ks.slice(axis + 1)];
  let y = e.op("Expand", [e.op("Unsqueeze", [k], { axes: [axis + 1] })], { shape: wide });
  const whole = ks[axis] * block;
  y = e.op("Reshape", [y], { shape: [...ks.slice(0, axis), whole, ...ks.slice(axis + 1)] });
  return whole === shape[axis]
    ? y
    : e.op("Slice", [y], { starts: [0], ends: [shape[axis]], axes: [axis] });
}

/** The axis and block of a QuantizeLinear or DequantizeLinear, from its attributes. */
function layoutOf(shape: Shape, a: Attrs): [number, number] {
  const given = (a.axis as number | undefined) ?? 1;
  const axis = shape.length ? (given < 0 ? given + shape.length : given) : 0;
  return [axis, (a.block_size as number | undefined) ?? 0];
}

/**
 * QuantizeLinear: y = saturate(round(x / scale) + zero point) in f32 arithmetic, rounding half
 * to even, into the zero point's type (`to` without one: u8 or i8; `bits: 4` for int4 and
 * uint4 held in them). Scales per tensor, per axis or per block (opset 21's `block_size`).
 */
const quantizeLinear: OpDef = {
  name: "QuantizeLinear",
  category: "composite",
  arity: [2, 3],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, ["f32", "f16"]);
    ctx.requireDType(1, [ctx.input(0).dtype]);
    scaleAxis(ctx);
    // The zero point's type is the result's; `to` stands for it where there is none.
    const to = ctx.dtype("to", "u8");
    const dtype = ctx.inputs.length > 2 ? ctx.input(2).dtype : to;
    if (dtype !== "u8" && dtype !== "i8") {
      ctx.fail(`quantization to ${dtype}`, "kiln quantizes to uint8 and int8", "unsupported");
    }
    const bits = ctx.int("bits", 8);
    if (bits !== 4 && bits !== 8) {
      ctx.fail(`bits ${bits}`, "quantize to 8 bits or 4", "bad-attribute");
    }
    return [{ shape: ctx.input(0).shape, dtype }];
  },
  decompose: (e, [x, scale, zero], a) => {
    const shape = e.typeOf(x).shape, [axis, block] = layoutOf(shape, a);
    const dtype = zero ? e.typeOf(zero).dtype : (a.to as DType | undefined) ?? "u8";
    const [lo, hi] = quantRange(dtype, (a.bits as number | undefined) ?? 8);
    const f32 = (k: EmitRef) => e.typeOf(k).dtype === "f32" ? k : e.op("Cast", [k], { to: "f32" });
    let q = e.op("Round", [e.op("Div", [f32(x), f32(spread(e, scale, shape, axis, block))])]);
    if (zero) {
      q = e.op("Add", [q, e.op("Cast", [spread(e, zero, shape, axis, block)], { to: "f32" })]);
    }
    return [e.op("Cast", [e.op("Clip", [q], { min: lo, max: hi })], { to: dtype })];
  },
};

/**
 * DequantizeLinear: (x − zero point) · scale in f32 arithmetic (the difference of two integers
 * of 16 bits or fewer is exact; the product rounds once), in the scale's type.
 */
const dequantizeLinear: OpDef = {
  name: "DequantizeLinear",
  category: "composite",
  arity: [2, 3],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, ["u8", "i8", "u16", "i16", "i32"]);
    const dtype = ctx.requireDType(1, ["f32", "f16"]);
    scaleAxis(ctx);
    if (ctx.inputs.length > 2) ctx.requireDType(2, [ctx.input(0).dtype]);
    return [{ shape: ctx.input(0).shape, dtype }];
  },
  decompose: (e, [x, scale, zero], a) => {
    const shape = e.typeOf(x).shape, [axis, block] = layoutOf(shape, a);
    const f32 = (k: EmitRef) => e.op("Cast", [k], { to: "f32" });
    let v = f32(x);
    if (zero) v = e.op("Sub", [v, f32(spread(e, zero, shape, axis, block))]);
    const s = spread(e, scale, shape, axis, block), dtype = e.typeOf(scale).dtype;
    const y = e.op("Mul", [v, dtype === "f32" ? s : f32(s)]);
    return [dtype === "f32" ? y : e.op("Cast", [y], { to: dtype })];
  },
};

defineOps([dynamicQuantizeLinear, rangeWithZero, quantizeLinear, dequantizeLinear]);
