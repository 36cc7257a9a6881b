/**
 * Progress of long work, for a caller that shows it: a compile's phases (import, fuse, codegen,
 * pipelines) with counts. A compile of a large model on a software GPU takes tens of seconds
 * (shufflenet: 44 s), and a caller with nothing to show looks hung.
 *
 * @module
 */

/**
 * A phase of a compile, or `run`: the runs after it, which a caller that runs (the CLI) reports
 * (a driver may build pipelines at their first dispatch).
 */
export type ProgressPhase = "import" | "fuse" | "codegen" | "pipelines" | "run";

/** Where a compile stands: `done` of `total` units of `phase` (kernels, for codegen and pipelines). */
export interface Progress {
  /** The phase. */
  readonly phase: ProgressPhase;
  /** Units done. */
  readonly done: number;
  /** Units in the phase. */
  readonly total: number;
}

/** Receives {@linkcode Progress} reports; called synchronously, so it should return quickly. */
export type ProgressCallback = (progress: Progress) => void;

/**
 * `callback` made safe to call from a compile: a display that throws must not fail the work it
 * shows, so its errors are dropped. `undefined` gives a function that does nothing.
 */
export function reporter(callback: ProgressCallback | undefined): ProgressCallback {
  if (!callback) return () => {};
  return (p) => {
    try {
      callback(p);
    } catch {
      // The display's own failure: the compile goes on.
    }
  };
}
