/**
 * The reference kernel signature: a kernel gets its inputs, attributes, the output types the
 * graph already inferred, and the node's {@linkcode InferContext} (so it resolves attributes with
 * the same code shape inference used), and returns one data array per output.
 *
 * @module
 */
import type { TensorData } from "../../jit/ir/dtype.ts";
import type { Attrs, InferContext, ValueType } from "../../jit/ops/mod.ts";
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
