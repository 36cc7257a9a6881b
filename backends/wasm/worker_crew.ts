/**
 * Worker threads for one arena program. Each worker instantiates the program's modules on the
 * shared arena, then waits on a control word; a kernel call splits its rows between the calling
 * thread and every worker that is up. Workers start in the background — until one is ready the
 * caller computes alone, so compiling never waits for threads — and are `unref`'d, so an
 * undisposed program never keeps a process alive.
 *
 * Hand-off is through `Atomics` on a shared control block, not messages: a message round trip
 * costs a trip through both event loops, an atomic one a few microseconds while the workers spin
 * (they spin briefly after each job, then sleep in `Atomics.wait`).
 *
 * @module
 */

import { KilnError } from "../../jit/errors.ts";

/** `node:worker_threads`' `Worker` (Deno and Node have it; browsers get no crew). */
export type WorkerClass = new (
  source: string,
  options: { eval: true; workerData: unknown },
) => { unref(): void; terminate(): unknown };

/** What the workers need to run a program's kernels. */
export interface CrewOptions {
  /** Threads in all, the caller included (≥ 2). */
  readonly threads: number;
  /** The `Worker` class of `node:worker_threads`. */
  readonly Worker: WorkerClass;
  /** The program's compiled kernels. */
  readonly modules: readonly WebAssembly.Module[];
  /** The shared arena. */
  readonly memory: WebAssembly.Memory;
  /** Per kernel: its buffer addresses (the arguments before scratch and row range). */
  readonly args: readonly (readonly number[])[];
  /** Scratch of thread `t`: `scratch + t * scratchBytes`. */
  readonly scratch: number;
  /** Scratch bytes per thread. */
  readonly scratchBytes: number;
  /** Spawn the workers now rather than after the current task. */
  readonly eager?: boolean;
}

const GEN = 0, PENDING = 1, KERNEL = 2, ROWS = 3, PARTS = 4, UNIT = 5, STOP = 6, FAILED = 7;
const CHUNK = 8, READY = 9;

/** Rows `[start, end)` of part `part` when `rows` split into `parts` multiples of `unit`. */
export function partOf(rows: number, parts: number, unit: number, part: number): [number, number] {
  const chunk = Math.ceil(rows / parts / unit) * unit;
  const start = Math.min(rows, part * chunk);
  return [start, Math.min(rows, start + chunk)];
}

// Runs inside each worker (as source text, so it needs no module resolution there).
const WORKER = `
const { workerData } = require("node:worker_threads");
const { control, memory, modules, args, scratch, scratchBytes, id } = workerData;
const env = {
  memory, sin: Math.sin, cos: Math.cos, pow: Math.pow, fmod: (a, b) => a % b,
  f16: Math.f16round ?? (() => NaN),
};
const runs = modules.map((m) => new WebAssembly.Instance(m, { env }).exports.run);
const c = new Int32Array(control);
const partOf = ${partOf.toString()};
Atomics.store(c, ${READY} + id, 1);
let gen = Atomics.load(c, ${GEN});
for (;;) {
  for (let spin = 0; spin < 20000 && Atomics.load(c, ${GEN}) === gen; spin++);
  Atomics.wait(c, ${GEN}, gen);
  gen = Atomics.load(c, ${GEN});
  if (Atomics.load(c, ${STOP})) break;
  const parts = Atomics.load(c, ${PARTS});
  if (id >= parts) continue;
  const k = Atomics.load(c, ${KERNEL});
  const [start, end] = partOf(Atomics.load(c, ${ROWS}), parts, Atomics.load(c, ${UNIT}), id);
  const chunk = Atomics.load(c, ${CHUNK});
  try {
    for (let s = start, n = chunk; s < end; s += n, n *= 2) {
      runs[k](...args[k], scratch + id * scratchBytes, s, Math.min(end, s + n));
    }
  } catch {
    Atomics.store(c, ${FAILED}, 1);
  }
  if (Atomics.sub(c, ${PENDING}, 1) === 1) Atomics.notify(c, ${PENDING});
}`;

/** Worker threads sharing one program's arena. */
export class Crew {
  #control: Int32Array;
  #workers: { terminate(): unknown }[] = [];
  #stopped = false;

  /**
   * Starts `threads - 1` workers in the background: after the current task, since `new Worker`
   * blocks the calling thread (20-30 ms each in Deno), which would otherwise land on every
   * compile and first run — or at once when `options.eager` (a first run long enough to want
   * the threads).
   */
  constructor(options: CrewOptions) {
    this.#control = new Int32Array(new SharedArrayBuffer(4 * (READY + options.threads)));
    if (options.eager) {
      this.#spawn(options);
      return;
    }
    unref(setTimeout(() => {
      if (!this.#stopped) this.#spawn(options);
    }, 0));
  }

  #spawn(options: CrewOptions): void {
    this.#workers = Array.from({ length: options.threads - 1 }, (_, i) => {
      const w = new options.Worker(WORKER, {
        eval: true,
        workerData: {
          control: this.#control.buffer,
          memory: options.memory,
          modules: options.modules,
          args: options.args,
          scratch: options.scratch,
          scratchBytes: options.scratchBytes,
          id: i + 1,
        },
      });
      w.unref();
      return w;
    });
  }

  /**
   * Runs kernel `kernel` over `rows` rows split in multiples of `unit`: part 0 through `call` on
   * this thread, the others on the ready workers (in calls of `chunk` rows, doubling); returns
   * when all parts are done.
   */
  run(
    kernel: number,
    rows: number,
    { unit, chunk }: { unit: number; chunk: number },
    call: (start: number, end: number) => void,
  ): void {
    const c = this.#control;
    const parts = 1 + this.ready();
    if (parts > 1) {
      Atomics.store(c, KERNEL, kernel);
      Atomics.store(c, ROWS, rows);
      Atomics.store(c, UNIT, unit);
      Atomics.store(c, CHUNK, chunk);
      Atomics.store(c, PARTS, parts);
      Atomics.store(c, PENDING, parts - 1);
      Atomics.add(c, GEN, 1);
      Atomics.notify(c, GEN);
    }
    const [start, end] = partOf(rows, parts, unit, 0);
    if (start < end) call(start, end);
    for (
      let left = Atomics.load(c, PENDING);
      parts > 1 && left !== 0;
      left = Atomics.load(c, PENDING)
    ) {
      Atomics.wait(c, PENDING, left, 1);
    }
    if (Atomics.exchange(c, FAILED, 0)) {
      throw new KilnError(`wasm: kernel ${kernel} trapped on a worker thread`, {
        code: "internal",
        fix: "report this with the graph; WasmBackend({ threads: 1 }) avoids the threads meanwhile",
      });
    }
  }

  /** Workers up and waiting for work. */
  ready(): number {
    let n = 0;
    while (n < this.#workers.length && Atomics.load(this.#control, READY + n + 1)) n++;
    return n;
  }

  /** Stops the workers. */
  dispose(): void {
    this.#stopped = true;
    Atomics.store(this.#control, STOP, 1);
    Atomics.add(this.#control, GEN, 1);
    Atomics.notify(this.#control, GEN);
    for (const w of this.#workers) w.terminate();
    this.#workers = [];
  }
}

/** Keeps a timer from holding the process open (Node's timers are objects, Deno's numbers). */
function unref(timer: unknown): void {
  if (typeof timer === "object" && timer !== null && "unref" in timer) {
    (timer as { unref(): void }).unref();
  } else {
    (globalThis as { Deno?: { unrefTimer(id: number): void } }).Deno?.unrefTimer(timer as number);
  }
}
