/**
 * How a thread waits on a shared word: spinning with a pause, or blocked in `Atomics.wait` where
 * the thread may block.
 *
 * @module
 */

/** One spin's pause (`Atomics.pause`, x86's PAUSE) where the engine has it, else nothing. */
export const pause: () => void = typeof Atomics.pause === "function"
  ? () => Atomics.pause()
  : () => {};

let blocks: boolean | undefined;

/** Whether this thread may block in `Atomics.wait` (a browser's main thread may not). */
export function canBlock(): boolean {
  if (blocks === undefined) {
    try {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 1, 0);
      blocks = true;
    } catch {
      blocks = false;
    }
  }
  return blocks;
}
