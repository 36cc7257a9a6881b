/**
 * Faulting a memory's pages in on every thread before a large write. A fresh memory's pages are
 * mapped at their first write, one fault each: on the 2-core VM about 11 µs a 4 KB page, so the
 * first run of a 0.5B decoder spent 3.8 s of its first generation's 6.8 writing 830 MB of weights
 * into a fresh memory (a copy into touched pages takes about 0.15 s). Faults on two threads took
 * 1.4-1.8 s for the same pages against 2.5-3.8 s on one: the threads take the faults, then the
 * calling thread copies.
 *
 * @module
 */

/** Bytes of a page as the operating system maps them. */
export const PAGE_BYTES = 4096;

/** The kernel index of a crew job that touches pages (see `Crew.touch`). */
export const TOUCH = 2 ** 30;

/** Total bytes of a run's writes from which its threads fault the pages in first. */
export const TOUCH_FROM = 2 ** 25;

/**
 * Faults in pages `[first + from, first + to)` of `memory` (a shared one), changing nothing: an
 * atomic add of 0 writes each page's first word (a read would map the shared zero page, and the
 * write after it fault again) and loses no value another thread stores there meanwhile. Its
 * source runs on the workers too (it refers to nothing outside itself).
 */
export function touchPages(
  memory: WebAssembly.Memory,
  first: number,
  from: number,
  to: number,
): void {
  const words = new Int32Array(memory.buffer);
  for (let page = first + from; page < first + to; page++) Atomics.add(words, page * 1024, 0);
}

/** What a touch runs on: a program's crew of workers (`worker_crew.ts`' `Crew`). */
export interface TouchCrew {
  /** Wakes the workers for a job. */
  prime(): void;
  /** Lets them sleep again. */
  rest(): void;
  /** Runs job `kernel` over `rows` in pieces on this thread and the ready workers. */
  run(
    kernel: number,
    rows: number,
    split: { readonly unit: number; readonly chunk: number; readonly pieces?: number },
    call: (start: number, end: number) => void,
  ): void;
}

/**
 * Faults in the pages of `memory` over `[at, at + bytes)` on this thread and the ready workers of
 * `crew` (woken for it), for a large write into them that follows.
 */
export function touchOnThreads(
  crew: TouchCrew,
  memory: WebAssembly.Memory,
  at: number,
  bytes: number,
): void {
  const first = Math.floor(at / PAGE_BYTES);
  const pages = Math.ceil((at + bytes) / PAGE_BYTES) - first;
  crew.prime();
  try {
    crew.run(
      TOUCH,
      pages,
      { unit: 1, chunk: first, pieces: 4 },
      (a, b) => touchPages(memory, first, a, b),
    );
  } finally {
    crew.rest();
  }
}
