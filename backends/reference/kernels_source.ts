/**
 * Reference kernels for ops without data inputs: Constant, ConstantOfShape, Range.
 *
 * @module
 */
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { rangeParams } from "../../jit/ops/source.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { Kernel } from "./kernel.ts";
import { castValue } from "./scalar_math.ts";
import { writer } from "./tensor_io.ts";

/** Kernels of the source family, by op name. */
export const sourceKernels: Record<string, Kernel> = {
  Constant: ({ attrs }) => [(attrs.value as HostTensor).data.slice()],
  ConstantOfShape: ({ outputs, ctx }) => {
    const { dtype, shape } = outputs[0];
    const w = writer(dtype, sizeOf(shape));
    const v = castValue(ctx.float("value", 0), dtype);
    for (let i = 0; i < sizeOf(shape); i++) w.out[i] = v;
    return [w.finish()];
  },
  Range: ({ ctx }) => {
    const { start, delta, count, dtype } = rangeParams(ctx);
    const w = writer(dtype, count);
    for (let i = 0; i < count; i++) w.out[i] = castValue(start + i * delta, dtype);
    return [w.finish()];
  },
};
