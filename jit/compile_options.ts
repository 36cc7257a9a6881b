/**
 * The options of `compile` (`jit/compile.ts`), and their names: a key that is not one of them is
 * refused where a caller passes them ({@linkcode COMPILE_OPTIONS}), and a run's or a
 * generation's options, which hold more, hand on only these ({@linkcode compileOptionsOf}).
 *
 * @module
 */
import type { Backend, BackendSet } from "./runtime/backend.ts";
import type { KernelCache } from "./runtime/kernel_cache.ts";
import type { ProgressCallback } from "./runtime/progress.ts";
import type { Policy } from "./schedule/schedule.ts";
import type { Precision } from "./passes/precision.ts";

/** Options for `compile` (`jit/compile.ts`). */
export interface CompileOptions {
  /** Backend id or instance: places everything there (the `named` policy). */
  readonly backend?: string | Backend;
  /** Placement policy when no backend is named (default `auto`; `"minimize-cost"` is `"min-cost"`). */
  readonly policy?: Policy | Policy["kind"] | "minimize-cost";
  /** The backends to resolve ids in and place work on (default: `registeredBackends()`). */
  readonly registry?: BackendSet;
  /**
   * Kernel cache (default, or `true`: the process-wide one); `false` generates every kernel
   * afresh.
   */
  readonly cache?: KernelCache | boolean;
  /**
   * Fuse into kernels (default true); `false` runs the legalized graph node by node on a
   * graph-level backend (the reference unless another is named).
   */
  readonly fuse?: boolean;
  /** State bindings: output name → input it refreshes after every run (e.g. a KV cache). */
  readonly state?: Readonly<Record<string, string>>;
  /**
   * Inputs whose data each run gives up (a generation's caches, each step's present fed back as
   * the next past): a device tensor passed for one is the run's to write over, and is disposed by
   * it. An output made from such an input point for point may then be stored in its buffer (the
   * wasm backend writes a decode step's new cache entry and leaves the rest in place). Host arrays
   * passed are never written.
   */
  readonly donate?: readonly string[];
  /**
   * Precision of float tensors (default `"f32"`): `"f16-storage"` keeps the graph's float inputs
   * and outputs in f16 on the device, `"f16"` every float tensor (f16 arithmetic, f32
   * accumulation in reductions and matmuls). The caller's tensors stay f32 either way. Both run
   * on every backend, natively where the device has f16 (WebGPU with `shader-f16`). `"exact"`
   * computes in f32 to the reference's bits on every backend. See `jit/passes/precision.ts`.
   */
  readonly precision?: Precision;
  /**
   * Where the named backend has no f64 arithmetic (WebGPU: WGSL has none), compute the graph's
   * f64 tensors in f32 instead of refusing it (default false). The caller still passes and gets
   * f64 data. Under a policy, f64 kernels are placed on a backend that has f64 (wasm) and this
   * does nothing.
   */
  readonly narrowF64?: boolean;
  /**
   * Shape buckets: inputs whose axis 0 (the batch) is an upper bound. The executable then runs
   * any smaller batch without recompiling, computing and returning only the active rows; a graph
   * that mixes batch rows is refused at compile time.
   */
  readonly buckets?: readonly string[];
  /** Called as the compile moves through its phases (fuse, codegen, pipelines), with counts. */
  readonly onProgress?: ProgressCallback;
  /**
   * Inputs that runs will give as device tensors, by name → the backend id whose device holds
   * them (default: every input on the host). The `local-first` policy places the kernels that
   * read them there; its executables compile such a variant by themselves when a run gives
   * device tensors (see `jit/runtime/specialize.ts`).
   */
  readonly inputsOn?: Readonly<Record<string, string>>;
  /**
   * How the executable will be used, a hint for the `auto` policy: `runs`, the runs expected.
   * Candidate plans are then weighed by their first run (a GPU's uploads and first dispatches)
   * plus the rest at their steady time, so a plan that is fast only once warm loses where few
   * runs follow (default: many runs, the steady time alone).
   */
  readonly workload?: WorkloadHint;
}

/** What the caller says of an executable's use (see {@linkcode CompileOptions.workload}). */
export interface WorkloadHint {
  /** Runs the executable is expected to make (a whole number of at least 1). */
  readonly runs?: number;
}

/** The keys of {@linkcode CompileOptions}. */
export const COMPILE_OPTIONS: readonly (keyof CompileOptions)[] = [
  "backend",
  "policy",
  "registry",
  "cache",
  "fuse",
  "state",
  "donate",
  "precision",
  "narrowF64",
  "buckets",
  "onProgress",
  "inputsOn",
  "workload",
];

/** The compile options among `options` (a run's or a generation's, which hold more). */
export function compileOptionsOf(options: CompileOptions): CompileOptions {
  const keys: readonly string[] = COMPILE_OPTIONS;
  return Object.fromEntries(Object.entries(options).filter(([k]) => keys.includes(k)));
}
