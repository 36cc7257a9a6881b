/**
 * Reference kernels of the scatters (`jit/ops/scatter.ts`): data copied, then every update
 * written in ONNX's order, combined by the reduction (the last write wins for "none").
 *
 * @module
 */
import type { TensorData } from "../../jit/ir/dtype.ts";
import { type Shape, sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import type { Kernel, KernelArgs } from "./kernel.ts";
import { index } from "./kernels_movement.ts";
import { read, written } from "./tensor_io.ts";

/** How a reduction combines what is there with an update (NaN wins max and min, as Max does). */
const COMBINE: Record<string, (was: number, v: number) => number> = {
  none: (_, v) => v,
  add: (was, v) => was + v,
  mul: (was, v) => was * v,
  max: (was, v) => (was > v || Number.isNaN(was) ? was : v),
  min: (was, v) => (was < v || Number.isNaN(was) ? was : v),
};

/** Writes update `u` of `args` at flat position `p` of `out`, as the reduction combines. */
function scatterInto(args: KernelArgs, places: (u: number) => number): TensorData[] {
  const [data, , updates] = args.inputs;
  const out = Array.from(read(data));
  const combine = COMBINE[args.ctx.choice("reduction", ["none", "add", "mul", "max", "min"])];
  const values = read(updates);
  for (let u = 0; u < values.length; u++) {
    const p = places(u);
    out[p] = combine(out[p], values[u]);
  }
  return [written(args.outputs[0].dtype, out)];
}

/** The coordinates of flat position `i` of `shape`. */
function coordsOf(i: number, shape: Shape, strides: readonly number[]): number[] {
  return shape.map((d, a) => Math.floor(i / strides[a]) % d);
}

/** Kernels by op name. */
export const scatterKernels: Record<string, Kernel> = {
  ScatterElements: (args) => {
    const [data, indices, updates] = args.inputs;
    const axis = args.ctx.axis(args.ctx.int("axis", 0), data.shape.length);
    const ids = read(indices), us = stridesOf(updates.shape), ds = stridesOf(data.shape);
    return scatterInto(args, (u) =>
      coordsOf(u, updates.shape, us).reduce(
        (p, c, d) =>
          p + (d === axis ? index(Number(ids[u]), data.shape[d], args.ctx.where) : c) * ds[d],
        0,
      ));
  },
  ScatterND: (args) => {
    const [data, indices] = args.inputs;
    const k = indices.shape.at(-1)!, slice = sizeOf(data.shape.slice(k));
    const ids = read(indices), ds = stridesOf(data.shape);
    return scatterInto(args, (u) => {
      const t = Math.floor(u / slice);
      let base = 0;
      for (let d = 0; d < k; d++) {
        base += index(Number(ids[t * k + d]), data.shape[d], args.ctx.where) * ds[d];
      }
      return base + (u % slice);
    });
  },
};
