/**
 * The WebAssembly backend (id `wasm`, kind `cpu-simd`): kernels generated from the kernel IR
 * (`shaders/wasm/codegen.ts`) by kiln's own module encoder (`shaders/wasm/encoder.ts`), compiled by the runtime's
 * WebAssembly engine, and run in one memory arena per program (`arena_program.ts`). Kernels use
 * f32x4 SIMD where their accesses allow; large ones split their rows over worker threads sharing
 * the arena (`worker_crew.ts`).
 *
 * @module
 */
import type {
  Artifact,
  AssemblyPlan,
  Backend,
  BackendKind,
  DeviceProfile,
  KernelCodegen,
  NodeInfo,
  PreparedKernel,
} from "../../jit/runtime/backend.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { customArtifact, customKernel, kernelOps } from "../../jit/runtime/custom_op.ts";
import { runsWhole } from "../../jit/passes/fusable.ts";
import { bindingsOf as planOf } from "../../jit/runtime/program.ts";
import { allocate, type BoundaryDType, internalDType } from "../../jit/ir/dtype.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import { ArenaStorage } from "./arena_storage.ts";
import { checkOptions, KilnError } from "../../jit/support/errors.ts";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { erf, pow } from "../reference/scalar_math.ts";
import { type ArenaPlan, arenaProgram } from "./arena_program.ts";
import { Shares } from "./arena_share.ts";
import { threadsOfProgram } from "./splits.ts";
import { OptimizingTier, type TierOptions } from "./optimizing_tier.ts";
import { warmedAtSecondRun, warmUpBudget } from "./warm_up.ts";
import { generateWasm } from "../../shaders/wasm/codegen.ts";
import { wasm } from "../../shaders/wasm/encoder.ts";
import { WorkerPool, type WorkerThreads } from "./worker_crew.ts";
import { readingWords, zeroHoldings } from "./held_zeros.ts";
import { denoWorkers, webWorkers } from "./web_workers.ts";

/**
 * Least channels of the 3×3 convolutions wasm computes as Winograd's F(4×4, 3×3)
 * (`jit/passes/winograd.ts`). `bench/winograd_convs.ts --tile 4` (one conv with its bias and Relu,
 * batch 1, Winograd ÷ direct, runs interleaved): on the 2-core VM 32 channels at 112×112 1.17,
 * 64 at 56×56 0.96, 128 at 28×28 0.68, 256 at 14×14 0.66, 512 at 7×7 0.70; on the H200 host's 16
 * threads 1.14, 0.93, 0.76, 0.66, 0.55. F(2×2, 3×3) there: 1.38, 1.15, 0.83, 0.78, 0.77 and 1.26,
 * 1.09, 0.95, 0.74, 0.71.
 */
const WINOGRAD_CHANNELS = 64;

/**
 * Outputs a side of wasm's Winograd tiles: F(4×4, 3×3), whose product takes 2.25 multiply-adds an
 * output and channel where F(2×2, 3×3) takes 4. ResNet-50 b1, `bench/winograd_convs.ts MODEL`:
 * 2-core VM 0.87-0.90 of the direct form's time (F(2×2) 0.90-0.92), 16 threads of the H200 host
 * 0.89-0.90 (0.92-0.93); ResNet-50 b8 on 16 threads 0.92 (0.98). Its U holds 36 values a filter
 * where the 3×3 weights held 9 (F(2×2): 16): ResNet-50 b1's process peaked at 721 MB resident
 * against 425 MB direct on the VM.
 */
const WINOGRAD_TILE: 2 | 4 = 4;

let workers: Promise<WorkerThreads | undefined> | undefined;

/**
 * Compiles a kernel's module. Synchronously where the engine allows: Deno's async
 * `WebAssembly.compile` optimizes eagerly and resolves only after ~300 ms even for a 2 KB module,
 * while a synchronous compile (lazy, baseline tier first) takes 0.2 ms. The price: V8 tiers a
 * small model's kernels up only after some 100 runs (the shared mlp runs 0.5 ms, then 0.16 ms).
 * Swapping in an async compile's modules when they arrive does not work either: the promise
 * settles only when the event loop turns, which a loop of awaited runs never does. Browsers
 * refuse synchronous compiles of larger modules on their main thread (a RangeError); those go
 * async.
 */
function compileModule(bytes: Uint8Array<ArrayBuffer>): Promise<WebAssembly.Module> {
  try {
    return Promise.resolve(new WebAssembly.Module(bytes));
  } catch (e) {
    if (e instanceof RangeError) return WebAssembly.compile(bytes);
    throw e;
  }
}

let relaxed: boolean | undefined;

/** Whether the engine compiles relaxed SIMD (checked once, on a module of one multiply-add). */
export function hasRelaxedSimd(): boolean {
  if (relaxed === undefined) {
    const m = new wasm.Module(), zero = () => m.f32x4.splat(m.f32.const(0));
    m.addFunction("f", wasm.none, wasm.v128, [], m.f32x4.relaxed_madd(zero(), zero(), zero()));
    relaxed = m.validate();
  }
  return relaxed;
}

let byteDot: boolean | undefined;

/**
 * Whether the engine's relaxed byte dot product (`i32x4.relaxed_dot_i8x16_i7x16_add_s`) is exact
 * for unsigned bytes past 127 (checked once, on the lanes that tell the lowerings apart): the
 * proposal leaves it to the engine whether such a byte is signed and whether pairs of products
 * saturate in 16 bits. x86's VNNI (`vpdpbusd`) computes it exactly; V8's lowering without VNNI
 * (`pmaddubsw`) saturates, and ARM's signed dot reads 255 as −1.
 */
export function exactByteDot(): boolean {
  // Signed −128, −128, −1, 5 by unsigned 255, 255, 200, 1: −65475 exactly; a pair saturated in
  // i16 gives −32768 − 195, and 255 and 200 read as signed 307.
  byteDot ??= hasRelaxedSimd() && engineByteDot([-128, -128, -1, 5], [255, 255, 200, 1]) === -65475;
  return byteDot;
}

/**
 * The engine's relaxed byte dot product of four signed bytes `a` by four unsigned bytes `b` (one
 * i32 lane's sum; an engine without relaxed SIMD cannot compile it).
 */
export function engineByteDot(a: readonly number[], b: readonly number[]): number {
  const m = new wasm.Module();
  const lanes = (x: readonly number[]) =>
    m.v128.const([...Array(4)].flatMap(() => x.map((v) => v & 255)));
  const dot = m.i32x4.relaxed_dot_i8x16_i7x16_add_s(
    lanes(a),
    lanes(b),
    m.i32x4.splat(m.i32.const(0)),
  );
  m.addFunction("f", wasm.none, wasm.i32, [], m.i32x4.extract_lane(dot, 3));
  m.addFunctionExport("f", "f");
  const bytes = m.emitBinary() as Uint8Array<ArrayBuffer>;
  return (new WebAssembly.Instance(new WebAssembly.Module(bytes)).exports.f as () => number)();
}

/**
 * Deno's own workers, else `node:worker_threads` (Node, or a Deno whose workers cannot be
 * unref'd; the specifier is kept from bundlers), else a cross-origin isolated page's Web Workers,
 * else `undefined` (one thread).
 */
async function workerThreads(): Promise<WorkerThreads | undefined> {
  const own = denoWorkers();
  if (own) return own;
  const specifier = ["node", "worker_threads"].join(":");
  try {
    const { Worker, MessageChannel } = await import(specifier);
    return { Worker, MessageChannel };
  } catch {
    return webWorkers();
  }
}

/** The machine's core count from `node:os` (Node without navigator), if it can be had. */
async function cores(): Promise<number | undefined> {
  try {
    const os = await import(["node", "os"].join(":"));
    const n = os.availableParallelism?.() ?? os.cpus().length;
    return Number.isInteger(n) && n >= 1 ? n : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Threads the backend uses by default on `cores` cores: all of them up to 4, a quarter fewer
 * beyond. The workers spin through a run, so every thread of ours holds a core; V8's compiler
 * and GC threads then preempt one of them for a scheduler tick (4 ms), and a run waits for the
 * piece that thread holds. On the 16-core H200 host (140 runs each, 2026-11-24), 12 threads
 * against 16: runs over twice the median 2-5 in 100 against 6-15, medians equal or lower
 * (transformer_block 0.47 against 0.49 ms, vit_tiny 1.33 against 1.36, unet 0.81 against 0.85);
 * 8 threads lost on vit_tiny (1.85 ms).
 */
export function threadsFor(cores: number): number {
  return cores <= 4 ? cores : cores - Math.floor(cores / 4);
}

/** Host functions kernels import: the reference backend's own scalar semantics. */
export const HOST_FUNCTIONS: Readonly<Record<string, (...args: number[]) => number>> = {
  exp: Math.exp,
  log: Math.log,
  erf,
  sin: Math.sin,
  cos: Math.cos,
  pow,
  fmod: (a, b) => a % b,
};

/** Options of {@linkcode WasmBackend}. */
export interface WasmBackendOptions {
  /**
   * Threads for large kernels, the calling one included (default: one per core up to 4 cores,
   * a quarter fewer beyond — see {@linkcode threadsFor} — and every core for a program of 2^32
   * element-operations or more, whose runs lose less to a preempted worker than they gain; cores from
   * `navigator.hardwareConcurrency`, or on Node 20, which has no navigator, `node:os`'s
   * `availableParallelism()` once `prepare()` has run). Threads need `SharedArrayBuffer` and
   * workers: Deno's own workers, `node:worker_threads` (Node) or, in a cross-origin isolated page,
   * Web Workers; where either is missing kernels run on the calling thread. Programs with a large
   * kernel share one process-wide pool per backend, which spawns the workers its programs take
   * (`unref`'d: they never keep the process alive).
   */
  readonly threads?: number;
  /**
   * Time every kernel of a run on the host clock (`Executable.deviceTimes()`, `explain`'s
   * measured column). Off by default: it adds two clock reads per kernel.
   */
  readonly profile?: boolean;
  /**
   * Most milliseconds a compiled program spends running on zeros at its second run, before the
   * caller's (default 100; 0 turns it off; see `warm_up.ts`). V8 runs a module's code unoptimized
   * until each function has executed enough, so a small model's kernels stayed slow for its first
   * 50-250 runs (resnet_block 0.55 ms a run over runs 4-24, 0.19 ms later, on 16 cores). The
   * warm-up runs on the calling thread alone, where V8 counts all of a kernel's work toward its
   * tier-up; it stops early once runs got faster.
   */
  readonly warmUpMs?: number;
  /**
   * Re-emit each module of a program that has run often through Binaryen's optimizer in a
   * worker and swap it in when ready (`true`, or when and how: see {@linkcode TierOptions}).
   * Off by default: Binaryen made no measured kernel faster (`optimizing_tier.ts`).
   */
  readonly optimizingTier?: boolean | TierOptions;
  /**
   * Whether quantized products of 8-bit activations run on relaxed SIMD's byte dot product, four
   * multiply-adds a lane (default: where the engine computes it exactly, {@linkcode exactByteDot}).
   * `true` forces it: its sums are then exact only while the unsigned bytes stay below 128 or the
   * engine is exact (tests use it on machines without VNNI).
   */
  readonly byteDot?: boolean;
  /**
   * Least input and output channels of the 3×3 convolutions of stride 1 computed as Winograd's
   * F(m×m, 3×3) (default 64, where it measured faster; `Infinity`: never).
   */
  readonly winogradChannels?: number;
  /** Outputs a side of their Winograd tiles, m: F(2×2, 3×3) or F(4×4, 3×3) (default 4). */
  readonly winogradTile?: 2 | 4;
}

/** The keys of {@linkcode WasmBackendOptions}: a misspelt one is refused (`checkOptions`). */
const WASM_OPTIONS: readonly (keyof WasmBackendOptions)[] = [
  "threads",
  "profile",
  "warmUpMs",
  "optimizingTier",
  "byteDot",
  "winogradChannels",
  "winogradTile",
];

/** The WebAssembly backend. */
export class WasmBackend implements Backend {
  /** Always `"wasm"`. */
  readonly id: string = "wasm";
  /** Code generator revision: the kernel cache keys on it, so bump it whenever generated code changes. */
  readonly version: string = "0.7.24";
  /** CPU with WebAssembly. */
  readonly kind: BackendKind = "cpu-simd";
  /** A CPU is never lost. */
  readonly deviceLost: boolean = false;
  #threads: number;
  /** Threads of the heaviest programs (see `threadsOfProgram`): every core. */
  #most: number;
  #workers?: WorkerThreads;
  #fma = false;
  #byteDot?: boolean;
  #winograd: number;
  #winogradTile: 2 | 4;
  #profile: boolean;
  #warmUpMs: number;
  #countCores = false;
  #tier?: OptimizingTier;
  /** Programs of one model share a memory and their weights' bytes in it (`arena_share.ts`). */
  #shares?: Shares;

  /** A backend; see {@linkcode WasmBackendOptions}. */
  constructor(options: WasmBackendOptions = {}) {
    checkOptions(options, WASM_OPTIONS, "WasmBackend");
    const cores = globalThis.navigator?.hardwareConcurrency ?? 1;
    const threads = options.threads ?? threadsFor(cores);
    if (!Number.isInteger(threads) || threads < 1) {
      throw new KilnError(`WasmBackend: threads must be a positive integer, got ${threads}`, {
        code: "out-of-range",
        fix: "pass threads: 1 or more (or leave it out for one per core)",
      });
    }
    this.#threads = typeof SharedArrayBuffer === "function" ? threads : 1;
    this.#most = options.threads === undefined ? Math.max(this.#threads, cores) : this.#threads;
    // Node before 21 has no navigator: prepare() asks node:os how many cores there are.
    this.#countCores = options.threads === undefined && globalThis.navigator === undefined &&
      typeof SharedArrayBuffer === "function";
    this.#byteDot = options.byteDot;
    this.#winograd = options.winogradChannels ?? WINOGRAD_CHANNELS;
    if (!(this.#winograd > 0)) {
      throw new KilnError(
        `WasmBackend: winogradChannels must be above 0, got ${options.winogradChannels}`,
        {
          code: "out-of-range",
          fix: "pass the least channels to compute as Winograd (64 by default), or Infinity: never",
        },
      );
    }
    this.#winogradTile = options.winogradTile ?? WINOGRAD_TILE;
    if (this.#winogradTile !== 2 && this.#winogradTile !== 4) {
      throw new KilnError(`WasmBackend: winogradTile must be 2 or 4, got ${options.winogradTile}`, {
        code: "out-of-range",
        fix: "pass winogradTile: 2 (F(2×2, 3×3)) or 4 (F(4×4, 3×3))",
      });
    }
    this.#profile = options.profile ?? false;
    this.#warmUpMs = options.warmUpMs ?? 100;
    if (!(this.#warmUpMs >= 0)) {
      throw new KilnError(`WasmBackend: warmUpMs must be 0 or more, got ${options.warmUpMs}`, {
        code: "out-of-range",
        fix: "pass warmUpMs: 0 (off) or a number of milliseconds",
      });
    }
    const tier = options.optimizingTier;
    this.#tier = tier ? new OptimizingTier(tier === true ? {} : tier) : undefined;
    // deno-lint-ignore no-this-alias
    const backend = this;
    this.codegen = {
      get format() {
        const shared = backend.#threads > 1 ? "-shared" : "", fma = backend.#fma ? "-fma" : "";
        return `wasm-12${shared}${fma}${backend.#bytes() ? "-dot8" : ""}`;
      },
      // In a promise's callback, so a refusal rejects rather than throws.
      generate: (kernel: KernelIR): Promise<Artifact> =>
        Promise.resolve().then(() => {
          if (kernel.opaque) {
            return customKernel(kernel.opaque.op, this.id)
              ? customArtifact(this.id, kernel.opaque, kernel, {
                artifact: "bytes",
                shared: this.#threads > 1,
              })
              : new Uint8Array();
          }
          this.#startPool();
          return generateWasm(wasm, kernel, {
            shared: this.#threads > 1,
            fma: this.#fma,
            byteDot: this.#bytes(),
          });
        }),
      load: async (kernel: KernelIR, artifact: Artifact): Promise<PreparedKernel> => {
        const module = await compileModule(artifact as Uint8Array<ArrayBuffer>);
        return this.#single(kernel, module);
      },
      assemble: async (plan) => {
        // Kernels with the same artifact (a repeated block) share one module: compiled once,
        // and tiered up once for all of them.
        const compiled = new Map<unknown, Promise<WebAssembly.Module>>();
        const sources = new Map<WebAssembly.Module, Uint8Array>();
        // Zero points some kernel reads as words stay words for all (see `held_zeros.ts`).
        const { strip } = zeroHoldings(plan.kernels);
        const kernels = plan.kernels.map((k, i) => strip.has(i) ? readingWords(k) : k);
        const modules = await Promise.all(kernels.map(async (k, i) => {
          const bytes = !strip.has(i) && (plan.artifacts?.[i] as Uint8Array | undefined)?.byteLength
            ? plan.artifacts![i]
            : await this.codegen.generate(k);
          let module = compiled.get(bytes);
          if (!module) {
            compiled.set(bytes, module = compileModule(bytes as Uint8Array<ArrayBuffer>));
          }
          sources.set(await module, bytes as Uint8Array);
          return module;
        }));
        const bound = planOf(plan.graph);
        const program = arenaProgram({
          ...bound,
          kernels,
          modules,
          constants: plan.constants,
          partial: plan.partial,
          imports: HOST_FUNCTIONS,
          ...this.#placing(plan, kernels),
          profile: this.#profile,
          tuning: plan.tuning,
          onTuning: plan.onTuning,
          tier: this.#tier?.forProgram(sources),
        });
        // The warm-up's arguments: zero inputs, and the params where given (graph order).
        const inputs = plan.graph.inputs.length;
        const zeros = (params: readonly RefTensor[] = []) =>
          bound.bindings.map(({ value }, i) => {
            const { shape, dtype } = plan.graph.values[value];
            return params[i - inputs] ?? { data: allocate(dtype, sizeOf(shape)), shape, dtype };
          });
        const ms = warmUpBudget(plan.graph, this.#warmUpMs);
        const outputs = bound.outputs.map((_, i) => i);
        return warmedAtSecondRun(program, zeros, outputs, ms, plan.graph.params.length);
      },
    };
  }

  /**
   * Where a program runs and lives: its threads, and the share of its model's programs it leases
   * its places in (found by its fixed data).
   */
  #placing(
    plan: AssemblyPlan,
    kernels: readonly KernelIR[],
  ): Pick<ArenaPlan, "threads" | "poolThreads" | "workers" | "share" | "paramData"> {
    const params = plan.graph.params.flatMap((p) => p.data ? [[p.value, p.data] as const] : []);
    const paramData = new Map(params);
    const fixed = [...paramData.values(), ...[...plan.constants.values()].map((t) => t.data)];
    return {
      threads: threadsOfProgram(kernels, this.#threads, this.#most),
      poolThreads: this.#most,
      workers: this.#workers,
      share: (this.#shares ??= new Shares(this.#threads > 1)).of(fixed),
      paramData,
    };
  }

  /**
   * A zero-filled device tensor (shape and dtype checked by the caller): on the host until a run
   * takes it into its arena (see `arena_storage.ts`).
   */
  allocate(shape: readonly number[], dtype: BoundaryDType): Promise<DeviceTensor> {
    const internal = internalDType(dtype);
    const storage = ArenaStorage.onHost(allocate(internal, sizeOf(shape)), internal);
    return Promise.resolve(new DeviceTensor(storage, shape, dtype));
  }

  /** SIMD128 WebAssembly on `threads` threads. */
  capabilities(): DeviceProfile {
    return {
      name: "WebAssembly SIMD",
      f16: false,
      f64: true,
      subgroups: false,
      simd: true,
      threads: this.#threads,
      maxWorkgroupSize: 0,
      maxStorageBufferBytes: 2 ** 32,
      // Buffers are function parameters, and engines refuse functions of over 1000.
      maxBindings: 256,
      timestampQuery: false,
      bf16: false,
      integerDot: true,
      byteDot: this.#bytes(),
      storedOperands: true,
      blockProducts: true,
      winogradChannels: this.#winograd,
      winogradTile: this.#winogradTile,
      // Integer block products (relaxed SIMD's byte dot product) read the packed weight once a
      // row faster than the weight unpacks and tiles: a 24-layer Qwen-shaped decoder's prefill on
      // the 2-core VM, prompt 16: 584 -> 246 ms. With the products' zero shares out of their loop
      // (dc6a147) up to 512 rows at least: prompt 128 1712-1763 -> 1047-1067 ms warm, prompt 512
      // 5.77 -> 4.82 s (f32 block products lost at 16 rows, 549 against 753). Taking a block of
      // columns at a time for every row, so that its weights stay in cache, was slower there
      // (1243-1275 ms at 128: each row's A is regrouped once a block).
      integerBlockRows: hasRelaxedSimd() ? 512 : 4,
      // Its integer block products pack A per thread, and may round it there as they do.
      roundingProducts: hasRelaxedSimd(),
      matrixUnits: false,
    };
  }

  /**
   * What fuses into kernel IR (see `runsWhole`). Placement ops are copies: the scheduler puts
   * them where their data must live, or here when this backend is named.
   */
  supports(node: NodeInfo): boolean {
    return !runsWhole(node) || customKernel(node.op, this.id) !== undefined;
  }

  /** Every op but custom ones without a kernel for this backend (see `kernelOps`). */
  ops(): readonly string[] {
    return kernelOps(this.id);
  }

  /** Kernel IR → WebAssembly modules (format `wasm-12-shared` when threads are on). */
  readonly codegen: KernelCodegen;

  /** Whether byte products run on the relaxed byte dot (see {@linkcode WasmBackendOptions.byteDot}). */
  #bytes(): boolean {
    return this.#byteDot ??= exactByteDot();
  }

  /** Finds the worker threads (Deno's, Node's or a page's) and probes for relaxed SIMD. */
  async prepare(): Promise<void> {
    if (this.#countCores) {
      this.#countCores = false;
      const n = await cores();
      if (n) [this.#threads, this.#most] = [threadsFor(n), n];
    }
    if (this.#threads > 1) this.#workers ??= await (workers ??= workerThreads());
    this.#fma = hasRelaxedSimd();
  }

  /** Nothing runs asynchronously. */
  flush(): Promise<void> {
    return Promise.resolve();
  }

  /** Nothing to release. */
  dispose(): void {}

  /** Nothing to recover. */
  recover(): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Starts the worker pool as code is generated (a no-op once it is up): its spawns, 12–20 ms
   * each, are then paid beside code generation rather than in a first run later.
   */
  #startPool(): void {
    if (this.#threads > 1 && this.#workers) {
      WorkerPool.of({ threads: this.#most, ...this.#workers }).start(this.#threads);
    }
  }

  /** One kernel on host data, in an arena of its own (used when a plan mixes backends). */
  #single(kernel: KernelIR, module: WebAssembly.Module): PreparedKernel {
    const n = kernel.inputs.length;
    const program = arenaProgram({
      bindings: kernel.inputs.map((_, i) => ({ value: i, resident: false })),
      outputs: kernel.outputs.map((_, k) => n + k),
      kernels: [{
        ...kernel,
        inputs: kernel.inputs.map((b, i) => ({ ...b, value: i })),
        outputs: kernel.outputs.map((o, k) => ({ ...o, value: n + k })),
      }],
      modules: [module],
      constants: new Map(),
      partial: [true],
      imports: HOST_FUNCTIONS,
      threads: this.#threads,
    });
    return {
      run: (inputs, _into, active) => program.run(inputs, kernel.outputs.map((_, k) => k), active),
    };
  }
}
