/**
 * The reference kernel of OneHot (`jit/ops/one_hot.ts`): each output element off or on by
 * whether its position along the new axis is its index's (floored, negative from the end).
 *
 * @module
 */
import { sizeOf } from "../../jit/ir/shape.ts";
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Kernels of OneHot, by op name. */
export const oneHotKernels: Record<string, Kernel> = {
  OneHot: ({ inputs: [indices, values], outputs, ctx }) => {
    const idx = read(indices), [off, on] = Array.from(read(values));
    const depth = ctx.int("depth"), axis = ctx.int("axis"), shape = indices.shape;
    const inner = sizeOf(shape.slice(axis));
    const out = new Float64Array(idx.length * depth);
    for (let i = 0; i < idx.length; i++) {
      const raw = Math.floor(idx[i]), index = raw < 0 ? raw + depth : raw;
      const [o, r] = [Math.floor(i / inner), i % inner];
      for (let p = 0; p < depth; p++) out[(o * depth + p) * inner + r] = p === index ? on : off;
    }
    return [written(outputs[0].dtype, out)];
  },
};
