/**
 * Bind groups of a program's kernels, found by the buffers they bind (see {@linkcode BindGroups}).
 *
 * @module
 */
import type { DType } from "../../jit/ir/dtype.ts";
import type { KernelIR, Packing } from "../../jit/ir/kernel_ir.ts";

/** A tensor's type, as buffers are sized by it (`packed`: 8-bit, four or eight to a word). */
export type Typed = {
  readonly shape: readonly number[];
  readonly dtype: DType;
  readonly packed?: Packing;
};

/** A tensor a kernel binds: its value and type. */
type Bound = Typed & { readonly value: number };

/** Bind groups kept per kernel (runs alternate among a few buffer sets). */
const BIND_GROUPS = 8;

/**
 * Bind groups, cached at two levels by the buffers they bind. Steady-state runs get the same
 * buffers back from the pool (a decode step alternates between two sets), so a run whose buffers
 * match an earlier run's, one by one, takes all that run's groups: hundreds of kernels a step, and
 * per-kernel keys of buffer ids had cost about a millisecond of each decode step's host time.
 * Otherwise each kernel looks among its own few groups for its buffers, so a run that changed one
 * buffer makes only the groups that bind it. Buffers compare by identity; one the pool destroyed
 * never matches again.
 */
export class BindGroups {
  #device: GPUDevice;
  #pipelines: readonly (GPUComputePipeline | undefined)[];
  /** Per kernel, what it binds (inputs, then outputs). */
  #bound: readonly (readonly Bound[])[];
  /** Every value some kernel binds: a run's buffers, listed in this order, identify it. */
  #values: readonly number[];
  #runs: { buffers: GPUBuffer[]; groups: (GPUBindGroup | undefined)[] }[] = [];
  #kernels: { buffers: GPUBuffer[]; group: GPUBindGroup }[][];
  #bytes: (t: Typed) => number;
  #offsets: ReadonlyMap<number, number>;

  /**
   * Groups for `kernels`' `pipelines`, each buffer bound at `bytes` of its tensor, from its
   * value's place in `offsets` (0 where absent: combined outputs share a buffer); the inputs
   * `aliases` names per kernel are read through their outputs' bindings, not bound.
   */
  constructor(
    device: GPUDevice,
    pipelines: readonly (GPUComputePipeline | undefined)[],
    kernels: readonly KernelIR[],
    { bytes, offsets = new Map(), aliases = [] }: {
      bytes: (t: Typed) => number;
      offsets?: ReadonlyMap<number, number>;
      aliases?: readonly ReadonlyMap<number, number>[];
    },
  ) {
    this.#device = device;
    this.#pipelines = pipelines;
    this.#bytes = bytes;
    this.#offsets = offsets;
    this.#bound = kernels.map((k, i) => [
      ...k.inputs.filter((_, j) => !aliases[i]?.has(j)),
      ...k.outputs,
    ]);
    this.#values = [...new Set(this.#bound.flat().map((b) => b.value))];
    this.#kernels = pipelines.map(() => []);
  }

  /** The groups of a run over `buffers` (value → buffer): kernel `i`'s when first asked for. */
  run(buffers: ReadonlyMap<number, GPUBuffer>): (i: number) => GPUBindGroup {
    const list = this.#values.map((v) => buffers.get(v)!);
    const run = recent(this.#runs, list, () => ({ buffers: list, groups: [] }));
    return (i) => run.groups[i] ??= this.#of(i, buffers);
  }

  /** Kernel `i`'s group over `buffers`, among its own few. */
  #of(i: number, buffers: ReadonlyMap<number, GPUBuffer>): GPUBindGroup {
    const bound = this.#bound[i];
    const list = bound.map((b) => buffers.get(b.value)!);
    return recent(this.#kernels[i], list, () => ({
      buffers: list,
      group: this.#device.createBindGroup({
        layout: this.#pipelines[i]!.getBindGroupLayout(0),
        // Bound at the tensor's size (pool buckets round up, past the binding limit for the
        // largest tensors that fit it), or less: a bucketed run uploads only its active rows.
        entries: list.map((buffer, j) => {
          const offset = this.#offsets.get(bound[j].value) ?? 0;
          const size = Math.min(this.#bytes(bound[j]), buffer.size - offset);
          return { binding: j, resource: { buffer, offset, size } };
        }),
      }),
    })).group;
  }
}

/**
 * The entry of `cache` made for `buffers` (the same buffers, one by one), else a new one from
 * `make`; moved to the front, and the cache kept to {@linkcode BIND_GROUPS} entries.
 */
function recent<T extends { readonly buffers: readonly GPUBuffer[] }>(
  cache: T[],
  buffers: readonly GPUBuffer[],
  make: () => T,
): T {
  const at = cache.findIndex((c) => c.buffers.every((b, j) => b === buffers[j]));
  const entry = at >= 0 ? cache.splice(at, 1)[0] : make();
  cache.unshift(entry);
  if (cache.length > BIND_GROUPS) cache.pop();
  return entry;
}
