/**
 * `compile(graph, options)`: the pipeline's entry, in four named phases — prepare (random ops,
 * precision, f64) → legalize → fuse ({@linkcode fuseFor}) → place (`schedule/place.ts`: the cost
 * model, and under auto a timed trial) → build (`runtime/build.ts`: codegen through the kernel
 * cache, then one program) → {@linkcode Executable}. A backend without a kernel-IR code generator
 * gets the legalized graph through its own `compile` instead.
 *
 * @module
 */
import type { Backend, BackendSet, DeviceProfile } from "./runtime/backend.ts";
import { type BackendRates, backendRates, knownRates } from "./schedule/cost_model.ts";
import { checkOptions, KilnError } from "./support/errors.ts";
import { Executable, settleCompile } from "./runtime/executable.ts";
import { reporter } from "./runtime/progress.ts";
import { splitReductions } from "./passes/split_reductions.ts";
import { rowsFirst } from "./passes/rows_first.ts";
import { joinedProducts } from "./passes/joined_products.ts";
import { winogradConvs, type WinogradOptions } from "./passes/winograd.ts";
import { joinedIntegerProducts } from "./passes/joined_integer_products.ts";
import { byteProducts } from "./passes/byte_products.ts";
import { packedRows } from "./passes/packed_rows.ts";
import { scalesOut } from "./passes/scales_out.ts";
import { foldEmpty } from "./passes/fold_empty.ts";
import { constantsLaidOut } from "./passes/constant_views.ts";
import { sharedNodes } from "./passes/shared_nodes.ts";
import { fuse, type FuseOptions } from "./passes/fuse.ts";
import { packedConstants } from "./passes/packed_constants.ts";
import { checkGraph, type Graph } from "./ir/graph.ts";
import { defaultKernelCache, type KernelCache, kernelCacheOf } from "./runtime/kernel_cache.ts";
import { checkInputsOn, expectedRuns } from "./schedule/placement_hints.ts";
import { legalize } from "./passes/legalize.ts";
import { decompose } from "./passes/decompose.ts";
import { planMemory } from "./schedule/memory_plan.ts";
import { donatedValues, inPlaceKernels } from "./schedule/in_place.ts";
import { checkedPolicy, policyOf } from "./schedule/policy.ts";
import { type Policy, UNKNOWN_RATES, usableBackends } from "./schedule/schedule.ts";
import { place } from "./schedule/place.ts";
import { buildExecutable, type FusedCompile } from "./runtime/build.ts";
import { Variants } from "./runtime/specialize.ts";
import { count } from "./runtime/counters.ts";
import { planBuckets } from "./schedule/buckets.ts";
import {
  applyPrecision,
  checkPrecision,
  narrowF64,
  type Precision,
  type Widened,
} from "./passes/precision.ts";
import { type DrawnInput, hoistRandom } from "./passes/random_inputs.ts";
import { type Int64Mode, lowerInt64 } from "./passes/int64.ts";
import { COMPILE_OPTIONS, type CompileOptions } from "./compile_options.ts";

export type { CompileOptions, WorkloadHint } from "./compile_options.ts";

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
 * Compiles `graph` into an {@linkcode Executable}: prepared (random ops hoisted, precision
 * applied), legalized, fused, placed and built — or, for a graph-level backend, handed to its
 * own `compile`.
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
  checkGraph(input, "compile()");
  // A misspelt option had been ignored (`precison: "f16"` compiled in f32).
  checkOptions(options, COMPILE_OPTIONS, "compile()");
  const start = performance.now();
  // A bad precision is refused before any device is acquired.
  const precision = checkPrecision(options.precision);
  // So is a cache option that is not one.
  const cache = kernelCacheOf(options.cache);
  const chosen = chosenBackend(options);
  // A named kernel backend is prepared first: what it supports, and how its graph is rewritten
  // (products over bytes where its code has byte dots), can depend on its device.
  if (chosen.named?.codegen && options.fuse !== false) await chosen.named.prepare();
  // Auto's candidates too. Capabilities are only known once a device is acquired (a software
  // GPU, binding limits): whether a device is a software one decides the rewrites, and fusion
  // reads their limits (unprepared, a process's first compile fused for no device limit and the
  // next ones for the device's). One that fails to prepare is left out by its profile, not by an
  // exception here.
  if (!chosen.named) {
    await Promise.all((chosen.registry?.list() ?? []).map((b) => b.prepare().catch(() => {})));
  }
  const prepared = prepare(input, options, { ...chosen, precision });
  // Checked here, where a graph-level backend (which writes over nothing) would skip fusion.
  donatedValues(options.donate, prepared.graph, options.state);
  const { named, registry } = prepared;
  const whole = (b: Backend, legal: Graph, reason?: string) =>
    wholeGraph(prepared, { backend: b, legal, reason, start });
  if (named?.compile && (!named.codegen || options.fuse === false)) {
    return await whole(named, legalize(prepared.graph, named, registry));
  }
  // A named backend is prepared first: what it supports can depend on its device's limits.
  await named?.prepare();
  const legal = named ? legalize(prepared.graph, named, registry) : prepared.graph;
  const policy: Policy = named
    ? { kind: "named", backend: named.id }
    : typeof options.policy === "string"
    ? policyOf(options.policy)
    : checkedPolicy(options.policy ?? { kind: "auto" });
  const candidates = named ? [named] : registry!.list();
  checkInputsOn(options.inputsOn, legal);
  const inputsOn = new Map(
    legal.inputs.flatMap((i) => {
      const id = options.inputsOn?.[i.name];
      return id === undefined ? [] : [[i.value, id] as const];
    }),
  );
  const holding = new Set(inputsOn.values());
  const fused = fuseFor(prepared, { legal, candidates, start, holding, cache });
  const outputs = new Set(legal.outputs.map((o) => o.value));
  const exe = await place({
    legal,
    fusion: fused.fusion,
    candidates,
    inputsOn,
    runs: expectedRuns(options.workload),
    usable: usableBackends(fused.fusion.kernels, candidates, policy, outputs, holding),
    policy,
    named: named !== undefined,
    stateful: options.state !== undefined,
    bucketed: fused.buckets !== undefined,
    notes: cache || defaultKernelCache(),
    start,
  }, {
    build: (placed) => buildExecutable(fused, placed),
    // The host's plan and the device's are each compiled as if named, fused for their own
    // limits: fused for Dawn's 8 bindings, auto's host plans of gru_bi and lstm2 had 31 and 51
    // kernels against wasm's own 24 and 47, and ran 1.23-1.27x as long.
    compileAs: async (backend, reason) => {
      const exe = await compile(input, { ...options, backend });
      settleCompile(exe, { reason });
      return exe;
    },
    wholeGraph: whole,
    rates: ratesOf,
  });
  // Local-first follows the inputs: a run that gives them on a device runs a variant placed there.
  if (policy.kind === "local-first") {
    const variant = (on: Readonly<Record<string, string>>) =>
      compile(input, { ...options, inputsOn: on });
    settleCompile(exe, { variants: new Variants(variant, options.inputsOn) });
  }
  return exe;
}

/** A graph made ready for legalization, and the backends it may run on. */
interface Prepared {
  /**
   * The graph: random ops hoisted into drawn inputs, empty tensors folded, scalar scales moved
   * past their products, gathered rows picked before their products, precision applied.
   */
  readonly graph: Graph;
  readonly drawn: DrawnInput[];
  readonly widened?: Widened;
  /** The backend the caller named, if any. */
  readonly named?: Backend;
  /** Where the others are found (none when an instance was passed without one). */
  readonly registry?: BackendSet;
  readonly options: CompileOptions;
}

/** The graph rewrites of {@linkcode prepare}, by input graph and how (see {@linkcode rewrittenOf}). */
const REWRITTEN = new WeakMap<
  Graph,
  Map<string, { readonly graph: WeakRef<Graph>; readonly drawn: DrawnInput[] }>
>();

/** A graph rewritten for compiling, and the random inputs it draws. */
interface Rewritten {
  readonly graph: Graph;
  readonly drawn: DrawnInput[];
}

/**
 * `input` with random ops hoisted into drawn inputs, empty tensors folded, constants laid out
 * once (where `fused`, transposed convolutions written out first), 3×3 convolutions as
 * Winograd's F(m×m, 3×3) where `winograd` says, repeated nodes computed once, scalar scales moved
 * past their products and large reductions to a few values split in two (not in the exact
 * precision: both regroup a rounding), gathered rows picked before their products,
 * where `join`, products (and integer products) of one A joined and, where `bytes`, quantized
 * products written over bytes. Shared while one is alive: auto's compile and the named compile it
 * places into rewrite the same graph (joining BERT-base's products copies 85 MB of weights, 56 ms
 * of auto's first result on the H200 host).
 */
function rewrittenOf(
  input: Graph,
  how: {
    exact: boolean;
    join: boolean;
    int64: Int64Mode;
    fused: boolean;
    bytes: boolean;
    /**
     * Few-row products over A rounded to 8 bits read it packed or round it themselves
     * (`DeviceProfile.packedRows`, `roundingProducts`), or neither.
     */
    rows?: "packed" | "rounded";
    winograd?: WinogradOptions;
  },
): Rewritten {
  const winograd = how.winograd && `${how.winograd.minChannels}/${how.winograd.tile}`;
  const key =
    `${how.exact} ${how.join} ${how.int64} ${how.fused} ${how.bytes} ${how.rows} ${winograd}`;
  let byHow = REWRITTEN.get(input);
  if (!byHow) REWRITTEN.set(input, byHow = new Map());
  const entry = byHow.get(key), kept = entry?.graph.deref();
  if (kept) return { graph: kept, drawn: entry!.drawn };
  const { graph: drawing, drawn } = hoistRandom(lowerInt64(input, how.int64));
  const constant = sharedNodes(constantsLaidOut(foldEmpty(drawing), how.fused));
  const laid = how.winograd ? winogradConvs(constant, how.winograd) : constant;
  const scaled = how.exact ? laid : scalesOut(laid);
  const rows = rowsFirst(how.exact ? scaled : splitReductions(scaled));
  const joined = how.join ? joinedIntegerProducts(joinedProducts(rows)) : rows;
  // Over bytes after the joins: a joined integer product's weights are one constant.
  const bytes = how.bytes ? byteProducts(joined) : joined;
  const graph = how.rows
    ? packedRows(bytes, how.rows === "rounded" ? { roundsUpTo: Infinity, packs: false } : {})
    : bytes;
  // Held weakly: the rewritten graph lives as long as a compile or an executable holds it.
  byHow.set(key, { graph: new WeakRef(graph), drawn });
  return { graph, drawn };
}

/** How few-row products over A rounded to 8 bits take A on a backend of `profile`. */
function rowsOf(profile: DeviceProfile | undefined): "packed" | "rounded" | undefined {
  return profile?.packedRows ? "packed" : profile?.roundingProducts ? "rounded" : undefined;
}

/** The backend `options` name (none: auto) and the registry the compile draws on. */
function chosenBackend(options: CompileOptions): Pick<Prepared, "named" | "registry"> {
  // Unfused compiles run node by node on one backend: the reference unless one is named.
  const id = options.backend ?? (options.fuse === false ? "reference" : undefined);
  // A backend instance needs no registry (it only widens the suggestions of a legalize error).
  const registry = options.registry ?? (typeof id === "object" ? undefined : registeredBackends());
  const named = typeof id === "object" ? id : id === undefined ? undefined : registry!.get(id);
  return { named, registry };
}

/**
 * `input` prepared for `options` (their `precision` checked), the named backend checked for what
 * the compile asks of it.
 */
function prepare(
  input: Graph,
  options: CompileOptions,
  { named, registry, precision }: Pick<Prepared, "named" | "registry"> & { precision: Precision },
): Prepared {
  // Joined products pay on a GPU (more tiles, fewer dispatches); on a CPU they measured the same
  // and would hold their weights twice beside the caller's graph.
  const join = !named || named.kind === "gpu";
  // int64 in f64 where the backend has it (auto places f64 kernels on the CPU), else in i32.
  const int64 = !named || named.capabilities().f64 ? "f64" : "i32";
  const fused = options.fuse !== false;
  const { graph: joined, drawn } = rewrittenOf(input, {
    exact: precision === "exact",
    join,
    int64,
    fused,
    // Quantized products over bytes where the named backend multiplies them exactly.
    bytes: fused && precision !== "exact" && named?.capabilities().byteDot === true,
    // A packed by its producer, or rounded by the products, where the named backend's block
    // products read it so; in f32 only (the rounding takes f32 A).
    rows: fused && precision === "f32" ? rowsOf(named?.capabilities()) : undefined,
    // Winograd's convolutions where the backends compute them faster, in f32 only: a rounding of
    // their own (not in the exact precision), and under f16 the transformed tiles, stored in 16
    // bits, took a 64-channel conv on wasm from 4.4e-4 to 4.2e-3 of its largest output.
    winograd: fused && precision === "f32"
      ? winogradOf(named ? [named] : registry?.list() ?? [])
      : undefined,
  });
  const { graph, widened } = withoutF64(
    applyPrecision(joined, precision),
    named,
    options.narrowF64 ?? false,
  );
  if (precision === "exact") exactDTypes(graph);
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
  return { graph, drawn, widened, named, registry, options };
}

/**
 * The Winograd rewrite the backends that may run the kernels ask for: where every compiled
 * backend with a hardware device asks for it (auto on a CPU-only machine: wasm alone), the first
 * one's; none where one does not (a GPU's products are faster direct) or none is there. Software
 * devices and interpreters run nothing another backend runs (`usableBackends`), and a device not
 * acquired (no adapter) reports no buffer size and runs nothing. The candidates are prepared.
 */
function winogradOf(candidates: readonly Backend[]): WinogradOptions | undefined {
  const running = candidates.filter((b) => b.codegen).map((b) => b.capabilities())
    .filter((p) => !p.software && !p.interpreter && p.maxStorageBufferBytes > 0);
  const minChannels = running[0]?.winogradChannels;
  if (minChannels === undefined || running.some((p) => p.winogradChannels === undefined)) {
    return undefined;
  }
  return { minChannels, tile: running[0].winogradTile };
}

/**
 * Refuses a graph the exact precision does not cover: its kernels are f32 (f64 and integers
 * compute the reference's way already), and an f16 tensor's products and sums round in ways the
 * backends' f16 paths do not share.
 */
function exactDTypes(graph: Graph): void {
  const half = graph.values.find((v) => v.dtype === "f16");
  if (!half) return;
  throw new KilnError(`The exact precision computes f32 graphs; "${half.name}" is f16`, {
    code: "unsupported",
    fix: 'cast the model to f32 (its f16 inputs become f32 ones), or compile with precision "f16"',
  });
}

/** The executable of a graph-level backend running the whole graph (`legal` for it). */
async function wholeGraph(
  prepared: Prepared,
  how: { backend: Backend; legal: Graph; reason?: string; start: number },
): Promise<Executable> {
  const { options } = prepared;
  if (options.buckets?.length) {
    throw new KilnError("Shape buckets need the fused path", {
      code: "unsupported",
      fix: "compile with fusion on a kernel-IR backend, or without buckets",
    });
  }
  await how.backend.prepare();
  const program = await how.backend.compile!(how.legal, { name: "graph" });
  count("kiln_compiles_total");
  count("kiln_compile_ms_total", performance.now() - how.start);
  return new Executable({
    graph: prepared.graph,
    backend: how.backend,
    program,
    compileMs: performance.now() - how.start,
    state: options.state,
    donate: options.donate,
    widened: prepared.widened,
    drawn: prepared.drawn,
    reason: how.reason,
  });
}

/** `legal` fused for the tightest binding limit among `candidates`, with what building needs. */
function fuseFor(
  prepared: Prepared,
  at: {
    legal: Graph;
    candidates: readonly Backend[];
    start: number;
    holding?: Set<string>;
    /** The compile's kernel cache (`false`: none). */
    cache: KernelCache | false;
  },
): FusedCompile {
  const { options, named } = prepared;
  const { legal, candidates, holding } = at;
  // Auto's candidates were prepared before the rewrites (see `compile`).
  // Kernels must fit the tightest binding limit among the backends that may run them (one
  // binding is kept for the output). A software device runs nothing where another backend runs
  // every kernel (see `usableBackends`): its limit split lstm2's 47 kernels into 51 on the
  // 2-core VM, all of them then run on wasm.
  const runs = (b: Backend) =>
    named !== undefined || !b.capabilities().software || (holding?.has(b.id) ?? false);
  const limits = candidates.filter((b) => b.codegen && b.capabilities().maxBindings > 0 && runs(b))
    .map((b) => b.capabilities().maxBindings - 1);
  const report = reporter(options.onProgress);
  report({ phase: "fuse", done: 0, total: 1 });
  // A software device that runs nothing here asks for no stored keys (the CPU path stays).
  const generated = candidates.filter((b) => b.codegen).map((b) =>
    runs(b) ? b.capabilities() : { ...b.capabilities(), storedKeys: undefined }
  );
  const maxInputs = limits.length ? Math.min(...limits) : Infinity;
  const exact = options.precision === "exact";
  const donated = donatedValues(options.donate, legal, options.state);
  const fused = fuse(legal, { maxInputs, ...fusionFor(generated), exact, donated });
  // 8-bit intermediates four to a word only where every backend that may run them holds them so.
  const intermediates = generated.length > 0 && generated.every((p) => p.packedIntermediates);
  const outputs = legal.outputs.map((o) => o.value);
  const packed = packedConstants(fused, outputs, { intermediates });
  const fusion = { ...packed, kernels: inPlaceKernels(packed.kernels, donated, new Set(outputs)) };
  report({ phase: "fuse", done: 1, total: 1 });
  const external = new Set([...outputs, ...fusion.constants.keys()]);
  return {
    graph: prepared.graph,
    legal,
    fusion,
    byId: new Map(candidates.map((b) => [b.id, b])),
    fallback: candidates[0],
    cache: at.cache || undefined,
    memory: planMemory(fusion.kernels, external),
    buckets: options.buckets?.length
      ? planBuckets(legal, fusion.kernels, options.buckets)
      : undefined,
    widened: prepared.widened,
    drawn: prepared.drawn,
    state: options.state,
    donate: options.donate,
    start: at.start,
    report,
    generated: new Map(),
  };
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
  if (!named || named.capabilities().f64) return prepared;
  // A composite asked to compute in f64 (Attention's softmax_precision) is written out first:
  // its f64 values are narrowed, or refused, as any other's.
  const graph = decompose(prepared.graph, (info) => Object.values(info.attrs).includes("f64"));
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

/**
 * The fusion choices that depend on the generators that may run a kernel (`profiles`: every
 * candidate's): integer products as one kernel only where all have integer dot products (else
 * exact float chunks); few-row products' elementwise operands inline unless one would take them
 * stored; block products tagged under every placement but where a backend would take their
 * unpacking stored, as the tag's kernel carries it inline: what a GPU reads well, and what the
 * generators that know the tag never evaluate (a decoder compiled `auto` on a GPU machine
 * otherwise unpacked every 4-bit weight into f32 buffers every step); a weight unpacked for more
 * rows tagged where some generator knows that tag (elsewhere the kernel stays plain, free to
 * merge with its neighbours).
 */
export function fusionFor(
  profiles: readonly DeviceProfile[],
): Pick<
  FuseOptions,
  | "integerDot"
  | "inlineOperands"
  | "blockProducts"
  | "blockUnpacks"
  | "blockPrologues"
  | "keptStores"
  | "combinedRanges"
  | "roundingProducts"
  | "integerBlockRows"
  | "patchesFrom"
  | "splitSums"
  | "halfPatches"
  | "keysFrom"
> {
  const all = (has: (p: DeviceProfile) => boolean | undefined) =>
    profiles.length > 0 && profiles.every((p) => has(p) ?? false);
  return {
    // Dots of every kind where every backend has them, of bytes where all have those at least.
    integerDot: all((p) => p.integerDot === true) || (all((p) => !!p.integerDot) && "bytes"),
    inlineOperands: !profiles.some((p) => p.storedOperands),
    blockProducts: all((p) => p.blockProducts || !p.storedOperands),
    blockUnpacks: profiles.some((p) => p.blockProducts),
    // Only where every candidate computes A itself: a backend that cannot would find it unstored.
    blockPrologues: all((p) => p.blockPrologues),
    // A kept store's other branch inline only where every candidate computes it at its writes.
    keptStores: all((p) => p.keptStores),
    combinedRanges: all((p) => p.combinedRanges),
    // Products that round A themselves, where every candidate's kernels do (`packed_rows.ts`).
    roundingProducts: all((p) => p.roundingProducts),
    // A plan whose kernels may land on several backends takes the fewest rows any of them wants.
    integerBlockRows: profiles.length
      ? Math.min(...profiles.map((p) => p.integerBlockRows ?? 4))
      : 4,
    // Patches are stored only where every candidate wants them: they cost memory and a pass.
    patchesFrom: all((p) => p.storedPatches !== undefined)
      ? Math.max(...profiles.map((p) => p.storedPatches!))
      : Infinity,
    splitSums: all((p) => p.splitSums),
    // Where every candidate has matrix units (an f16 plan's GPU kernels then run on them).
    halfPatches: all((p) => p.matrixUnits),
    // Keys are stored where any candidate that runs work wants them (auto on a GPU machine runs
    // its attention there): the copy is one pass over the keys, a small share of any attention's.
    keysFrom: Math.min(Infinity, ...profiles.flatMap((p) => p.storedKeys ?? [])),
  };
}
