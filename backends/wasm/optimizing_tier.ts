/**
 * The wasm backend's optimizing tier (`WasmBackendOptions.optimizingTier`): once a program has
 * run `after` times, each of its modules is re-emitted through Binaryen's optimizer in a worker
 * and swapped in on the calling thread when ready. Worker threads keep the code they have: they
 * run shares of the same kernels, and the results are the same bits either way (Binaryen keeps
 * float arithmetic as written).
 *
 * The optimized bytes come back through shared memory, looked at when each run starts: a loop of
 * awaited runs never turns the event loop, where a message would wait for ever (see
 * `compileModule` in `wasm_backend.ts`). The worker loads Binaryen as `npm:binaryen`, so the tier
 * runs under Deno, with `SharedArrayBuffer`.
 *
 * Off by default: on the 2-core VM Binaryen's -O1 to -O3 made no kernel of the shared models or of
 * the matmul, softmax and GELU workloads faster, most a few percent slower, and took 30-50 ms a
 * module (`bench/wasm_tier.ts`, `bench/REPORT-tier.md`).
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { IS_DENO } from "../../jit/support/packages.ts";
import { unrefWorker } from "./web_workers.ts";

/** The Binaryen release kiln loads (the tier's worker, `kiln explain --wat`). */
export const BINARYEN_VERSION = "123.0.0";

/** Options of the optimizing tier. */
export interface TierOptions {
  /** Runs of a program after which its modules are optimized (default 100). */
  readonly after?: number;
  /** Binaryen's optimize level, 1 to 4 (default 2, `wasm-opt -O2`). */
  readonly level?: number;
}

/** What the tier swaps optimized modules into: an arena program. */
export interface Swappable {
  /** Runs `fresh` (the same code, optimized) wherever `old` ran on the calling thread. */
  replaceModule(old: WebAssembly.Module, fresh: WebAssembly.Module): void;
}

/** The bytes a worker hands back: word 0 the state, word 1 the length, the module after. */
const HEADER = 8;
const PENDING = 0, DONE = 1, FAILED = 2;

/**
 * The worker's script: for each message, Binaryen optimizes the bytes and writes the result into
 * the message's shared buffer, or marks it failed (with the reason after the header).
 */
const WORKER = `
let binaryen;
self.onmessage = async ({ data: { bytes, shared, level, specifier } }) => {
  const words = new Int32Array(shared, 0, 2);
  const put = (state, out) => {
    const fits = out.length <= shared.byteLength - ${HEADER};
    new Uint8Array(shared, ${HEADER}).set(fits ? out : out.subarray(0, 0));
    Atomics.store(words, 1, fits ? out.length : 0);
    Atomics.store(words, 0, fits ? state : ${FAILED});
  };
  try {
    binaryen ??= await import(specifier).then((m) => m.default ?? m);
    const module = binaryen.readBinary(bytes);
    module.setFeatures(binaryen.Features.All);
    binaryen.setOptimizeLevel(level);
    binaryen.setShrinkLevel(0);
    module.optimize();
    const out = module.emitBinary();
    module.dispose();
    put(${DONE}, out);
  } catch (e) {
    put(${FAILED}, new TextEncoder().encode(String(e).slice(0, 400)));
  }
};`;

/** One module's optimization under way: polled until done or failed. */
interface Job {
  readonly old: WebAssembly.Module;
  readonly shared: SharedArrayBuffer;
}

/** The tier of a backend: one worker for all its programs, started on the first request. */
export class OptimizingTier {
  /** Runs of a program after which its modules are optimized. */
  readonly after: number;
  /** Binaryen's optimize level. */
  readonly level: number;
  /** Why the worker could not optimize, once it could not (the tier then stops asking). */
  failure?: string;
  #worker?: Worker;

  /** A tier; refused with a Fix where it cannot run or the options are out of range. */
  constructor(options: TierOptions = {}) {
    this.after = options.after ?? 100;
    this.level = options.level ?? 2;
    if (!Number.isInteger(this.after) || this.after < 1) {
      throw range(`optimizingTier.after must be a whole number of at least 1, got ${this.after}`);
    }
    if (![1, 2, 3, 4].includes(this.level)) {
      throw range(`optimizingTier.level must be 1, 2, 3 or 4, got ${this.level}`);
    }
    if (!IS_DENO || typeof SharedArrayBuffer !== "function" || typeof Worker !== "function") {
      throw new KilnError("The wasm optimizing tier needs Deno, workers and SharedArrayBuffer", {
        code: "unsupported",
        fix: "leave optimizingTier out (it is off by default), or run under Deno",
      });
    }
  }

  /** A program's share of the tier, for modules compiled from `sources`. */
  forProgram(sources: ReadonlyMap<WebAssembly.Module, Uint8Array>): ProgramTier {
    return new ProgramTier(this, sources);
  }

  /** Sends `bytes` (the module `old`'s) to the worker. */
  request(old: WebAssembly.Module, bytes: Uint8Array): Job {
    if (!this.#worker) {
      const url = URL.createObjectURL(new Blob([WORKER], { type: "text/javascript" }));
      this.#worker = new Worker(url, { type: "module" });
      // Idle, it must not keep the process alive (a program may never run again).
      unrefWorker(this.#worker);
    }
    // Room for the module to grow by half, and for a failure's reason.
    const shared = new SharedArrayBuffer(HEADER + Math.max(1024, bytes.length * 1.5) | 0);
    const specifier = ["npm", `binaryen@${BINARYEN_VERSION}`].join(":");
    this.#worker.postMessage({ bytes, shared, level: this.level, specifier });
    return { old, shared };
  }

  /** Stops the worker. */
  dispose(): void {
    this.#worker?.terminate();
    this.#worker = undefined;
  }
}

/** One program's tier: counts its runs, asks for its modules, swaps them in as they come. */
export class ProgramTier {
  readonly #tier: OptimizingTier;
  readonly #sources: ReadonlyMap<WebAssembly.Module, Uint8Array>;
  #runs = 0;
  #jobs: Job[] = [];

  /** The tier of a program whose modules were compiled from `sources`. */
  constructor(tier: OptimizingTier, sources: ReadonlyMap<WebAssembly.Module, Uint8Array>) {
    this.#tier = tier;
    this.#sources = sources;
  }

  /** At the start of each run of `program`: asks for its modules, or takes what is ready. */
  step(program: Swappable): void {
    if (this.#tier.failure !== undefined) return;
    if (++this.#runs === this.#tier.after) {
      this.#jobs = [...this.#sources].map(([old, bytes]) => this.#tier.request(old, bytes));
    }
    if (!this.#jobs.length) return;
    this.#jobs = this.#jobs.filter((job) => {
      const words = new Int32Array(job.shared, 0, 2);
      const state = Atomics.load(words, 0);
      if (state === PENDING) return true;
      const out = new Uint8Array(job.shared, HEADER, Atomics.load(words, 1)).slice();
      if (state === DONE) {
        program.replaceModule(job.old, new WebAssembly.Module(out));
      } else this.#fail(new TextDecoder().decode(out));
      return false;
    });
  }

  /** The tier stops, once, saying why on stderr: runs go on in the code they have. */
  #fail(reason: string): void {
    if (this.#tier.failure !== undefined) return;
    this.#tier.failure = reason || "the optimized module did not fit its buffer";
    console.warn(
      `kiln: the wasm optimizing tier stopped: ${this.#tier.failure}. Fix: allow Deno to fetch ` +
        `npm:binaryen@${BINARYEN_VERSION}, or leave optimizingTier out`,
    );
  }
}

function range(message: string): KilnError {
  return new KilnError(message, {
    code: "out-of-range",
    fix: "pass optimizingTier: { after: N ≥ 1, level: 1-4 }, or leave it out",
  });
}
