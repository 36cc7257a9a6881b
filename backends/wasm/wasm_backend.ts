/**
 * The WebAssembly backend (id `wasm`, kind `cpu-simd`): kernels emitted with Binaryen from the
 * kernel IR (`wasm_codegen.ts`), compiled by the runtime's WebAssembly engine, and run in one
 * memory arena per program (`arena_program.ts`). Binaryen is loaded on `prepare()`, so importing
 * kiln stays cheap. Kernels use f32x4 SIMD where their accesses allow; large ones split their rows
 * over worker threads sharing the arena (`worker_crew.ts`).
 *
 * @module
 */
import type {
  Artifact,
  Backend,
  BackendKind,
  Cost,
  DeviceProfile,
  KernelCodegen,
  NodeInfo,
  PreparedKernel,
  Program,
  Workload,
} from "../backend.ts";
import { runOpAsGraph } from "../backend_base.ts";
import { fusable } from "../fusable.ts";
import { bindingsOf as planOf } from "../../jit/program.ts";
import { fromF16Bits, toF16Bits } from "../../jit/dtype.ts";
import { KilnError } from "../../jit/errors.ts";
import { fuse } from "../../jit/fuse.ts";
import type { Graph } from "../../jit/graph.ts";
import type { HostTensor } from "../../jit/host_tensor.ts";
import type { KernelIR } from "../../jit/kernel_ir.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { arenaProgram } from "./arena_program.ts";
import { type Binaryen, generateWasm } from "./wasm_codegen.ts";
import type { WorkerClass } from "./worker_crew.ts";

let binaryen: Promise<Binaryen> | undefined;
let workers: Promise<WorkerClass | undefined> | undefined;

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

/** Whether the engine compiles relaxed SIMD (a one-instruction probe module, checked once). */
function hasRelaxedSimd(binaryen: Binaryen): boolean {
  if (relaxed !== undefined) return relaxed;
  const m = new binaryen.Module();
  m.setFeatures(binaryen.Features.SIMD128 | binaryen.Features.RelaxedSIMD);
  const zero = () => m.f32x4.splat(m.f32.const(0));
  m.addFunction(
    "f",
    binaryen.none,
    binaryen.v128,
    [],
    binaryen._BinaryenSIMDTernary(m.ptr, binaryen.RelaxedMaddVecF32x4, zero(), zero(), zero()),
  );
  relaxed = WebAssembly.validate(m.emitBinary());
  m.dispose();
  return relaxed;
}

/** `node:worker_threads`' Worker, or `undefined` (browsers); the specifier is kept from bundlers. */
async function workerClass(): Promise<WorkerClass | undefined> {
  const specifier = ["node", "worker_threads"].join(":");
  try {
    return (await import(specifier)).Worker as WorkerClass;
  } catch {
    return undefined;
  }
}

/** Host functions kernels import: the reference backend's own scalar semantics. */
const IMPORTS: Record<string, (...args: number[]) => number> = {
  sin: Math.sin,
  cos: Math.cos,
  pow: Math.pow,
  fmod: (a, b) => a % b,
  f16: (x) => fromF16Bits(toF16Bits(x)),
};

/** Options of {@linkcode WasmBackend}. */
export interface WasmBackendOptions {
  /**
   * Threads for large kernels, the calling one included (default
   * `navigator.hardwareConcurrency`). Threads need `node:worker_threads` (Deno, Node) and
   * `SharedArrayBuffer`; where either is missing kernels run on the calling thread. Each program
   * with a large kernel starts its own `threads - 1` workers; `dispose()` ends them.
   */
  readonly threads?: number;
}

/** The WebAssembly backend. */
export class WasmBackend implements Backend {
  /** Always `"wasm"`. */
  readonly id: string = "wasm";
  /** Implementation version. */
  readonly version: string = "0.1.0";
  /** CPU with WebAssembly. */
  readonly kind: BackendKind = "cpu-simd";
  /** A CPU is never lost. */
  readonly deviceLost: boolean = false;
  #binaryen?: Binaryen;
  #threads: number;
  #Worker?: WorkerClass;
  #fma = false;

  /** A backend; see {@linkcode WasmBackendOptions}. */
  constructor(options: WasmBackendOptions = {}) {
    const threads = options.threads ?? globalThis.navigator?.hardwareConcurrency ?? 1;
    if (!Number.isInteger(threads) || threads < 1) {
      throw new KilnError(`WasmBackend: threads must be a positive integer, got ${threads}`, {
        code: "out-of-range",
        fix: "pass threads: 1 or more (or leave it out for navigator.hardwareConcurrency)",
      });
    }
    this.#threads = typeof SharedArrayBuffer === "function" ? threads : 1;
    // deno-lint-ignore no-this-alias
    const backend = this;
    this.codegen = {
      get format() {
        return `wasm-5${backend.#threads > 1 ? "-shared" : ""}${backend.#fma ? "-fma" : ""}`;
      },
      generate: (kernel: KernelIR): Artifact =>
        kernel.opaque
          ? new Uint8Array()
          : generateWasm(this.#loaded(), kernel, { shared: this.#threads > 1, fma: this.#fma }),
      load: async (kernel: KernelIR, artifact: Artifact): Promise<PreparedKernel> => {
        const module = await compileModule(artifact as Uint8Array<ArrayBuffer>);
        return this.#single(kernel, module);
      },
      assemble: async (plan) => {
        const modules = await Promise.all(plan.kernels.map((k, i) => {
          const bytes = (plan.artifacts?.[i] as Uint8Array | undefined)?.byteLength
            ? plan.artifacts![i]
            : this.codegen.generate(k);
          return compileModule(bytes as Uint8Array<ArrayBuffer>);
        }));
        return arenaProgram({
          ...planOf(plan.graph),
          kernels: plan.kernels,
          modules,
          constants: plan.constants,
          partial: plan.partial,
          imports: IMPORTS,
          threads: this.#threads,
          Worker: this.#Worker,
        });
      },
    };
  }

  /** SIMD128 WebAssembly on `threads` threads. */
  capabilities(): DeviceProfile {
    return {
      name: "WebAssembly SIMD (Binaryen-generated)",
      f16: false,
      subgroups: false,
      simd: true,
      threads: this.#threads,
      maxWorkgroupSize: 0,
      maxStorageBufferBytes: 2 ** 32,
      maxBindings: 0,
      timestampQuery: false,
    };
  }

  /** What fuses into kernel IR (see `fusable`), except the GPU's `ToDevice`. */
  supports(node: NodeInfo): boolean {
    return node.op !== "ToDevice" && fusable(node);
  }

  /** Placement uses the calibrated cost model; this is a static fallback. */
  estimateCost(_graph: Graph, workload: Workload): Cost {
    return { compute: workload.flops / 5e8 + workload.bytes / 5e9, transfer: 0 };
  }

  /** Kernel IR → WebAssembly modules (format `wasm-4-shared` when threads are on). */
  readonly codegen: KernelCodegen;

  /** Loads Binaryen (once per process) and, for threads, `node:worker_threads`. */
  async prepare(): Promise<void> {
    this.#binaryen ??=
      await (binaryen ??= import("npm:binaryen@132.0.0").then((m) => m.default as Binaryen));
    if (this.#threads > 1) this.#Worker ??= await (workers ??= workerClass());
    this.#fma = hasRelaxedSimd(this.#binaryen);
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

  /** Whole-graph compile: fuse, generate and assemble one program (no kernel cache). */
  async compile(graph: Graph): Promise<Program> {
    await this.prepare();
    const fusion = fuse(graph);
    const opaque = fusion.kernels.filter((k) => k.opaque);
    if (opaque.length) {
      throw new KilnError(
        `wasm cannot run ${opaque.map((k) => `${k.name} (${k.opaque!.op})`).join(", ")}`,
        {
          code: "unsupported",
          fix:
            "compile with the auto policy (such ops run on the reference beside it) or the reference backend",
        },
      );
    }
    return await this.codegen.assemble!({
      graph,
      kernels: fusion.kernels,
      constants: fusion.constants,
    });
  }

  /** Runs one op on host tensors (a one-node graph through the fused path). */
  op(op: string, inputs: readonly HostTensor[], attrs: Attrs = {}): Promise<HostTensor[]> {
    return runOpAsGraph(this, op, inputs, attrs);
  }

  #loaded(): Binaryen {
    if (!this.#binaryen) {
      throw new KilnError("The wasm backend was used before prepare()", {
        code: "internal",
        fix: "await backend.prepare() first (compile() does)",
      });
    }
    return this.#binaryen;
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
      imports: IMPORTS,
      threads: this.#threads,
    });
    return {
      run: (inputs, _into, active) => program.run(inputs, kernel.outputs.map((_, k) => k), active),
    };
  }
}
