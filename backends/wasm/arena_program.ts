/**
 * The arena program: a whole fused plan in one `WebAssembly.Memory` (its own, or one it leases
 * places in beside the other programs of its model, their shared weights held once:
 * `arena_share.ts`). Every buffer has a fixed place in the arena (intermediates share places per
 * the memory plan, weights read only as packed panels take turns at one, `ArenaLayout.sources`);
 * each run writes the inputs (params and constants only when their data changed, a tiled
 * product's fixed B packed right after), calls each kernel's `run` with its buffers' addresses and
 * row range, and reads back only the requested outputs.
 *
 * @module
 */
import type { KernelTime, Program, ResidentRunOptions } from "../../jit/runtime/backend.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import type { DType, TensorData } from "../../jit/ir/dtype.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { gatherOutOfRange, rowCount } from "../../jit/ir/kernel_ir.ts";
import { settled } from "../../jit/support/errors.ts";
import { neededKernels } from "../../jit/runtime/program.ts";
import { count } from "../../jit/runtime/counters.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { elementBytes, wordsInto, writeWords } from "../words.ts";
import { halfMatmulView } from "../../shaders/wasm/matmul_plan.ts";
import { type Split, WorkerPool } from "./worker_crew.ts";
import { type Chain, SPLIT_PAYS, splitsOf, totalWork, workOf } from "./splits.ts";
import type { ProgramTier, Swappable } from "./optimizing_tier.ts";
import { ThreadTuner } from "./thread_tuner.ts";
import { type ArenaLayout, WORDS } from "./arena_layout.ts";
import { ArenaHome, ArenaStorage, type ArgumentPlace, placeArguments } from "./arena_storage.ts";
import {
  arenaOf,
  heldBy,
  holding,
  type Lease,
  type SharedPlace,
  type SharePlan,
} from "./arena_share.ts";
import { PlaceSwaps } from "./arena_places.ts";
import { TOUCH_FROM, touchOnThreads } from "./prefault.ts";
import { bindCall, type InstancePlan, type Instances, instantiate } from "./arena_instances.ts";

/** Element-ops of a program from which the worker pool spawns at compile (see `WorkerPool`). */
const EAGER_WORK = 2 ** 33;

/** A plan for the arena: its layout's parts and how it runs. */
export interface ArenaPlan extends SharePlan, InstancePlan {
  /** Per kernel: whether a bucketed run computes only the active rows. */
  readonly partial?: readonly boolean[];
  /**
   * Threads of the worker pool the program enlists in (default `threads`): the most any program
   * of its backend takes, so that programs taking fewer share the pool of those taking more.
   */
  readonly poolThreads?: number;
  /** Time each kernel of a run (wall clock, threads included) for `deviceTimes()`. */
  readonly profile?: boolean;
  /** The thread verdict of an earlier compile of these kernels (see `Program.tuning`). */
  readonly tuning?: string;
  /** Told each new thread verdict (see `AssemblyPlan.onTuning`). */
  readonly onTuning?: (verdict: string) => Promise<void> | void;
  /** The optimizing tier's share for this program, where the backend has one. */
  readonly tier?: ProgramTier;
}

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
  /**
   * Runs with outputs left in the arena as device tensors where `keep` says, and device tensors
   * among the arguments (see `arena_storage.ts`); `alone` as {@linkcode ArenaProgram.runAlone}.
   */
  runResident(
    args: readonly (RefTensor | DeviceTensor)[],
    outputs: readonly number[],
    options: ResidentRunOptions & { readonly alone?: boolean },
  ): Promise<(TensorData | DeviceTensor)[]>;
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
  return new Arena({ ...given, kernels: given.kernels.map(halfMatmulView) });
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
  /** Groups split as one job (see `Chain`), and the chain each first member starts. */
  #chains: readonly Chain[];
  #chainAt: Map<number, number>;
  #crew?: ReturnType<WorkerPool["enlist"]>;
  #stored?: boolean;
  #tuner?: ThreadTuner;
  #reported?: string;
  /** The store of the last verdict reported (see `AssemblyPlan.onTuning`). */
  #noted: Promise<void> | void = undefined;
  #needed: (outputs: readonly number[]) => readonly boolean[];
  #times: KernelTime[] = [];
  #threadedRuns = 0;
  /** Whether a run has begun (the first writes the weights: see `#touchAhead`). */
  #ran = false;
  /** Data last written per value (params and constants are written again only when changed). */
  #written = new Map<number, TensorData>();
  /** Values written by the current run (a prepacked B among them is packed anew). */
  #fresh = new Set<number>();
  /** The device tensors living in the arena. */
  #home: ArenaHome;
  /** The program's places in its share's memory, where it leased them. */
  #lease?: Lease;
  /** Fixed values at places other programs read too (see `arena_share.ts`), by value. */
  #shared: ReadonlyMap<number, SharedPlace>;
  /** Each argument's place, where a kernel reads it. */
  #places: (ArgumentPlace | undefined)[];
  /** Trades an argument's place for an output's (see `arena_places.ts`). */
  #swaps: PlaceSwaps;
  /**
   * The kernels whose fixed B is each value (a run's fresh values look them up: scanning every
   * kernel for each of a decode step's 48 swapped caches took 0.1 ms a step).
   */
  #fixedPacks = new Map<number, number[]>();
  /** The params and constants: the weights, whose writes are counted apart. */
  #fixed: ReadonlySet<number>;
  /** Each bound value's first binding (a decode step's 50 outputs scanned 300: 0.1 ms a step). */
  #binding = new Map<number, number>();

  constructor(plan: ArenaPlan) {
    this.#plan = plan;
    const { layout, memory, lease } = arenaOf(plan);
    this.#layout = layout;
    this.#memory = memory;
    this.#shared = lease?.places ?? new Map();
    plan.bindings.forEach((b, i) => this.#binding.has(b.value) || this.#binding.set(b.value, i));
    const params = plan.bindings.filter((b) => b.resident).map((b) => b.value);
    this.#fixed = new Set([...params, ...plan.constants.keys()]);
    layout.packs.forEach((p, i) => {
      if (p?.fixed) this.#fixedPacks.set(p.value, [...this.#fixedPacks.get(p.value) ?? [], i]);
    });
    const k = this.#k = instantiate(plan, layout, this.#memory);
    this.#home = new ArenaHome(this.#memory);
    this.#lease = lease && heldBy(this.#home, lease);
    // A packed source (it shares one place), a table (not words) or a place other programs read:
    // never a device tensor's place.
    this.#places = plan.bindings.map(({ value }) => {
      const type = layout.types.get(value);
      const own = !layout.sources.has(value) && !layout.held.has(value) && !this.#shared.has(value);
      return type && own ? { at: layout.offsets.get(value)!, dtype: type.dtype } : undefined;
    });
    this.#swaps = new PlaceSwaps({
      ...plan,
      ...layout,
      places: this.#places,
      addresses: k.addresses,
      table: k.table,
      tableAt: k.tableAt,
      rebind: (n) => bindCall(k, n, layout.scratch),
    });
    this.#rowsOf = plan.kernels.map((kernel, i) => k.panels[i] || rowCount(kernel));
    this.#chains = layout.chains;
    this.#chainAt = new Map(this.#chains.map((c, n) => [c.kernels[0], n]));
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
          args: k.table,
          argAt: k.tableAt,
          packs: k.packs,
          scratch: layout.scratch,
          scratchBytes: layout.scratchSize,
          // Spawning blocks this thread for 20-30 ms a worker: worth it up front only for first
          // runs that the threads shorten by more (matmul 2048 first run 540 -> 390 ms; 1024 and
          // W1-16M were as fast or faster without). Other programs spawn them as their second run
          // that wants threads begins (see `execute`), after the first result.
          eager: totalWork(plan.kernels) >= EAGER_WORK,
          chains: this.#chains.map((c) => c.kernels.flatMap((m, x) => [m, c.per[x]])),
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
    return settled(() =>
      this.#execute(args, outputs, { active, tuned: true, into }) as TensorData[]
    );
  }

  /** A run on this thread alone, untimed (a warm-up; see {@linkcode ArenaProgram.runAlone}). */
  runAlone(
    args: readonly RefTensor[],
    outputs: readonly number[],
    active?: number,
    into?: readonly (TensorData | undefined)[],
  ): Promise<TensorData[]> {
    return settled(() =>
      this.#execute(args, outputs, { active, tuned: false, into }) as TensorData[]
    );
  }

  /**
   * Runs `repeat` times, each repetition's `feedback` outputs the next one's arguments (they stay
   * in the arena between), outputs kept as device tensors where `keep` says.
   */
  runResident(
    args: readonly (RefTensor | DeviceTensor)[],
    outputs: readonly number[],
    options: ResidentRunOptions & { readonly alone?: boolean },
  ): Promise<(TensorData | DeviceTensor)[]> {
    const { repeat, feedback, keep, active, into, alone } = options;
    return settled(() => {
      // Between repetitions only the fed-back outputs are made, and they stay in the arena.
      const fed = feedback.map(([o]) => o), kept = fed.map(() => true);
      let current = args, passed: DeviceTensor[] = [];
      for (let r = 0; r < repeat - 1; r++) {
        const out = this.#execute(current, fed, { active, tuned: !alone, keep: kept });
        passed.forEach((t) => t.dispose());
        passed = out as DeviceTensor[];
        const next = [...current];
        feedback.forEach(([, a], j) => (next[a] = passed[j]));
        current = next;
      }
      try {
        return this.#execute(current, outputs, { active, tuned: !alone, into, keep });
      } finally {
        passed.forEach((t) => t.dispose());
      }
    });
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
      bindCall(this.#k, i, this.#layout.scratch);
      count("kiln_wasm_tier_swaps_total");
    });
  }

  /** Stops the crew's work for this program and forgets what was written. */
  dispose(): void {
    // Its device tensors stay readable, on the host.
    this.#home.evacuate();
    this.#crew?.dispose();
    this.#written.clear();
    this.#lease?.end();
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

  /**
   * Writes `data` at `value`'s place, unless it is the data written there last (by any program
   * reading the place: it is new to this one all the same, and its packed panels are made anew).
   */
  #write(value: number, data: TensorData, dtype: DType): void {
    if (!this.#layout.types.has(value)) return;
    const stale = this.#stale(value, data);
    if (!stale && this.#written.get(value) === data) return;
    this.#fresh.add(value);
    if (!stale) return;
    const at = this.#layout.offsets.get(value)!, bytes = this.#layout.held.has(value);
    const written = writeWords(this.#memory.buffer, at, data, dtype, bytes);
    count("kiln_wasm_host_bytes_total", written);
    if (this.#fixed.has(value)) count("kiln_wasm_weight_bytes_total", written);
    const shared = this.#shared.get(value);
    if (shared) shared.holds = data;
  }

  /** Whether `value`'s place (one of the program's values) holds other bytes than `data`'s. */
  #stale(value: number, data: TensorData): boolean {
    const shared = this.#shared.get(value);
    return shared ? !holding(shared, data) : this.#written.get(value) !== data;
  }

  /**
   * In the program's first run, which writes its weights into places never touched, faults those
   * places in on the ready workers and this thread first where the writes come to
   * {@linkcode TOUCH_FROM} bytes or more (see `prefault.ts`); later runs find them mapped.
   */
  #touchAhead(args: readonly (RefTensor | DeviceTensor)[]): void {
    const first = !this.#ran;
    this.#ran = true;
    if (!first || !this.#crew?.ready()) return;
    let from = Infinity, to = 0, bytes = 0;
    const add = (value: number, t: { data: TensorData; dtype: string }) => {
      if (!this.#layout.types.has(value) || !this.#stale(value, t.data)) return;
      const at = this.#layout.offsets.get(value)!;
      const n = t.data.length * elementBytes(t.dtype as DType, WORDS);
      [from, to, bytes] = [Math.min(from, at), Math.max(to, at + n), bytes + n];
    };
    this.#plan.bindings.forEach((b, i) => args[i] instanceof DeviceTensor || add(b.value, args[i]));
    for (const [v, t] of this.#plan.constants) add(v, t);
    if (bytes >= TOUCH_FROM) touchOnThreads(this.#crew, this.#memory, from, to - from);
  }

  /** Whether kernel `i`'s B is packed in every run, before its calls. */
  #packsAhead(i: number): boolean {
    const pack = this.#layout.packs[i];
    return pack !== undefined && !pack.fixed && this.#k.packs[i] > 0;
  }

  /** Kernel `i` over rows `[start, end)`, in calls of `chunk` rows, each twice the last. */
  #callRows(i: number, start: number, end: number): void {
    for (let s = start, n = this.#split[i].chunk; s < end; s += n, n *= 2) {
      this.#k.bound[i](s, Math.min(end, s + n), this.#k.packs[i]);
    }
  }

  /**
   * A run: arguments written, the wanted kernels called (threaded or not), outputs read or, where
   * `keep` says, left in the arena as device tensors. Throws a fault a kernel recorded.
   */
  #execute(
    args: readonly (RefTensor | DeviceTensor)[],
    outputs: readonly number[],
    o: { active?: number; tuned: boolean; into?: Into; keep?: readonly boolean[] },
  ): (TensorData | DeviceTensor)[] {
    this.#plan.tier?.step(this);
    const crew = this.#crew;
    const threads = o.tuned && (this.#tuner?.next() ?? false);
    // Left to the pool, the spawn waits for a task boundary that a caller awaiting runs back to
    // back never reaches: with a stored verdict of threads, a compile from the disk cache ran
    // mobilenet_v2ish's first 110 runs alone on the 16-core host (0.93 ms a run, 0.33 after).
    // Spawned in the compile instead, fifteen workers took 125-160 ms of unet's first result.
    // Where no verdict is stored the tuner is still deciding, and its probes run alone.
    if (threads && this.#stored && ++this.#threadedRuns === 2) crew!.start();
    this.#touchAhead(args);
    if (threads) crew!.prime();
    const began = performance.now();
    this.#writeArguments(args);
    try {
      this.#times = this.#callKernels(outputs, o.active, threads);
    } finally {
      // The workers spun through the run for its jobs (see `WorkerPool.prime`).
      if (threads) crew!.rest();
    }
    // Until every worker is up a threaded run splits over fewer threads than it will: such
    // runs time nothing.
    if (o.tuned && this.#tuner) {
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
      throw error;
    }
    return this.#outputs(args, outputs, o.into, o.keep);
  }

  /**
   * The run's arguments and the constants into the arena (device tensors placed, see
   * `placeArguments`); fixed Bs that changed packed.
   */
  #writeArguments(args: readonly (RefTensor | DeviceTensor)[]): void {
    const plan = this.#plan;
    const device = this.#home.live.size > 0 || args.some((a) => a instanceof DeviceTensor);
    const swap = (i: number, at: number) => this.#swaps.swap(i, at);
    const placed = device ? placeArguments(this.#home, this.#places, args, swap) : [];
    this.#swaps.settle();
    plan.bindings.forEach((b, i) => {
      const a = args[i];
      if (a instanceof DeviceTensor && this.#shared.has(b.value)) {
        // A place other programs read takes host data alone (see `#places`).
        const s = a.storage() as ArenaStorage;
        return this.#write(b.value, s.copy(0, s.length), s.dtype);
      }
      if (a instanceof DeviceTensor) {
        // Its words are in place; a host argument there later is written again.
        if (placed[i]) this.#fresh.add(b.value);
        this.#written.delete(b.value);
        return;
      }
      this.#write(b.value, a.data, a.dtype);
      if (b.resident) this.#written.set(b.value, a.data);
      this.#packSource(b.value);
    });
    for (const [v, t] of plan.constants) {
      this.#write(v, t.data, t.dtype as DType);
      this.#written.set(v, t.data);
      this.#packSource(v);
    }
    for (const v of this.#fresh) this.#packAll(v);
    this.#fresh.clear();
  }

  /** Packs `value` where it is a packed source just written, before the next takes its place. */
  #packSource(value: number): void {
    if (this.#layout.sources.has(value) && this.#fresh.delete(value)) this.#packAll(value);
  }

  /** Packs the B of every kernel whose fixed B is `value`. */
  #packAll(value: number): void {
    for (const i of this.#fixedPacks.get(value) ?? []) this.#pack(i);
  }

  /**
   * Calls the kernels the outputs need, over the active rows, a chain's members together where
   * threaded (see `Chain`); their times where profiled.
   */
  #callKernels(outputs: readonly number[], active: number | undefined, threads: boolean) {
    const plan = this.#plan;
    const { threaded } = this.#layout;
    const { runs, addresses, panels } = this.#k;
    const timed: KernelTime[] = [];
    const wanted = this.#needed(outputs);
    const chained = threads && !plan.profile && active === undefined;
    let after = -1;
    plan.kernels.forEach((k, i) => {
      if (!wanted[i] || i <= after) return;
      const chain = chained ? this.#chains[this.#chainAt.get(i) ?? -1] : undefined;
      if (chain && chain.kernels.every((m) => wanted[m])) {
        for (const m of chain.kernels) if (this.#packsAhead(m)) this.#pack(m);
        const call = (a: number, b: number) =>
          chain.kernels.forEach((m, x) =>
            this.#k.bound[m](a * chain.per[x], b * chain.per[x], this.#k.packs[m])
          );
        this.#crew!.run(-1 - this.#chainAt.get(i)!, chain.rows, chain.split, call);
        after = chain.kernels.at(-1)!;
        return;
      }
      const start = plan.profile ? performance.now() : 0;
      if (this.#packsAhead(i)) this.#pack(i);
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
   * the caller's arrays where `into` has them) or, where `keep` says, left there.
   */
  #outputs(
    args: readonly (RefTensor | DeviceTensor)[],
    outputs: readonly number[],
    into: Into = [],
    keep: readonly boolean[] = [],
  ): (TensorData | DeviceTensor)[] {
    const plan = this.#plan;
    const { types, offsets } = this.#layout;
    return outputs.map((i, j) => {
      const v = plan.outputs[i];
      const bound = this.#binding.get(v);
      // A graph output that is a folded constant or an argument: a copy, so the caller cannot
      // change it (a host argument is the executable's to copy).
      const given = bound !== undefined ? args[bound] : plan.constants.get(v);
      if (given instanceof DeviceTensor) {
        const storage = given.storage() as ArenaStorage;
        const data = storage.copy(0, given.size);
        return keep[j] ? kept(ArenaStorage.onHost(data, storage.dtype), given) : data;
      }
      if (given) {
        const dtype = given.dtype as DType;
        if (keep[j]) return kept(ArenaStorage.onHost(given.data.slice(), dtype), given);
        return bound !== undefined ? given.data : given.data.slice();
      }
      const t = types.get(v)!, n = sizeOf(t.shape);
      if (keep[j]) return kept(ArenaStorage.inArena(this.#home, offsets.get(v)!, t.dtype, n), t);
      const data = wordsInto(
        into[j],
        this.#memory.buffer as ArrayBuffer,
        offsets.get(v)!,
        n,
        t.dtype,
      );
      count("kiln_wasm_host_bytes_total", data.byteLength);
      return data;
    });
  }
}

/** The caller's arrays for a run's outputs, by position (see `Program.run`). */
type Into = readonly (TensorData | undefined)[];

/** A device tensor over `storage`, of `t`'s shape (the executable gives it the graph's dtype). */
const kept = (
  storage: ArenaStorage,
  t: { readonly shape: readonly number[]; readonly dtype: string },
) => new DeviceTensor(storage, [...t.shape], t.dtype as DType);
