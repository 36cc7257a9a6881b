/**
 * The cost model: per backend, the rates that turn work into time on this machine — bytes/s and
 * flop/s of its kernels, a fixed cost per dispatch, the latency of one synchronization with the
 * host (Deno's GPU awaits cost about 11 ms), and bytes/s across the host boundary. Rates come from
 * a short calibration run, stored beside the kernel cache so later processes on the same machine
 * reuse it, and can be overridden, e.g. to model a device that is not present.
 *
 * @module
 */
import { type Backend, profileKey } from "../runtime/backend.ts";
import type { Graph } from "../ir/graph.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { digest } from "../ir/digest.ts";
import { defaultKernelCache } from "../runtime/kernel_cache.ts";
import { uniform } from "../support/random.ts";
import { checkOptions, KilnError, shown } from "../support/errors.ts";

/** Measured (or given) speed of one backend. */
export interface BackendRates {
  /** Bytes per millisecond its kernels stream. */
  readonly bytesPerMs: number;
  /** Operations per millisecond its kernels compute. */
  readonly flopsPerMs: number;
  /** Fixed milliseconds per kernel dispatch. */
  readonly dispatchMs: number;
  /** Milliseconds per host synchronization (once per run). */
  readonly syncMs: number;
  /** Bytes per millisecond to and from the host (Infinity for host-memory backends). */
  readonly transferBytesPerMs: number;
}

/**
 * How calibration compiles its probe graphs for one backend (the compiler hands itself in, so the
 * cost model does not depend on it).
 */
export type ProbeCompiler = (graph: Graph) => Promise<ProbeProgram>;

/** What calibration needs of a compiled probe (an `Executable` is one): repeated runs, disposal. */
export interface ProbeProgram {
  /** Runs the probe on `inputs`, `repeat` times in one submission where the backend can. */
  run(inputs: Probe["feeds"], options?: { readonly repeat?: number }): PromiseLike<unknown>;
  /** Frees what the probe holds. */
  dispose(): void;
}

const overrides = new Map<string, BackendRates>();
const measured = new Map<string, Promise<BackendRates>>();
const known = new Map<string, BackendRates>();

/** The fields of {@linkcode BackendRates}, each a number >= 0. */
const RATE_FIELDS = ["bytesPerMs", "flopsPerMs", "dispatchMs", "syncMs", "transferBytesPerMs"];

/** Sets the rates of backend `id`, replacing calibration (pass `undefined` to recalibrate). */
export function setBackendRates(id: string, rates: BackendRates | undefined): void {
  checkOptions(rates, RATE_FIELDS, "setBackendRates");
  // Every rate given, none negative or NaN: a missing one made every estimate NaN, and placement
  // then compared NaNs.
  const given = rates as unknown as Record<string, unknown> | undefined;
  const bad = given && RATE_FIELDS.find((f) => !(typeof given[f] === "number" && given[f] >= 0));
  if (bad) {
    throw new KilnError(`setBackendRates: ${bad} must be a number >= 0, got ${shown(given[bad])}`, {
      code: "bad-input",
      fix: `give every rate: ${RATE_FIELDS.join(", ")}`,
    });
  }
  if (rates) overrides.set(id, rates);
  else overrides.delete(id);
  measured.delete(id);
  known.delete(id);
}

/** The rates of `backend` if already known (given or calibrated), without calibrating. */
export function knownRates(backend: Backend): BackendRates | undefined {
  return overrides.get(backend.id) ?? known.get(backend.id);
}

/**
 * The rates of `backend`: an override, or a calibration run compiled with `probe` (once per
 * process, then persisted per machine).
 */
export function backendRates(backend: Backend, probe: ProbeCompiler): Promise<BackendRates> {
  const fixed = overrides.get(backend.id);
  if (fixed) return Promise.resolve(fixed);
  let m = measured.get(backend.id);
  if (!m) {
    measured.set(backend.id, m = persisted(backend, probe));
    m.then((r) => known.set(backend.id, r), () => measured.delete(backend.id));
  }
  return m;
}

/** Calibration stored beside the kernel cache, keyed by backend and device profile. */
async function persisted(backend: Backend, probe: ProbeCompiler): Promise<BackendRates> {
  // The key is the prepared device's profile: before `prepare` a GPU reports zeros.
  await backend.prepare();
  const cache = defaultKernelCache();
  const name = `rates-${backend.id}-${
    digest(profileKey(backend.capabilities())).slice(0, 12)
  }.json`;
  try {
    const text = await cache.readNote(name);
    const r = text &&
      JSON.parse(text, (_k, v) => (v === "Infinity" ? Infinity : v)) as BackendRates;
    if (
      r &&
      [r.bytesPerMs, r.flopsPerMs, r.dispatchMs, r.syncMs, r.transferBytesPerMs].every((x) =>
        typeof x === "number" && x > 0
      )
    ) return r;
  } catch { /* not calibrated yet on this machine, or an unreadable note */ }
  const rates = await calibrate(backend, probe);
  await cache.writeNote(name, JSON.stringify(rates, (_k, v) => (v === Infinity ? "Infinity" : v)));
  return rates;
}

/**
 * Times a streaming kernel and a small matmul on `backend` (a few milliseconds in all); on a GPU,
 * where one run is its readback, the device rates come from repeated probes ({@linkcode deviceRate}).
 */
async function calibrate(backend: Backend, probe: ProbeCompiler): Promise<BackendRates> {
  const tiny = new GraphBuilder();
  tiny.output("y", tiny.op("Neg", [tiny.input("x", [1])]));
  // Eight kernels: reductions over alternating axes cannot share a kernel.
  const chain = new GraphBuilder();
  let v = chain.input("x", [4, 4]);
  for (let i = 0; i < 8; i++) {
    v = chain.op("Add", [v, chain.op("ReduceMax", [v], { axes: [i % 2], keepdims: 1 })]);
  }
  chain.output("y", v);
  /** Milliseconds a run of a probe takes, end to end, after one untimed run. */
  const time = async ({ graph, feeds }: Pick<Probe, "graph" | "feeds">) => {
    const exe = await probe(graph);
    await exe.run(feeds);
    const t0 = performance.now();
    const reps = 3;
    for (let i = 0; i < reps; i++) await exe.run(feeds);
    exe.dispose();
    return (performance.now() - t0) / reps;
  };
  const tinyMs = await time({ graph: tiny.build(), feeds: { x: feed(new Float32Array(1), [1]) } });
  const chainMs = await time({
    graph: chain.build(),
    feeds: { x: feed(new Float32Array(16), [4, 4]) },
  });
  const dispatchMs = Math.max((chainMs - tinyMs) / 7, 1e-3);
  const stream = streamProbe(1 << 16), mm = matmulProbe(64);
  const streamRate = stream.work / Math.max(await time(stream) - tinyMs, 1e-3);
  const mmRate = mm.work / Math.max(await time(mm) - tinyMs, 1e-3);
  const gpu = backend.kind === "gpu";
  const target = measurableMs(backend.capabilities().readbackMs);
  return {
    bytesPerMs: gpu
      ? await deviceRate(probe, streamProbe, [1 << 20, 1 << 22, 1 << 24], streamRate, target)
      : streamRate,
    flopsPerMs: gpu
      ? await deviceRate(probe, matmulProbe, [256, 512, 1024], mmRate, target)
      : mmRate,
    dispatchMs,
    syncMs: Math.max(tinyMs - dispatchMs, 0),
    transferBytesPerMs: gpu ? streamRate : Infinity,
  };
}

/** A probe graph of some size, its feeds and the work one run of it does (bytes or flops). */
/** One probe graph, its inputs and its work (bytes or operations). */
interface Probe {
  readonly graph: Graph;
  readonly feeds: Record<string, { data: Float32Array; shape: number[]; dtype: "f32" }>;
  readonly work: number;
}

const feed = (data: Float32Array, shape: number[]) => ({ data, shape, dtype: "f32" as const });

/** `y = x · 2 + 1` over `n` elements: 8 bytes an element. */
function streamProbe(n: number): Probe {
  const b = new GraphBuilder();
  b.output("y", b.op("Add", [b.op("Mul", [b.input("x", [n]), b.constant(2)]), b.constant(1)]));
  return { graph: b.build(), feeds: { x: feed(uniform(n, 1), [n]) }, work: n * 8 };
}

/** An `m`×`m` matmul: 2m³ flops. */
function matmulProbe(m: number): Probe {
  const b = new GraphBuilder();
  b.output("y", b.op("MatMul", [b.input("a", [m, m]), b.input("b", [m, m])]));
  const feeds = { a: feed(uniform(m * m, 2), [m, m]), b: feed(uniform(m * m, 3), [m, m]) };
  return { graph: b.build(), feeds, work: 2 * m * m * m };
}

/**
 * Milliseconds of repeated work that make a device's rate measurable past one readback: four
 * readbacks' worth, at least 4 ms. Deno's WebGPU (11 ms a readback) gets 44 ms, as the 40 of
 * before; Dawn's (0.035-0.2 ms) gets 4, and its calibration no longer spends a second of a first
 * run on repetitions aimed past a readback it does not have.
 */
export function measurableMs(readbackMs = 10): number {
  return Math.max(4, 4 * readbackMs);
}

/** The most repetitions of a probe in one submission. */
const MAX_REPEAT = 4096;

/**
 * A device's rate (work per millisecond) from repetitions of a probe in one submission, on the
 * largest of `sizes` it needs. Timed end to end, one run of a probe is mostly its readback
 * (Deno: about 11 ms, in steps of its 10 ms map polling), so the H200's rates came out as the
 * clamp's 524 TB/s in one process and 2 GFLOP/s in the next, and the second kept ResNet-18 off
 * the GPU. Here a probe's repetitions grow until they add `target` ms to one run;
 * the next size is tried while a repetition takes under 0.2 ms (dispatch-bound), none past what
 * the device can bind (the last rate measured stands, else `fallback`, the end-to-end one).
 */
async function deviceRate(
  probe: ProbeCompiler,
  make: (size: number) => Probe,
  sizes: readonly number[],
  fallback: number,
  target: number,
): Promise<number> {
  let rate = fallback;
  for (const size of sizes) {
    const { graph, feeds, work } = make(size);
    let exe: ProbeProgram;
    try {
      exe = await probe(graph);
    } catch {
      break; // past the device's limits: the last size's rate stands
    }
    try {
      await exe.run(feeds);
      const once = performance.now();
      await exe.run(feeds);
      const oneMs = performance.now() - once;
      let repeat = 16, perMs = 0;
      for (let tries = 0; tries < 4; tries++) {
        const t0 = performance.now();
        await exe.run(feeds, { repeat });
        const extra = performance.now() - t0 - oneMs;
        perMs = Math.max(extra, 0) / (repeat - 1);
        if (extra >= target || repeat === MAX_REPEAT) break;
        // Aim past the target: the readback's steps make a short extra uncertain.
        repeat = Math.min(
          MAX_REPEAT,
          perMs > 0 ? Math.ceil(2 * target / perMs) : 16 * repeat,
        );
      }
      if (perMs <= 0) continue;
      rate = work / perMs;
      if (perMs >= 0.2) break;
    } catch {
      break;
    } finally {
      exe.dispose();
    }
  }
  return rate;
}
