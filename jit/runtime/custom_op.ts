/**
 * User-defined ops. {@linkcode registerOp} adds an op with its shape rule and a reference
 * implementation (so the reference backend and every test oracle can run it), and optionally a
 * kernel generator per backend id. A backend without a kernel for the op reports it unsupported,
 * and legalization refuses the graph with an error naming the op and the backend.
 *
 * @module
 */
import type { TensorData } from "../ir/dtype.ts";
import { KilnError } from "../support/errors.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { type Attrs, defineOps, getOp, opNames, type ValueType } from "../ops/mod.ts";

/** What a custom kernel generator receives. */
export interface CustomKernelArgs {
  /** Input types. */
  readonly inputs: readonly ValueType[];
  /** Output types. */
  readonly outputs: readonly ValueType[];
  /** Attributes. */
  readonly attrs: Attrs;
  /** `wasm`: whether the imported `env.memory` is shared (the backend runs threads). */
  readonly shared?: boolean;
}

/**
 * Generates a backend's kernel for a custom op.
 *
 * - `webgpu`: WGSL with `@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id:
 *   vec3<u32>)`. Bindings of group 0: the inputs (`var<storage, read>`), then the outputs
 *   (`var<storage, read_write>`), as arrays of 32-bit elements (f32, i32 or u32; bool and 8-bit
 *   types are stored one per word; f16 too, except on a device with `shader-f16`, where f16 tensors
 *   are `array<f16>` and the shader must `enable f16;`); every binding must be used. It is dispatched over the first
 *   output's elements: element `id.x + id.y * 4194240` (65535 workgroups of 64 a row), so check it
 *   against the count.
 * - `wasm`: a module importing `env.memory` (shared when `shared`) and exporting
 *   `run(input addresses…, output addresses…)`: byte addresses of 32-bit elements laid out as above.
 */
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

/** The kernel generator a custom op registered for `backend`, if any. */
export function customKernel(op: string, backend: string): CustomKernel | undefined {
  const k = customOps.get(op)?.kernels?.[backend];
  return typeof k === "function" ? k : undefined;
}

/**
 * Runs the generator of custom op `op` for `backend` on a kernel's buffers, checking that it gave
 * the artifact kind the backend loads (WGSL text, or WebAssembly bytes).
 */
export function customArtifact(
  backend: string,
  opaque: { readonly op: string; readonly attrs: Attrs },
  buffers: { readonly inputs: readonly ValueType[]; readonly outputs: readonly ValueType[] },
  form: { readonly artifact: "text" | "bytes"; readonly shared?: boolean },
): string | Uint8Array {
  const generate = customKernel(opaque.op, backend);
  if (!generate) {
    throw new KilnError(`Custom op ${opaque.op} has no ${backend} kernel`, {
      code: "unsupported",
      fix: `register one with registerOp({ kernels: { ${backend}: … } }), or run it elsewhere`,
    });
  }
  const strip = (t: ValueType): ValueType => ({ shape: t.shape, dtype: t.dtype });
  let out: unknown;
  try {
    out = generate({
      inputs: buffers.inputs.map(strip),
      outputs: buffers.outputs.map(strip),
      attrs: opaque.attrs,
      ...(form.shared === undefined ? {} : { shared: form.shared }),
    });
  } catch (e) {
    throw new KilnError(
      `The ${backend} kernel generator of ${opaque.op} failed: ${(e as Error)?.message}`,
      { code: "bad-input", fix: "fix the generator registered with registerOp", cause: e },
    );
  }
  // The backend says which form its artifacts take (WGSL text, a wasm module's bytes).
  const text = form.artifact === "text";
  if (text ? typeof out !== "string" : !(out instanceof Uint8Array)) {
    throw new KilnError(
      `The ${backend} kernel of ${opaque.op} must return a ${text ? "string" : "Uint8Array"}`,
      {
        code: "bad-input",
        fix: text ? "return the kernel's source text" : "return the module's bytes",
      },
    );
  }
  return out as string | Uint8Array;
}

/**
 * The ops a backend that generates kernels from kernel IR runs as they are: every op fusion
 * expresses (all but custom ones), and the custom ops with a kernel registered for `backend`.
 */
export function kernelOps(backend: string): string[] {
  return opNames().filter((op) =>
    getOp(op).category !== "custom" || customKernel(op, backend) !== undefined
  ).sort();
}
