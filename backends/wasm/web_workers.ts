/**
 * Worker threads from the web's `Worker`, with the interface the pool takes from
 * `node:worker_threads`: Deno's own workers, and a browser's Web Workers.
 *
 * In Deno they replace `node:worker_threads`, which is built on them: that module loads Deno's
 * Node layer on first use (10-35 ms) and boots it in every worker, so on the 2-core VM a
 * `node:worker_threads` worker blocked its spawner 50-77 ms and answered after 136-140 ms, one of
 * Deno's own 19-21 ms and 42-44 ms (2026-11-26). Deno's workers keep the process alive unless
 * unref'd, which its public API does not offer: the pool unrefs them through the method its
 * `node:worker_threads` uses, and where that method is not found it takes `node:worker_threads`.
 *
 * Threads need shared memory, which browsers give only to cross-origin isolated pages (served
 * with `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy:
 * require-corp`), and `Atomics.waitAsync` for the workers to sleep while their event loop
 * delivers programs; elsewhere there are none and the backend runs on one thread.
 *
 * @module
 */
import {
  type ChannelClass,
  WEB_WORKER,
  type WorkerClass,
  type WorkerThreads,
} from "./worker_crew.ts";

/** A `Worker`'s method that refs (`true`) or unrefs (`false`) it, where one is found. */
type Ref = (this: Worker, ref: boolean) => void;

/** A Web Worker running {@linkcode WEB_WORKER}, started like a `node:worker_threads` one. */
class WebWorker {
  static #url?: string;
  static ref?: Ref;
  #worker: Worker;

  /** Starts the worker (the Node script `_source` is not for these: they run their own). */
  constructor(_source: string, options: { workerData: unknown; transferList: unknown[] }) {
    WebWorker.#url ??= URL.createObjectURL(new Blob([WEB_WORKER], { type: "text/javascript" }));
    // Deno runs module workers only; the script has no imports, so browsers take it either way.
    this.#worker = new Worker(WebWorker.#url, { type: "module" });
    this.#worker.postMessage(options.workerData, options.transferList as Transferable[]);
  }

  /** Lets the process end while the worker waits (browsers have no process to keep alive). */
  unref(): void {
    WebWorker.ref?.call(this.#worker, false);
  }

  /** Stops the worker. */
  terminate(): void {
    this.#worker.terminate();
  }
}

/**
 * Deno's method behind `node:worker_threads`' `unref`: the one unnamed symbol of
 * `Worker.prototype` that keys a method of one argument. A Deno that names it, or has none, gets
 * `undefined`, and the pool falls back to `node:worker_threads`.
 */
function denoRef(): Ref | undefined {
  const proto = Worker.prototype as unknown as Record<symbol, unknown>;
  const found = Object.getOwnPropertySymbols(proto)
    .filter((s) => s.description === undefined)
    .map((s) => proto[s])
    .filter((f): f is Ref => typeof f === "function" && f.length === 1);
  return found.length === 1 ? found[0] : undefined;
}

const shared = (): WorkerThreads => ({
  Worker: WebWorker as unknown as WorkerClass,
  MessageChannel: MessageChannel as unknown as ChannelClass,
});

/** Whether this runtime has what the workers' body needs (see the module documentation). */
function capable(): boolean {
  return typeof Worker === "function" && typeof Atomics.waitAsync === "function" &&
    typeof MessageChannel === "function";
}

/** Deno's own workers, unref'd as `node:worker_threads`' are, where Deno allows it. */
export function denoWorkers(): WorkerThreads | undefined {
  if (!("Deno" in globalThis) || !capable()) return undefined;
  WebWorker.ref ??= denoRef();
  return WebWorker.ref ? shared() : undefined;
}

/**
 * Lets the process end while Deno worker `worker` waits, where Deno's method for it is found
 * (whether it was is the result).
 */
export function unrefWorker(worker: Worker): boolean {
  WebWorker.ref ??= denoRef();
  WebWorker.ref?.call(worker, false);
  return WebWorker.ref !== undefined;
}

/** The page's worker threads, where it may have them (see the module documentation). */
export function webWorkers(): WorkerThreads | undefined {
  const g = globalThis as { crossOriginIsolated?: boolean };
  return g.crossOriginIsolated === true && capable() ? shared() : undefined;
}
