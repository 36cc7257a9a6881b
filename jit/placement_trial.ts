/**
 * Measured placement. The cost model's estimate places a program, but where a device plan and an
 * all-host plan are within {@linkcode TRIAL_RATIO} of each other in estimated time, `compile`
 * builds both and times them on zero-filled inputs (the way autotuners do), keeps the faster, and
 * stores the verdict beside the kernel cache keyed by graph and machine, so later compiles on
 * the same machine take it without timing. (On the H200, auto put mlp and lenet on the GPU, 12 ms
 * a run, one awaited readback, against 1.3–3.5 ms on wasm: estimates from micro-calibration miss
 * such small programs by that much.)
 *
 * @module
 */
import type { Backend } from "./backend.ts";
import { digest } from "./digest.ts";
import { allocate } from "./dtype.ts";
import type { Executable } from "./executable.ts";
import type { Graph } from "./graph.ts";
import type { HostTensor } from "./host_tensor.ts";
import { defaultKernelCache } from "./kernel_cache.ts";
import { sizeOf } from "./shape.ts";

/** Plans whose estimates differ by less than this factor are timed, not trusted. */
export const TRIAL_RATIO = 20;

/** Which plan won a trial. */
export type Verdict = "device" | "host";

/** The key of a trial: the graph and every backend's identity and device profile. */
export function trialKey(graph: Graph, backends: readonly Backend[]): string {
  const machine = backends.map((b) => [b.id, b.version, b.capabilities()]);
  return digest(graph.canonical() + JSON.stringify(machine)).slice(0, 24);
}

function file(key: string): string | undefined {
  const dir = defaultKernelCache().dir;
  return dir ? `${dir}/placement-${key}.json` : undefined;
}

/** A stored verdict for `key`, if any. */
export async function storedVerdict(key: string): Promise<Verdict | undefined> {
  const path = file(key);
  if (!path) return undefined;
  try {
    const { readFile } = await import("node:fs/promises");
    const v = JSON.parse(await readFile(path, "utf8")).verdict;
    return v === "device" || v === "host" ? v : undefined;
  } catch {
    return undefined;
  }
}

/** Stores a verdict (a read-only cache only costs a trial in the next process). */
export async function storeVerdict(key: string, record: TrialRecord): Promise<void> {
  const path = file(key);
  if (!path) return;
  try {
    const { mkdir, writeFile } = await import("node:fs/promises");
    await mkdir(path.slice(0, path.lastIndexOf("/")), { recursive: true });
    await writeFile(path, JSON.stringify(record));
  } catch { /* the verdict is an optimisation */ }
}

/** What a trial measured. */
export interface TrialRecord {
  /** The faster plan. */
  readonly verdict: Verdict;
  /** Median milliseconds of the device plan's runs. */
  readonly deviceMs: number;
  /** Median milliseconds of the all-host plan's runs. */
  readonly hostMs: number;
}

/** Zero-filled data for every input of `graph` (indices 0 are always in range). */
function zeros(graph: Graph): Record<string, HostTensor> {
  return Object.fromEntries(graph.inputs.map((i) => {
    const n = sizeOf(i.shape);
    const data = i.dtype === "i64" ? new BigInt64Array(n) : allocate(i.dtype, n);
    return [i.name, { data, shape: i.shape, dtype: i.dtype }];
  }));
}

/**
 * Times both executables (one warm-up, then three runs each, alternating) and returns the
 * record; `undefined` when either fails to run (the estimate stands then).
 */
export async function trial(
  device: Executable,
  host: Executable,
  graph: Graph,
): Promise<TrialRecord | undefined> {
  const feeds = zeros(graph);
  const times: [number[], number[]] = [[], []];
  try {
    for (let rep = 0; rep < 4; rep++) {
      for (const [i, exe] of [device, host].entries()) {
        const t0 = performance.now();
        await exe.run(feeds);
        if (rep > 0) times[i].push(performance.now() - t0);
      }
    }
  } catch {
    return undefined;
  }
  const median = (xs: number[]) => xs.sort((a, b) => a - b)[xs.length >> 1];
  const deviceMs = median(times[0]), hostMs = median(times[1]);
  return { verdict: hostMs <= deviceMs ? "host" : "device", deviceMs, hostMs };
}
