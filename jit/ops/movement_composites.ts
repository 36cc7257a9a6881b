/**
 * Movement ops ONNX defines through others: `Tile` (a broadcast between interleaved reshapes) and
 * `CenterCropPad` (a centred slice or zero pad per axis). Both decompose into movement, which
 * fusion turns into index arithmetic.
 *
 * @module
 */
import { formatShape } from "../ir/shape.ts";
import { defineOps, type OpDef } from "./registry.ts";

const tile: OpDef = {
  name: "Tile",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const { shape, dtype } = ctx.input(0), repeats = ctx.ints("repeats");
    if (repeats.length !== shape.length || repeats.some((r) => !(Number.isInteger(r) && r >= 0))) {
      ctx.fail(
        `repeats [${repeats}] for a tensor of rank ${shape.length}`,
        "give one non-negative repeat per axis",
        "bad-attribute",
      );
    }
    return [{ shape: shape.map((d, i) => d * repeats[i]), dtype }];
  },
  decompose: (e, [x], a) => {
    const shape = e.typeOf(x).shape, repeats = a.repeats as readonly number[];
    // [d0, d1, …] → [1, d0, 1, d1, …] → expanded to [r0, d0, r1, d1, …] → [r0·d0, r1·d1, …].
    const interleaved = shape.flatMap((d) => [1, d]);
    const spread = shape.flatMap((d, i) => [repeats[i], d]);
    // allowzero: a 0 in these shapes is an empty axis, not "keep the input's".
    const reshaped = e.op("Reshape", [x], { shape: interleaved, allowzero: 1 });
    const wide = e.op("Expand", [reshaped], { shape: spread });
    return [e.op("Reshape", [wide], { shape: shape.map((d, i) => d * repeats[i]), allowzero: 1 })];
  },
};

/** CenterCropPad's axes (every axis by default), negative ones counted from the end. */
function cropAxes(rank: number, given?: readonly number[]): number[] {
  return (given ?? [...Array(rank).keys()]).map((a) => (a < 0 ? a + rank : a));
}

const centerCropPad: OpDef = {
  name: "CenterCropPad",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const { shape, dtype } = ctx.input(0), target = ctx.ints("shape");
    const given = ctx.has("axes") ? ctx.ints("axes") : undefined;
    const axes = cropAxes(shape.length, given);
    if (
      axes.length !== target.length || axes.some((a) => a < 0 || a >= shape.length) ||
      target.some((t) => !(Number.isInteger(t) && t >= 0))
    ) {
      ctx.fail(
        `shape [${target}] for axes [${axes}] of ${formatShape(shape)}`,
        "give one non-negative target size per axis",
        "bad-input",
      );
    }
    const out = [...shape];
    axes.forEach((a, i) => (out[a] = target[i]));
    return [{ shape: out, dtype }];
  },
  decompose: (e, [x], a) => {
    const shape = e.typeOf(x).shape, target = a.shape as readonly number[];
    let y = x;
    cropAxes(shape.length, a.axes as readonly number[] | undefined).forEach((axis, i) => {
      const d = shape[axis], want = target[i];
      if (want < d) {
        const start = Math.floor((d - want) / 2);
        y = e.op("Slice", [y], { starts: [start], ends: [start + want], axes: [axis] });
      } else if (want > d) {
        const pads = shape.map(() => 0).concat(shape.map(() => 0));
        pads[axis] = Math.floor((want - d) / 2);
        pads[axis + shape.length] = want - d - pads[axis];
        y = e.op("Pad", [y], { pads, mode: "constant", value: 0 });
      }
    });
    return [y === x ? e.op("Identity", [x]) : y];
  },
};

defineOps([tile, centerCropPad]);
