/**
 * The reference kernel of Einsum (`jit/ops/einsum.ts`): every combination of the equation's
 * letters visited once, the operands' elements there multiplied in float64 and added into the
 * output's element (a repeated letter reads an operand's diagonal, a broadcast axis of 1 stays).
 *
 * @module
 */
import { type EinsumPlan, einsumPlan } from "../../jit/ops/einsum.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { Kernel } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** Each of `axes`' strides per letter of `all` (0 where a letter is absent or broadcast). */
function strides(shape: readonly number[], axes: readonly string[], all: readonly string[]) {
  const out = all.map(() => 0);
  let stride = 1;
  for (let k = shape.length - 1; k >= 0; k--) {
    if (shape[k] !== 1) out[all.indexOf(axes[k])] += stride;
    stride *= shape[k];
  }
  return out;
}

/** Kernels of Einsum, by op name. */
export const einsumKernels: Record<string, Kernel> = {
  Einsum: ({ inputs, outputs, ctx }) => {
    const shapes = inputs.map((t) => t.shape);
    const plan = einsumPlan(ctx.attrs.equation as string, shapes) as EinsumPlan;
    const all = [...new Set([...plan.output, ...plan.letters.flat()])];
    const extents = all.map((l) => plan.extent.get(l)!);
    const data = inputs.map(read);
    const steps = inputs.map((t, i) => strides(t.shape, plan.letters[i], all));
    const outShape = plan.output.map((l) => plan.extent.get(l)!);
    const outSteps = strides(outShape, plan.output, all);
    const out = new Float64Array(sizeOf(outShape));
    const total = sizeOf(extents), at = all.map(() => 0);
    for (let n = 0; n < total; n++) {
      let product = 1, o = 0;
      for (let i = 0; i < data.length; i++) {
        let offset = 0;
        for (let a = 0; a < all.length; a++) offset += at[a] * steps[i][a];
        product *= data[i][offset];
      }
      for (let a = 0; a < all.length; a++) o += at[a] * outSteps[a];
      out[o] += product;
      // The next combination, the last letter fastest.
      for (let a = all.length - 1; a >= 0 && ++at[a] === extents[a]; a--) at[a] = 0;
    }
    return [written(outputs[0].dtype, out)];
  },
};
