/**
 * The WebAssembly backend (id `wasm`, kind `cpu-simd`): kernels emitted with Binaryen from the
 * kernel IR (`wasm_codegen.ts`), compiled by the runtime's WebAssembly engine, and run in one
 * memory arena per program (`arena_program.ts`). Binaryen is loaded on `prepare()`, so importing
 * kiln stays cheap. Kernels use f32x4 SIMD where their accesses allow and run single-threaded.
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

let binaryen: Promise<Binaryen> | undefined;

/** Host functions kernels import: the reference backend's own scalar semantics. */
const IMPORTS: Record<string, (...args: number[]) => number> = {
  sin: Math.sin,
  cos: Math.cos,
  pow: Math.pow,
  fmod: (a, b) => a % b,
  f16: (x) => fromF16Bits(toF16Bits(x)),
};

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

  /** SIMD128 WebAssembly, single-threaded. */
  capabilities(): DeviceProfile {
    return {
      name: "WebAssembly SIMD (Binaryen-generated)",
      f16: false,
      subgroups: false,
      simd: true,
      threads: 1,
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

  /** Kernel IR → WebAssembly modules. */
  readonly codegen: KernelCodegen = {
    format: "wasm-3",
    generate: (
      kernel: KernelIR,
    ): Artifact => (kernel.opaque ? new Uint8Array() : generateWasm(this.#loaded(), kernel)),
    load: async (kernel: KernelIR, artifact: Artifact): Promise<PreparedKernel> => {
      const module = await WebAssembly.compile(artifact as Uint8Array<ArrayBuffer>);
      return this.#single(kernel, module);
    },
    assemble: async (plan) => {
      const modules = await Promise.all(plan.kernels.map((k, i) => {
        const bytes = (plan.artifacts?.[i] as Uint8Array | undefined)?.byteLength
          ? plan.artifacts![i]
          : this.codegen.generate(k);
        return WebAssembly.compile(bytes as Uint8Array<ArrayBuffer>);
      }));
      return arenaProgram({
        ...planOf(plan.graph),
        kernels: plan.kernels,
        modules,
        constants: plan.constants,
        partial: plan.partial,
        imports: IMPORTS,
      });
    },
  };

  /** Loads Binaryen (once per process). */
  async prepare(): Promise<void> {
    this.#binaryen ??=
      await (binaryen ??= import("npm:binaryen@132.0.0").then((m) => m.default as Binaryen));
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
    });
    return {
      run: (inputs, _into, active) => program.run(inputs, kernel.outputs.map((_, k) => k), active),
    };
  }
}
