/**
 * The backend contract. A backend runs work in one of two ways: kernels (kernel IR through its
 * {@linkcode KernelCodegen}: generate, load, run) or a whole legalized graph (`compile`, for
 * graph-level backends such as the reference and those deriving from `BackendBase`). Everything
 * the scheduler needs to choose between backends is here too: an honest {@linkcode DeviceProfile},
 * per-node support, a relative cost estimate, and a lifecycle that covers device loss. The
 * contract lives in the core (`jit/`), which never names a concrete backend.
 *
 * @module
 */
import type { BoundaryDType, TensorData } from "../ir/dtype.ts";
import type { DeviceTensor } from "./device_tensor.ts";
import type { Graph } from "../ir/graph.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import type { Attrs, ValueType } from "../ops/mod.ts";
import type { RefTensor } from "../ir/host_tensor.ts";

/** What kind of hardware a backend drives; custom backends may name their own. */
export type BackendKind = "cpu" | "cpu-simd" | "gpu" | (string & Record<never, never>);

/** What a device can do. Unknown capabilities are reported as `false` / 0, never guessed. */
export interface DeviceProfile {
  /** Human-readable device description. */
  readonly name: string;
  /** Native f16 arithmetic. */
  readonly f16: boolean;
  /** f64 arithmetic (kernels with f64 values run only where this is true). */
  readonly f64: boolean;
  /** Subgroup (SIMD-group) operations. */
  readonly subgroups: boolean;
  /** SIMD lanes on the CPU (128-bit WebAssembly SIMD). */
  readonly simd: boolean;
  /** Threads the backend can use. */
  readonly threads: number;
  /** Largest workgroup (invocations); 0 when not a GPU. */
  readonly maxWorkgroupSize: number;
  /** Largest storage buffer binding in bytes; 0 when unknown. */
  readonly maxStorageBufferBytes: number;
  /** Most storage buffers one kernel may bind; 0 when unlimited or unknown. */
  readonly maxBindings: number;
  /** GPU timestamp queries. */
  readonly timestampQuery: boolean;
  /**
   * A software implementation of the device (llvmpipe, lavapipe, SwiftShader, WARP, a fallback
   * adapter) that the caller did not opt into: exact but slow, so no policy but naming the
   * backend places work on it.
   */
  readonly software?: boolean;
  /**
   * An interpreter (the reference backend: plain TypeScript, the oracle): exact but slow, so
   * policies weigh it only where no compiled backend runs a kernel (and it is never calibrated
   * then).
   */
  readonly interpreter?: boolean;
  /**
   * The least milliseconds a result of this device takes to reach the host (one awaited
   * readback of a few bytes), measured when it was prepared: every run of a plan that reads
   * back from it takes at least that. Deno's WebGPU: about 11 ms (its `mapAsync` sleeps 10 ms
   * after polling the device). Absent where unknown.
   */
  readonly readbackMs?: number;
  /**
   * Whether bf16 tensors are stored as 16 bits. No built-in backend does: bf16 is a boundary
   * dtype, held as f32 inside (exactly), rounded to bfloat16 where it is cast or leaves.
   */
  readonly bf16?: boolean;
  /** The device's subgroup sizes `[min, max]`, where it reports them (WebGPU `subgroups`). */
  readonly subgroupSizes?: readonly [number, number];
  /**
   * Whether the code generator runs IntegerMatMul kernels as integer dot products (WebAssembly's
   * `i32x4.dot_i16x8_s`): fusion then builds them as one kernel instead of exact float chunks.
   * `"bytes"`: only products over bytes (a u8 by an i8 operand: WGSL's `dot4I8Packed`).
   */
  readonly integerDot?: boolean | "bytes";
  /**
   * Whether those integer dot products multiply bytes exactly, four a lane (WebAssembly's relaxed
   * byte dot product where the engine computes unsigned bytes without saturating): the compile
   * then writes quantized products of 8-bit activations over bytes (`byte_products.ts`).
   */
  readonly byteDot?: boolean;
  /**
   * Whether its block products read A packed to bytes by its producer (`PackRowBlocks`) in byte
   * dot products as the words lie: the compile then has few-row products over A rounded to 8
   * bits take it so (`jit/passes/packed_rows.ts`).
   */
  readonly packedRows?: boolean;
  /**
   * Whether its kernels hold the 8-bit values elementwise kernels store whole four to a word
   * (`packedConstants`' `intermediates`, WebGPU): a DynamicQuantizeLinear's bytes, written a word
   * for four and read by byte products as they lie.
   */
  readonly packedIntermediates?: boolean;
  /**
   * Whether its block products of one row over A rounded to 8 bits a block round A themselves, as
   * QuantizeRowBlocks does, where they pack it for their integer sums: the compile then has them
   * take A as it is (a BlockMatMul that `rounds`, `jit/passes/packed_rows.ts`), and no kernel
   * rounds A before them.
   */
  readonly roundingProducts?: boolean;
  /**
   * Whether a product of a few rows should read its elementwise operand stored rather than
   * computed as it reads it (fusion's `inlineOperands` is then off): WebAssembly, whose reduction
   * kernels compute such an operand point by point through its index arithmetic. On the H200's
   * 16 threads a Qwen2.5-0.5B-shaped 4-bit decoder's step took 3.5 s with its weights unpacked
   * inline, 1.0 s unpacked into buffers first; through Dawn, 23 ms inline against 2.3 s.
   */
  readonly storedOperands?: boolean;
  /**
   * Whether the code generator runs a BlockMatMul of few rows as one kernel that unpacks the
   * packed weight in registers (WebAssembly): fusion then tags the product with its buffers.
   */
  readonly blockProducts?: boolean;
  /**
   * Whether the code generator computes the A of a block product of few rows from an elementwise
   * expression as it reads A (`BlockProduct.prologue`, WebGPU): fusion then leaves such an A
   * unstored. A GPU's kernels cost a dispatch each, which a decode step's host time is made of;
   * WebAssembly's cost a call.
   */
  readonly blockPrologues?: boolean;
  /**
   * Whether the code generator stores an output `Where(c, input, y)` over its donated input only
   * where `c` fails, computing `y` nowhere else (`shaders/wgsl/in_place.ts`): fusion then reads
   * such a `y` inline under a broadcast (a decode step's new cache entry) instead of storing it.
   */
  readonly keptStores?: boolean;
  /**
   * Whether the code generator combines a kernel's values into a scalar's largest as it goes
   * (`KernelOutput.combine`, WebGPU by atomics): fusion then gives a DynamicQuantizeLinear's
   * range to the kernel that computes its input, where it took two kernels of its own.
   */
  readonly combinedRanges?: boolean;
  /**
   * Rows of A up to which a BlockMatMul whose A was rounded to 8 bits a block (MatMulNBits of
   * `accuracy_level` 4) still runs as one block product kernel: a generator that sums those in
   * integers reads the packed weight once per row faster than it unpacks it for a tiled product.
   * Default: as any block product (4).
   */
  readonly integerBlockRows?: number;
  /**
   * Least multiply-adds of a conv whose patches the code generator wants stored as a matrix
   * before the product (im2col) rather than gathered as its tiles fill: a GPU's tiles then read
   * a plain matrix, where each gathered element costs the window's index arithmetic. Absent:
   * never (WebAssembly packs its patches per tile).
   */
  readonly storedPatches?: number;
  /**
   * Whether a product of few outputs and a deep K should sum K in parts, each a kernel's tiles,
   * added up by a second kernel: a large GPU fills its compute units only with many tiles.
   */
  readonly splitSums?: boolean;
  /**
   * Least elements of a batched product's B that its kernels would read across its columns
   * (attention's keys through a transposing view of the projection's output, [tokens, heads ·
   * size]) from which it is stored along them first: WebGPU's attention kernels give each thread
   * a key, and read BERT-base's keys that way 3.6× slower than laid out by head (H200: 0.068 ms
   * against 0.019 for the group, the copy 0.008), while a dozen tokens' keys cost the copy's
   * dispatch more than it saves. Absent: never (where another candidate asks, it is stored).
   */
  readonly storedKeys?: number;
  /**
   * Least input and output channels of a 3×3 convolution of stride 1 the compile computes as
   * Winograd's F(2×2, 3×3) for this backend (`jit/passes/winograd.ts`: 16 products of the
   * channels a 2×2 block of outputs where the direct convolution takes 36, with transforms
   * around them). Absent: never.
   */
  readonly winogradChannels?: number;
  /** Outputs a side of those convolutions' Winograd tiles: F(2×2, 3×3) or F(4×4, 3×3) (default 2). */
  readonly winogradTile?: 2 | 4;
  /** Whether kiln's matrix kernels can run on the device's matrix units (WebGPU subgroup matrices). */
  readonly matrixUnits?: boolean;
  /** Which device this is, where the implementation says (vendor, architecture, device). */
  readonly deviceId?: string;
}

/**
 * A device profile as the key of what persists across processes (kernel code, calibrated rates,
 * placement verdicts): every field but `readbackMs`, which is measured anew in each process and
 * differs between them. (Keyed with it, every process on the H200 host calibrated, generated
 * and ran its placement trials again, and a calibration that caught a slow readback put
 * ResNet-18 on wasm at 57 ms against the GPU's 31.)
 */
export function profileKey(profile: DeviceProfile): string {
  const { readbackMs: _measured, ...fixed } = profile;
  return JSON.stringify(fixed);
}

/** A node as a backend sees it when asked whether it can run it. */
export interface NodeInfo {
  /** Op name. */
  readonly op: string;
  /** Attributes. */
  readonly attrs: Attrs;
  /** Input types. */
  readonly inputs: readonly ValueType[];
  /** Output types. */
  readonly outputs: readonly ValueType[];
  /** Label for messages. */
  readonly label: string;
}

/** A backend's own time estimate ({@linkcode Backend.estimateCost}), in milliseconds. */
export interface Cost {
  /** Milliseconds spent computing. */
  readonly compute: number;
  /** Milliseconds spent moving the work's data to and from the device (0 in host memory). */
  readonly transfer: number;
}

/** How much work a graph is: used by cost estimates. */
export interface Workload {
  /** Floating-point (or integer) operations. */
  readonly flops: number;
  /** Bytes read and written by the nodes. */
  readonly bytes: number;
  /** Bytes crossing the host boundary (inputs, params, outputs). */
  readonly hostBytes: number;
}

/** A compiled graph, ready to run on its backend. */
export interface Program {
  /**
   * Runs the graph. `args` holds the graph's inputs followed by its params, in declaration order
   * (already validated and converted to internal dtypes); `outputs` lists the indices of the graph
   * outputs wanted. Returns their data in that order. `active` is the batch extent of a bucketed
   * run (see `compile`'s `buckets`). `into` holds, by position in `outputs`, the caller's arrays
   * for them (`RunOptions.into`): a program that reads an output out of its own memory writes it
   * there and returns that array, rather than a fresh one the executable would copy over.
   */
  run(
    args: readonly RefTensor[],
    outputs: readonly number[],
    active?: number,
    into?: readonly (TensorData | undefined)[],
  ): Promise<TensorData[]>;
  /** Releases what the program holds. */
  dispose(): void;
  /**
   * Whether `run` has read (copied) every argument before it returns its promise. Otherwise the
   * executable hands it copies of the caller's arrays, which the caller may change right after
   * calling `run()`.
   */
  readonly readsArgsOnCall?: boolean;
  /** Device time of each kernel in the last finished run, where the backend measures it. */
  deviceTimes?(): readonly KernelTime[];
  /**
   * Warms the program up now, where it warms up at all (wasm: on zero inputs, as its second run
   * would otherwise), for a caller about to time its runs; resolves once it is warm. `params` are
   * the params its runs pass (in the graph's order), so the warm-up computes on them and the first
   * run has none to write.
   */
  warmUp?(params?: readonly RefTensor[]): Promise<void>;
  /**
   * The verdict of the program's own run-time tuning once it has one (wasm: threads or one
   * thread, and how many), as text a later compile hands back through
   * {@linkcode AssemblyPlan.tuning}; `undefined` while undecided or where nothing is tuned.
   */
  readonly tuning?: string;
  /**
   * Runs with device-resident data, where the backend has device memory: arguments may be
   * {@linkcode DeviceTensor}s of this backend (used in place), outputs may stay on the device,
   * and `repeat` runs the graph several times in one submission with `feedback` outputs becoming
   * arguments of the next repetition, reading back only at the end.
   */
  runResident?(
    args: readonly (RefTensor | DeviceTensor)[],
    outputs: readonly number[],
    options: ResidentRunOptions,
  ): Promise<(TensorData | DeviceTensor)[]>;
}

/** Options of {@linkcode Program.runResident}. */
export interface ResidentRunOptions {
  /** Repetitions of the graph (at least 1). */
  readonly repeat: number;
  /** `[output, arg]` pairs: after each repetition, that output becomes that argument. */
  readonly feedback: readonly (readonly [output: number, arg: number])[];
  /** Per requested output: whether it stays on the device (each kept one in its own memory). */
  readonly keep: readonly boolean[];
  /** The batch extent of a bucketed run. */
  readonly active?: number;
  /** Per requested output read to the host: the caller's array for it (see `Program.run`). */
  readonly into?: readonly (TensorData | undefined)[];
}

/** How long one kernel ran on its device. */
export interface KernelTime {
  /** The kernel's name (as in `explain`). */
  readonly kernel: string;
  /** Milliseconds between the start and the end of its pass, on the device's clock. */
  readonly ms: number;
}

/** Generated code for one kernel: source text or a binary module. */
export type Artifact = string | Uint8Array;

/** A kernel loaded on its backend, ready to run on host buffers. */
export interface PreparedKernel {
  /**
   * Runs the kernel on its inputs (in `kernel.inputs` order) and returns one array per output.
   * Where `into` holds an array for an output (the memory plan's slot), the kernel writes there
   * and returns that array. `active` (shape buckets) limits the run to the first `active` of the
   * `space[0]` batch rows.
   */
  run(
    inputs: readonly RefTensor[],
    into?: readonly (TensorData | undefined)[],
    active?: number,
  ): TensorData[] | Promise<TensorData[]>;
}

/**
 * The fused path of a backend: it generates code for kernel IR and loads it. Generated artifacts
 * go through the kernel cache (memory and disk), so `generate` runs once per distinct kernel.
 */
export interface KernelCodegen {
  /** Artifact format tag, part of the cache key (bump it when the generator changes). */
  readonly format: string;
  /**
   * Generates the artifact for `kernel` (the "codegen" step counted in stats); asynchronous
   * where the generator loads on first use, so a warm kernel cache never loads it.
   */
  generate(kernel: KernelIR): Artifact | Promise<Artifact>;
  /** Loads an artifact (fresh or from the cache) into a runnable kernel. */
  load(kernel: KernelIR, artifact: Artifact): PreparedKernel | Promise<PreparedKernel>;
  /**
   * Optionally, one program for a plan that runs wholly on this backend (a GPU keeps data
   * resident and submits once per run); without it, kernels run one by one on host buffers.
   */
  assemble?(plan: AssemblyPlan): Promise<Program>;
}

/** What {@linkcode KernelCodegen.assemble} receives. */
export interface AssemblyPlan {
  /** The legalized graph. */
  readonly graph: Graph;
  /** Kernels in execution order. */
  readonly kernels: readonly KernelIR[];
  /** Each kernel's artifact (from the cache or freshly generated). */
  readonly artifacts?: readonly Artifact[];
  /** Constant buffers (value id → data). */
  readonly constants: ReadonlyMap<number, HostTensor>;
  /** Per kernel: whether a bucketed run limits it to the active rows. */
  readonly partial?: readonly boolean[];
  /**
   * The {@linkcode Program.tuning} an earlier compile of the same kernels on this machine
   * reached (read from beside the kernel cache): the program starts from it instead of timing
   * its ways again.
   */
  readonly tuning?: string;
  /**
   * Called with the program's {@linkcode Program.tuning} whenever it changes (a first verdict,
   * or a later probe that overturns it), so the stored verdict follows the latest one; it
   * returns the store's promise, which a program that reaches its verdict in a warm-up awaits
   * before the run after it (a process may end at any await: a note left to the background was
   * lost whenever one ended with `Deno.exit`).
   */
  readonly onTuning?: (verdict: string) => Promise<void> | void;
}

/** Options passed to {@linkcode Backend.compile}. */
export interface BackendCompileOptions {
  /** A name for the program (for messages and profiling). */
  readonly name?: string;
}

/** A kiln backend. */
export interface Backend {
  /** Unique id, e.g. `"reference"`, `"wasm"`, `"webgpu"`. */
  readonly id: string;
  /** Version of the backend implementation. */
  readonly version: string;
  /** Kind of hardware. */
  readonly kind: BackendKind;
  /** Whether the device was lost (GPU reset); `recover()` brings it back. */
  readonly deviceLost: boolean;
  /** The device's capabilities. */
  capabilities(): DeviceProfile;
  /** Whether this backend can run `node` as it is (legalization decomposes or rejects the rest). */
  supports(node: NodeInfo): boolean;
  /** The ops it runs as they are (custom ones with a kernel of its own among them), sorted. */
  ops?(): readonly string[];
  /** A zero-filled tensor in its device memory (see `DeviceTensor.allocate`), where it has any. */
  allocate?(shape: readonly number[], dtype: BoundaryDType): Promise<DeviceTensor>;
  /**
   * The backend's own estimate, in milliseconds, of doing `workload` (one kernel's work, or the
   * whole of `graph` for a graph-level backend) here. When present, every cost-driven placement
   * uses it in place of the rates calibrated on the machine: the way a custom backend states its
   * speed. The built-in backends leave it out (they are calibrated).
   */
  estimateCost?(graph: Graph, workload: Workload): Cost;
  /**
   * Compiles a legalized graph: the path of graph-level backends (the reference, backends deriving
   * from `BackendBase`). A backend with {@linkcode Backend.codegen} gets kernels instead and need
   * not implement it; every backend has one of the two.
   */
  compile?(graph: Graph, options?: BackendCompileOptions): Promise<Program>;
  /** Acquires the device (idempotent). */
  prepare(): Promise<void>;
  /** Waits until submitted work is done. */
  flush(): Promise<void>;
  /** Releases the device and every program. */
  dispose(): void;
  /** Re-acquires a lost device; compiled programs must be recompiled. */
  recover(): Promise<void>;
  /** The fused path, when the backend consumes kernel IR. */
  readonly codegen?: KernelCodegen;
  /**
   * Values of `kernels` that this backend never stores when it runs all of the kernels that
   * touch them (`outputs`: the values needed past them), because it makes one kernel of several
   * and keeps them in registers and workgroup memory — a flash attention's scores. The scheduler
   * exempts them from the binding limit and keeps their kernels together here.
   */
  elided?(kernels: readonly KernelIR[], outputs: ReadonlySet<number>): ReadonlySet<number>;
}

/** Node info for node `id` of `graph`. */
export function nodeInfo(graph: Graph, id: number): NodeInfo {
  const n = graph.nodes[id];
  return {
    op: n.op,
    attrs: n.attrs,
    inputs: n.inputs.map((v) => graph.values[v]),
    outputs: n.outputs.map((v) => graph.values[v]),
    label: n.label,
  };
}

/**
 * The backends a compile may place work on, by id. `BackendRegistry` implements it; the core
 * takes it as a parameter so that it never names a concrete backend.
 */
export interface BackendSet {
  /** The backend with `id` (a `KilnError` listing the ids when there is none). */
  get(id: string): Backend;
  /** Every backend, in registration order. */
  list(): Backend[];
}
