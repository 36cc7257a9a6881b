/**
 * Test utilities shared by every backend's suite: closeness checks that understand NaN and
 * infinities, and one-call helpers to run an op or a graph on a backend.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { Backend, KernelCodegen } from "../runtime/backend.ts";
import {
  BackendRegistry,
  compile,
  type CompileOptions,
  GraphBuilder,
  KilnError,
} from "../../mod.ts";
import { fromF16Bits, type TensorData } from "../ir/dtype.ts";
import { zeroInputs } from "../schedule/placement_trial.ts";
import type { Graph } from "../ir/graph.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import type { Attrs } from "../ops/mod.ts";
import { rng } from "../support/random.ts";
import { runOp as runOpOn, type RunOpOptions } from "../runtime/run_op.ts";
import { setBackendRates } from "../schedule/cost_model.ts";

/** Options for {@linkcode assertClose}. */
export interface CloseOptions {
  /** Absolute tolerance (default 1e-6). */
  atol?: number;
  /** Relative tolerance (default 1e-5). */
  rtol?: number;
  /** Prefix for the failure message. */
  message?: string;
}

/** Values in [-1, 1) from a multiplicative hash, so tests need no RNG. */
export const hashed = (n: number, salt: number): number[] =>
  Array.from({ length: n }, (_, i) => (((i + 1) * salt) % 2000) / 1000 - 1);

/** Runs `graph` on `backend` and on the reference and compares every output within `atol`. */
export async function graphMatchesReference(
  graph: Graph,
  feeds: Record<string, HostTensor>,
  backend: Backend,
  atol = 1e-5,
): Promise<void> {
  using got = await compile(graph, { backend, cache: false });
  using want = await compile(graph, { backend: "reference", cache: false });
  const [g, w] = [await got.run(feeds), await want.run(feeds)];
  for (const name of Object.keys(w)) {
    assertClose(numbers(g[name].data), numbers(w[name].data), { atol, rtol: 1e-4, message: name });
  }
}

/**
 * Runs `graph` on `backend` and on the reference and asserts every output's data equal, element
 * for element (exact paths: integer sums, the exact precision).
 */
export async function graphEqualsReference(
  graph: Graph,
  feeds: Record<string, HostTensor>,
  backend: Backend,
): Promise<void> {
  using got = await compile(graph, { backend, cache: false });
  using want = await compile(graph, { backend: "reference", cache: false });
  const [g, w] = [await got.run(feeds), await want.run(feeds)];
  for (const name of Object.keys(w)) {
    const [a, b] = [g[name].data, w[name].data];
    assert.equal(a.constructor, b.constructor, `${name}: its array type`);
    assert.equal(a.length, b.length, `${name}: its length`);
    // The first difference named: a deep comparison's diff of large arrays ran out of memory.
    let at = 0;
    while (at < a.length && Object.is(a[at], b[at])) at++;
    if (at === a.length) at = -1;
    assert.equal(at, -1, `${name}: element ${at} is ${a[at]}, the reference's ${b[at]}`);
  }
}

/** Numbers of a tensor's data (f16 decoded when `f16` is set, i64 converted). */
export function numbers(data: TensorData | ArrayLike<number>, f16 = false): number[] {
  if (f16) return Array.from(data as Uint16Array, fromF16Bits);
  return Array.from(data as ArrayLike<number | bigint>, Number);
}

/**
 * Asserts `actual` ≈ `expected` elementwise: `|a - e| ≤ atol + rtol·|e|`; NaN matches NaN and
 * infinities must match exactly. The message names the first differing index.
 */
export function assertClose(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  options: CloseOptions = {},
): void {
  const atol = options.atol ?? 1e-6, rtol = options.rtol ?? 1e-5;
  const prefix = options.message ? `${options.message}: ` : "";
  assert.equal(
    actual.length,
    expected.length,
    `${prefix}length ${actual.length} ≠ ${expected.length}`,
  );
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i], e = expected[i];
    const delta = Number.isFinite(a) && Number.isFinite(e) ? ` (|Δ| = ${Math.abs(a - e)})` : "";
    assert.ok(isClose(a, e, atol, rtol), `${prefix}index ${i}: got ${a}, expected ${e}${delta}`);
  }
}

/**
 * Whether `a` ≈ `e`: `|a - e| ≤ atol + rtol·|e|`, NaN matching only NaN and infinities matching
 * only themselves (with both tolerances 0: exact equality, as integers are compared).
 */
export function isClose(a: number, e: number, atol: number, rtol: number): boolean {
  if (Number.isNaN(e) || Number.isNaN(a)) return Number.isNaN(a) && Number.isNaN(e);
  if (!Number.isFinite(e) || !Number.isFinite(a)) return a === e;
  return Math.abs(a - e) <= atol + rtol * Math.abs(e);
}

/** {@linkcode runOpOn} on the reference backend unless `options.backend` names another. */
export function runOp(
  op: string,
  inputs: readonly HostTensor[],
  attrs: Attrs = {},
  options: RunOpOptions = {},
): Promise<HostTensor[]> {
  return runOpOn(op, inputs, attrs, { ...options, backend: options.backend ?? "reference" });
}

/**
 * Runs `op` on `backend` and on the reference and asserts the same shapes and dtypes and close
 * values (`tolerance` as in {@linkcode assertClose}; f16 outputs compared decoded).
 */
export async function assertMatchesReference(
  backend: string | Backend,
  op: string,
  inputs: readonly HostTensor[],
  attrs: Attrs,
  tolerance: { atol: number; rtol: number },
): Promise<void> {
  const [got, want] = await Promise.all([
    runOp(op, inputs, attrs, { backend }),
    runOp(op, inputs, attrs),
  ]);
  const message = `${op} ${JSON.stringify(inputs.map((t) => t.shape))} ${JSON.stringify(attrs)}`;
  for (const [i, w] of want.entries()) {
    assert.deepEqual(got[i].shape, w.shape, message);
    assert.equal(got[i].dtype, w.dtype, message);
    assertClose(numbers(got[i].data, got[i].dtype === "f16"), numbers(w.data, w.dtype === "f16"), {
      ...tolerance,
      message,
    });
  }
}

/** Compiles and runs `graph` once on `backend` (default: the reference), disposing the executable. */
export async function runGraph(
  graph: Graph,
  inputs: Record<string, HostTensor>,
  backend?: string | Backend,
): Promise<Record<string, HostTensor>> {
  const exe = await compile(graph, { backend: backend ?? "reference" });
  try {
    return await exe.run(inputs);
  } finally {
    exe.dispose();
  }
}

/**
 * Compiles `graph` with `options`, runs it twice on zeros and disposes it: a wasm program warms up
 * at its second run, where its thread tuner reaches the verdict a kernel cache keeps.
 */
export async function compileAndWarm(graph: Graph, options: CompileOptions): Promise<void> {
  using exe = await compile(graph, options);
  const zeros = zeroInputs(graph);
  for (let r = 0; r < 2; r++) await exe.run(zeros);
}

/** Shorthand for an f32 host tensor. */
export function f32(values: ArrayLike<number>, shape?: readonly number[]): HostTensor {
  return { data: Float32Array.from(values), shape: shape ?? [values.length], dtype: "f32" };
}

/** Shorthand for an i32 host tensor. */
export function i32(values: ArrayLike<number>, shape?: readonly number[]): HostTensor {
  return { data: Int32Array.from(values), shape: shape ?? [values.length], dtype: "i32" };
}

/** Bytes over their whole range from seed `seed`, extremes first: u8 0…255 or i8 −128…127. */
export function randomBytes(dtype: "u8" | "i8", shape: number[], seed: number): HostTensor {
  const next = rng(seed), n = shape.reduce((a, b) => a * b, 1);
  const data = dtype === "u8" ? new Uint8Array(n) : new Int8Array(n);
  const low = dtype === "u8" ? 0 : -128;
  for (let i = 0; i < n; i++) {
    data[i] = i < 4 ? low + 255 * (i % 2) : low + Math.floor(next() * 256);
  }
  return { data, shape, dtype };
}

/** Shorthand for a bool host tensor. */
export function bool(values: ArrayLike<number | boolean>, shape?: readonly number[]): HostTensor {
  return {
    data: Uint8Array.from(values, (v) => +!!v),
    shape: shape ?? [values.length],
    dtype: "bool",
  };
}

/**
 * Runs `body` while backend `id` has rates that make it look fastest at everything: for placement
 * rules that must hold whatever the costs (a limit, a missing capability).
 */
export async function withFastestRates(id: string, body: () => Promise<void>): Promise<void> {
  setBackendRates(id, {
    bytesPerMs: 1e12,
    flopsPerMs: 1e15,
    dispatchMs: 0,
    syncMs: 0,
    transferBytesPerMs: 1e12,
  });
  try {
    await body();
  } finally {
    setBackendRates(id, undefined);
  }
}

/**
 * Checks a device backend's loss and recovery: a run pending when `lose()` destroys the device
 * rejects with a KilnError that says to `recover()`, auto then places nothing there, executables
 * built before the loss refuse to run, and after `recover()` a new compile gives correct results.
 */
export async function assertRecoversFromLoss(backend: Backend, lose: () => void): Promise<void> {
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.input("x", [256])]));
  const graph = b.build();
  const e256 = new Array(256).fill(Math.E);
  const exe = await compile(graph, { backend, cache: false });
  const feeds = { x: f32(new Float32Array(256).fill(1)) };
  assertClose(numbers((await exe.run(feeds)).y.data), e256, { rtol: 1e-6 });
  const pending = exe.run(feeds);
  lose();
  await assert.rejects(
    pending.result(),
    (e: unknown) =>
      e instanceof KilnError && /lost/.test(e.message) && /recover\(\)/.test(e.message),
  );
  await new Promise((r) => setTimeout(r, 50));
  assert.ok(backend.deviceLost);
  const registry = new BackendRegistry().register(backend);
  const fallback = await compile(graph, { registry, cache: false });
  assert.ok(fallback.plan!.schedule.placement.every((p) => p !== backend.id));
  await backend.recover();
  assert.equal(backend.deviceLost, false);
  await assert.rejects(
    exe.run(feeds).result(),
    (e: unknown) => e instanceof KilnError && /compile again/.test(e.message),
  );
  const again = await compile(graph, { backend, cache: false });
  assertClose(numbers((await again.run(feeds)).y.data), e256, { rtol: 1e-6 });
}

/** `codegen` whose kernels each take `ms` longer (a slow device, measured by placement trials). */
export function delayed(codegen: KernelCodegen, ms: number): KernelCodegen {
  return {
    format: codegen.format,
    generate: (k) => codegen.generate(k),
    load: async (k, artifact) => {
      const kernel = await codegen.load(k, artifact);
      return {
        run: async (inputs, into, active) => {
          await new Promise((resolve) => setTimeout(resolve, ms));
          return kernel.run(inputs, into, active);
        },
      };
    },
  };
}
