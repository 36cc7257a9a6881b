/**
 * Per-call timing for the benchmark files: `deno bench` reports means, while the workloads' issue
 * asks for the median of the timed runs, which this machine's page-fault storms (see
 * `bench/REPORT.md`) move far less. Every call of a wrapped benchmark is timed; when the process
 * ends, each benchmark's median after its warm-up goes to stderr as a
 * `median <workload> <library> <ms> <calls>` line, which `bench/report.ts` tabulates.
 *
 * @module
 */

const durations = new Map<string, number[]>();

/** Calls `deno bench` makes before it measures: at least the first, at most a tenth. */
function warmup(calls: number): number {
  return Math.max(1, Math.ceil(calls / 10));
}

/** The median of `xs` (sorted copy). */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b), h = s.length >> 1;
  return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
}

/** `run`, timed per call under `workload` and `library`. */
export function timed(
  workload: string,
  library: string,
  run: () => Promise<unknown>,
): () => Promise<void> {
  const ms: number[] = [];
  durations.set(`${workload}\t${library}`, ms);
  return async () => {
    const start = performance.now();
    await run();
    ms.push(performance.now() - start);
  };
}

addEventListener("unload", () => {
  for (const [key, ms] of durations) {
    const measured = ms.slice(warmup(ms.length));
    if (measured.length) console.error(`median\t${key}\t${median(measured)}\t${measured.length}`);
  }
});
