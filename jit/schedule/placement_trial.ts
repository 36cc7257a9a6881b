/**
 * Measured placement. The cost model's estimate places a program, but where the alternatives to
 * a plan that uses a device (everything on the host's SIMD backend, or everything on that device)
 * are within {@linkcode TRIAL_RATIO} of it in estimated time, `compile` builds them all and times
 * them on zero-filled inputs (the way autotuners do), keeps the faster, and
 * stores the verdict beside the kernel cache keyed by graph and machine, so later compiles on
 * the same machine take it without timing. (On the H200, auto put mlp and lenet on the GPU, 12 ms
 * a run, one awaited readback, against 1.3–3.5 ms on wasm: estimates from micro-calibration miss
 * such small programs by that much.)
 *
 * @module
 */
import { type Backend, profileKey } from "../runtime/backend.ts";
import { digest } from "../ir/digest.ts";
import { allocate } from "../ir/dtype.ts";
import type { Executable } from "../runtime/executable.ts";
import type { Graph } from "../ir/graph.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { defaultKernelCache, type KernelCache } from "../runtime/kernel_cache.ts";
import { sizeOf } from "../ir/shape.ts";

/** Plans whose estimates differ by less than this factor are timed, not trusted. */
export const TRIAL_RATIO = 20;

/**
 * Which plan won a trial: the estimate's own (`plan`, which may mix backends), everything on the
 * host's SIMD backend (`host`), or everything on the device the plan uses (`device`).
 */
export type Verdict = "plan" | "host" | "device";

const VERDICTS: readonly Verdict[] = ["plan", "host", "device"];

/**
 * The key of a trial: the graph's structure (its weights' values do not change which plan is
 * faster), every backend's identity and device profile, and the runs the caller expects where it
 * said (a verdict for one run is not one for many).
 */
export function trialKey(graph: Graph, backends: readonly Backend[], runs?: number): string {
  const machine = backends.map((b) => [b.id, b.version, profileKey(b.capabilities())]);
  const hint = runs === undefined ? "" : `runs ${runs}`;
  return digest(graph.structureHash() + JSON.stringify(machine) + hint).slice(0, 24);
}

const note = (key: string) => `placement-${key}.json`;

/** A verdict stored for `key` beside the kernels of `cache`, if any. */
export async function storedVerdict(
  key: string,
  cache: KernelCache = defaultKernelCache(),
): Promise<Verdict | undefined> {
  try {
    const v = JSON.parse(await cache.readNote(note(key)) ?? "{}").verdict;
    return VERDICTS.includes(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** Stores a verdict (a read-only cache only costs a trial in the next process). */
export function storeVerdict(
  key: string,
  record: TrialRecord,
  cache: KernelCache = defaultKernelCache(),
): Promise<void> {
  return cache.writeNote(note(key), JSON.stringify(record));
}

/** What a trial measured. */
export interface TrialRecord {
  /** The fastest plan. */
  readonly verdict: Verdict;
  /** Median milliseconds of each timed plan's runs. */
  readonly ms: Partial<Record<Verdict, number>>;
  /** Milliseconds of each plan's first run (uploads, first dispatches), where runs were hinted. */
  readonly firstMs?: Partial<Record<Verdict, number>>;
}

/**
 * The runs a caller expects of an executable (`compile(…, { workload: { runs } })`), with the
 * first run of each plan: plans are then weighed by their first run plus the rest at their median,
 * so a plan fast only once warm (a GPU's uploads and pipelines) loses where few runs follow.
 */
export interface Expected {
  /** Runs the caller expects. */
  readonly runs: number;
  /** Each plan's first run, milliseconds. */
  readonly firsts: ReadonlyMap<Verdict, number>;
}

/** Zero-filled data for every input of `graph` (indices 0 are always in range). */
export function zeroInputs(graph: Graph): Record<string, HostTensor> {
  return Object.fromEntries(graph.inputs.map((i) => {
    const n = sizeOf(i.shape);
    const data = i.dtype === "i64" ? new BigInt64Array(n) : allocate(i.dtype, n);
    return [i.name, { data, shape: i.shape, dtype: i.dtype }];
  }));
}

/**
 * Warm-up runs of each plan before it is timed (at most {@linkcode WARM_MS} of them): a backend
 * may tune itself over its first runs (wasm times its runs with and without worker threads), and
 * a plan timed mid-tuning lost to a slower one (vit_tiny on the H200 went to the GPU at 12.7 ms
 * against 3.6 ms on wasm).
 */
const WARM_RUNS = 10, WARM_MS = 150;

/** Timed runs of each plan, taking turns (their median is compared), at the least. */
const ROUNDS = 5;

/**
 * Rounds go on up to {@linkcode MAX_ROUNDS} while all of them together took under this many
 * milliseconds: five runs of sub-millisecond plans were too few for a median (on the H200, Dawn
 * table, auto kept wasm for generator at 0.41 ms a run against the GPU's 0.31).
 */
const ROUNDS_MS = 25;

/** The most timed rounds. */
const MAX_ROUNDS = 25;

/**
 * A plan this many times slower than the fastest in a round runs no more rounds (DenseNet-121's
 * mixed plan took 2.7 s a run against 44 ms on wasm, and its five rounds most of a 43 s compile).
 */
const HOPELESS = 4;

/**
 * A run must also take this many milliseconds for its plan to be dropped as {@linkcode HOPELESS}:
 * a sub-millisecond plan costs the rounds little, and one round of it can be a collector's pause.
 */
const HOPELESS_MS = 5;

/**
 * How much faster than the host-only plan another must be to win: a plan that moves data to a
 * device varies more from run to run (transfers, an awaited readback) than it does in a few timed
 * runs, and the host's plan is the one whose estimate the trial is there to check.
 */
export const HOST_MARGIN = 0.9;

/**
 * The least time a device plan spends on each kernel besides its readback (encoding, dispatch,
 * launch). Through Dawn on the H200 kiln's webgpu runs took 15 µs a kernel beyond the readback
 * for vit_tiny's 28 kernels and 35-45 µs for lstm2's 51 and gru_bi's 31 (2026-11-27), so a host
 * plan faster than the readback plus this much a kernel cannot lose to the device, and the
 * device's pipelines are not compiled for a trial (lstm2's auto first run took 2.7 s on Dawn
 * with them, 0.6 s without).
 */
export const KERNEL_FLOOR_MS = 0.015;

/**
 * The most operations one host thread does in a millisecond: 128-bit SIMD's four f32 lanes, two
 * fused multiply-adds a cycle, 4 GHz (64 GFLOP/s). kiln's wasm kernels reach a fraction of it
 * (BERT-base: about 9 GFLOP/s a thread on the H200 host's 16), so no host plan runs a graph in
 * less than its operations at this rate ({@linkcode hostFloorMs}).
 */
export const HOST_PEAK_FLOPS_PER_MS = 6.4e7;

/** The least milliseconds a host plan of `flops` operations takes on `threads` threads. */
export function hostFloorMs(flops: number, threads: number): number {
  return flops / (HOST_PEAK_FLOPS_PER_MS * Math.max(1, threads));
}

/**
 * The least milliseconds a run of `kernels` kernels takes on a device whose readback takes
 * `readbackMs` (0 where none was measured: no floor then; `Infinity` where there is no device).
 */
export function deviceFloorMs(readbackMs: number, kernels: number): number {
  return readbackMs && readbackMs + KERNEL_FLOOR_MS * kernels;
}

/**
 * The verdict of timed runs (ms per plan): the fastest median (or, where the caller said how many
 * runs it expects, the least time over them), the host plan on near ties.
 */
export function verdictOf(
  times: ReadonlyMap<Verdict, readonly number[]>,
  expected?: Expected,
): TrialRecord {
  const ms = Object.fromEntries(
    [...times].map(([v, xs]) => [v, [...xs].sort((a, b) => a - b)[xs.length >> 1]]),
  ) as Record<Verdict, number>;
  const cost = (v: Verdict) =>
    expected ? (expected.firsts.get(v) ?? ms[v]) + (expected.runs - 1) * ms[v] : ms[v];
  const fastest = [...times.keys()].reduce((a, b) => (cost(b) < cost(a) ? b : a));
  const host = times.has("host") && cost(fastest) > HOST_MARGIN * cost("host");
  const verdict = host ? "host" : fastest;
  if (!expected) return { verdict, ms };
  return { verdict, ms, firstMs: Object.fromEntries(expected.firsts) };
}

/**
 * Times the executables (warmed up, then {@linkcode ROUNDS} runs each or more for fast plans,
 * taking turns, less for a {@linkcode HOPELESS} one) and returns the record; `undefined` when
 * one fails to run (the estimate stands then).
 */
export async function trial(
  plans: ReadonlyMap<Verdict, Executable>,
  graph: Graph,
  runs?: number,
): Promise<TrialRecord | undefined> {
  const feeds = zeroInputs(graph);
  const times = new Map([...plans.keys()].map((v) => [v, [] as number[]]));
  const firsts = new Map<Verdict, number>();
  try {
    for (const [v, exe] of plans) {
      const until = performance.now() + WARM_MS;
      for (let i = 0; i < WARM_RUNS && performance.now() < until; i++) {
        const t0 = performance.now();
        await exe.run(feeds);
        if (i === 0) firsts.set(v, performance.now() - t0);
      }
    }
    const running = new Map(plans);
    const start = performance.now();
    for (
      let rep = 0;
      rep < ROUNDS || (rep < MAX_ROUNDS && performance.now() - start < ROUNDS_MS);
      rep++
    ) {
      const round = new Map<Verdict, number>();
      for (const [v, exe] of running) {
        const t0 = performance.now();
        await exe.run(feeds);
        const ms = performance.now() - t0;
        round.set(v, ms);
        times.get(v)!.push(ms);
      }
      const best = Math.min(...round.values());
      for (const [v, ms] of round) {
        if (ms > HOPELESS * best && ms > HOPELESS_MS) running.delete(v);
      }
    }
  } catch {
    return undefined;
  }
  return verdictOf(times, runs === undefined ? undefined : { runs, firsts });
}

/**
 * The median milliseconds of {@linkcode CHECK_RUNS} runs of `exe` after a first one (its uploads
 * and first dispatches, timed apart), `undefined` where it fails to run: enough to tell a plan from
 * a bound it beats several times over, where {@linkcode trial} compares plans that may be close
 * (its warm-ups and rounds were a third of auto's first run of BERT-base on the H200).
 */
export async function checkRuns(
  exe: Executable,
  graph: Graph,
): Promise<{ firstMs: number; ms: number } | undefined> {
  const feeds = zeroInputs(graph);
  const times: number[] = [];
  let firstMs = 0;
  try {
    const t0 = performance.now();
    await exe.run(feeds);
    firstMs = performance.now() - t0;
    for (let i = 0; i < CHECK_RUNS; i++) {
      const t1 = performance.now();
      await exe.run(feeds);
      times.push(performance.now() - t1);
    }
  } catch {
    return undefined;
  }
  return { firstMs, ms: times.sort((a, b) => a - b)[CHECK_RUNS >> 1] };
}

/** Timed runs of {@linkcode checkRuns}. */
const CHECK_RUNS = 3;

/**
 * Builds and times `plans` (see {@linkcode trial}), the host plan first: every other plan waits
 * for its device at least once a run (`deviceSyncMs`, that device's measured synchronization), so
 * a host plan faster than {@linkcode HOST_MARGIN} of that wins without the others being built. (On
 * the H200 host, building and timing the GPU plans of models that run in well under a millisecond
 * on wasm made `auto`'s first run 1.5–2.5 s, against 0.8–1.2 s for wasm alone.) A
 * `deviceSyncMs` of 0 skips that (the host plan is known to be slower). The record is `undefined`
 * when a plan fails to run; `built` holds every executable built.
 */
export async function trialOf<P>(
  plans: ReadonlyMap<Verdict, P>,
  build: (plan: P) => Promise<Executable>,
  graph: Graph,
  deviceSyncMs: number,
  runs?: number,
): Promise<{ record?: TrialRecord; built: Map<Verdict, Executable> }> {
  const built = new Map<Verdict, Executable>();
  const host = plans.get("host");
  if (host !== undefined && deviceSyncMs > 0) {
    built.set("host", await build(host));
    const alone = await trial(built, graph, runs);
    if (alone && alone.ms.host! < HOST_MARGIN * deviceSyncMs) return { record: alone, built };
  }
  for (const [v, p] of plans) if (!built.has(v)) built.set(v, await build(p));
  return { record: await trial(built, graph, runs), built };
}
