/**
 * The GPU program: a whole fused plan on one device. Each run writes the inputs, encodes every
 * kernel's dispatch (for every repetition), copies all requested host outputs into one staging
 * buffer, submits (in a few parts where the kernels are many: `run_encoder.ts`) and awaits at
 * most one `mapAsync` — in Deno every GPU await costs about 10 ms, so this is the main lever; a
 * run whose outputs stay on the device awaits nothing. Params and constants stay resident between
 * runs; device-tensor arguments are bound in place; intermediates come from the pool and return to
 * it when the run settles (queue order keeps later work on them behind this submit), so runs need
 * no queue of their own and pipelined runs overlap their waits.
 *
 * @module
 */
import type { KernelTime, Program, ResidentRunOptions } from "../../jit/runtime/backend.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { type DType, internalDType, type TensorData } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";

import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { type KernelIR, type Packing, rowCount } from "../../jit/ir/kernel_ir.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import { neededKernels } from "../../jit/runtime/program.ts";
import { type MemoryPlan, planMemory } from "../../jit/schedule/memory_plan.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { dispatchSize, type KernelLayout } from "../../shaders/wgsl/codegen.ts";
import { fromStored, packedLength, storedBytes } from "../words.ts";
import { type GpuContext, GpuStorage, mapForRead, STAGING, STORAGE } from "./gpu_storage.ts";
import { OwnBuffers, SMALL_BYTES } from "./own_buffers.ts";
import { ProgramUploads } from "./program_uploads.ts";
import { BindGroups, type Typed } from "./bind_groups.ts";
import { RunEncoder } from "./run_encoder.ts";
import { copies, kernelAliases, type StoredOver, storedOver, takenHomes } from "./in_place.ts";

/** A plan for one device. */
export interface GpuPlan {
  /** Values bound from the run's arguments, in argument order; `resident` ones (params) stay uploaded. */
  readonly bindings: readonly { readonly value: number; readonly resident: boolean }[];
  /** The value of each output index `run` may be asked for. */
  readonly outputs: readonly number[];
  /** Kernels in execution order (opaque ones are custom ops with registered WGSL). */
  readonly kernels: readonly KernelIR[];
  /** One pipeline per kernel (`undefined` for `ToDevice`, which is a buffer copy). */
  readonly pipelines: readonly (GPUComputePipeline | undefined)[];
  /** Each generated kernel's layout (its dispatch follows it); `undefined` for custom ones. */
  readonly layouts: readonly (KernelLayout | undefined)[];
  /** Constant buffers (value id → data). */
  readonly constants: ReadonlyMap<number, HostTensor>;
  /** Per kernel: whether a bucketed run dispatches only the active rows. */
  readonly partial?: readonly boolean[];
}

const RESOLVE = 0x200 | 0x04; // QUERY_RESOLVE | COPY_SRC

/**
 * A custom op's WGSL kernel runs one invocation per element of its first output, in workgroups of
 * 64, 65535 workgroups a row (see `CustomKernel`).
 */
function customDispatch(k: KernelIR): [number, number, number] {
  const groups = Math.max(1, Math.ceil(sizeOf(k.outputs[0]?.shape ?? []) / 64));
  return [Math.min(groups, 65535), Math.ceil(groups / 65535), 1];
}

/** Builds the program for `plan` on `ctx`. */
export function gpuProgram(ctx: GpuContext, plan: GpuPlan): Program {
  return new GpuProgram(ctx, plan);
}

/** The buffers of one run: where each value lives, what is staged and what is kept. */
interface RunBuffers {
  /** Buffers of the arguments, params and constants. */
  readonly given: Map<number, GPUBuffer>;
  /** Kernel outputs: two sets that repetitions alternate between (one where repeat is 1). */
  readonly sets: Map<number, GPUBuffer>[];
  /** Staged outputs' byte offsets in the staging buffer, and where the timestamps go. */
  readonly offsets: Map<number, number>;
  readonly stamps: number;
  readonly stampBytes: number;
  readonly resolved?: GPUBuffer;
  readonly staging?: GPUBuffer;
  /** Per output, its device buffer where it stays on the device (copied where shared). */
  readonly kept: ({ value: number; buffer: GPUBuffer; copy: boolean } | undefined)[];
}

/** The program of a plan on one device (see the module's description). */
class GpuProgram implements Program {
  readonly readsArgsOnCall = true;
  #ctx: GpuContext;
  #plan: GpuPlan;
  /** The arguments', params' and constants' buffers (see `program_uploads.ts`). */
  #uploads: ProgramUploads;
  /** Values held four or eight to a word (8-bit constants, `KernelBuffer.packed`). */
  #packed = new Map<number, Packing>();
  /** Two timestamps per kernel (pass begin and end), resolved and read back with the outputs. */
  #queries?: GPUQuerySet;
  #times: KernelTime[] = [];
  #kernelsNeeded: (outputs: readonly number[]) => readonly boolean[];
  /** The type of every value a kernel binds, and of the constants. */
  #types = new Map<number, Typed>();
  #groups: BindGroups;
  /**
   * Intermediates share buffers as the memory plan says (lifetimes that do not overlap): one per
   * slot, at the largest of its values. A buffer each, a 0.5B decoder's step took 2 GB of them
   * (every layer's weight unpacked), past the pool's cap: each release evicted and each step
   * re-created them, seconds a token on Dawn.
   */
  #memory: MemoryPlan;
  #slotBytes: number[];
  /** Each kernel's rows, and its dispatch over all of them (made at its first run). */
  #rows: readonly number[];
  #dispatches: [number, number, number][] = [];
  #own: OwnBuffers;
  /** The argument of each bound value (its first binding): looked up for every output a run. */
  #argument = new Map<number, number>();
  /** The values bound resident (params). */
  #resident = new Set<number>();
  /**
   * A combined output (`KernelOutput.combine`) of each of their slots (`planMemory`): the slots
   * are cleared as each repetition starts, their words counting from 0.
   */
  #words: number[];
  /** Outputs stored over inputs, each in one buffer a run (`in_place.ts`). */
  #pairs: readonly StoredOver[];

  constructor(ctx: GpuContext, plan: GpuPlan) {
    this.#ctx = ctx;
    this.#plan = plan;
    const { kernels, constants } = plan;
    this.#queries = ctx.timestamps
      ? ctx.device.createQuerySet({ type: "timestamp", count: 2 * Math.max(1, kernels.length) })
      : undefined;
    this.#kernelsNeeded = neededKernels(kernels, plan.outputs);
    this.#rows = kernels.map(rowCount);
    for (const k of kernels) {
      for (const b of [...k.inputs, ...k.outputs]) this.#types.set(b.value, b);
      for (const b of k.inputs) if (b.packed) this.#packed.set(b.value, b.packed);
    }
    for (const [v, t] of constants) {
      this.#types.set(v, { shape: t.shape, dtype: t.dtype as DType, packed: this.#packed.get(v) });
    }
    plan.bindings.forEach((b, i) => this.#argument.has(b.value) || this.#argument.set(b.value, i));
    for (const b of plan.bindings) if (b.resident) this.#resident.add(b.value);
    this.#own = new OwnBuffers(ctx.device, ctx.pool);
    this.#uploads = new ProgramUploads(ctx, this.#own);
    const external = new Set([
      ...plan.bindings.map((b) => b.value),
      ...constants.keys(),
      ...plan.outputs,
    ]);
    const stride = ctx.device.limits.minStorageBufferOffsetAlignment;
    this.#memory = planMemory(kernels, external, [], stride);
    const { assignment, offsets } = this.#memory;
    const combined = kernels.flatMap((k) => k.outputs.filter((o) => o.combine));
    this.#words = [...new Map(combined.map((o) => [assignment.get(o.value), o.value])).values()];
    this.#slotBytes = this.#memory.slots.map(() => 0);
    for (const [v, slot] of assignment) {
      const end = (offsets.get(v) ?? 0) + this.#bytesOf(this.#types.get(v)!);
      this.#slotBytes[slot] = Math.max(this.#slotBytes[slot], end);
    }
    const aliases = kernelAliases(kernels, plan.layouts);
    this.#pairs = storedOver(kernels, aliases, this.#bytesOf);
    this.#groups = new BindGroups(ctx.device, plan.pipelines, kernels, {
      bytes: this.#bytesOf,
      offsets,
      aliases,
    });
  }

  /** Bytes a buffer for a tensor takes (at least one word: WebGPU binds no empty buffers). */
  #bytesOf = (t: Typed): number =>
    t.packed
      ? packedLength(sizeOf(t.shape), t.packed)
      : storedBytes(Math.max(1, sizeOf(t.shape)), t.dtype, this.#ctx);

  /** A run: one repetition, every output read back. */
  async run(
    args: readonly RefTensor[],
    outputs: readonly number[],
    active?: number,
    into?: readonly (TensorData | undefined)[],
  ): Promise<TensorData[]> {
    // Runs need no queue: each takes its own buffers and staging from the pool, so pipelined
    // runs overlap their waits for the device.
    return await this.runResident(args, outputs, {
      repeat: 1,
      feedback: [],
      keep: outputs.map(() => false),
      active,
      into,
    }) as TensorData[];
  }

  /** Kernel times of the last timed run. */
  deviceTimes(): readonly KernelTime[] {
    return this.#times;
  }

  /** Frees the query set and lets go of the resident uploads (shared by the device's programs). */
  dispose(): void {
    this.#queries?.destroy();
    this.#own.dispose();
    this.#uploads.dispose();
  }

  /** Encodes the kernels of one repetition over `buffers` (value → buffer). */
  #encode(
    run: RunEncoder,
    buffers: ReadonlyMap<number, GPUBuffer>,
    active: number | undefined,
    timed: Set<number>,
    wanted: readonly boolean[],
  ): void {
    const { kernels, pipelines } = this.#plan;
    const plan = this.#plan;
    const queries = this.#queries;
    // One compute pass for all the kernels unless each is timed (timestamps go per pass): WebGPU
    // orders a pass's dispatches and makes each one's writes visible to the next, and a pass a
    // kernel cost each run its own begin and end.
    let shared: GPUComputePassEncoder | undefined;
    // Cleared before any pass, a slot at once.
    for (const v of this.#words) run.encoder.clearBuffer(buffers.get(v)!);
    const group = this.#groups.run(buffers);
    kernels.forEach((k, i) => {
      if (!wanted[i]) return;
      const partial = active !== undefined && plan.partial?.[i] === true;
      const rows = partial ? this.#rows[i] / k.space[0] * active : this.#rows[i];
      if (rows === 0) return;
      if (queries) timed.add(i);
      const pass = queries
        ? run.encoder.beginComputePass({
          label: k.name,
          timestampWrites: {
            querySet: queries,
            beginningOfPassWriteIndex: 2 * i,
            endOfPassWriteIndex: 2 * i + 1,
          },
        })
        : shared ??= run.encoder.beginComputePass();
      pass.setPipeline(pipelines[i]!);
      pass.setBindGroup(0, group(i));
      const [x, y, z] = this.#dispatch(i, rows, partial);
      pass.dispatchWorkgroups(x, y, z);
      if (queries) pass.end();
      else if (run.dispatched(pass)) shared = undefined;
    });
    shared?.end();
  }

  /** Kernel `i`'s workgroups over `rows` (over all its rows computed once). */
  #dispatch(i: number, rows: number, partial: boolean): [number, number, number] {
    const layout = this.#plan.layouts[i];
    const size = (): [number, number, number] =>
      layout ? dispatchSize(layout, rows) : customDispatch(this.#plan.kernels[i]);
    return partial ? size() : this.#dispatches[i] ??= size();
  }

  /** A run whose outputs may stay on the device (see `Program.runResident`). */
  async runResident(
    args: readonly (RefTensor | DeviceTensor)[],
    outputs: readonly number[],
    options: ResidentRunOptions,
  ): Promise<(TensorData | DeviceTensor)[]> {
    const ctx = this.#ctx;
    ctx.check();
    const acquired: GPUBuffer[] = [];
    const claimed = new Set<GPUBuffer>();
    const writing: number[] = [];
    try {
      const io = this.#outputsOf(args, outputs, options.keep);
      const held = { acquired, claimed, writing };
      const buffers = await this.#buffers(args, outputs, options, io, held);
      const timed = await this.#submit(outputs, options, buffers, io, writing);
      this.#own.submitted(writing.splice(0));
      return await this.#read(outputs, io, buffers, timed, options.into);
    } catch (e) {
      ctx.pool.release(claimed);
      if (e instanceof KilnError) throw e;
      // A destroyed device fails the map before its lost promise settles: give it a moment.
      await new Promise((r) => setTimeout(r, 0));
      ctx.check();
      throw new KilnError(
        `The WebGPU run failed (${(e as Error).message}); the device may have been lost`,
        {
          code: "backend",
          fix:
            "call recover() on the webgpu backend and compile again (the auto policy falls back to the CPU meanwhile)",
          cause: e,
        },
      );
    } finally {
      this.#own.submitted(writing);
      ctx.pool.release(acquired.filter((b) => !claimed.has(b)));
    }
  }

  /**
   * Where each requested output comes from: host arguments that are also outputs come back as
   * they are; everything else is read from the device (staged) or stays there (kept).
   */
  #outputsOf(
    args: readonly (RefTensor | DeviceTensor)[],
    outputs: readonly number[],
    keep: readonly boolean[],
  ): RunOutputs {
    const argOf = (v: number) => {
      const i = this.#argument.get(v);
      return i === undefined ? undefined : args[i];
    };
    const typeOf = (v: number): Typed => {
      const arg = this.#types.has(v) ? undefined : argOf(v);
      return arg ? { shape: arg.shape, dtype: internalDType(arg.dtype) } : this.#types.get(v)!;
    };
    const passed = outputs.map((i) => {
      const arg = argOf(this.#plan.outputs[i]);
      return arg !== undefined && !(arg instanceof DeviceTensor) ? arg : undefined;
    });
    const staged = outputs.map((_, j) => !keep[j] && !passed[j]);
    return { typeOf, passed, staged };
  }

  /** Every buffer of a run, acquired from the pool (those handed out as device tensors claimed). */
  async #buffers(
    args: readonly (RefTensor | DeviceTensor)[],
    outputs: readonly number[],
    { repeat, keep }: ResidentRunOptions,
    io: RunOutputs,
    held: { acquired: GPUBuffer[]; claimed: Set<GPUBuffer>; writing: number[] },
  ): Promise<RunBuffers> {
    const { bindings, constants, kernels } = this.#plan;
    const { pool } = this.#ctx;
    const { acquired, claimed } = held;
    const given = new Map<number, GPUBuffer>();
    const needed = new Set(
      outputs.flatMap((i, j) => (io.passed[j] ? [] : [this.#plan.outputs[i]])),
    );
    // Each upload starts now, in binding order (a host argument is read before `run` returns).
    const uploads: Promise<unknown>[] = [];
    const bind = (v: number, t: RefTensor | DeviceTensor, keep: boolean, i?: number) => {
      const now = this.#uploads.now(t);
      if (now) given.set(v, now);
      else {
        const binding = i === undefined ? undefined : { i, held };
        const packed = this.#packed.get(v);
        uploads.push(
          this.#uploads.upload(t, { keep, acquired, binding, packed }).then((b) => given.set(v, b)),
        );
      }
    };
    bindings.forEach((b, i) => {
      if (this.#types.has(b.value) || needed.has(b.value)) bind(b.value, args[i], b.resident, i);
    });
    for (const [v, t] of constants) bind(v, { ...t, dtype: t.dtype as DType }, true);
    await Promise.all(uploads);
    const bound = { argument: this.#argument, resident: this.#resident };
    const homes = takenHomes(this.#pairs, { args, ...bound, given, acquired, repeat });
    // Repetitions alternate between two sets of kernel outputs: one holds the state the next
    // repetition reads while it writes the other (dispatches in one encoder run in order).
    const sets: Map<number, GPUBuffer>[] = [];
    // A run of one repetition takes the program's own buffers for its small intermediates.
    // The program's own buffers this run binds: they stay its own (a kept output is copied out).
    const owned = new Set<GPUBuffer>();
    const own = (bytes: number) => repeat === 1 && bytes <= SMALL_BYTES;
    const noted = (b: GPUBuffer, bytes: number) => {
      if (own(bytes)) owned.add(b);
      else acquired.push(b);
      return b;
    };
    // At hand (every steady-state run), a buffer is taken without waiting: see `uploads.now`.
    const now = (key: string, bytes: number) => {
      const b = own(bytes) ? this.#own.smallNow(key) : pool.reuse(bytes, STORAGE);
      return b && noted(b, bytes);
    };
    const take = async (key: string, bytes: number) =>
      noted(
        own(bytes) ? await this.#own.small(key, bytes) : await pool.acquire(bytes, STORAGE),
        bytes,
      );
    for (let s = 0; s < Math.min(repeat, 2); s++) {
      const set = new Map<number, GPUBuffer>(), slots: GPUBuffer[] = [];
      for (const [i, bytes] of this.#slotBytes.entries()) {
        slots.push(now(`s${i}`, bytes) ?? await take(`s${i}`, bytes));
      }
      for (const k of kernels) {
        for (const o of k.outputs) {
          const slot = this.#memory.assignment.get(o.value);
          const bytes = this.#bytesOf(o);
          set.set(
            o.value,
            homes.get(o.value) ??
              (slot !== undefined
                ? slots[slot]
                : now(`v${o.value}`, bytes) ?? await take(`v${o.value}`, bytes)),
          );
        }
      }
      sets.push(set);
    }
    const offsets = new Map<number, number>();
    let total = 0;
    outputs.forEach((i, j) => {
      const v = this.#plan.outputs[i];
      if (!io.staged[j] || offsets.has(v)) return;
      offsets.set(v, total);
      total += this.#bytesOf(io.typeOf(v));
    });
    const queries = this.#queries;
    const stamps = Math.ceil(total / 8) * 8, stampBytes = queries ? queries.count * 8 : 0;
    const resolved = queries ? await pool.acquire(stampBytes, RESOLVE) : undefined;
    if (resolved) acquired.push(resolved);
    const staging = total + stampBytes
      ? await pool.acquire(stamps + stampBytes, STAGING)
      : undefined;
    if (staging) acquired.push(staging);
    const last = sets[(repeat - 1) % 2] ?? new Map<number, GPUBuffer>();
    // Kept outputs take the last repetition's buffer; a value kept twice, or one that is not a
    // kernel output (an input, param or constant), is copied into a buffer of its own.
    const kept: RunBuffers["kept"] = [];
    for (const [j, i] of outputs.entries()) {
      if (!keep[j]) {
        kept.push(undefined);
        continue;
      }
      const v = this.#plan.outputs[i];
      const mine = last.get(v);
      if (mine && !claimed.has(mine) && !owned.has(mine)) {
        claimed.add(mine);
        kept.push({ value: v, buffer: mine, copy: false });
      } else {
        const bytes = this.#bytesOf(io.typeOf(v));
        const buffer = pool.reuse(bytes, STORAGE) ?? await pool.acquire(bytes, STORAGE);
        claimed.add(buffer);
        kept.push({ value: v, buffer, copy: true });
      }
    }
    return { given, sets, offsets, stamps, stampBytes, resolved, staging, kept };
  }

  /** Encodes every repetition and the copies out and submits them; the kernels timed. */
  async #submit(
    outputs: readonly number[],
    { repeat, feedback, active }: ResidentRunOptions,
    run: RunBuffers,
    io: RunOutputs,
    writing: readonly number[],
  ): Promise<Set<number>> {
    const { device } = this.#ctx;
    const { bindings, kernels } = this.#plan;
    const { given, sets, staging } = run;
    const last = sets[(repeat - 1) % 2] ?? new Map<number, GPUBuffer>();
    const bufferOf = (v: number, set: ReadonlyMap<number, GPUBuffer>) =>
      set.get(v) ?? given.get(v)!;
    device.pushErrorScope("validation");
    const parts = new RunEncoder(device, kernels.length, this.#queries !== undefined);
    this.#own.encodeUploads(parts.encoder, writing);
    const timed = new Set<number>();
    // Only the kernels the requested outputs (and the fed-back ones) need.
    const wanted = this.#kernelsNeeded([...outputs, ...feedback.map(([o]) => o)]);
    for (let r = 0; r < repeat; r++) {
      const buffers = new Map(given);
      for (const [v, b] of sets[r % 2]) buffers.set(v, b);
      if (r > 0) {
        for (const [o, a] of feedback) {
          buffers.set(bindings[a].value, bufferOf(this.#plan.outputs[o], sets[(r - 1) % 2]));
        }
      }
      copies(parts.encoder, this.#pairs, buffers, wanted);
      this.#encode(parts, buffers, active, timed, wanted);
    }
    const encoder = parts.encoder;
    for (const k of run.kept) {
      if (k?.copy) {
        const from = bufferOf(k.value, last);
        encoder.copyBufferToBuffer(from, 0, k.buffer, 0, this.#bytesOf(io.typeOf(k.value)));
      }
    }
    for (const [v, off] of run.offsets) {
      encoder.copyBufferToBuffer(bufferOf(v, last), 0, staging!, off, this.#bytesOf(io.typeOf(v)));
    }
    const queries = this.#queries;
    if (queries && run.resolved) {
      encoder.resolveQuerySet(queries, 0, queries.count, run.resolved, 0);
      encoder.copyBufferToBuffer(run.resolved, 0, staging!, run.stamps, run.stampBytes);
    }
    parts.submit();
    const error = await device.popErrorScope();
    if (error) {
      throw new KilnError(
        `WebGPU rejected the run of ${kernels.map((k) => k.name).join(", ")}: ${error.message}`,
        {
          code: "backend",
          fix:
            "report this with the kernel's WGSL (explain shows it); use the reference backend meanwhile",
        },
      );
    }
    return timed;
  }

  /**
   * The outputs: kept ones as device tensors, passed ones as they are, staged ones read back
   * (into the caller's arrays where `into` has them; with the kernel times). Without a readback
   * nothing needs the device to finish: later work on these buffers (through the pool or device
   * tensors) is ordered after this submit.
   */
  async #read(
    outputs: readonly number[],
    io: RunOutputs,
    run: RunBuffers,
    timed: ReadonlySet<number>,
    into: readonly (TensorData | undefined)[] = [],
  ): Promise<(TensorData | DeviceTensor)[]> {
    const { staging, stamps, stampBytes } = run;
    const queries = this.#queries;
    const mapped = staging ? await mapForRead(this.#ctx, staging, stamps + stampBytes) : undefined;
    const bytes = mapped?.range;
    // One output's own copy is handed out as it is; outputs sharing one are copied out of it.
    const owned = mapped?.owned === true && io.staged.filter(Boolean).length === 1 && !queries;
    const data = outputs.map((i, j): TensorData | DeviceTensor => {
      const v = this.#plan.outputs[i];
      const t = io.typeOf(v);
      const k = run.kept[j];
      if (k) {
        return new DeviceTensor(new GpuStorage(this.#ctx, k.buffer, t.dtype), t.shape, t.dtype);
      }
      if (io.passed[j]) return io.passed[j].data;
      const at = run.offsets.get(v)!;
      return fromStored(bytes!, at, sizeOf(t.shape), t.dtype, this.#ctx, { owned, into: into[j] });
    });
    if (queries && bytes) {
      const t = new BigUint64Array(bytes, stamps, queries.count);
      this.#times = [...timed].map((i) => ({
        kernel: this.#plan.kernels[i].name,
        ms: Number(t[2 * i + 1] - t[2 * i]) / 1e6,
      }));
    }
    staging?.unmap();
    return data;
  }
}

/** Where a run's requested outputs come from (see `GpuProgram.#outputsOf`). */
interface RunOutputs {
  /** The stored type of a value (an argument's where it is one). */
  readonly typeOf: (v: number) => Typed;
  /** Per output, the host argument it is, if any. */
  readonly passed: readonly (RefTensor | undefined)[];
  /** Per output, whether it is read back through the staging buffer. */
  readonly staged: readonly boolean[];
}
