/**
 * The last stage of a compile: one placement of the fused kernels built into an
 * {@linkcode Executable}. Each kernel's code comes from the kernel cache (or is generated once per
 * compile where there is none); a plan wholly on a backend that assembles programs (a GPU, wasm's
 * arena) becomes one program there, any other runs its kernels one by one over host buffers. A
 * cached artifact that fails to load is regenerated once.
 *
 * @module
 */
import type { Artifact, Backend, KernelCodegen, Program } from "./backend.ts";
import { Executable, type PlanInfo } from "./executable.ts";
import type { Graph } from "../ir/graph.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import { kernelText } from "../ir/expr_table.ts";
import type { FusionResult } from "../passes/fuse.ts";
import type { Widened } from "../passes/precision.ts";
import type { DrawnInput } from "../passes/random_inputs.ts";
import type { BucketPlan } from "../schedule/buckets.ts";
import type { MemoryPlan } from "../schedule/memory_plan.ts";
import type { Schedule } from "../schedule/schedule.ts";
import { type KernelCache, tuningNoteOf } from "./kernel_cache.ts";
import { hostProgram } from "./program.ts";
import type { ProgressCallback } from "./progress.ts";

/** What a compile knows once its graph is fused: everything a placement is built from. */
export interface FusedCompile {
  /** The graph the executable checks its inputs against (prepared: random ops hoisted). */
  readonly graph: Graph;
  /** That graph legalized for the backends that may run it. */
  readonly legal: Graph;
  /** Its kernels. */
  readonly fusion: FusionResult;
  /** The backends that may run them, by id. */
  readonly byId: ReadonlyMap<string, Backend>;
  /** The backend an empty plan is said to run on. */
  readonly fallback: Backend;
  /** Where kernel code is cached (none: generated once per compile). */
  readonly cache?: KernelCache;
  /** Intermediate buffers' reuse. */
  readonly memory: MemoryPlan;
  /** Shape buckets, if the caller asked for them. */
  readonly buckets?: BucketPlan;
  /** What the executable widens at its boundary (f64 narrowed to f32). */
  readonly widened?: Widened;
  /** Inputs the executable draws on every run (hoisted random ops). */
  readonly drawn: DrawnInput[];
  /** Initial values of state inputs. */
  readonly state?: Readonly<Record<string, string>>;
  /** Inputs whose data each run gives up (`CompileOptions.donate`). */
  readonly donate?: readonly string[];
  /** When the compile started (`performance.now()`). */
  readonly start: number;
  /** Progress of the compile's phases. */
  readonly report: ProgressCallback;
  /**
   * Code generated in this compile without a cache, by backend and kernel text: structurally
   * equal kernels are generated once in every plan a compile builds (shufflenet's 75 kernels are
   * 23 distinct ones, and auto may build the host plan before and again in its trial).
   */
  readonly generated: Map<string, ReturnType<KernelCodegen["generate"]>>;
}

/** Where kernel code came from, counted. */
type Sources = { memory: number; disk: number; generated: number };

/** The code of every kernel of a placement, and how to regenerate one that fails to load. */
interface KernelCode {
  readonly artifacts: Artifact[];
  readonly sources: Sources;
  /** Per kernel, whether its code came from a cache (memory or disk) rather than this compile. */
  readonly cached: readonly boolean[];
  /** Kernel `i`'s code regenerated after `error` (rethrown where it was fresh already). */
  refresh(i: number, error: unknown): Promise<void>;
}

/** Kernel `k`'s code for `backend`: cached, generated once in this compile, or (`refresh`) anew. */
async function artifactOf(
  c: FusedCompile,
  k: KernelIR,
  backend: Backend,
  refresh = false,
): Promise<{ artifact: Artifact; source: "memory" | "disk" | "generated" }> {
  // A custom op's kernel is the user's code, which may change under the same op name: never
  // cached.
  if (c.cache && !k.opaque) return await c.cache.artifact(k, backend, { refresh });
  const key = `${backend.id}\n${kernelText(k)}`;
  let artifact = refresh ? undefined : c.generated.get(key);
  if (!artifact) {
    artifact = backend.codegen!.generate(k);
    c.generated.set(key, artifact);
  }
  return { artifact: await artifact, source: "generated" };
}

/** Every kernel's code for its place in `placed`, reporting the codegen phase. */
async function kernelCode(c: FusedCompile, placed: Schedule): Promise<KernelCode> {
  const { kernels } = c.fusion;
  const total = kernels.length;
  const backendOf = (i: number) => c.byId.get(placed.placement[i])!;
  let coded = 0;
  c.report({ phase: "codegen", done: 0, total });
  const fetched = await Promise.all(
    kernels.map(async (k, i) => {
      const got = await artifactOf(c, k, backendOf(i));
      c.report({ phase: "codegen", done: ++coded, total });
      return got;
    }),
  );
  c.report({ phase: "pipelines", done: 0, total });
  const sources: Sources = { memory: 0, disk: 0, generated: 0 };
  for (const f of fetched) sources[f.source]++;
  const artifacts = fetched.map((f) => f.artifact);
  return {
    artifacts,
    sources,
    cached: fetched.map((f) => f.source !== "generated"),
    // The cache verifies what it reads, but an artifact from another engine version can still
    // be refused where it loads.
    async refresh(i: number, error: unknown) {
      if (fetched[i].source === "generated") throw error;
      console.warn(
        `kiln: the cached code of kernel ${kernels[i].name} failed to load (${
          (error as Error)?.message
        }); regenerating it`,
      );
      artifacts[i] = (await artifactOf(c, kernels[i], backendOf(i), true)).artifact;
    },
  };
}

/** One program on `only`, a backend that assembles programs, retried with fresh code once. */
async function assembled(c: FusedCompile, only: Backend, code: KernelCode): Promise<Program> {
  const cache = c.cache && c.cache.dir !== false ? c.cache : undefined;
  // A program's run-time tuning verdict (wasm's thread choice) is kept beside the kernels, by
  // backend and kernels, and handed to the next compile of the same plan on this machine.
  const note = cache ? tuningNoteOf(only, c.fusion.kernels) : undefined;
  const tuning = note ? await cache!.readNote(note) : undefined;
  // The program awaits the store of a verdict its warm-up reached (see `AssemblyPlan.onTuning`).
  const onTuning = note ? (verdict: string) => cache!.writeNote(note, verdict) : undefined;
  const assemble = () =>
    only.codegen!.assemble!({
      graph: c.legal,
      kernels: c.fusion.kernels,
      artifacts: code.artifacts,
      constants: c.fusion.constants,
      partial: c.buckets?.partial,
      tuning,
      onTuning,
    });
  return await assemble().catch(async (e) => {
    if (!code.cached.some(Boolean)) throw e;
    for (let i = 0; i < code.cached.length; i++) if (code.cached[i]) await code.refresh(i, e);
    return await assemble();
  });
}

/** Kernels run one by one over host buffers, each loaded by its backend. */
async function kernelByKernel(c: FusedCompile, placed: Schedule, code: KernelCode) {
  const load = async (k: KernelIR, i: number) => {
    const codegen = c.byId.get(placed.placement[i])!.codegen!;
    try {
      return await codegen.load(k, code.artifacts[i]);
    } catch (e) {
      await code.refresh(i, e);
      return await codegen.load(k, code.artifacts[i]);
    }
  };
  return hostProgram({
    graph: c.legal,
    kernels: c.fusion.kernels,
    prepared: await Promise.all(c.fusion.kernels.map(load)),
    constants: c.fusion.constants,
    memory: c.memory,
    partial: c.buckets?.partial,
  });
}

/** The executable of one placement of the compile's kernels. */
export async function buildExecutable(c: FusedCompile, placed: Schedule): Promise<Executable> {
  await Promise.all([...new Set(placed.placement)].map((id) => c.byId.get(id)!.prepare()));
  const code = await kernelCode(c, placed);
  const only = new Set(placed.placement).size === 1 ? c.byId.get(placed.placement[0]) : undefined;
  const program = only?.codegen?.assemble
    ? await assembled(c, only, code)
    : await kernelByKernel(c, placed, code);
  const total = c.fusion.kernels.length;
  c.report({ phase: "pipelines", done: total, total });
  const main = c.byId.get(placed.placement[0] ?? c.fallback.id) ?? c.fallback;
  const plan: PlanInfo = {
    backend: main.id,
    kernels: c.fusion.kernels,
    log: c.fusion.log,
    memory: c.memory,
    sources: code.sources,
    schedule: placed,
  };
  return new Executable({
    graph: c.graph,
    backend: main,
    program,
    compileMs: performance.now() - c.start,
    plan,
    state: c.state,
    donate: c.donate,
    buckets: c.buckets,
    widened: c.widened,
    drawn: c.drawn,
  });
}
