/**
 * Worker threads for arena programs: one pool per thread count for the whole process, which
 * every program enlists in (a `Crew` is a program's place in it). Each worker instantiates a
 * program's modules on that program's shared arena as soon as the program is enlisted, then
 * waits on a control word; a kernel call splits its rows into pieces that the calling thread and
 * the workers that are up claim one at a time. Workers start in the background — until one is
 * ready the caller computes alone, so compiling never waits for threads — and are `unref`'d, so
 * they never keep a process alive.
 *
 * One pool, not workers per program: `new Worker` blocks the calling thread 20-30 ms in Deno, and
 * per-program workers made every compile after the first pay that once its event loop turned
 * (the benchmarks' first timed iterations absorbed thirteen such spawns), and kept threads × programs
 * threads alive.
 *
 * Hand-off is through `Atomics` on a shared control block, not messages: a message round trip
 * costs a trip through both event loops, an atomic one a few microseconds while the workers spin
 * (they spin briefly after each job, then sleep in `Atomics.wait`; a run wakes them as it starts,
 * so they spin while it writes its inputs). Programs reach the workers as
 * messages on a port each worker drains synchronously (`receiveMessageOnPort`) when it wakes; in
 * a browser, whose workers sleep in `Atomics.waitAsync`, they queue up while it sleeps.
 *
 * @module
 */

import { count as tally } from "../../jit/runtime/counters.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { erf, pow } from "../reference/scalar_math.ts";
import { canBlock, pause } from "./waits.ts";
import { TOUCH, touchPages } from "./prefault.ts";

/** `node:worker_threads`' `Worker` (Deno, Node; a browser's Web Workers through `web_workers.ts`). */
export type WorkerClass = new (
  source: string,
  options: { eval: true; workerData: unknown; transferList: unknown[] },
) => { unref(): void; terminate(): unknown };

/** `node:worker_threads`' `MessageChannel`. */
export type ChannelClass = new () => {
  port1: { postMessage(message: unknown): void; unref?(): void };
  port2: unknown;
};

/** What the workers need to run a program's kernels. */
export interface CrewOptions {
  /** The program's compiled kernels. */
  readonly modules: readonly WebAssembly.Module[];
  /** The shared arena. */
  readonly memory: WebAssembly.Memory;
  /** Kernels' buffer addresses (before scratch and rows), `k`'s from `argAt[k]`; may change. */
  readonly args: Int32Array;
  /** Where each kernel's addresses start in `args` (one more entry: the end). */
  readonly argAt: readonly number[];
  /** Per kernel: its prepacked B's address, or 0 (the argument after the row range). */
  readonly packs: readonly number[];
  /** Scratch of thread `t`: `scratch + t * scratchBytes`. */
  readonly scratch: number;
  /** Scratch bytes per thread. */
  readonly scratchBytes: number;
  /** Spawn the pool's workers now (if they are not up) rather than after the current task. */
  readonly eager?: boolean;
  /**
   * Per chain (kernel `-1 - c` of a job; see `splits.ts`): its members' kernel indices, each
   * followed by its rows per row of the chain.
   */
  readonly chains?: readonly (readonly number[])[];
  /**
   * Threads the program's kernels split over, the caller included (default: the pool's). A pool
   * spawns the workers its programs take, no more, and only they spin through a run.
   */
  readonly threads?: number;
}

/** What `node:worker_threads` provides for a pool. */
export interface WorkerThreads {
  /** Its `Worker` class. */
  readonly Worker: WorkerClass;
  /** Its `MessageChannel` class. */
  readonly MessageChannel: ChannelClass;
}

/**
 * How a kernel's rows split: pieces of multiples of `unit` rows, `pieces` per thread the kernel
 * is worth (`parts`, the caller's included), each run in calls of `chunk` rows (doubling).
 */
export interface Split {
  /** Rows a piece is a multiple of. */
  readonly unit: number;
  /** Rows of a piece's first call. */
  readonly chunk: number;
  /** Most threads the kernel's work is worth (default: every ready one). */
  readonly parts?: number;
  /**
   * Pieces per thread (default 1). More pieces balance better (a late thread leaves less for the
   * others to take over) but cost a claim each, and a matmul call streams all of B's panels.
   */
  readonly pieces?: number;
}

/** A pool's threads and where they come from. */
export interface PoolOptions extends WorkerThreads {
  /** Most threads its programs take, the caller included (≥ 2). */
  readonly threads: number;
}

const GEN = 0, DONE = 1, KERNEL = 2, ROWS = 3, PARTS = 4, SIZE = 5, STOP = 6, FAILED = 7;
const CHUNK = 8, PROGRAM = 9, JOB = 10, ACTIVE = 11, NEXT = 12, COUNT = 13, READY = 14;

/**
 * A job's pieces are claimed from {@linkcode NEXT}: the job's generation in the high bits, the
 * next piece in the low {@linkcode INDEX_BITS}. A claim is a compare-exchange that fails once the
 * word moved on to another job, so a worker that read a job's parameters late (descheduled, or
 * waking as the next job is written) can never run a piece of one job with another's parameters.
 */
const INDEX_BITS = 12, INDEX_MASK = (1 << INDEX_BITS) - 1;
/** Most pieces a job has (an index of all ones marks a job whose pieces are not open yet). */
const MOST_PIECES = INDEX_MASK - 1;

/**
 * Spins of a worker after a job before it sleeps in `Atomics.wait` (~0.15 ms), unless a run is
 * under way: then it spins for the run's next job, checking the clock every
 * {@linkcode CLOCK_SPINS} spins, for at most {@linkcode ACTIVE_MS}.
 *
 * Spinning through the run, not a count of spins: a worker asleep takes tens of microseconds to
 * wake, and a count of spins lasts as long as V8 makes the loop run (interpreted, then
 * optimized). On the 2-core machine vit_tiny's threaded runs took 1.4 ms in some processes and
 * 3.3 ms in others — its ~40 threaded kernels, between kernels run on the calling thread alone,
 * each woke a worker that had fallen asleep.
 */
const SPIN = 20000, CLOCK_SPINS = 4096, ACTIVE_MS = 50;

/**
 * Spins before sleeping where each spin pauses (`Atomics.pause`, x86's PAUSE: tens of cycles
 * rather than a few), about as long as {@linkcode SPIN} plain ones. A plain spin keeps the core's
 * pipeline full of loads: where a worker spins on the other hardware thread of the core the
 * calling thread runs on, the caller's kernels between the split ones run at half speed.
 */
const SPIN_PAUSED = 5000;

/**
 * Milliseconds of kernels run alone (the spawn timer not having fired) after which the workers
 * spawn on the spot: by then a second thread would have saved more than the spawn's 20-30 ms.
 */
const STARVED_MS = 100;

/**
 * Rows of each piece when `rows` split into about `pieces` pieces of multiples of `unit`, and how
 * many pieces that makes (at most {@linkcode MOST_PIECES}).
 */
export function piecesOf(
  rows: number,
  pieces: number,
  unit: number,
): [size: number, count: number] {
  const units = Math.ceil(rows / unit);
  const size = unit * Math.max(Math.ceil(units / pieces), Math.ceil(units / MOST_PIECES));
  return [size, Math.ceil(rows / size)];
}

/**
 * What each worker runs (as source text, so it needs no module resolution there), given its data,
 * a way to take a message off its port without blocking (`{ message }`, or undefined when none
 * waits) and a way to sleep until a control word changes. Node's and Deno's workers block in
 * `Atomics.wait` and read their port synchronously; a browser's must return to its event loop
 * for messages to arrive, so it sleeps in `Atomics.waitAsync` and its port's messages queue up
 * meanwhile (see {@linkcode WEB_WORKER}).
 */
const BODY = `async ({ control, port, id }, receive, sleep) => {
const host = {
  exp: Math.exp, log: Math.log, erf: ${erf},
  sin: Math.sin, cos: Math.cos, pow: ${pow}, fmod: (a, b) => a % b,
};
const programs = new Map();
const drain = () => {
  for (let m = receive(port); m; m = receive(port)) {
    const p = m.message;
    if (p.drop !== undefined) programs.delete(p.drop);
    else {
      // A program this worker cannot instantiate is one it takes no piece of. Kernels of one
      // module share an instance, as on the calling thread (see arenaProgram).
      let runs;
      try {
        const made = new Map();
        const instance = (m) => new WebAssembly.Instance(m, { env: { memory: p.memory, ...host } });
        runs = p.modules.map((m) => made.get(m) ?? made.set(m, instance(m).exports.run).get(m));
      } catch {}
      programs.set(p.id, { ...p, runs });
    }
  }
};
const c = new Int32Array(control);
// A spin with a pause hands the core's other hardware thread its share (see SPIN).
const pause = typeof Atomics.pause === "function";
const spins = pause ? ${SPIN_PAUSED} : ${SPIN};
drain();
Atomics.store(c, ${READY} + id, 1);
let gen = Atomics.load(c, ${GEN});
for (;;) {
  const until = performance.now() + ${ACTIVE_MS};
  for (let spin = 1; Atomics.load(c, ${GEN}) === gen; spin++) {
    if (pause) Atomics.pause();
    if (spin < spins) continue;
    if (id > Atomics.load(c, ${ACTIVE})) break;
    if (spin % ${CLOCK_SPINS} === 0 && performance.now() > until) break;
  }
  await sleep(c, ${GEN}, gen);
  gen = Atomics.load(c, ${GEN});
  if (Atomics.load(c, ${STOP})) break;
  drain();
  // A wake without a job (a program discharged, or a run starting) must not run the job
  // published after it; during a run the loop above spins for that job.
  if (Atomics.load(c, ${JOB}) !== gen) continue;
  if (id >= Atomics.load(c, ${PARTS})) continue;
  const tag = gen << ${INDEX_BITS};
  try {
    // A program read from a later job than ours may not have reached us yet: our claims would
    // fail then anyway.
    const p = programs.get(Atomics.load(c, ${PROGRAM}));
    const k = Atomics.load(c, ${KERNEL}), rows = Atomics.load(c, ${ROWS});
    // A touch job needs the program's memory alone; any other its instances.
    if (!p || (!p.runs && k !== ${TOUCH})) continue;
    const size = Atomics.load(c, ${SIZE}), count = Atomics.load(c, ${COUNT});
    const chunk = Atomics.load(c, ${CHUNK}), chain = k < 0 ? p.chains[-1 - k] : undefined;
    for (;;) {
      const v = Atomics.load(c, ${NEXT});
      const piece = v & ${INDEX_MASK};
      if ((v & ~${INDEX_MASK}) !== tag || piece >= count) break;
      if (Atomics.compareExchange(c, ${NEXT}, v, v + 1) !== v) continue;
      try {
        const end = Math.min(rows, (piece + 1) * size), args = (i) => p.args.subarray(p.argAt[i], p.argAt[i + 1]);
        const scratch = p.scratch + id * p.scratchBytes;
        // A touch job's pieces are pages from the one its chunk names (see prefault.ts).
        if (k === ${TOUCH}) (${touchPages})(p.memory, chunk, piece * size, end);
        else if (chain) {
          for (let j = 0; j < chain.length; j += 2) {
            const i = chain[j], per = chain[j + 1];
            p.runs[i](...args(i), scratch, piece * size * per, end * per, p.packs[i]);
          }
        } else {
          for (let s = piece * size, n = chunk; s < end; s += n, n *= 2) {
            p.runs[k](...args(k), scratch, s, Math.min(end, s + n), p.packs[k]);
          }
        }
      } catch {
        Atomics.store(c, ${FAILED}, 1);
      }
      if (Atomics.add(c, ${DONE}, 1) === count - 1) Atomics.notify(c, ${DONE});
    }
  } catch {
    Atomics.store(c, ${FAILED}, 1);
  }
}
}`;

/** Node's and Deno's workers (`node:worker_threads`, evaluated as a script). */
const WORKER = `
const { workerData, receiveMessageOnPort } = require("node:worker_threads");
(${BODY})(workerData, receiveMessageOnPort, (c, i, v) => Atomics.wait(c, i, v));`;

/**
 * A browser's Web Worker (cross-origin isolated pages: shared memory): its data arrives as the
 * first message, and its port's messages queue while it awaits.
 */
export const WEB_WORKER = `
onmessage = ({ data }) => {
  onmessage = null;
  const queue = [];
  data.port.onmessage = (m) => queue.push({ message: m.data });
  (${BODY})(data, () => queue.shift(), (c, i, v) => Atomics.waitAsync(c, i, v).value);
};`;

/** The process's worker threads for one thread count, shared by every program. */
export class WorkerPool {
  static #pools = new Map<number, WorkerPool>();
  static #hooked = false;
  #options: PoolOptions;
  #control: Int32Array;
  #workers: { worker: { terminate(): unknown }; port: { postMessage(m: unknown): void } }[] = [];
  #programs = new Map<number, CrewOptions>();
  #ids = 0;
  #scheduled = false;
  #alone = 0;
  #closed = false;
  /** Threads the programs enlisted so far take at most (the workers spawned are one fewer). */
  #wanted = 0;

  /** The process-wide pool of `options.threads` threads (made on first use). */
  static of(options: PoolOptions): WorkerPool {
    let pool = WorkerPool.#pools.get(options.threads);
    if (!pool || pool.#closed) {
      WorkerPool.#pools.set(options.threads, pool = new WorkerPool(options));
    }
    return pool;
  }

  private constructor(options: PoolOptions) {
    this.#options = options;
    this.#control = new Int32Array(new SharedArrayBuffer(4 * (READY + options.threads)));
  }

  /**
   * Enlists a program. Unless something {@linkcode WorkerPool.start}ed them (the wasm backend
   * does as Binaryen loads), the `threads - 1` workers start after the task of the pool's first
   * run, since `new Worker` blocks the calling thread (20-30 ms each in Deno), which would
   * otherwise land on a compile (one awaiting the disk cache turns the event loop) or a first
   * run — or at once for a `program.eager` (a first run long enough to want the threads).
   */
  enlist(program: CrewOptions): Crew {
    const id = ++this.#ids;
    const threads = Math.min(program.threads ?? this.#options.threads, this.#options.threads);
    this.#wanted = Math.max(this.#wanted, threads);
    this.#programs.set(id, program);
    for (const w of this.#workers) w.port.postMessage(registration(id, program));
    // Woken now, the workers instantiate the program while the caller still compiles, not in
    // its first threaded run.
    if (this.ready()) this.#wake();
    if (program.eager) this.start();
    return new Crew(this, id, threads);
  }

  /**
   * Spawns the workers its programs take (`threads`, where none is enlisted yet), those not up
   * yet, now (this thread blocks 20-30 ms a worker in Deno).
   */
  start(threads?: number): void {
    const want = Math.min(
      Math.max(this.#wanted, threads ?? 0) || this.#options.threads,
      this.#options.threads,
    );
    const have = this.#workers.length;
    if (have >= want - 1 || this.#closed) return;
    const { Worker, MessageChannel } = this.#options;
    const more = Array.from({ length: want - 1 - have }, (_, j) => {
      const i = have + j;
      const { port1, port2 } = new MessageChannel();
      port1.unref?.();
      const worker = new Worker(WORKER, {
        eval: true,
        workerData: { control: this.#control.buffer, port: port2, id: i + 1 },
        transferList: [port2],
      });
      worker.unref();
      for (const [id, p] of this.#programs) port1.postMessage(registration(id, p));
      return { worker, port: port1 };
    });
    this.#workers = [...this.#workers, ...more];
    if (!WorkerPool.#hooked) {
      WorkerPool.#hooked = true;
      // Stop the workers before the runtime tears them down at exit: a CI test process aborted
      // once in three at exit ("corrupted size vs. prev_size" from glibc) after every test had
      // passed, with the workers still spinning or asleep on the shared control words.
      globalThis.addEventListener?.("unload", () => {
        for (const pool of WorkerPool.#pools.values()) pool.close();
      });
    }
  }

  /**
   * Spawns after the current task, or now once kernels have run alone for {@linkcode STARVED_MS}:
   * a caller awaiting runs back to back only ever turns microtasks, and would otherwise stay on
   * one thread for good.
   */
  #spawnSoon(): void {
    if (!this.#scheduled) {
      this.#scheduled = true;
      unref(setTimeout(() => this.start(), 0));
    } else if (this.#alone > STARVED_MS) {
      this.start();
    }
  }

  /** Runs kernel `kernel` of program `program` (see {@linkcode Crew.run}). */
  run(
    program: number,
    kernel: number,
    rows: number,
    split: Split,
    call: (start: number, end: number) => void,
    threads: number = this.#options.threads,
  ): void {
    const alone = !this.#workers.length, began = alone ? performance.now() : 0;
    if (alone) this.#spawnSoon();
    const parts = Math.min(1 + this.ready(), split.parts ?? Infinity, threads);
    if (parts <= 1) call(0, rows);
    else this.#share(program, kernel, rows, parts, split, call);
    if (alone) this.#alone += performance.now() - began;
    if (Atomics.exchange(this.#control, FAILED, 0)) {
      throw new KilnError(`wasm: kernel ${kernel} trapped on a worker thread`, {
        code: "internal",
        fix: "report this with the graph; WasmBackend({ threads: 1 }) avoids the threads meanwhile",
      });
    }
  }

  /**
   * Publishes a job of `rows` rows in pieces that this thread and the first `parts - 1` workers
   * claim one at a time, runs pieces until none is left, and waits for those claimed elsewhere.
   *
   * Claimed, not assigned: on the 16-core H200 host a worker woke 4–11 ms late in one threaded
   * run in three (the scheduler's tick: V8's background threads and fifteen spinning workers on
   * sixteen cores), and a fixed part made the whole run wait for it (lenet 0.22 ms a run once
   * warm, 12–31 ms in such runs). A late worker now finds the pieces taken.
   */
  #share(
    program: number,
    kernel: number,
    rows: number,
    parts: number,
    { unit, chunk, pieces = 1 }: Split,
    call: (start: number, end: number) => void,
  ): void {
    const c = this.#control;
    const [size, count] = piecesOf(rows, parts * pieces, unit);
    const gen = Atomics.load(c, GEN) + 1, tag = gen << INDEX_BITS;
    // Closed first, so that a worker still reading the previous job's parameters cannot claim.
    Atomics.store(c, NEXT, tag | INDEX_MASK);
    Atomics.store(c, PROGRAM, program);
    Atomics.store(c, KERNEL, kernel);
    Atomics.store(c, ROWS, rows);
    Atomics.store(c, SIZE, size);
    Atomics.store(c, COUNT, count);
    Atomics.store(c, CHUNK, chunk);
    Atomics.store(c, PARTS, parts);
    Atomics.store(c, DONE, 0);
    Atomics.store(c, NEXT, tag);
    Atomics.store(c, JOB, gen);
    Atomics.store(c, GEN, gen);
    Atomics.notify(c, GEN);
    let failure: { error: unknown } | undefined, claimed = count, mine = 0;
    for (let v = Atomics.load(c, NEXT); (v & INDEX_MASK) < count; v = Atomics.load(c, NEXT)) {
      if (Atomics.compareExchange(c, NEXT, v, v + 1) !== v) continue;
      const piece = v & INDEX_MASK;
      mine++;
      try {
        call(piece * size, Math.min(rows, (piece + 1) * size));
      } catch (error) {
        failure = { error };
      }
      Atomics.add(c, DONE, 1);
      if (failure) {
        // Pieces a worker claimed still write the arena: wait for those before throwing.
        claimed = Math.min(count, Atomics.exchange(c, NEXT, tag | INDEX_MASK) & INDEX_MASK);
        break;
      }
    }
    // It spins before it blocks: woken from `Atomics.wait`, a join took tens of microseconds
    // more, as many times a run as it has split kernels. A browser's main thread never blocks.
    const block = canBlock();
    for (
      let spin = 0, done = Atomics.load(c, DONE);
      done < claimed;
      done = Atomics.load(c, DONE), spin++
    ) {
      if (spin < SPIN_PAUSED) pause();
      else if (block) Atomics.wait(c, DONE, done, 1);
    }
    if (failure) throw failure.error;
    tally("kiln_worker_pieces_total", claimed - mine);
  }

  /**
   * Starts a run on `threads` threads: the first `threads - 1` ready workers wake and spin for
   * its jobs until {@linkcode WorkerPool.rest} (a worker asleep in `Atomics.wait` takes tens of
   * microseconds to wake for each); the others sleep, leaving their cores to V8's own threads.
   */
  prime(threads: number = this.#options.threads): void {
    if (!this.ready()) return;
    Atomics.store(this.#control, ACTIVE, threads - 1);
    this.#wake();
  }

  /** Ends a run: the workers sleep once their spin after the last job is over. */
  rest(): void {
    Atomics.store(this.#control, ACTIVE, 0);
  }

  /** Workers up and waiting for work. */
  ready(): number {
    let n = 0;
    while (n < this.#workers.length && Atomics.load(this.#control, READY + n + 1)) n++;
    return n;
  }

  /** Workers spawned so far, booting or up. */
  get spawned(): number {
    return this.#workers.length;
  }

  /** Programs enlisted and not yet discharged. */
  get programs(): number {
    return this.#programs.size;
  }

  /** Forgets program `id`; the workers drop its instances (and arena) when they next wake. */
  discharge(id: number): void {
    if (!this.#programs.delete(id)) return;
    for (const w of this.#workers) w.port.postMessage({ drop: id });
    if (this.ready()) this.#wake();
  }

  /** Stops the workers; the next {@linkcode WorkerPool.of} makes a fresh pool. */
  close(): void {
    this.#closed = true;
    Atomics.store(this.#control, STOP, 1);
    this.#wake();
    for (const w of this.#workers) w.worker.terminate();
    this.#workers = [];
    this.#programs.clear();
  }

  #wake(): void {
    Atomics.add(this.#control, GEN, 1);
    Atomics.notify(this.#control, GEN);
  }
}

/** One program's place in a {@linkcode WorkerPool}. */
export class Crew {
  #pool: WorkerPool;
  #id: number;
  #threads: number;

  /** Made by {@linkcode WorkerPool.enlist}: program `id` on `threads` threads of `pool`. */
  constructor(pool: WorkerPool, id: number, threads: number) {
    this.#pool = pool;
    this.#id = id;
    this.#threads = threads;
  }

  /**
   * Runs kernel `kernel` over `rows` rows split in multiples of `unit`: part 0 through `call` on
   * this thread, the others on the ready workers (in calls of `chunk` rows, doubling); returns
   * when all parts are done.
   */
  run(
    kernel: number,
    rows: number,
    split: Split,
    call: (start: number, end: number) => void,
  ): void {
    this.#pool.run(this.#id, kernel, rows, split, call, this.#threads);
  }

  /** Spawns the pool's workers if they are not up (see {@linkcode WorkerPool.start}). */
  start(): void {
    this.#pool.start(this.#threads);
  }

  /** Wakes the workers for kernels this thread is about to run (see {@linkcode WorkerPool.prime}). */
  prime(): void {
    this.#pool.prime(this.#threads);
  }

  /** Lets the workers sleep after a run (see {@linkcode WorkerPool.rest}). */
  rest(): void {
    this.#pool.rest();
  }

  /** Workers up and waiting for work, of those this program takes. */
  ready(): number {
    return Math.min(this.#pool.ready(), this.#threads - 1);
  }

  /** Workers this program takes once all are up (its threads - 1). */
  get workers(): number {
    return this.#threads - 1;
  }

  /** Leaves the pool (its workers stay for other programs). */
  dispose(): void {
    this.#pool.discharge(this.#id);
  }
}

function registration(id: number, p: CrewOptions) {
  return {
    id,
    memory: p.memory,
    modules: p.modules,
    args: p.args,
    argAt: p.argAt,
    packs: p.packs,
    scratch: p.scratch,
    scratchBytes: p.scratchBytes,
    chains: p.chains ?? [],
  };
}

/** Keeps a timer from holding the process open (Node's timers are objects, Deno's numbers). */
function unref(timer: unknown): void {
  if (typeof timer === "object" && timer !== null && "unref" in timer) {
    (timer as { unref(): void }).unref();
  } else {
    (globalThis as { Deno?: { unrefTimer(id: number): void } }).Deno?.unrefTimer(timer as number);
  }
}
