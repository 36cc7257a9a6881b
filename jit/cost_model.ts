/**
 * The cost model: per backend, the rates that turn work into time on this machine — bytes/s and
 * flop/s of its kernels, a fixed cost per dispatch, the latency of one synchronization with the
 * host (Deno's GPU awaits cost about 11 ms), and bytes/s across the host boundary. Rates come from
 * a short calibration run, stored beside the kernel cache so later processes on the same machine
 * reuse it, and can be overridden, e.g. to model a device that is not present.
 *
 * @module
 */
import { type Backend, profileKey } from "./backend.ts";
import type { Executable } from "./executable.ts";
import type { Graph } from "./graph.ts";
import { GraphBuilder } from "./graph_builder.ts";
import { digest } from "./digest.ts";
import { defaultKernelCache } from "./kernel_cache.ts";
import { uniform } from "./random.ts";

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
export type ProbeCompiler = (graph: Graph) => Promise<Executable>;

const overrides = new Map<string, BackendRates>();
const measured = new Map<string, Promise<BackendRates>>();
const known = new Map<string, BackendRates>();

/** Sets the rates of backend `id`, replacing calibration (pass `undefined` to recalibrate). */
export function setBackendRates(id: string, rates: BackendRates | undefined): void {
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

/** Times a streaming kernel and a small matmul on `backend` (a few milliseconds in all). */
async function calibrate(backend: Backend, probe: ProbeCompiler): Promise<BackendRates> {
  const n = 1 << 16, m = 64;
  const stream = new GraphBuilder();
  stream.output(
    "y",
    stream.op("Add", [
      stream.op("Mul", [stream.input("x", [n]), stream.constant(2)]),
      stream.constant(1),
    ]),
  );
  const mm = new GraphBuilder();
  mm.output("y", mm.op("MatMul", [mm.input("a", [m, m]), mm.input("b", [m, m])]));
  const tiny = new GraphBuilder();
  tiny.output("y", tiny.op("Neg", [tiny.input("x", [1])]));
  // Eight kernels: reductions over alternating axes cannot share a kernel.
  const chain = new GraphBuilder();
  let v = chain.input("x", [4, 4]);
  for (let i = 0; i < 8; i++) {
    v = chain.op("Add", [v, chain.op("ReduceMax", [v], { axes: [i % 2], keepdims: 1 })]);
  }
  chain.output("y", v);
  const time = async (
    graph: ReturnType<GraphBuilder["build"]>,
    inputs: Record<string, Float32Array>,
    shape: Record<string, number[]>,
  ) => {
    const exe = await probe(graph);
    const feeds = Object.fromEntries(
      Object.entries(inputs).map((
        [k, v],
      ) => [k, { data: v, shape: shape[k], dtype: "f32" as const }]),
    );
    await exe.run(feeds);
    const t0 = performance.now();
    const reps = 3;
    for (let i = 0; i < reps; i++) await exe.run(feeds);
    exe.dispose();
    return (performance.now() - t0) / reps;
  };
  const tinyMs = await time(tiny.build(), { x: new Float32Array(1) }, { x: [1] });
  const chainMs = await time(chain.build(), { x: new Float32Array(16) }, { x: [4, 4] });
  const dispatchMs = Math.max((chainMs - tinyMs) / 7, 1e-3);
  const streamMs = Math.max(
    await time(stream.build(), { x: uniform(n, 1) }, { x: [n] }) - tinyMs,
    1e-3,
  );
  const mmMs = Math.max(
    await time(mm.build(), { a: uniform(m * m, 2), b: uniform(m * m, 3) }, {
      a: [m, m],
      b: [m, m],
    }) - tinyMs,
    1e-3,
  );
  return {
    bytesPerMs: (n * 8) / streamMs,
    flopsPerMs: (2 * m * m * m) / mmMs,
    dispatchMs,
    syncMs: Math.max(tinyMs - dispatchMs, 0),
    transferBytesPerMs: backend.kind === "gpu" ? (n * 8) / streamMs : Infinity,
  };
}
