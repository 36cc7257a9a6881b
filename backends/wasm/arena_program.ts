/**
 * The arena program: a whole fused plan in one `WebAssembly.Memory`. Every buffer has a fixed
 * place in the arena (intermediates share places per the memory plan); each run writes the inputs (params and constants only when their data
 * changed), calls each kernel's `run` with its buffers' addresses and row range, and reads back
 * only the requested outputs.
 *
 * @module
 */
import type { KernelTime, Program } from "../../jit/runtime/backend.ts";
import type { DType, TensorData } from "../../jit/ir/dtype.ts";
import type { HostTensor, RefTensor } from "../../jit/ir/host_tensor.ts";
import { type KernelIR, rowCount } from "../../jit/ir/kernel_ir.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { gatherOutOfRange } from "../../jit/ir/kernel_ir.ts";
import { planMemory } from "../../jit/schedule/memory_plan.ts";
import { neededKernels } from "../../jit/runtime/program.ts";
import { count } from "../../jit/runtime/counters.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { elementBytes, type Storage, toWords, wordsInto } from "../words.ts";
import {
  halfMatmulView,
  packedInput,
  packsOf,
  scratchBytes,
} from "../../shaders/wasm/matmul_plan.ts";
import { type Split, WorkerPool, type WorkerThreads } from "./worker_crew.ts";
import { SPLIT_PAYS, splitsOf, threadable, totalWork, workOf } from "./splits.ts";
import type { ProgramTier, Swappable } from "./optimizing_tier.ts";
import { ThreadTuner } from "./thread_tuner.ts";

/** The arena stores every dtype in 32-bit words, f64 in 64-bit ones (see `words.ts`). */
const WORDS: Storage = { half: false };

/** Element-ops of a program from which the worker pool spawns at compile (see `WorkerPool`). */
const EAGER_WORK = 2 ** 33;

/** A plan for the arena. */
export interface ArenaPlan {
  /** Values bound from the run's arguments, in argument order; `resident` ones are params. */
  readonly bindings: readonly { readonly value: number; readonly resident: boolean }[];
  /** The value of each output index `run` may be asked for. */
  readonly outputs: readonly number[];
  /**
   * Kernels in execution order; opaque ones are custom ops whose registered module's `run` takes
   * their buffers' addresses alone.
   */
  readonly kernels: readonly KernelIR[];
  /** One compiled module per kernel. */
  readonly modules: readonly WebAssembly.Module[];
  /** Constant buffers (value id → data). */
  readonly constants: ReadonlyMap<number, HostTensor>;
  /** Per kernel: whether a bucketed run computes only the active rows. */
  readonly partial?: readonly boolean[];
  /** Host functions the modules import (`env.*`). */
  readonly imports: Readonly<Record<string, (...args: number[]) => number>>;
  /** Threads for large kernels (modules must import a shared memory when > 1). */
  readonly threads?: number;
  /**
   * Threads of the worker pool the program enlists in (default `threads`): the most any program
   * of its backend takes, so that programs taking fewer share the pool of those taking more.
   */
  readonly poolThreads?: number;
  /** The worker threads (Deno's, `node:worker_threads` or a page's), when there are any. */
  readonly workers?: WorkerThreads;
  /** Time each kernel of a run (wall clock, threads included) for `deviceTimes()`. */
  readonly profile?: boolean;
  /** The thread verdict of an earlier compile of these kernels (see `Program.tuning`). */
  readonly tuning?: string;
  /** Told each new thread verdict (see `AssemblyPlan.onTuning`). */
  readonly onTuning?: (verdict: string) => Promise<void> | void;
  /** The optimizing tier's share for this program, where the backend has one. */
  readonly tier?: ProgramTier;
}

/**
 * Bytes at the arena's start where a kernel records a fault it cannot return: word 0 is set to 1,
 * words 1 and 2 hold a gather's offending index and the extent it had to fit. A run checks it
 * after its kernels and throws.
 */
export const FAULT_BYTES = 16;

const PAGE = 65536;
/** 4 GiB: what a 32-bit WebAssembly memory can address. */
const MAX_PAGES = 65536;

/** A program in one arena. */
export interface ArenaProgram extends Program {
  /**
   * Runs on the calling thread alone, untimed by the thread tuner: a warm-up. V8 tiers a wasm
   * function up once one instance has run it enough, so runs split over threads, each instance
   * running a share, stay in baseline code threads times longer (resnet_block on 2 cores: 0.10 ms
   * from the 5th run alone, from the 30th threaded). `into` as `Program.run` takes it.
   */
  runAlone(
    args: readonly RefTensor[],
    outputs: readonly number[],
    active?: number,
    into?: readonly (TensorData | undefined)[],
  ): Promise<TensorData[]>;
  /** Whether runs take one way for now: single-threaded, or the thread tuner has a verdict. */
  readonly settled: boolean;
  /** Runs on one thread from now on, unless the thread tuner's later probes find threads faster. */
  presumeAlone(): void;
  /**
   * Whether a kernel has work enough to gain from the threads on its own (see
   * {@linkcode SPLIT_PAYS}), however short the whole run.
   */
  readonly splitPays: boolean;
  /** Settles once the last thread verdict reported has been stored (see `ArenaPlan.onTuning`). */
  readonly noted: Promise<void> | void;
}

/** Where everything of a program lives in its arena, and how large the arena is. */
interface ArenaLayout {
  /** Every kernel buffer's type, by value. */
  readonly types: Map<number, { shape: readonly number[]; dtype: DType }>;
  /** Every value's byte offset. */
  readonly offsets: Map<number, number>;
  /** Per kernel, whether it is worth splitting over threads; the threads the program uses. */
  readonly threaded: boolean[];
  readonly threads: number;
  /** The scratch (one slice of `scratchSize` a thread) after the values. */
  readonly scratch: number;
  readonly scratchSize: number;
  /** Per tiled matmul, where its B's packed panels go (fixed B: packed once per change). */
  readonly packs: (Pack | undefined)[];
  readonly packedAt: number[];
  /** The arena's size in pages. */
  readonly pages: number;
}

/** Where a tiled matmul's B is packed, and how. */
interface Pack {
  readonly value: number;
  readonly fixed: boolean;
  readonly bytes: number;
  readonly tableRows?: number;
  at: number;
}

/** The arena of `plan`: its values, scratch and packed panels placed; too large, refused. */
function arenaLayout(plan: ArenaPlan): ArenaLayout {
  const types = new Map<number, { shape: readonly number[]; dtype: DType }>();
  for (const k of plan.kernels) for (const b of [...k.inputs, ...k.outputs]) types.set(b.value, b);
  // Intermediates share places as the compiler's memory plan says (lifetimes that do not
  // overlap); inputs, params, constants and outputs keep places of their own.
  const external = new Set([
    ...plan.bindings.map((b) => b.value),
    ...plan.constants.keys(),
    ...plan.outputs,
  ]);
  const memoryPlan = planMemory(plan.kernels, external);
  const bytes = (v: number) => {
    const { shape, dtype } = types.get(v)!;
    return Math.ceil(Math.max(1, sizeOf(shape)) * elementBytes(dtype, WORDS) / 16) * 16;
  };
  const slotBytes = memoryPlan.slots.map(() => 0);
  for (const [v, s] of memoryPlan.assignment) slotBytes[s] = Math.max(slotBytes[s], bytes(v));
  const offsets = new Map<number, number>();
  // The arena's first words are the fault record kernels write (see `FAULT_BYTES`).
  let top = FAULT_BYTES;
  const slotAt = slotBytes.map((b) => (top += b) - b);
  for (const v of types.keys()) {
    const slot = memoryPlan.assignment.get(v);
    if (slot !== undefined) offsets.set(v, slotAt[slot]);
    else {
      offsets.set(v, top);
      top += bytes(v);
    }
  }
  // Decided once per kernel: run() consults it on every call.
  const threaded = plan.kernels.map(threadable);
  const threads = plan.workers && threaded.some(Boolean) ? plan.threads ?? 1 : 1;
  const scratch = top,
    scratchSize = Math.ceil(Math.max(16, ...plan.kernels.map(scratchBytes)) / 16) * 16;
  top += scratchSize * threads;
  // A tiled matmul reads B as panels packed ahead of it (see `tiledGemm`): a B the program holds
  // fixed (a param or constant) at a place of its own, packed once per change of B; any other B
  // at one place all such kernels share, packed in every run right before its kernel.
  const fixed = new Set([
    ...plan.bindings.filter((b) => b.resident).map((b) => b.value),
    ...plan.constants.keys(),
  ]);
  const declared = new Map(plan.modules.map((m) => [m, packsOf(m)]));
  const packs = plan.kernels.map((k, i) => {
    const { bytes, tableRows } = declared.get(plan.modules[i]) ?? {};
    if (bytes === undefined) return undefined;
    const value = k.inputs[packedInput(k)].value;
    return { value, fixed: fixed.has(value), bytes, tableRows, at: 0 };
  });
  for (const p of packs) if (p?.fixed) top = (p.at = top) + p.bytes;
  const transient = Math.max(0, ...packs.map((p) => (p && !p.fixed ? p.bytes : 0)));
  for (const p of packs) if (p && !p.fixed) p.at = top;
  top += transient;
  const packedAt = packs.map((p) => p?.at ?? 0);
  const pages = Math.max(1, Math.ceil(top / PAGE));
  if (pages > MAX_PAGES) {
    throw new KilnError(
      `The wasm backend needs ${
        (top / 2 ** 30).toFixed(1)
      } GiB for this program's buffers; WebAssembly addresses at most 4 GiB`,
      {
        code: "unsupported",
        fix: "run it on the webgpu or reference backend, or compile smaller pieces of the graph",
      },
    );
  }
  return { types, offsets, threaded, threads, scratch, scratchSize, packs, packedAt, pages };
}

/** Builds the program for `plan`. */
export function arenaProgram(given: ArenaPlan): ArenaProgram {
  // The kernels as generated (`generateWasm`): an f16 matmul's B is packed for its tiles.
  return new Arena({ ...given, kernels: given.kernels.map(halfMatmulView) });
}

/** The instantiated modules of a program: each kernel's entry, bound to its buffers. */
interface Instances {
  /** Each kernel's `run` export, its buffers' addresses, and `run` with them bound. */
  readonly runs: ((...a: number[]) => void)[];
  readonly addresses: number[][];
  readonly bound: ((...a: number[]) => void)[];
  /** Per kernel, the panels a matmul of few rows ranges over instead of rows (0: rows). */
  readonly panels: number[];
  /** Per kernel, the place of its B's panels its calls take (negated: they pack them). */
  readonly packs: number[];
}

/**
 * One instance per module: kernels of the same code (a repeated block, an RNN's steps) share it,
 * and with it V8's tier-up budget, so their code is optimized as soon as one kernel's would be
 * if it ran as often as they all do.
 */
function instantiate(plan: ArenaPlan, layout: ArenaLayout, memory: WebAssembly.Memory): Instances {
  const instances = new Map<WebAssembly.Module, WebAssembly.Exports>();
  const exported = plan.modules.map((mod) => {
    let exports = instances.get(mod);
    if (!exports) {
      exports = new WebAssembly.Instance(mod, { env: { memory, ...plan.imports } }).exports;
      instances.set(mod, exports);
    }
    return exports;
  });
  const runs = exported.map((e) => e.run as (...a: number[]) => void);
  const addresses = plan.kernels.map((k) =>
    [...k.inputs, ...k.outputs].map((b) => layout.offsets.get(b.value)!)
  );
  // Each kernel's call with its buffers bound, and its rows: a run of a small model is mostly
  // calls (lstm2: 47 kernels in 0.13 ms), so nothing is spread or counted per call.
  const bound = runs.map((run, i) => run.bind(null, ...addresses[i], layout.scratch));
  // A matmul of few rows ranges over B's panels instead (see `panelSplit`): its calls cover
  // every row.
  const panels = exported.map((e) => (e.panelSplit as WebAssembly.Global | undefined)?.value ?? 0);
  // A B packed anew each run whose kernel packs its own panels in each call: its place
  // negated says so (see `tiledLoops`), and the program packs nothing ahead.
  const packs = layout.packedAt.map((at, i) => {
    const own = (exported[i].packsInCalls as WebAssembly.Global | undefined)?.value;
    return own && layout.packs[i] && !layout.packs[i]!.fixed ? -at : at;
  });
  return { runs, addresses, bound, panels, packs };
}

/** A program in one arena (see {@linkcode ArenaProgram}). */
class Arena implements ArenaProgram, Swappable {
  // Arguments are copied into the arena before the first await.
  readonly readsArgsOnCall = true;
  readonly splitPays: boolean;
  #plan: ArenaPlan;
  #layout: ArenaLayout;
  #memory: WebAssembly.Memory;
  #k: Instances;
  #rowsOf: number[];
  #split: Split[];
  #crew?: ReturnType<WorkerPool["enlist"]>;
  #stored?: boolean;
  #tuner?: ThreadTuner;
  #reported?: string;
  /** The store of the last verdict reported (see `AssemblyPlan.onTuning`). */
  #noted: Promise<void> | void = undefined;
  #needed: (outputs: readonly number[]) => readonly boolean[];
  #times: KernelTime[] = [];
  #threadedRuns = 0;
  /** Data last written per value (params and constants are written again only when changed). */
  #written = new Map<number, TensorData>();
  /** Values written by the current run (a prepacked B among them is packed anew). */
  #fresh = new Set<number>();

  constructor(plan: ArenaPlan) {
    this.#plan = plan;
    const layout = this.#layout = arenaLayout(plan);
    const shared = (plan.threads ?? 1) > 1;
    this.#memory = new WebAssembly.Memory({
      initial: layout.pages,
      maximum: shared ? layout.pages : MAX_PAGES,
      shared,
    } as WebAssembly.MemoryDescriptor);
    const k = this.#k = instantiate(plan, layout, this.#memory);
    this.#rowsOf = plan.kernels.map((kernel, i) => k.panels[i] || rowCount(kernel));
    // A stored verdict counts for the same thread count only (another machine, another setting).
    const [way, count] = plan.tuning?.split(" ") ?? [];
    const { threads } = layout;
    this.#stored = Number(count) === threads && (way === "threads" || way === "alone")
      ? way === "threads"
      : undefined;
    this.#crew = threads > 1
      ? WorkerPool.of({ threads: Math.max(threads, plan.poolThreads ?? 0), ...plan.workers! })
        .enlist({
          threads,
          modules: plan.modules,
          memory: this.#memory,
          args: k.addresses,
          packs: k.packs,
          scratch: layout.scratch,
          scratchBytes: layout.scratchSize,
          // Spawning blocks this thread for 20-30 ms a worker: worth it up front only for first
          // runs that the threads shorten by more (matmul 2048 first run 540 -> 390 ms; 1024 and
          // W1-16M were as fast or faster without). Other programs spawn them as their second run
          // that wants threads begins (see `execute`), after the first result.
          eager: totalWork(plan.kernels) >= EAGER_WORK,
        })
      : undefined;
    this.#split = splitsOf(plan.kernels, k.panels);
    this.#tuner = this.#crew ? new ThreadTuner(this.#stored, threads) : undefined;
    this.#reported = this.#verdict();
    this.#needed = neededKernels(plan.kernels, plan.outputs);
    this.splitPays = threads > 1 &&
      plan.kernels.some((k) => !k.opaque && workOf(k) >= SPLIT_PAYS);
  }

  #verdict(): string | undefined {
    const choice = this.#tuner?.choice;
    return choice === undefined
      ? undefined
      : `${choice ? "threads" : "alone"} ${this.#layout.threads}`;
  }

  /** A run, timed by the thread tuner (outputs into the caller's arrays: `Program.run`). */
  run(
    args: readonly RefTensor[],
    outputs: readonly number[],
    active?: number,
    into?: readonly (TensorData | undefined)[],
  ): Promise<TensorData[]> {
    return this.#execute(args, outputs, active, true, into);
  }

  /** A run on this thread alone, untimed (a warm-up; see {@linkcode ArenaProgram.runAlone}). */
  runAlone(
    args: readonly RefTensor[],
    outputs: readonly number[],
    active?: number,
    into?: readonly (TensorData | undefined)[],
  ): Promise<TensorData[]> {
    return this.#execute(args, outputs, active, false, into);
  }

  /** Whether runs take one way for now: single-threaded, or the thread tuner has a verdict. */
  get settled(): boolean {
    return this.#tuner?.choice !== undefined || !this.#tuner;
  }

  /** Runs on one thread from now on, unless the tuner's later probes find threads faster. */
  presumeAlone(): void {
    // A presumption, not a timing: kept from the stored verdicts unless a probe overturns it.
    this.#tuner?.presumeAlone();
    this.#reported = this.#verdict();
  }

  /** Settles once the last verdict reported has been stored. */
  get noted(): Promise<void> | void {
    return this.#noted;
  }

  /** The thread tuner's verdict, once it has one. */
  get tuning(): string | undefined {
    return this.#verdict();
  }

  /** Kernel times of the last profiled run. */
  deviceTimes(): readonly KernelTime[] {
    return this.#times;
  }

  /**
   * Runs `fresh` (the optimizing tier's form of `old`) for `old`'s kernels on this thread; the
   * workers keep theirs.
   */
  replaceModule(old: WebAssembly.Module, fresh: WebAssembly.Module): void {
    const env = { memory: this.#memory, ...this.#plan.imports };
    const run = new WebAssembly.Instance(fresh, { env }).exports.run as (...a: number[]) => void;
    this.#plan.modules.forEach((m, i) => {
      if (m !== old) return;
      this.#k.runs[i] = run;
      this.#k.bound[i] = run.bind(null, ...this.#k.addresses[i], this.#layout.scratch);
      count("kiln_wasm_tier_swaps_total");
    });
  }

  /** Stops the crew's work for this program and forgets what was written. */
  dispose(): void {
    this.#crew?.dispose();
    this.#written.clear();
  }

  /**
   * Packs kernel `i`'s B: its panels, and a table's rows in calls of 64 rows, then twice as many
   * each (see `tableRows`).
   */
  #pack(i: number): void {
    const rows = this.#layout.packs[i]?.tableRows ?? 0;
    const { runs, addresses } = this.#k;
    for (let s = 0, n = 64; s === 0 || s < rows; s += n, n *= 2) {
      runs[i](
        ...addresses[i],
        this.#layout.scratch,
        -1 - s,
        Math.min(rows, s + n),
        this.#layout.packedAt[i],
      );
    }
  }

  /** Writes `data` at `value`'s place, unless it is the data written there last. */
  #write(value: number, data: TensorData, dtype: DType): void {
    if (!this.#layout.types.has(value) || this.#written.get(value) === data) return;
    this.#fresh.add(value);
    const words = toWords(data, dtype);
    new Uint8Array(this.#memory.buffer, this.#layout.offsets.get(value)!, words.byteLength).set(
      new Uint8Array(words.buffer, words.byteOffset, words.byteLength),
    );
  }

  /** Kernel `i` over rows `[start, end)`, in calls of `chunk` rows, each twice the last. */
  #callRows(i: number, start: number, end: number): void {
    for (let s = start, n = this.#split[i].chunk; s < end; s += n, n *= 2) {
      this.#k.bound[i](s, Math.min(end, s + n), this.#k.packs[i]);
    }
  }

  /** A run: arguments written, the wanted kernels called (threaded or not), outputs read. */
  #execute(
    args: readonly RefTensor[],
    outputs: readonly number[],
    active: number | undefined,
    tuned: boolean,
    into?: readonly (TensorData | undefined)[],
  ): Promise<TensorData[]> {
    this.#plan.tier?.step(this);
    const crew = this.#crew;
    const threads = tuned && (this.#tuner?.next() ?? false);
    // Left to the pool, the spawn waits for a task boundary that a caller awaiting runs back to
    // back never reaches: with a stored verdict of threads, a compile from the disk cache ran
    // mobilenet_v2ish's first 110 runs alone on the 16-core host (0.93 ms a run, 0.33 after).
    // Spawned in the compile instead, fifteen workers took 125-160 ms of unet's first result.
    // Where no verdict is stored the tuner is still deciding, and its probes run alone.
    if (threads && this.#stored && ++this.#threadedRuns === 2) crew!.start();
    if (threads) crew!.prime();
    const began = performance.now();
    this.#writeArguments(args);
    try {
      this.#times = this.#callKernels(outputs, active, threads);
    } finally {
      // The workers spun through the run for its jobs (see `WorkerPool.prime`).
      if (threads) crew!.rest();
    }
    // Until every worker is up a threaded run splits over fewer threads than it will: such
    // runs time nothing.
    if (tuned && this.#tuner) {
      this.#tuner.record(threads, performance.now() - began, crew!.ready() === crew!.workers);
      const now = this.#verdict();
      if (now !== this.#reported && now !== undefined) {
        this.#noted = this.#plan.onTuning?.(this.#reported = now);
      }
    }
    const fault = new Int32Array(this.#memory.buffer, 0, 3);
    if (fault[0] !== 0) {
      const error = gatherOutOfRange(fault[1], fault[2]);
      fault.fill(0);
      return Promise.reject(error);
    }
    return Promise.resolve(this.#outputs(args, outputs, into));
  }

  /** The run's arguments and the constants into the arena; fixed Bs that changed packed. */
  #writeArguments(args: readonly RefTensor[]): void {
    const plan = this.#plan;
    plan.bindings.forEach((b, i) => {
      this.#write(b.value, args[i].data, args[i].dtype);
      if (b.resident) this.#written.set(b.value, args[i].data);
    });
    for (const [v, t] of plan.constants) {
      this.#write(v, t.data, t.dtype as DType);
      this.#written.set(v, t.data);
    }
    this.#layout.packs.forEach((p, i) => p?.fixed && this.#fresh.has(p.value) && this.#pack(i));
    this.#fresh.clear();
  }

  /** Calls the kernels the outputs need, over the active rows; their times where profiled. */
  #callKernels(outputs: readonly number[], active: number | undefined, threads: boolean) {
    const plan = this.#plan;
    const { packs, threaded } = this.#layout;
    const { runs, addresses, panels } = this.#k;
    const timed: KernelTime[] = [];
    const wanted = this.#needed(outputs);
    plan.kernels.forEach((k, i) => {
      if (!wanted[i]) return;
      const start = plan.profile ? performance.now() : 0;
      if (packs[i] && !packs[i].fixed && this.#k.packs[i] > 0) this.#pack(i);
      // A panel split computes every row, the stale ones past the active rows too (harmless:
      // see `panelSplit`).
      const rows = active !== undefined && plan.partial?.[i] && !panels[i]
        ? this.#rowsOf[i] / k.space[0] * active
        : this.#rowsOf[i];
      if (k.opaque) runs[i](...addresses[i]);
      else if (threads && threaded[i]) {
        this.#crew!.run(i, rows, this.#split[i], (a, b) => this.#callRows(i, a, b));
      } else this.#callRows(i, 0, rows);
      if (plan.profile) timed.push({ kernel: k.name, ms: performance.now() - start });
    });
    return timed;
  }

  /**
   * The outputs' data: arguments as given, constants copied, the rest read from the arena (into
   * the caller's arrays where `into` has them).
   */
  #outputs(
    args: readonly RefTensor[],
    outputs: readonly number[],
    into: readonly (TensorData | undefined)[] = [],
  ): TensorData[] {
    const plan = this.#plan;
    const { types, offsets } = this.#layout;
    return outputs.map((i, j) => {
      const v = plan.outputs[i];
      const bound = plan.bindings.findIndex((b) => b.value === v);
      if (bound >= 0) return args[bound].data;
      // A graph output that is a folded constant: a copy, so the caller cannot change it.
      const constant = plan.constants.get(v);
      if (constant) return constant.data.slice();
      const t = types.get(v)!;
      const memory = this.#memory.buffer as ArrayBuffer;
      return wordsInto(into[j], memory, offsets.get(v)!, sizeOf(t.shape), t.dtype);
    });
  }
}
