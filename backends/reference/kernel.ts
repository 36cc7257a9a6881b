/**
 * The reference kernel signature: a kernel gets its inputs, attributes, the output types the
 * graph already inferred, and the node's {@linkcode InferContext} (so it resolves attributes with
 * the same code shape inference used), and returns one data array per output.
 *
 * @module
 */
import type { DType, TensorData } from "../../jit/ir/dtype.ts";
import { type Attrs, InferContext, type ValueType } from "../../jit/ops/mod.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";

/** What a reference kernel receives. */
export interface KernelArgs {
  /** Input tensors. */
  readonly inputs: readonly RefTensor[];
  /** Node attributes. */
  readonly attrs: Attrs;
  /** Output types. */
  readonly outputs: readonly ValueType[];
  /** The node's inference context, for attribute resolution. */
  readonly ctx: InferContext;
}

/** A reference kernel. */
export type Kernel = (args: KernelArgs) => TensorData[];

/**
 * `kernel` (of op `op`) run on `inputs` with `attrs`, giving one output of `shape` and `dtype`: a
 * composite's reference computing a step through another op's own (`where` labels errors).
 */
export function runKernel(
  kernel: Kernel,
  op: string,
  [inputs, attrs]: [readonly RefTensor[], Attrs],
  [shape, dtype]: [readonly number[], DType],
  where: string,
): RefTensor {
  const ctx = new InferContext({ op, where, inputs, attrs });
  return { data: kernel({ inputs, attrs, outputs: [{ shape, dtype }], ctx })[0], shape, dtype };
}
