/**
 * The host program: runs a fused plan's kernels in order over host buffers. Graph inputs, params
 * and constants seed the buffer table; each intermediate is dropped after the last kernel that
 * reads it (the memory plan's lifetimes), and only the requested outputs are returned.
 *
 * @module
 */
import type { PreparedKernel, Program } from "../backends/backend.ts";
import type { RefTensor } from "../backends/reference/tensor_io.ts";
import type { DType, TensorData } from "./dtype.ts";
import type { Graph } from "./graph.ts";
import type { HostTensor } from "./host_tensor.ts";
import type { KernelIR } from "./kernel_ir.ts";

/** What a host program is assembled from. */
export interface HostProgramInit {
  /** The (legalized) graph. */
  readonly graph: Graph;
  /** Kernels in execution order. */
  readonly kernels: readonly KernelIR[];
  /** The loaded kernels, same order. */
  readonly prepared: readonly PreparedKernel[];
  /** Constant buffers fusion kept (value id → data). */
  readonly constants: ReadonlyMap<number, HostTensor>;
}

/** Assembles a {@linkcode Program} that runs `kernels` on the host. */
export function hostProgram(init: HostProgramInit): Program {
  const { graph, kernels, prepared, constants } = init;
  const lastUse = new Map<number, number>();
  kernels.forEach((k, i) => k.inputs.forEach((b) => lastUse.set(b.value, i)));
  const keep = new Set([...graph.outputs.map((o) => o.value), ...constants.keys()]);
  const constTensors = [...constants].map((
    [v, t],
  ): [number, RefTensor] => [v, { data: t.data, shape: t.shape, dtype: t.dtype as DType }]);
  return {
    async run(args, outputs) {
      const env = new Map<number, RefTensor>(constTensors);
      [...graph.inputs, ...graph.params].forEach((b, i) => env.set(b.value, args[i]));
      for (let i = 0; i < kernels.length; i++) {
        const k = kernels[i];
        const data: TensorData[] = await prepared[i].run(k.inputs.map((b) => env.get(b.value)!));
        k.outputs.forEach((o, j) =>
          env.set(o.value, { data: data[j], shape: o.shape, dtype: o.dtype })
        );
        for (const b of k.inputs) {
          if (lastUse.get(b.value) === i && !keep.has(b.value)) env.delete(b.value);
        }
      }
      return outputs.map((i) => env.get(graph.outputs[i].value)!.data);
    },
    dispose() {},
  };
}
