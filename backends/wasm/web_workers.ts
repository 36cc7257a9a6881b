/**
 * Worker threads in a browser: Web Workers with the interface the pool takes from
 * `node:worker_threads`. Threads need shared memory, which browsers give only to cross-origin
 * isolated pages (served with `Cross-Origin-Opener-Policy: same-origin` and
 * `Cross-Origin-Embedder-Policy: require-corp`), and `Atomics.waitAsync` for the workers to sleep
 * while their event loop delivers programs; elsewhere there are none and the backend runs on one
 * thread.
 *
 * @module
 */
import {
  type ChannelClass,
  WEB_WORKER,
  type WorkerClass,
  type WorkerThreads,
} from "./worker_crew.ts";

/** A Web Worker running {@linkcode WEB_WORKER}, started like a `node:worker_threads` one. */
class WebWorker {
  static #url?: string;
  #worker: Worker;

  /** Starts the worker (the Node script `_source` is not for browsers: it runs its own). */
  constructor(_source: string, options: { workerData: unknown; transferList: unknown[] }) {
    WebWorker.#url ??= URL.createObjectURL(new Blob([WEB_WORKER], { type: "text/javascript" }));
    this.#worker = new Worker(WebWorker.#url);
    this.#worker.postMessage(options.workerData, options.transferList as Transferable[]);
  }

  /** Browsers have no process to keep alive. */
  unref(): void {}

  /** Stops the worker. */
  terminate(): void {
    this.#worker.terminate();
  }
}

/** The page's worker threads, where it may have them (see the module documentation). */
export function webWorkers(): WorkerThreads | undefined {
  const g = globalThis as { crossOriginIsolated?: boolean; Worker?: unknown };
  const ready = g.crossOriginIsolated === true && typeof g.Worker === "function" &&
    typeof Atomics.waitAsync === "function" && typeof MessageChannel === "function";
  return ready
    ? {
      Worker: WebWorker as unknown as WorkerClass,
      MessageChannel: MessageChannel as unknown as ChannelClass,
    }
    : undefined;
}
