/**
 * The host program: runs a fused plan's kernels in order over host buffers. Graph inputs, params
 * and constants seed the buffer table; each intermediate is dropped after the last kernel that
 * reads it (the memory plan's lifetimes), and only the kernels the requested outputs need run.
 *
 * @module
 */
import type { PreparedKernel, Program } from "./backend.ts";
import type { RefTensor } from "../ir/host_tensor.ts";
import type { DType, TensorData } from "../ir/dtype.ts";
import type { Graph } from "../ir/graph.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import type { MemoryPlan } from "../schedule/memory_plan.ts";
import { sizeOf } from "../ir/shape.ts";

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
  /** Where intermediates live; their slots are allocated once and reused by every run. */
  readonly memory: MemoryPlan;
  /** Per kernel: whether a bucketed run limits it to the active batch rows. */
  readonly partial?: readonly boolean[];
}

/**
 * Assembles a {@linkcode Program} that runs `kernels` on the host. Intermediates are written into
 * the memory plan's slots (one `ArrayBuffer` each, viewed as the dtype that lives there at the
 * time); runs of one program are serialized because they share those slots.
 */
export function hostProgram(init: HostProgramInit): Program {
  const { graph, kernels, prepared, constants, memory } = init;
  const lastUse = new Map<number, number>();
  kernels.forEach((k, i) => k.inputs.forEach((b) => lastUse.set(b.value, i)));
  const keep = new Set([...graph.outputs.map((o) => o.value), ...constants.keys()]);
  const needed = neededKernels(kernels, graph.outputs.map((o) => o.value));
  const constTensors = [...constants].map((
    [v, t],
  ): [number, RefTensor] => [v, { data: t.data, shape: t.shape, dtype: t.dtype as DType }]);
  let slots: ArrayBuffer[] | undefined;
  const into = kernels.map((k) =>
    k.outputs.map((o) => {
      const slot = memory.assignment.get(o.value);
      return slot === undefined ? undefined : () =>
        view(
          (slots ??= memory.slots.map((b) => new ArrayBuffer(b)))[slot],
          o.dtype,
          sizeOf(o.shape),
        );
    })
  );
  const runOnce = async (
    args: readonly RefTensor[],
    outputs: readonly number[],
    active?: number,
  ) => {
    const env = new Map<number, RefTensor>(constTensors);
    [...graph.inputs, ...graph.params].forEach((b, i) => env.set(b.value, args[i]));
    const run = needed(outputs);
    for (let i = 0; i < kernels.length; i++) {
      if (!run[i]) continue;
      const k = kernels[i];
      const data: TensorData[] = await prepared[i].run(
        k.inputs.map((b) => env.get(b.value)!),
        into[i].map((f) => f?.()),
        active !== undefined && init.partial?.[i] ? active : undefined,
      );
      k.outputs.forEach((o, j) =>
        env.set(o.value, { data: data[j], shape: o.shape, dtype: o.dtype })
      );
      for (const b of k.inputs) {
        if (lastUse.get(b.value) === i && !keep.has(b.value)) env.delete(b.value);
      }
    }
    return outputs.map((i) => env.get(graph.outputs[i].value)!.data);
  };
  return {
    run: serialized(runOnce),
    dispose() {
      slots = undefined;
    },
  };
}

/**
 * Which of `kernels` (in execution order) a run must execute to produce `values`: those that
 * write one of them or write an input of a kernel that must run. A run asking for some outputs
 * skips the branches only the others need.
 */
export function kernelsFor(kernels: readonly KernelIR[], values: Iterable<number>): boolean[] {
  const wanted = new Set(values);
  const run = kernels.map(() => false);
  for (let i = kernels.length - 1; i >= 0; i--) {
    if (!kernels[i].outputs.some((o) => wanted.has(o.value))) continue;
    run[i] = true;
    for (const b of kernels[i].inputs) wanted.add(b.value);
  }
  return run;
}

/**
 * {@linkcode kernelsFor} per set of requested output indices (`outputs` maps an index to its
 * value), remembered: programs ask it on every run.
 */
export function neededKernels(
  kernels: readonly KernelIR[],
  outputs: readonly number[],
): (requested: readonly number[]) => readonly boolean[] {
  const memo = new Map<string, boolean[]>();
  return (requested) => {
    const key = requested.join();
    let run = memo.get(key);
    if (!run) {
      run = kernelsFor(kernels, requested.map((i) => outputs[i]));
      if (memo.size < 64) memo.set(key, run);
    }
    return run;
  };
}

/**
 * `run` behind a queue: a program's runs share its buffers, so each starts when the previous one
 * has settled (a failed run does not block the next).
 */
export function serialized(run: Program["run"]): Program["run"] {
  let queue: Promise<unknown> = Promise.resolve();
  return (args, outputs, active, into) => {
    const result = queue.then(() => run(args, outputs, active, into));
    queue = result.catch(() => {});
    return result;
  };
}

/** A typed view of `n` elements of `dtype` at the start of `buffer`. */
function view(buffer: ArrayBuffer, dtype: DType, n: number): TensorData {
  switch (dtype) {
    case "f64":
      return new Float64Array(buffer, 0, n);
    case "i64":
      return new BigInt64Array(buffer, 0, n);
    case "f32":
      return new Float32Array(buffer, 0, n);
    case "f16":
      return new Uint16Array(buffer, 0, n);
    case "i32":
      return new Int32Array(buffer, 0, n);
    case "u32":
      return new Uint32Array(buffer, 0, n);
    case "i16":
      return new Int16Array(buffer, 0, n);
    case "u16":
      return new Uint16Array(buffer, 0, n);
    case "i8":
      return new Int8Array(buffer, 0, n);
    case "u8":
    case "bool":
      return new Uint8Array(buffer, 0, n);
  }
}

/** The run-time bindings of a graph: inputs then params (resident), and its outputs' values. */
export function bindingsOf(
  graph: Graph,
): { bindings: { value: number; resident: boolean }[]; outputs: number[] } {
  return {
    bindings: [
      ...graph.inputs.map((i) => ({ value: i.value, resident: false })),
      ...graph.params.map((p) => ({ value: p.value, resident: true })),
    ],
    outputs: graph.outputs.map((o) => o.value),
  };
}
