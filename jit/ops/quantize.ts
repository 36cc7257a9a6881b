/**
 * `DynamicQuantizeLinear`: x (f32) quantized to uint8 with a scale and zero point computed from
 * its own range (widened to hold 0), as ONNX defines it: scale = (max − min) / 255, zero point =
 * saturate(round(−min / scale)), y = saturate(round(x / scale) + zero point), rounding half to
 * even. The range is taken rows first, then over the row results, for a large tensor: one
 * reduction of a whole activation ran on one GPU workgroup (1.1 ms for BERT-base's [128, 3072] on
 * the H200, 96 of them a run) and one wasm thread; by rows it spreads. Min and max are exact in any
 * order. A small tensor keeps one step (a second kernel cost quant_dynamic's [2, 1024] a tenth of
 * its run on wasm).
 *
 * @module
 */
import { sizeOf } from "../ir/shape.ts";
import { defineOps, type EmitRef, type OpDef } from "./registry.ts";

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
    const shape = e.typeOf(x).shape, rank = shape.length;
    const all = { axes: [...Array(rank).keys()], keepdims: 0 };
    const long = rank > 1 && sizeOf(shape) >= 1 << 16;
    const whole = (reduce: string) =>
      e.op(reduce, [long ? e.op(reduce, [x], { axes: [rank - 1], keepdims: 1 }) : x], all);
    const f = (v: number) => e.scalar(v, "f32");
    const zero = f(0);
    const hi = e.op("Max", [whole("ReduceMax"), zero]);
    const lo = e.op("Min", [whole("ReduceMin"), zero]);
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

defineOps([dynamicQuantizeLinear]);
