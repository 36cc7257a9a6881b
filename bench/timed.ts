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

/** Milliseconds of each of `count` calls of `run`, one after another. */
export async function wallTimes(run: () => PromiseLike<unknown>, count: number): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < count; i++) {
    const start = performance.now();
    await run();
    ms.push(performance.now() - start);
  }
  return ms;
}

/**
 * Milliseconds of each of `runs`, called in turns `count` times (so that each meets the same
 * moments of a host whose speed moves): one list of times a function.
 */
export async function interleavedTimes(
  runs: readonly (() => PromiseLike<unknown>)[],
  count: number,
): Promise<number[][]> {
  const ms = runs.map(() => [] as number[]);
  for (let r = 0; r < count; r++) {
    for (const [i, run] of runs.entries()) ms[i].push(...await wallTimes(run, 1));
  }
  return ms;
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

/**
 * Device milliseconds between the start and the end of timestamped compute passes (a device with
 * `timestamp-query`): begin a pass with {@linkcode PassTimer.writes} (or the first of several
 * with its start and the last with its end), then {@linkcode PassTimer.submit} the encoder.
 */
export class PassTimer {
  /** Timestamp writes for a pass descriptor: its start and its end. */
  readonly writes: GPUComputePassTimestampWrites;
  #device: GPUDevice;
  #resolve: GPUBuffer;
  #read: GPUBuffer;

  /** Queries and buffers on `device`. */
  constructor(device: GPUDevice) {
    this.#device = device;
    const querySet = device.createQuerySet({ type: "timestamp", count: 2 });
    this.writes = { querySet, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 };
    const buffer = (usage: number) => device.createBuffer({ size: 16, usage });
    this.#resolve = buffer(GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC);
    this.#read = buffer(GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
  }

  /** Submits `encoder` with the queries' readback; the milliseconds between them. */
  async submit(encoder: GPUCommandEncoder): Promise<number> {
    encoder.resolveQuerySet(this.writes.querySet, 0, 2, this.#resolve, 0);
    encoder.copyBufferToBuffer(this.#resolve, 0, this.#read, 0, 16);
    this.#device.queue.submit([encoder.finish()]);
    await this.#read.mapAsync(GPUMapMode.READ);
    const [start, end] = new BigUint64Array(this.#read.getMappedRange());
    this.#read.unmap();
    return Number(end - start) / 1e6;
  }

  /** Frees the queries and buffers. */
  destroy(): void {
    this.writes.querySet.destroy();
    this.#resolve.destroy();
    this.#read.destroy();
  }
}

/**
 * Dawn's flags for timing kernels: Dawn rounds timestamps to 65.5 µs unless told not to (its
 * `timestamp_quantization` toggle), which made every one-row product read 0 or 65.5 µs and a
 * model's kernels sum to 3-4x its run; KILN_DAWN_FLAGS, where set, decides.
 */
export const timingDawnFlags: readonly string[] | undefined =
  Deno.env.get("KILN_DAWN_FLAGS") === undefined
    ? ["disable-dawn-features=timestamp_quantization"]
    : undefined;
