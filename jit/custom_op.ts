/**
 * User-defined ops. {@linkcode registerOp} adds an op with its shape rule and a reference
 * implementation (so the reference backend and every test oracle can run it), and optionally a
 * kernel generator per backend id. A backend without a kernel for the op reports it unsupported,
 * and legalization refuses the graph with an error naming the op and the backend.
 *
 * @module
 */
import type { TensorData } from "./dtype.ts";
import { KilnError } from "./errors.ts";
import type { HostTensor } from "./host_tensor.ts";
import { type Attrs, defineOps, type ValueType } from "./ops/mod.ts";

/** What a custom kernel generator receives. */
export interface CustomKernelArgs {
  /** Input types. */
  readonly inputs: readonly ValueType[];
  /** Output types. */
  readonly outputs: readonly ValueType[];
  /** Attributes. */
  readonly attrs: Attrs;
}

/** Generates a backend's kernel for a custom op: WGSL source for `webgpu`, a WASM module for `wasm`. */
export type CustomKernel = (args: CustomKernelArgs) => string | Uint8Array;

/** Definition of a custom op. */
export interface CustomOpSpec {
  /** Unique op name (prefix it, e.g. `"my.Swish"`). */
  readonly name: string;
  /** Smallest and largest input count; default `[1, 1]`. */
  readonly arity?: readonly [number, number];
  /** Output types from input types and attributes; throw to reject a node. */
  inferShape(inputs: readonly ValueType[], attrs: Attrs): ValueType | ValueType[];
  /** Reference implementation: one data array (or HostTensor) per output. */
  reference(
    inputs: readonly HostTensor[],
    attrs: Attrs,
  ): TensorData | HostTensor | (TensorData | HostTensor)[];
  /** Kernel generators by backend id. */
  readonly kernels?: Readonly<Record<string, CustomKernel>>;
}

const customOps = new Map<string, CustomOpSpec>();

/**
 * Registers a custom op.
 *
 * @example A swish op with only a reference implementation
 * ```ts
 * import { registerOp } from "./custom_op.ts";
 * registerOp({
 *   name: "example.Swish",
 *   inferShape: ([x]) => x,
 *   reference: ([x]) => (x.data as Float32Array).map((v) => v / (1 + Math.exp(-v))),
 * });
 * ```
 */
export function registerOp(spec: CustomOpSpec): void {
  if (
    typeof spec?.name !== "string" || typeof spec.inferShape !== "function" ||
    typeof spec.reference !== "function"
  ) {
    throw new KilnError("registerOp needs { name, inferShape, reference }", {
      code: "bad-attribute",
      fix: "pass a name, a shape rule and a reference implementation",
    });
  }
  defineOps([{
    name: spec.name,
    category: "custom",
    arity: spec.arity ?? [1, 1],
    primitive: true,
    infer: (ctx) => {
      let out: ValueType | ValueType[];
      try {
        out = spec.inferShape(ctx.inputs, ctx.attrs);
      } catch (e) {
        if (e instanceof KilnError) throw e;
        return ctx.fail(
          `inferShape rejected the node: ${(e as Error).message}`,
          "pass inputs the custom op accepts",
        );
      }
      return Array.isArray(out) ? out : [out];
    },
  }]);
  customOps.set(spec.name, spec);
}

/** The custom op named `op`, if any. */
export function customOp(op: string): CustomOpSpec | undefined {
  return customOps.get(op);
}
