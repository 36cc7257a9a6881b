/**
 * {@linkcode RunHandle}: the asynchronous result of a run. It can be polled (`isReady`, `tryGet`)
 * by code that must not block, or awaited. A failed run never becomes an unhandled rejection on
 * its own: the error is kept and surfaces where the result is asked for.
 *
 * @module
 */
import { KilnError } from "../support/errors.ts";

/**
 * Where a run's time went, in milliseconds (`performance.now()` on the calling thread):
 * `hostMs` the synchronous part of the call (inputs checked and copied, work handed to the
 * backend; on wasm, whose kernels run on the calling thread and its workers, the compute too),
 * `waitMs` awaiting the backend (a GPU's queue, its execution and the readback), `outputMs`
 * making the results the caller's (copies, widening, checks), `wallMs` all of it.
 */
export interface RunTiming {
  /** The synchronous part of the call: checks, copies, hand-off (on wasm, the compute too). */
  readonly hostMs: number;
  /** Awaiting the backend: a GPU's queue, execution and readback. */
  readonly waitMs: number;
  /** Making the results the caller's: copies, widening, checks. */
  readonly outputMs: number;
  /** All of it, from the call to the results. */
  readonly wallMs: number;
}

/** The pending or settled result of one run. */
export class RunHandle<T> implements PromiseLike<T> {
  #promise: Promise<T>;
  #timing?: Promise<RunTiming>;
  #settled = false;
  #failed = false;
  #value?: T;
  #error?: unknown;

  /** Wraps a promise of the run's result (and of its timing, where the runner measures one). */
  constructor(promise: Promise<T>, timing?: Promise<RunTiming>) {
    this.#promise = promise;
    this.#timing = timing;
    timing?.catch(() => {});
    promise.then(
      (v) => {
        this.#settled = true;
        this.#value = v;
      },
      (e) => {
        this.#settled = true;
        this.#failed = true;
        this.#error = e;
      },
    );
  }

  /** Whether the run has finished (successfully or not). */
  isReady(): boolean {
    return this.#settled;
  }

  /** The result if the run has finished, `undefined` if not; rethrows the run's error. */
  tryGet(): T | undefined {
    if (this.#failed) throw this.#error;
    return this.#value;
  }

  /** The result, once the run finishes. */
  result(): Promise<T> {
    return this.#promise;
  }

  /**
   * Where the run's time went (see {@linkcode RunTiming}), once it finishes; rejects as the run
   * does, or where the runner measured nothing.
   */
  timing(): Promise<RunTiming> {
    return this.#timing ?? Promise.reject(
      new KilnError("This run was not timed: only an executable's runs are", {
        code: "unsupported",
        fix: "time the runs of an Executable (compile(), OnnxModel.compileFor())",
      }),
    );
  }

  /** Makes the handle awaitable. */
  then<R1 = T, R2 = never>(
    onFulfilled?: ((value: T) => R1 | PromiseLike<R1>) | null,
    onRejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null,
  ): Promise<R1 | R2> {
    return this.#promise.then(onFulfilled, onRejected);
  }
}
