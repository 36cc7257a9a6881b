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
import { aluCount, type KernelIR, matmulOperands, rowCount } from "../../jit/ir/kernel_ir.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { gatherOutOfRange } from "../../jit/ir/kernel_ir.ts";
import { planMemory } from "../../jit/schedule/memory_plan.ts";
import { neededKernels } from "../../jit/runtime/program.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { elementBytes, fromWords, type Storage, toWords } from "../words.ts";
import {
  contracts,
  halfMatmulView,
  packsOf,
  scratchBytes,
  TILE_ROWS,
} from "../../shaders/wasm/matmul_plan.ts";
import { type Split, WorkerPool, type WorkerThreads } from "./worker_crew.ts";

/** The arena stores every dtype in 32-bit words, f64 in 64-bit ones (see `words.ts`). */
const WORDS: Storage = { half: false };

/** Element-ops of a program from which the worker pool spawns at compile (see `WorkerPool`). */
const EAGER_WORK = 2 ** 33;

/**
 * How kernel `k`'s rows split: a thread's share is a multiple of `unit` rows, and its calls
 * (see {@linkcode CHUNK_WORK}) of `tile` rows. A matmul's rows are output rows times columns;
 * its shares are pairs of output rows, its calls whole tiles (shares of whole tiles split W5's
 * 64 rows 36/28 on two threads; 32/32 took it from 1.12 to 1.06 ms).
 */
function rowUnit(k: KernelIR): { unit: number; tile: number } {
  const n = k.space[k.space.length - 2];
  return contracts(k) ? { unit: 2 * n, tile: TILE_ROWS * n } : { unit: 16, tile: 16 };
}

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
  /** The worker threads (Deno's, `node:worker_threads` or a page's), when there are any. */
  readonly workers?: WorkerThreads;
  /** Time each kernel of a run (wall clock, threads included) for `deviceTimes()`. */
  readonly profile?: boolean;
  /** The thread verdict of an earlier compile of these kernels (see `Program.tuning`). */
  readonly tuning?: string;
  /** Told each new thread verdict (see `AssemblyPlan.onTuning`). */
  readonly onTuning?: (verdict: string) => Promise<void> | void;
}

/**
 * Element-operations below which a kernel runs on the calling thread alone. Workers spin through
 * a run (see `worker_crew.ts`), so a hand-off costs a few microseconds, not a wake-up: on the
 * 16-core H200 host, 2^20 left shufflenet's depthwise convs and vit's row kernels on one thread
 * (shufflenet 21 -> 9 ms, vit 2.8 -> 1.7 ms at 2^16; 2 cores: 10.1 -> 8.4, 2.5 -> 1.8 ms).
 */
const THREADED_WORK = 1 << 16;

/**
 * Element-operations each thread of a split kernel gets at least: a kernel takes as many threads
 * as its work fills, not every thread there is (waking fifteen workers for a kernel two could
 * finish cost more than it saved on a 16-core machine).
 */
const PART_WORK = 1 << 14;

/** Pieces per thread of a split kernel that is not a matmul (see `Split.pieces`). */
const PIECES = 4;

/**
 * Element-operations of a kernel's first call in a run; each further call takes twice the rows
 * of the one before. A fresh module runs in V8's baseline tier until its optimized code is
 * ready, and a running call never switches tiers: one call would run a first 4096² matmul ten
 * times slower than the next. Short first calls switch within milliseconds, and doubling keeps
 * the calls few (a matmul call streams all of B's panels, so its calls must not stay short).
 */
const CHUNK_WORK = 1 << 24;

/** Element-operations of a kernel (its space times the ALU ops per point, at least one). */
function workOf(k: KernelIR): number {
  if (k.opaque) return sizeOf(k.outputs[0]?.shape ?? []);
  const ops = [...k.reductions, ...k.outputs].reduce((n, x) => n + 1 + aluCount(x.expr), 0);
  return sizeOf(k.space) * ops;
}

/** Whether `k` is worth splitting. */
function threadable(k: KernelIR): boolean {
  return !k.opaque && workOf(k) >= THREADED_WORK;
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

/**
 * Whether a program's runs use its worker threads, decided by timing and kept under review.
 *
 * After {@linkcode ThreadTuner.WARM} runs, runs alternate between threaded and single-threaded
 * until each way has {@linkcode ThreadTuner.SAMPLES} timings; the faster way (by the fastest of
 * its latest timings) is chosen. The first threaded run with the workers up is not a sample:
 * its workers' code is cold. A verdict too close to call (see
 * {@linkcode ThreadTuner.CLOSE}) takes more samples, up to {@linkcode ThreadTuner.MOST} a way.
 *
 * The first verdict times code V8 is still optimizing, on every core: on the 2-core machine
 * vit_tiny's early threaded runs read 3–8 ms and its steady ones 1.4 ms (2.2 ms alone), so one
 * process in two kept one thread for good. So the verdict stays under review: after
 * {@linkcode ThreadTuner.FIRST_PROBE} runs ({@linkcode ThreadTuner.CLEAR_PROBE} when one way
 * was twice as fast), then at doubling gaps (at most
 * {@linkcode ThreadTuner.LAST_PROBE}), one run goes the other way, and the choice switches when
 * the other way's latest timings beat the chosen way's by the margin. A probe costs at most one
 * run in eight, fewer as the gaps grow.
 * Hand-off costs are the machine's, not the kernel's: on a 2-core machine lenet ran 0.50 ms on
 * one thread and 1.01 ms on two; on 16 cores the threaded runs of small models were worse still.
 */
export class ThreadTuner {
  /** Runs before timing starts (code tiers up, workers spawn). */
  static readonly WARM = 2;
  /** Timings per way for a first verdict, and the latest timings a verdict reads. */
  static readonly SAMPLES = 3;
  /** Timings per way at most, when the first verdict is close. */
  static readonly MOST = 8;
  /**
   * Threaded ÷ single-threaded at or below which one timing of each way is a first verdict: a run
   * on one thread then costs four threaded ones or more (ResNet-18 on the 16-core host: 400 ms
   * against 46, and three such samples were 0.8 s of its early runs).
   */
  static readonly DECISIVE = 0.25;
  /** Threaded ÷ single-threaded (fastest runs) between which a first verdict is close. */
  static readonly CLOSE: readonly [number, number] = [0.8, 1.05];
  /** Runs after the first verdict at which the other way is first tried again. */
  static readonly FIRST_PROBE = 2;
  /** Runs after a first verdict of a 2× or wider margin at which the other way is first tried. */
  static readonly CLEAR_PROBE = 32;
  /** The longest gap between two such tries. */
  static readonly LAST_PROBE = 1024;
  #runs = 0;
  /** Timings single-threaded and threaded, latest last. */
  #times: [number[], number[]] = [[], []];
  #choice?: boolean;
  /** Whether a threaded run with the workers up has happened (the workers' warm-up). */
  #warmThreads = false;
  /** Whether the current probe of the threads has had its waking run. */
  #woken = false;
  /** Runs until the next probe, and the gap after it. */
  #untilProbe = ThreadTuner.FIRST_PROBE;
  #gap = ThreadTuner.FIRST_PROBE;

  /**
   * A tuner, starting from `verdict` when an earlier process on this machine reached one (the
   * first probe of the other way then comes after {@linkcode ThreadTuner.CLEAR_PROBE} runs).
   */
  constructor(verdict?: boolean) {
    if (verdict === undefined) return;
    this.#choice = verdict;
    this.#untilProbe = this.#gap = ThreadTuner.CLEAR_PROBE;
  }

  /** Whether the next run should use the threads. */
  next(): boolean {
    if (this.#choice === undefined) {
      return this.#runs < ThreadTuner.WARM || (this.#runs - ThreadTuner.WARM) % 2 === 0;
    }
    return this.#untilProbe === 0 ? !this.#choice : this.#choice;
  }

  /**
   * Records a run that took `ms` with threads or without; `ready` says whether the workers were
   * up (until they are, a threaded run is a single-threaded one and times nothing).
   */
  record(threads: boolean, ms: number, ready: boolean): void {
    if (!ready) return;
    if (this.#runs++ < ThreadTuner.WARM) return;
    if (threads && !this.#warmThreads) {
      this.#warmThreads = true;
      return;
    }
    // A probe of the threads after runs without them finds the workers asleep, and on a busy
    // 16-core host waking them cost more than the run (vit_tiny: 9.4 ms against 1.5 a run once
    // awake): the probe's first run wakes them and times nothing, the next one probes.
    if (this.#choice === false && this.#untilProbe === 0 && !this.#woken) {
      this.#woken = true;
      return;
    }
    this.#woken = false;
    const times = this.#times[threads ? 1 : 0];
    times.push(ms);
    if (times.length > ThreadTuner.MOST) times.shift();
    const [alone, threaded] = this.#times.map((t) => Math.min(...t.slice(-ThreadTuner.SAMPLES)));
    // Threads must win by a margin, as a run on one thread leaves the other cores to the rest of
    // the process; the fastest timing of each way, as interference only ever adds time.
    const ratio = threaded / alone;
    if (this.#choice === undefined) {
      const samples = Math.min(...this.#times.map((t) => t.length));
      const [low, high] = ThreadTuner.CLOSE;
      if (samples < ThreadTuner.SAMPLES && !(samples && ratio <= ThreadTuner.DECISIVE)) return;
      if (ratio >= low && ratio < high && samples < ThreadTuner.MOST) return;
      this.#choice = ratio < 0.9;
      // A probe of a way two or more times slower costs that much: on the 16-core host one run
      // of shufflenet alone took 25-35 ms against 6 threaded, and probes at runs 2, 6 and 14 put
      // three of those among a caller's first twenty runs.
      if (ratio < 0.5 || ratio > 2) this.#untilProbe = this.#gap = ThreadTuner.CLEAR_PROBE;
      return;
    }
    if (this.#untilProbe-- > 0) return;
    this.#gap = Math.min(ThreadTuner.LAST_PROBE, this.#gap * 2);
    this.#untilProbe = this.#gap;
    this.#choice = ratio < (this.#choice ? 1 / 0.9 : 0.9);
  }

  /**
   * Takes one thread as the verdict, where none is in yet, as a stored verdict would be (the
   * threads are first tried after {@linkcode ThreadTuner.CLEAR_PROBE} runs).
   */
  presumeAlone(): void {
    if (this.#choice !== undefined) return;
    this.#choice = false;
    this.#untilProbe = this.#gap = ThreadTuner.CLEAR_PROBE;
  }

  /** The way runs take now, once a first verdict is in. */
  get choice(): boolean | undefined {
    return this.#choice;
  }
}

/** A program in one arena. */
export interface ArenaProgram extends Program {
  /**
   * Runs on the calling thread alone, untimed by the thread tuner: a warm-up. V8 tiers a wasm
   * function up once one instance has run it enough, so runs split over threads, each instance
   * running a share, stay in baseline code threads times longer (resnet_block on 2 cores: 0.10 ms
   * from the 5th run alone, from the 30th threaded).
   */
  runAlone(
    args: readonly RefTensor[],
    outputs: readonly number[],
    active?: number,
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

/** Builds the program for `plan`. */
export function arenaProgram(given: ArenaPlan): ArenaProgram {
  // The kernels as generated (`generateWasm`): an f16 matmul's B is packed for its tiles.
  const plan = { ...given, kernels: given.kernels.map(halfMatmulView) };
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
    const value = k.inputs[matmulOperands(k)!.b.input].value;
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
  const shared = (plan.threads ?? 1) > 1;
  const memory = new WebAssembly.Memory({
    initial: pages,
    maximum: shared ? pages : MAX_PAGES,
    shared,
  } as WebAssembly.MemoryDescriptor);
  // One instance per module: kernels of the same code (a repeated block, an RNN's steps) share
  // it, and with it V8's tier-up budget, so their code is optimized as soon as one kernel's would
  // be if it ran as often as they all do.
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
    [...k.inputs, ...k.outputs].map((b) => offsets.get(b.value)!)
  );
  // Each kernel's call with its buffers bound, and its rows: a run of a small model is mostly
  // calls (lstm2: 47 kernels in 0.13 ms), so nothing is spread or counted per call.
  const bound = runs.map((run, i) => run.bind(null, ...addresses[i], scratch));
  // A matmul of few rows ranges over B's panels instead (see `panelSplit`): its calls cover
  // every row.
  const panels = exported.map((e) => (e.panelSplit as WebAssembly.Global | undefined)?.value ?? 0);
  const rowsOf = plan.kernels.map((k, i) => panels[i] || rowCount(k));
  // A stored verdict counts for the same thread count only (another machine, another setting).
  const [way, count] = plan.tuning?.split(" ") ?? [];
  const stored = Number(count) === threads && (way === "threads" || way === "alone")
    ? way === "threads"
    : undefined;
  const crew = threads > 1
    ? WorkerPool.of({ threads, ...plan.workers! }).enlist({
      modules: plan.modules,
      memory,
      args: addresses,
      packs: packedAt,
      scratch,
      scratchBytes: scratchSize,
      // Spawning blocks this thread for 20-30 ms a worker: worth it up front only for first runs
      // that the threads shorten by more (matmul 2048 first run 540 -> 390 ms; 1024 and W1-16M
      // were as fast or faster without). Other programs spawn them as their second run that
      // wants threads begins (see `execute`), after the first result.
      eager: plan.kernels.reduce((sum, k) => sum + workOf(k), 0) >= EAGER_WORK,
    })
    : undefined;
  const split = plan.kernels.map((k, i): Split => {
    const parts = Math.max(1, Math.floor(workOf(k) / PART_WORK));
    if (panels[i]) return { unit: 1, chunk: panels[i], parts };
    const { unit, tile } = rowUnit(k), work = workOf(k) / Math.max(1, rowCount(k));
    // A matmul call streams all of B's panels: its calls start at 11 tiles (66 rows) to
    // amortize that.
    const least = contracts(k) ? 11 : 1;
    return {
      unit,
      chunk: tile * Math.max(least, Math.floor(CHUNK_WORK / (work * tile))),
      parts,
      // A late thread's share goes to the others in quarters; a matmul keeps one piece a
      // thread, as each call streams B's panels.
      pieces: contracts(k) ? 1 : PIECES,
    };
  });
  // On this thread alone: split between the threads (worker primed) it measured no faster —
  // W5's 1.6 MB of weights 0.13 -> 0.11 ms, while W2-512 ran 3.57 -> 3.85 ms in all.
  // B's panels, and a table's rows in calls of 64 rows, then twice as many each (see `tableRows`).
  const tables = packs.map((p) => p?.tableRows ?? 0);
  const pack = (i: number) => {
    for (let s = 0, n = 64; s === 0 || s < tables[i]; s += n, n *= 2) {
      runs[i](...addresses[i], scratch, -1 - s, Math.min(tables[i], s + n), packedAt[i]);
    }
  };
  const written = new Map<number, TensorData>();
  /** Values written by the current run (a prepacked B among them is packed anew). */
  const fresh = new Set<number>();
  const write = (value: number, data: TensorData, dtype: DType) => {
    if (!types.has(value) || written.get(value) === data) return;
    fresh.add(value);
    const words = toWords(data, dtype);
    new Uint8Array(memory.buffer, offsets.get(value)!, words.byteLength).set(
      new Uint8Array(words.buffer, words.byteOffset, words.byteLength),
    );
  };
  const tuner = crew ? new ThreadTuner(stored) : undefined;
  const verdict = () =>
    tuner?.choice === undefined ? undefined : `${tuner.choice ? "threads" : "alone"} ${threads}`;
  let reported = verdict();
  /** The store of the last verdict reported (see `AssemblyPlan.onTuning`). */
  let noted: Promise<void> | void = undefined;
  const needed = neededKernels(plan.kernels, plan.outputs);
  let times: KernelTime[] = [], threadedRuns = 0;
  /** Kernel `i` over rows `[start, end)`, in calls of `chunk` rows, each twice the last. */
  const callRows = (i: number, start: number, end: number) => {
    for (let s = start, n = split[i].chunk; s < end; s += n, n *= 2) {
      bound[i](s, Math.min(end, s + n), packedAt[i]);
    }
  };
  const execute = (
    args: readonly RefTensor[],
    outputs: readonly number[],
    active: number | undefined,
    tuned: boolean,
  ): Promise<TensorData[]> => {
    const threads = tuned && (tuner?.next() ?? false);
    // Left to the pool, the spawn waits for a task boundary that a caller awaiting runs back to
    // back never reaches: with a stored verdict of threads, a compile from the disk cache ran
    // mobilenet_v2ish's first 110 runs alone on the 16-core host (0.93 ms a run, 0.33 after).
    // Spawned in the compile instead, fifteen workers took 125-160 ms of unet's first result.
    // Where no verdict is stored the tuner is still deciding, and its probes run alone.
    if (threads && stored && ++threadedRuns === 2) crew!.start();
    if (threads) crew!.prime();
    const began = performance.now();
    plan.bindings.forEach((b, i) => {
      write(b.value, args[i].data, args[i].dtype);
      if (b.resident) written.set(b.value, args[i].data);
    });
    for (const [v, t] of plan.constants) {
      write(v, t.data, t.dtype as DType);
      written.set(v, t.data);
    }
    packs.forEach((p, i) => p?.fixed && fresh.has(p.value) && pack(i));
    fresh.clear();
    const timed: KernelTime[] = [];
    const wanted = needed(outputs);
    try {
      plan.kernels.forEach((k, i) => {
        if (!wanted[i]) return;
        const start = plan.profile ? performance.now() : 0;
        if (packs[i] && !packs[i].fixed) pack(i);
        // A panel split computes every row, the stale ones past the active rows too (harmless:
        // see `panelSplit`).
        const rows = active !== undefined && plan.partial?.[i] && !panels[i]
          ? rowsOf[i] / k.space[0] * active
          : rowsOf[i];
        if (k.opaque) runs[i](...addresses[i]);
        else if (threads && threaded[i]) crew!.run(i, rows, split[i], (a, b) => callRows(i, a, b));
        else callRows(i, 0, rows);
        if (plan.profile) timed.push({ kernel: k.name, ms: performance.now() - start });
      });
    } finally {
      // The workers spun through the run for its jobs (see `WorkerPool.prime`).
      if (threads) crew!.rest();
    }
    times = timed;
    // Until every worker is up a threaded run splits over fewer threads than it will: such
    // runs time nothing.
    if (tuned && tuner) {
      tuner.record(threads, performance.now() - began, crew!.ready() === crew!.workers);
      const now = verdict();
      if (now !== reported && now !== undefined) noted = plan.onTuning?.(reported = now);
    }
    const fault = new Int32Array(memory.buffer, 0, 3);
    if (fault[0] !== 0) {
      const error = gatherOutOfRange(fault[1], fault[2]);
      fault.fill(0);
      return Promise.reject(error);
    }
    return Promise.resolve(outputs.map((i) => {
      const v = plan.outputs[i];
      const bound = plan.bindings.findIndex((b) => b.value === v);
      if (bound >= 0) return args[bound].data;
      // A graph output that is a folded constant: a copy, so the caller cannot change it.
      const constant = plan.constants.get(v);
      if (constant) return constant.data.slice();
      const t = types.get(v)!;
      return fromWords(memory.buffer as ArrayBuffer, offsets.get(v)!, sizeOf(t.shape), t.dtype);
    }));
  };
  return {
    // Arguments are copied into the arena before the first await.
    readsArgsOnCall: true,
    run: (args, outputs, active) => execute(args, outputs, active, true),
    runAlone: (args, outputs, active) => execute(args, outputs, active, false),
    get settled() {
      return tuner?.choice !== undefined || !tuner;
    },
    splitPays: threads > 1 && plan.kernels.some((k) => !k.opaque && workOf(k) >= SPLIT_PAYS),
    presumeAlone: () => {
      // A presumption, not a timing: kept from the stored verdicts unless a probe overturns it.
      tuner?.presumeAlone();
      reported = verdict();
    },
    get noted() {
      return noted;
    },
    get tuning() {
      return verdict();
    },
    deviceTimes: () => times,
    dispose() {
      crew?.dispose();
      written.clear();
    },
  };
}

/**
 * Element-operations of a kernel that gains from the threads however short the run around it,
 * about 0.1 ms on one thread: a program with one is not presumed single-threaded for its short
 * runs (see `ALONE_MS` in `warm_up.ts`), its tuner decides in the warm-up. mlp's 8 × 784 × 256
 * layer (9.6M) ran 0.13-0.17 ms a run alone and 0.08-0.09 threaded on the 16-core host, where the
 * presumption kept its first 32 runs alone: medians of runs 4-63 there, four processes each,
 * 0.116-0.257 ms presumed and 0.099-0.174 decided (2 cores: 0.16-0.26 against 0.14-0.17).
 * lenet's largest kernel (5.8M) and the other small models' (under 5M) stay presumed: letting
 * the tuner decide for every short program slowed mobile_block and llama_dynamo's early runs.
 */
const SPLIT_PAYS = 1 << 23;
