/**
 * {@linkcode RunHandle}: the asynchronous result of a run. It can be polled (`isReady`, `tryGet`)
 * by code that must not block, or awaited. A failed run never becomes an unhandled rejection on
 * its own: the error is kept and surfaces where the result is asked for.
 *
 * @module
 */

/** The pending or settled result of one run. */
export class RunHandle<T> implements PromiseLike<T> {
  #promise: Promise<T>;
  #settled = false;
  #failed = false;
  #value?: T;
  #error?: unknown;

  /** Wraps a promise of the run's result. */
  constructor(promise: Promise<T>) {
    this.#promise = promise;
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

  /** Makes the handle awaitable. */
  then<R1 = T, R2 = never>(
    onFulfilled?: ((value: T) => R1 | PromiseLike<R1>) | null,
    onRejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null,
  ): Promise<R1 | R2> {
    return this.#promise.then(onFulfilled, onRejected);
  }
}
