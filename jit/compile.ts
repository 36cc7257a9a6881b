/**
 * `compile(graph, options)`: the pipeline's entry — graph → legalize → fuse → codegen (through the
 * kernel cache) → program → {@linkcode Executable}. A backend without a kernel-IR code generator
 * gets the legalized graph through its own `compile` instead.
 *
 * @module
 */
import type { Backend, BackendSet, KernelCodegen, Program } from "./runtime/backend.ts";
import { type BackendRates, backendRates, knownRates } from "./schedule/cost_model.ts";
import { KilnError } from "./support/errors.ts";
import { Executable, type PlanInfo, settleCompile } from "./runtime/executable.ts";
import { type ProgressCallback, reporter } from "./runtime/progress.ts";
import { foldEmpty } from "./passes/fold_empty.ts";
import { fuse } from "./passes/fuse.ts";
import type { Graph } from "./ir/graph.ts";
import { defaultKernelCache, type KernelCache, tuningNoteOf } from "./runtime/kernel_cache.ts";
import type { KernelIR } from "./ir/kernel_ir.ts";
import { kernelText } from "./ir/expr_table.ts";
import { legalize } from "./passes/legalize.ts";
import { planMemory } from "./schedule/memory_plan.ts";
import { checkedPolicy, graphLevelChoice, policyOf } from "./schedule/policy.ts";
import { hostProgram } from "./runtime/program.ts";
import {
  deviceFloorMs,
  HOST_MARGIN,
  storedVerdict,
  storeVerdict,
  trial,
  TRIAL_RATIO,
  trialKey,
  trialOf,
  type TrialRecord,
  type Verdict,
} from "./schedule/placement_trial.ts";
import {
  canRun,
  elidedBy,
  memorySpace,
  type Policy,
  type Schedule,
  schedule,
  UNKNOWN_RATES,
  usableBackends,
} from "./schedule/schedule.ts";
import { count } from "./runtime/counters.ts";
import { planBuckets } from "./schedule/buckets.ts";
import {
  applyPrecision,
  checkPrecision,
  narrowF64,
  type Precision,
  type Widened,
} from "./passes/precision.ts";
import { hoistRandom } from "./passes/random_inputs.ts";

/** Options for {@linkcode compile}. */
export interface CompileOptions {
  /** Backend id or instance: places everything there (the `named` policy). */
  readonly backend?: string | Backend;
  /** Placement policy when no backend is named (default `auto`; `"minimize-cost"` is `"min-cost"`). */
  readonly policy?: Policy | Policy["kind"] | "minimize-cost";
  /** The backends to resolve ids in and place work on (default: {@linkcode registeredBackends}). */
  readonly registry?: BackendSet;
  /** Kernel cache (default: the process-wide one); `false` generates every kernel afresh. */
  readonly cache?: KernelCache | false;
  /**
   * Fuse into kernels (default true); `false` runs the legalized graph node by node on a
   * graph-level backend (the reference unless another is named).
   */
  readonly fuse?: boolean;
  /** State bindings: output name → input it refreshes after every run (e.g. a KV cache). */
  readonly state?: Readonly<Record<string, string>>;
  /**
   * Precision of float tensors (default `"f32"`): `"f16-storage"` keeps the graph's float inputs
   * and outputs in f16 on the device, `"f16"` every float tensor (f16 arithmetic, f32
   * accumulation in reductions and matmuls). The caller's tensors stay f32 either way. Both need
   * a named backend that stores f16 natively (WebGPU with `shader-f16`); see `jit/passes/precision.ts`.
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
}

let provider: (() => BackendSet) | undefined;

/**
 * Sets where {@linkcode compile} finds backends when the caller passes no `registry`. The core
 * names no concrete backend: the public entry (`mod.ts`) supplies the built-in registry.
 */
export function setDefaultBackends(backends: () => BackendSet): void {
  provider = backends;
}

/** The backends a compile without `registry` uses (see {@linkcode setDefaultBackends}). */
export function registeredBackends(): BackendSet {
  if (provider) return provider();
  throw new KilnError("No backends are registered with the compiler", {
    code: "backend",
    fix: 'import kiln from its entry point ("mod.ts"), or pass { registry } to compile()',
  });
}

/**
 * Compiles `graph` into an {@linkcode Executable}.
 *
 * @example
 * ```ts
 * import { compile, GraphBuilder } from "../mod.ts";
 * const b = new GraphBuilder();
 * b.output("y", b.op("Exp", [b.input("x", [2])]));
 * const exe = await compile(b.build());
 * const { y } = await exe.run({ x: { data: new Float32Array([0, 1]), shape: [2], dtype: "f32" } });
 * console.log(y.data); // Float32Array [1, 2.718…]
 * ```
 */
export async function compile(input: Graph, options: CompileOptions = {}): Promise<Executable> {
  if (!isGraph(input)) throw notAGraph(input);
  const precision = checkPrecision(options.precision);
  // Unfused compiles run node by node on one backend: the reference unless one is named.
  const id = options.backend ?? (options.fuse === false ? "reference" : undefined);
  // A backend instance needs no registry (it only widens the suggestions of a legalize error).
  const registry = options.registry ?? (typeof id === "object" ? undefined : registeredBackends());
  const named = typeof id === "object" ? id : id === undefined ? undefined : registry!.get(id);
  const start = performance.now();
  if (precision !== "f32") await checkHalf(named, precision);
  // Random ops become inputs the executable draws on every run.
  const { graph: drawing, drawn } = hoistRandom(input);
  const { graph, widened } = withoutF64(
    applyPrecision(foldEmpty(drawing), precision),
    named,
    options.narrowF64 ?? false,
  );
  if (named && !named.codegen && !named.compile) {
    throw new KilnError(`Backend "${named.id}" has neither codegen nor compile()`, {
      code: "backend",
      fix: "implement KernelCodegen (codegen) or compile(graph) in the backend",
    });
  }
  if (named?.codegen && !named.compile && options.fuse === false) {
    throw new KilnError(`Backend "${named.id}" only runs fused kernels`, {
      code: "unsupported",
      fix: "compile with fusion on (the default), or name a graph-level backend such as reference",
    });
  }
  /** The executable of a graph-level backend running the whole graph (`legal` for it). */
  const whole = async (b: Backend, legal: Graph, reason?: string) => {
    if (options.buckets?.length) {
      throw new KilnError("Shape buckets need the fused path", {
        code: "unsupported",
        fix: "compile with fusion on a kernel-IR backend, or without buckets",
      });
    }
    await b.prepare();
    const program = await b.compile!(legal, { name: "graph" });
    count("kiln_compiles_total");
    count("kiln_compile_ms_total", performance.now() - start);
    return new Executable({
      graph,
      backend: b,
      program,
      compileMs: performance.now() - start,
      state: options.state,
      widened,
      drawn,
      reason,
    });
  };
  if (named?.compile && (!named.codegen || options.fuse === false)) {
    return await whole(named, legalize(graph, named, registry));
  }
  // A named backend is prepared first: what it supports can depend on its device's limits.
  await named?.prepare();
  const legal = named ? legalize(graph, named, registry) : graph;
  const policy: Policy = named
    ? { kind: "named", backend: named.id }
    : typeof options.policy === "string"
    ? policyOf(options.policy)
    : checkedPolicy(options.policy ?? { kind: "auto" });
  const candidates = named ? [named] : registry!.list();
  // Capabilities are only known once a device is acquired (a software GPU, binding limits);
  // a backend that fails to prepare is left out by its profile, not by an exception here.
  // Prepared before fusion, which reads their limits: otherwise a process's first compile
  // fused for no device limit and the next ones for the device's.
  if (!named) await Promise.all(candidates.map((b) => b.prepare().catch(() => {})));
  // Kernels must fit the tightest binding limit among the backends that may run them (one
  // binding is kept for the output). A software device runs nothing where another backend runs
  // every kernel (see `usableBackends`): its limit split lstm2's 47 kernels into 51 on the
  // 2-core VM, all of them then run on wasm.
  const limits = candidates.filter((b) => {
    const { maxBindings, software } = b.capabilities();
    return b.codegen && maxBindings > 0 && (named !== undefined || !software);
  }).map((b) => b.capabilities().maxBindings - 1);
  const report = reporter(options.onProgress);
  report({ phase: "fuse", done: 0, total: 1 });
  const fusion = fuse(legal, { maxInputs: limits.length ? Math.min(...limits) : Infinity });
  report({ phase: "fuse", done: 1, total: 1 });
  const external = new Set([...legal.outputs.map((o) => o.value), ...fusion.constants.keys()]);
  const hostValues = new Set(
    [...legal.inputs, ...legal.params].map((b) => b.value).concat([...fusion.constants.keys()]),
  );
  const outputs = new Set(legal.outputs.map((o) => o.value));
  const usable = usableBackends(fusion.kernels, candidates, policy, outputs);
  const byId = new Map(candidates.map((b) => [b.id, b]));
  const cache = options.cache === false ? undefined : options.cache ?? defaultKernelCache();
  const memory = planMemory(fusion.kernels, external);
  const buckets = options.buckets?.length
    ? planBuckets(legal, fusion.kernels, options.buckets)
    : undefined;

  // Without a cache, structurally equal kernels are still generated once, in every plan this
  // compile builds: a network repeats its blocks (shufflenet's 75 kernels are 23 distinct ones,
  // unet's 29 are 20), and auto may build the host plan before and again in its trial.
  const generated = new Map<string, ReturnType<KernelCodegen["generate"]>>();
  /** The executable of one placement of the kernels. */
  const build = async (placed: Schedule): Promise<Executable> => {
    await Promise.all([...new Set(placed.placement)].map((id) => byId.get(id)!.prepare()));
    const sources = { memory: 0, disk: 0, generated: 0 };
    // A custom op's kernel is the user's code, which may change under the same op name: never
    // cached.
    const artifactOf = async (k: KernelIR, backend: Backend, refresh = false) => {
      if (cache && !k.opaque) return await cache.artifact(k, backend, { refresh });
      const key = `${backend.id}\n${kernelText(k)}`;
      let artifact = refresh ? undefined : generated.get(key);
      if (!artifact) generated.set(key, artifact = backend.codegen!.generate(k));
      return { artifact: await artifact, source: "generated" as const };
    };
    const total = fusion.kernels.length;
    let coded = 0;
    report({ phase: "codegen", done: 0, total });
    const fetched = await Promise.all(
      fusion.kernels.map(async (k, i) => {
        const got = await artifactOf(k, byId.get(placed.placement[i])!);
        report({ phase: "codegen", done: ++coded, total });
        return got;
      }),
    );
    report({ phase: "pipelines", done: 0, total });
    for (const f of fetched) sources[f.source]++;
    const artifacts = fetched.map((f) => f.artifact);
    /**
     * Regenerates kernel `i`'s cached artifact after it failed to load: the cache verifies what it
     * reads, but an artifact from another engine version can still be refused.
     */
    const refresh = async (i: number, error: unknown) => {
      if (fetched[i].source === "generated") throw error;
      console.warn(
        `kiln: the cached code of kernel ${fusion.kernels[i].name} failed to load (${
          (error as Error)?.message
        }); regenerating it`,
      );
      artifacts[i] =
        (await artifactOf(fusion.kernels[i], byId.get(placed.placement[i])!, true)).artifact;
    };
    // A plan wholly on a backend that assembles programs (a GPU) becomes one program there;
    // otherwise kernels run one by one over host buffers.
    const only = new Set(placed.placement).size === 1 ? byId.get(placed.placement[0]) : undefined;
    // A program's run-time tuning verdict (wasm's thread choice) is kept beside the kernels,
    // by backend and kernels, and handed to the next compile of the same plan on this machine.
    const tuningNote = only?.codegen?.assemble && cache && cache.dir !== false
      ? tuningNoteOf(only, fusion.kernels)
      : undefined;
    const tuning = tuningNote ? await cache!.readNote(tuningNote) : undefined;
    // The program awaits the store of a verdict its warm-up reached (see `AssemblyPlan.onTuning`).
    const onTuning = tuningNote
      ? (verdict: string) => cache!.writeNote(tuningNote, verdict)
      : undefined;
    const assemble = () =>
      only!.codegen!.assemble!({
        graph: legal,
        kernels: fusion.kernels,
        artifacts,
        constants: fusion.constants,
        partial: buckets?.partial,
        tuning,
        onTuning,
      });
    const load = async (i: number) => {
      const codegen = byId.get(placed.placement[i])!.codegen!;
      try {
        return await codegen.load(fusion.kernels[i], artifacts[i]);
      } catch (e) {
        await refresh(i, e);
        return await codegen.load(fusion.kernels[i], artifacts[i]);
      }
    };
    const program: Program = only?.codegen?.assemble
      ? await assemble().catch(async (e) => {
        if (fetched.every((f) => f.source === "generated")) throw e;
        for (let i = 0; i < fetched.length; i++) {
          if (fetched[i].source !== "generated") await refresh(i, e);
        }
        return await assemble();
      })
      : hostProgram({
        graph: legal,
        kernels: fusion.kernels,
        prepared: await Promise.all(fusion.kernels.map((_, i) => load(i))),
        constants: fusion.constants,
        memory,
        partial: buckets?.partial,
      });
    report({ phase: "pipelines", done: total, total });
    const main = byId.get(placed.placement[0] ?? candidates[0].id) ?? candidates[0];
    const plan: PlanInfo = {
      backend: main.id,
      kernels: fusion.kernels,
      log: fusion.log,
      memory,
      sources,
      schedule: placed,
    };
    return new Executable({
      graph,
      backend: main,
      program,
      compileMs: performance.now() - start,
      plan,
      state: options.state,
      buckets,
      widened,
      drawn,
    });
  };

  const request = {
    kernels: fusion.kernels,
    hostValues,
    outputs,
  };
  /** Whether `b` can run every kernel, given the values it elides among them. */
  const runsAll = (b: Backend) => {
    const elided = elidedBy(b, fusion.kernels, outputs);
    return fusion.kernels.every((k) => canRun(b, k, elided));
  };
  /** Every kernel on `b` (which runs them all), estimated with `rates`, for `reason`. */
  const allOn = (b: Backend, reason: string, rates = knownRates(b) ?? UNKNOWN_RATES) => ({
    ...schedule({
      ...request,
      graph: legal,
      backends: [b],
      policy: { kind: "named", backend: b.id },
      rates: [rates],
    }),
    reason,
  });
  const timedAgainst = (b: Backend, other: string) =>
    `auto: every kernel on "${b.id}", timed against ${other}`;
  /** `exe`, counted as this compile's result (a trial's choice for `reason`). */
  const done = (exe: Executable, reason?: string) => {
    settleCompile(exe, { compileMs: performance.now() - start, reason });
    count("kiln_compiles_total");
    count("kiln_compile_ms_total", exe.compileMs);
    return exe;
  };
  const key = trialKey(legal, usable);
  // Verdicts are kept beside the kernels of the cache the caller names (the process's otherwise).
  const notes = options.cache || defaultKernelCache();
  /** `record`'s plan among `built` (`fallback` without one), the record stored, the rest disposed. */
  const keep = async (
    built: Map<Verdict, Executable>,
    record: TrialRecord | undefined,
    fallback: Verdict,
  ) => {
    if (record) await storeVerdict(key, record, notes);
    const exe = built.get(record?.verdict ?? fallback)!;
    for (const other of built.values()) if (other !== exe) other.dispose();
    return exe;
  };
  /**
   * The fastest of `plans`: the verdict of an earlier trial of this graph on this machine, else a
   * trial's (stored for the next compile); `fallback` where a plan fails to run. `syncMs`: see
   * {@linkcode trialOf}.
   */
  const fastest = async (plans: Map<Verdict, Schedule>, fallback: Verdict, syncMs: number) => {
    const stored = await storedVerdict(key, notes);
    if (stored && plans.has(stored)) return await build(plans.get(stored)!);
    const { record, built } = await trialOf(plans, build, legal, syncMs);
    return await keep(built, record, fallback);
  };
  // A device that waits at least its `readbackMs` a run (Deno's GPU: about 11 ms), and
  // KERNEL_FLOOR_MS a kernel, cannot beat a host plan that runs in less. Under auto the host plan
  // is built and timed first, and where it is that fast the device is neither calibrated nor
  // tried: both took 0.2-0.3 s of every first run of a small model on the H200 host.
  const devices = usable.filter((b) => memorySpace(b) !== "host");
  const readback = Math.min(...devices.map((b) => b.capabilities().readbackMs ?? 0));
  const floor = deviceFloorMs(readback, fusion.kernels.length);
  const host = usable.filter((b) => memorySpace(b) === "host");
  const hostSimd = host.find((b) => b.kind !== "cpu");
  // A device that runs every kernel, for a plan all on it.
  const rival = devices.find((b) => !b.capabilities().software && runsAll(b));
  // Whether the host plan was timed against that floor and found slower.
  let hostTimed = false;
  if (
    policy.kind === "auto" && !options.state && !buckets && floor > 0 && floor < Infinity &&
    hostSimd && host.length === 1 && runsAll(hostSimd) &&
    candidates.every((b) => b.codegen || !b.compile)
  ) {
    // The host's plan and the device's are each compiled as if named, fused for their own
    // limits: fused for Dawn's 8 bindings, auto's host plans of gru_bi and lstm2 had 31 and 51
    // kernels against wasm's own 24 and 47, and ran 1.23-1.27x as long.
    const asNamed = (b: Backend, reason: string) =>
      compile(input, { ...options, backend: b }).then((exe) => {
        settleCompile(exe, { reason });
        return exe;
      });
    // A plan an earlier compile here found fastest (against the device's plan or its floor).
    const stored = rival && await storedVerdict(key, notes);
    const earlier = (b: Backend) =>
      `auto: every kernel on "${b.id}", as an earlier compile on this machine found fastest`;
    if (stored === "host") return done(await asNamed(hostSimd, earlier(hostSimd)));
    // A device that fails to build its plan now leaves the host's, timed as below.
    const chosen = stored === "device" && await asNamed(rival!, earlier(rival!)).catch(() => {});
    if (chosen) return done(chosen);
    const exe = await asNamed(
      hostSimd,
      `auto: the host plan runs in less than the least readback of ${
        devices.map((b) => b.id).join(", ")
      } and its kernels' dispatch (${floor.toFixed(1)} ms a run), so no device plan was tried`,
    );
    const record = await trial(new Map([["host", exe]]), legal);
    if (record && record.ms.host! < HOST_MARGIN * floor) {
      // Kept for the next compile, which then times nothing (a warm `kiln run` timed it anew).
      if (rival) await storeVerdict(key, record, notes);
      return done(exe);
    }
    hostTimed = true;
    // Slower than the device's floor, the host plan is timed against the device's as they are:
    // the calibration behind an estimate, which the trial would check anyway, was most of auto's
    // first run on Dawn (1.4-1.6 s of vit_tiny's and unet's). The host executable timed is kept:
    // a new one starts cold, on one thread (ResNet-18 timed 458 ms a run against 49).
    if (rival) {
      const plans = new Map<Verdict, Executable>([["host", exe]]);
      try {
        plans.set("device", await asNamed(rival, timedAgainst(rival, `"${hostSimd.id}"`)));
      } catch { /* the device cannot build its plan: the host's stands */ }
      const kept = await keep(
        plans,
        plans.size > 1 ? await trial(plans, legal) : undefined,
        "host",
      );
      return done(kept, kept === exe ? timedAgainst(hostSimd, `"${rival.id}"`) : undefined);
    }
    exe.dispose();
  }
  // One backend runs every kernel and no whole-graph backend competes: there is nothing to weigh,
  // so nothing is calibrated (its probes' compiles and runs were part of every first run).
  const sole = usable.length === 1 && policy.kind === "auto" &&
    !candidates.some((b) => !b.codegen && b.compile) && runsAll(usable[0]);
  const rates = sole ? [knownRates(usable[0]) ?? UNKNOWN_RATES] : await ratesOf(usable, policy);
  const placed = sole
    ? allOn(usable[0], `auto: only "${usable[0].id}" runs every kernel here`)
    : schedule({ ...request, graph: legal, backends: usable, policy, rates });
  if (!named && !options.buckets?.length) {
    const chosen = await graphLevelChoice(legal, candidates, placed, policy, ratesOf);
    if (chosen) return await whole(chosen.backend, chosen.legal, chosen.reason);
  }
  // A plan that uses a device is timed against its single-backend alternatives (all on the
  // host's SIMD backend, all on that device) when their estimates are within TRIAL_RATIO, once
  // per graph and machine: small programs are where estimates are least reliable. A plan all on
  // the host's SIMD backend is timed against the device's, as estimates err both ways (a
  // miscalibrated GPU kept ResNet-18 on wasm at 57 ms against the GPU's 31).
  const onHost = placed.placement.every((id) => id === hostSimd?.id);
  const plans = new Map<Verdict, Schedule>([[onHost ? "host" : "plan", placed]]);
  const device =
    placed.placement.map((id) => byId.get(id)!).find((b) => memorySpace(b) !== "host") ??
      devices.find((b) => !b.capabilities().software);
  if (policy.kind === "auto" && !options.state && !buckets && device) {
    // `timed`: the host plan was timed already and lost only to the readback floor, so it is
    // tried whatever its estimate (Dawn's 0.2 ms floor let vit_tiny's 4 ms estimate on the GPU
    // skip a host plan that ran in 1 ms).
    const add = (b: Backend | undefined, verdict: Verdict, timed = false) => {
      const at = b ? usable.indexOf(b) : -1;
      if (at < 0 || !runsAll(b!)) return;
      if (placed.placement.every((id) => id === b!.id)) return;
      const only = allOn(b!, timedAgainst(b!, "the least estimated time's plan"), rates[at]);
      if (timed || only.totalMs <= TRIAL_RATIO * placed.totalMs) plans.set(verdict, only);
    };
    add(hostSimd, "host", hostTimed);
    add(device, "device");
  }
  if (plans.size === 1) return done(await build(placed));
  // Timed against the readback already, the host plan need not be timed alone again.
  const syncMs = device && !hostTimed ? rates[usable.indexOf(device)].syncMs : 0;
  return done(await fastest(plans, onHost ? "host" : "plan", syncMs));
}

/**
 * `prepared` (the graph and what the executable widens) as a named backend without f64 runs it:
 * narrowed to f32 where the caller allows it, else refused with a `Fix:` if it has f64 values.
 */
function withoutF64(
  prepared: { graph: Graph; widened?: Widened },
  named: Backend | undefined,
  allow: boolean,
): { graph: Graph; widened?: Widened } {
  const { graph } = prepared;
  if (!named || named.capabilities().f64) return prepared;
  const wide = graph.values.filter((v) => v.dtype === "f64");
  if (!wide.length) return prepared;
  if (allow && !prepared.widened) return narrowF64(graph);
  const what = `Backend "${named.id}" has no f64 arithmetic, and the graph computes ${
    wide.slice(0, 3).map((v) => `"${v.name}"`).join(", ")
  }${wide.length > 3 ? ` and ${wide.length - 3} more` : ""} in f64`;
  throw new KilnError(
    allow ? `${what}; narrowF64 cannot combine with an f16 precision` : what,
    {
      code: "unsupported",
      fix: allow
        ? 'compile with precision: "f32" to narrow f64 to f32, or on backend "wasm"'
        : 'compile with backend "wasm" or "reference" (f64 there), the auto policy (it runs f64 kernels on the CPU), or narrowF64: true to compute them in f32 here',
    },
  );
}

/** Refuses an f16 precision unless the named backend stores f16 natively (it would be slower). */
async function checkHalf(named: Backend | undefined, precision: Precision): Promise<void> {
  const fix =
    `compile with backend: "webgpu" on a device with shader-f16, or with precision: "f32"`;
  if (!named) {
    throw new KilnError(`precision "${precision}" needs a named backend`, {
      code: "unsupported",
      fix,
    });
  }
  await named.prepare();
  if (!named.capabilities().f16) {
    throw new KilnError(
      `Backend "${named.id}" (${named.capabilities().name}) cannot store f16 natively, which ` +
        `precision "${precision}" needs`,
      { code: "unsupported", fix },
    );
  }
}

/**
 * Per backend, the rates its placement is estimated with. Only the cost-driven policies calibrate
 * (once per machine, persisted); the others use rates already known, if any.
 */
async function ratesOf(backends: readonly Backend[], policy: Policy): Promise<BackendRates[]> {
  if (policy.kind !== "auto" && policy.kind !== "min-cost") {
    return backends.map((b) => knownRates(b) ?? UNKNOWN_RATES);
  }
  return await Promise.all(
    backends.map((b) =>
      backendRates(b, (graph: Graph) => compile(graph, { backend: b, cache: false }))
    ),
  );
}

/** Whether `input` is a graph (by shape: a graph of another copy of kiln's modules counts). */
function isGraph(input: unknown): input is Graph {
  const g = input as Partial<Graph> | undefined;
  return typeof g?.hash === "function" && Array.isArray(g.nodes) && Array.isArray(g.outputs);
}

/** The error of a `compile` given something other than a graph (a fusion plan, a builder). */
function notAGraph(input: unknown): KilnError {
  const kernels = (input as { kernels?: unknown })?.kernels !== undefined;
  return new KilnError(
    `compile() takes a Graph, got ${kernels ? "fuse()'s kernel plan" : typeof input}`,
    {
      code: "bad-input",
      fix: kernels
        ? "pass the graph itself: compile() fuses it (fuse() is for inspecting the plan)"
        : "build a Graph (GraphBuilder.build(), importOnnx, or a Tensor's graph) and pass it",
    },
  );
}
