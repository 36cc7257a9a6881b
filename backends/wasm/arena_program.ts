/**
 * The arena program: a whole fused plan in one `WebAssembly.Memory`. Every buffer has a fixed
 * place in the arena; each run writes the inputs (params and constants only when their data
 * changed), calls each kernel's `run` with its buffers' addresses and row range, and reads back
 * only the requested outputs.
 *
 * @module
 */
import type { Program } from "../backend.ts";
import type { DType, TensorData } from "../../jit/dtype.ts";
import type { HostTensor } from "../../jit/host_tensor.ts";
import { type KernelIR, rowCount } from "../../jit/kernel_ir.ts";
import { sizeOf } from "../../jit/shape.ts";
import { fromWords, toWords } from "../words.ts";
import { scratchBytes } from "./wasm_codegen.ts";

/** A plan for the arena. */
export interface ArenaPlan {
  /** Values bound from the run's arguments, in argument order; `resident` ones are params. */
  readonly bindings: readonly { readonly value: number; readonly resident: boolean }[];
  /** The value of each output index `run` may be asked for. */
  readonly outputs: readonly number[];
  /** Kernels in execution order (none opaque). */
  readonly kernels: readonly KernelIR[];
  /** One compiled module per kernel. */
  readonly modules: readonly WebAssembly.Module[];
  /** Constant buffers (value id → data). */
  readonly constants: ReadonlyMap<number, HostTensor>;
  /** Per kernel: whether a bucketed run computes only the active rows. */
  readonly partial?: readonly boolean[];
  /** Host functions the modules import (`env.*`). */
  readonly imports: Readonly<Record<string, (...args: number[]) => number>>;
}

const PAGE = 65536;

/** Builds the program for `plan`. */
export function arenaProgram(plan: ArenaPlan): Program {
  const types = new Map<number, { shape: readonly number[]; dtype: DType }>();
  for (const k of plan.kernels) for (const b of [...k.inputs, ...k.outputs]) types.set(b.value, b);
  const offsets = new Map<number, number>();
  let top = 0;
  for (const [v, t] of types) {
    offsets.set(v, top);
    top += Math.ceil(Math.max(1, sizeOf(t.shape)) * 4 / 16) * 16;
  }
  const scratch = top;
  top += Math.ceil(Math.max(16, ...plan.kernels.map(scratchBytes)) / 16) * 16;
  const memory = new WebAssembly.Memory({
    initial: Math.max(1, Math.ceil(top / PAGE)),
    maximum: 65536,
  });
  const runs = plan.modules.map((
    mod,
  ) => (new WebAssembly.Instance(mod, { env: { memory, ...plan.imports } }).exports.run as (
    ...a: number[]
  ) => void));
  const written = new Map<number, TensorData>();
  const write = (value: number, data: TensorData, dtype: DType) => {
    if (!types.has(value) || written.get(value) === data) return;
    const words = toWords(data, dtype);
    new Uint8Array(memory.buffer, offsets.get(value)!, words.byteLength).set(
      new Uint8Array(words.buffer, words.byteOffset, words.byteLength),
    );
  };
  return {
    run(args, outputs, active) {
      plan.bindings.forEach((b, i) => {
        write(b.value, args[i].data, args[i].dtype);
        if (b.resident) written.set(b.value, args[i].data);
      });
      for (const [v, t] of plan.constants) {
        write(v, t.data, t.dtype as DType);
        written.set(v, t.data);
      }
      plan.kernels.forEach((k, i) => {
        const rows = active !== undefined && plan.partial?.[i]
          ? rowCount(k) / k.space[0] * active
          : rowCount(k);
        runs[i](
          ...k.inputs.map((b) => offsets.get(b.value)!),
          ...k.outputs.map((b) => offsets.get(b.value)!),
          scratch,
          0,
          rows,
        );
      });
      return Promise.resolve(outputs.map((i) => {
        const v = plan.outputs[i];
        const bound = plan.bindings.findIndex((b) => b.value === v);
        if (bound >= 0) return args[bound].data;
        const t = types.get(v)!;
        return fromWords(memory.buffer as ArrayBuffer, offsets.get(v)!, sizeOf(t.shape), t.dtype);
      }));
    },
    dispose() {
      written.clear();
    },
  };
}
