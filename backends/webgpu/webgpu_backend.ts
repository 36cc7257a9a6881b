/**
 * The WebGPU backend (id `webgpu`, kind `gpu`), through `navigator.gpu` — Deno's WebGPU, or the
 * `webgpu` npm package (Dawn) on Node. Kernels are WGSL generated from the kernel IR
 * (`shaders/wgsl/codegen.ts`) with one pipeline per kernel, attention groups fused into one
 * (`shaders/wgsl/attention.ts`); a plan that runs wholly here becomes one submit and at most one
 * readback per run (`gpu_program.ts`). Device loss marks the backend lost and
 * fails pending and later runs with a clear error until `recover()` acquires a new device
 * (programs built on the old one must be recompiled).
 *
 * @module
 */
import { Residents } from "./residents.ts";
import type {
  Artifact,
  Backend,
  BackendKind,
  DeviceProfile,
  KernelCodegen,
  NodeInfo,
  PreparedKernel,
  Program,
} from "../../jit/runtime/backend.ts";
import { envVar } from "../../jit/support/env.ts";
import { customArtifact, customKernel, kernelOps } from "../../jit/runtime/custom_op.ts";
import { runsWhole } from "../../jit/passes/fusable.ts";
import { bindingsOf as planOf } from "../../jit/runtime/program.ts";
import { type BoundaryDType, internalDType, type TensorData } from "../../jit/ir/dtype.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import { checkOptions, KilnError, shown } from "../../jit/support/errors.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { unfit } from "../../jit/schedule/schedule.ts";
import { generateWgsl, kernelLayout, type WgslOptions } from "../../shaders/wgsl/codegen.ts";
import { groupLayout, groupWgsl, withFusedAttention } from "../../shaders/wgsl/attention.ts";
import { BufferPool, emptyPoolStats, type PoolStats } from "./buffer_pool.ts";
import { ClockWindow, lowersClock, raiseClock } from "./clock_wake.ts";
import { dawnGlAdapter, machineDawnGpu } from "./dawn.ts";
import { gpuProgram } from "./gpu_program.ts";
import type { GpuContext } from "./gpu_storage.ts";
import {
  byteMatricesUsable,
  isSoftwareAdapter,
  MATRIX_FEATURE,
  matrixUnitsUsable,
  shuffleSize,
  storageBindings,
  webgpuProfile,
} from "./device_profile.ts";
import { fastestGpu, gpuChoice, isGpuName } from "./gpu_choice.ts";
import { WEBGPU_OPTIONS, type WebGpuOptions } from "./webgpu_options.ts";

export type { WebGpuOptions } from "./webgpu_options.ts";
import { allocateStorage, MAP_READ, STAGING, STORAGE } from "./gpu_storage.ts";

/** Dawn's flags as given (options, else `KILN_DAWN_FLAGS`); `undefined` leaves them to kiln. */
function givenDawnFlags(options: WebGpuOptions): readonly string[] | undefined {
  return options.dawnFlags ?? envVar("KILN_DAWN_FLAGS")?.split(/\s+/).filter(Boolean);
}

/** The WebGPU backend. */
export class WebGpuBackend implements Backend {
  /** Always `"webgpu"`. */
  readonly id: string = "webgpu";
  /** Code generator revision: the kernel cache keys on it, so bump it whenever generated code changes. */
  readonly version: string = "0.6.59";
  /** A GPU. */
  readonly kind: BackendKind = "gpu";
  #options: WebGpuOptions;
  #adapter?: GPUAdapter;
  #device?: GPUDevice;
  #pool?: BufferPool;
  #residents?: Residents;
  #lost = false;
  #lostReason = "";
  #readbackMs?: number;
  #generation = 0;
  #preparing?: Promise<void>;
  #dawn = false;
  /** The GPU entry point the device came from, and its clock's window where it lowers it. */
  #entry?: GPU;
  #clock?: ClockWindow;
  /** Whether WGSL has the packed byte dot products here (see `WebGpuOptions.packedDots`). */
  #packedDots = false;
  /** The adapter the automatic choice of implementation got, for `#acquire` to take. */
  #probed?: GPUAdapter;

  /** Creates the backend; the device is acquired by `prepare()`. */
  constructor(options: WebGpuOptions = {}) {
    checkOptions(options, WEBGPU_OPTIONS, "WebGpuBackend");
    const sizes = ["poolCapBytes", "maxStorageBufferBytes", "storedPatches", "storedKeys"] as const;
    const size = sizes.find((k) => options[k] !== undefined && !(Number(options[k]) > 0));
    if (size) {
      throw new KilnError(`WebGpuBackend: ${size} must be above 0, got ${shown(options[size])}`, {
        code: "out-of-range",
        fix: `pass a positive ${size}, or leave it out for the default`,
      });
    }
    const gpu: unknown = options.gpu;
    // A misspelt name had taken Deno's WebGPU without a word.
    const entry = typeof gpu === "object" && gpu !== null;
    if (gpu !== undefined && !entry && !isGpuName(gpu)) {
      throw new KilnError(
        `WebGpuBackend: gpu ${JSON.stringify(gpu)} names no WebGPU implementation`,
        {
          code: "bad-input",
          fix: 'pass gpu: "dawn", "navigator" or "auto" (the default), or a GPU entry point',
        },
      );
    }
    this.#options = options;
  }

  /** Whether `navigator.gpu` exists in this runtime. */
  static available(): boolean {
    return typeof navigator !== "undefined" && (navigator as { gpu?: unknown }).gpu !== undefined;
  }

  /** Whether the device was lost. */
  get deviceLost(): boolean {
    return this.#lost;
  }

  /** Buffer pool counters (zeros before `prepare()`). */
  poolStats(): PoolStats {
    return this.#pool?.stats() ?? emptyPoolStats();
  }

  /** A zero-filled tensor in this device's memory (shape and dtype checked by the caller). */
  async allocate(shape: readonly number[], dtype: BoundaryDType): Promise<DeviceTensor> {
    await this.prepare();
    const storage = await allocateStorage(this.#context(), sizeOf(shape), internalDType(dtype));
    return new DeviceTensor(storage, shape, dtype);
  }

  /** The device's limits and features; zeros and `false` until `prepare()` has run. */
  capabilities(): DeviceProfile {
    return webgpuProfile(this.#adapter, this.#device, {
      dawn: this.#dawn,
      allowSoftware: this.#options.allowSoftware ?? envVar("KILN_ALLOW_SOFTWARE_GPU") === "1",
      maxStorageBufferBytes: this.#options.maxStorageBufferBytes,
      readbackMs: this.#readbackMs,
      storedPatches: this.#options.storedPatches,
      storedKeys: this.#options.storedKeys,
      splitSums: this.#options.splitSums ?? envVar("KILN_SPLIT_SUMS") !== "0",
      combinedRanges: this.#options.combinedRanges ?? envVar("KILN_COMBINED_RANGES") !== "0",
      packedDots: this.#packedDots,
    });
  }

  /**
   * What fuses into kernel IR (see `runsWhole`). Placement ops are copies: the scheduler puts
   * them where their data must live, or here when this backend is named. Tensors past the
   * device's binding limit are the scheduler's concern (it places their kernels elsewhere).
   */
  supports(node: NodeInfo): boolean {
    return !runsWhole(node) || customKernel(node.op, this.id) !== undefined;
  }

  /** Every op but custom ones without a kernel for this backend (see `kernelOps`). */
  ops(): readonly string[] {
    return kernelOps(this.id);
  }

  /**
   * The intermediates of attention groups this backend runs as flash kernels (see
   * `shaders/wgsl/flash.ts`): the scores and softmax weights never reach device memory, which is
   * what lets a long sequence's attention past the binding limit.
   */
  elided(kernels: readonly KernelIR[], outputs: ReadonlySet<number>): ReadonlySet<number> {
    const { fused } = withFusedAttention(kernels, outputs, this.#wgsl());
    // The flash kernel's own buffers must fit, or it cannot run here either.
    const values = [...fused].flatMap(([one, group]) =>
      "rows" in group && !unfit(this, one)
        ? [...group.scores.outputs, ...group.weights.outputs].map((o) => o.value)
        : []
    );
    return new Set(values);
  }

  /** Kernel IR → WGSL, loaded as compute pipelines. */
  readonly codegen: KernelCodegen = ((backend: WebGpuBackend): KernelCodegen => ({
    // Kernels depend on the device's workgroup limit, so it is part of every cache key.
    get format(): string {
      const wgsl = backend.#wgsl();
      return `wgsl-5-i${wgsl.maxInvocations}${wgsl.packedDots ? "-d4" : ""}`;
    },
    generate: (kernel: KernelIR): Artifact =>
      kernel.opaque ? backend.#custom(kernel) ?? "" : backend.#generate(kernel),
    load: async (kernel: KernelIR, artifact: Artifact): Promise<PreparedKernel> => {
      const pipeline = await backend.#pipeline(kernel, artifact as string);
      return backend.#single(kernel, pipeline);
    },
    assemble: (plan) =>
      backend.#program(
        plan.graph,
        plan.kernels,
        plan.constants,
        (i) => plan.artifacts?.[i] as string | undefined,
        plan.partial,
      ),
  }))(this);

  /** Acquires the adapter and device (idempotent; a lost one waits for `recover()`). */
  prepare(): Promise<void> {
    // A lost device stays lost until `recover()`: preparing it again (compile prepares every
    // candidate) had quietly replaced it, and auto placed work on it (seen on the H200).
    if (this.#device) return Promise.resolve();
    return this.#preparing ??= this.#acquire().finally(() => (this.#preparing = undefined));
  }

  async #acquire(): Promise<void> {
    const gpu = await this.#gpu();
    this.#packedDots = (this.#options.packedDots ?? envVar("KILN_PACKED_DOTS") !== "0") &&
      languageFeature(gpu, PACKED_DOTS);
    const request = async (featureLevel?: string) => {
      try {
        return await gpu.requestAdapter({
          powerPreference: this.#options.powerPreference,
          ...(featureLevel ? { featureLevel } : {}),
        });
      } catch (e) {
        // Dawn throws where its flags name no backend it has.
        throw new KilnError(`The WebGPU implementation refused to give an adapter: ${e}`, {
          code: "backend",
          fix: "check the gpu and dawnFlags options (KILN_GPU, KILN_DAWN_FLAGS)",
          cause: e,
        });
      }
    };
    // The adapter the automatic choice already asked for, where it was asked as this would.
    const probed = this.#options.powerPreference ? undefined : this.#probed;
    this.#probed = undefined;
    const adapter = this.#options.featureLevel
      ? await request(this.#options.featureLevel)
      : probed ?? await request() ?? await request("compatibility") ??
        (this.#dawn && typeof this.#options.gpu !== "object" && !givenDawnFlags(this.#options)
          ? await dawnGlAdapter()
          : null);
    if (!adapter) {
      throw new KilnError("No WebGPU adapter was found", {
        code: "backend",
        fix: this.#dawn
          ? "use the reference or wasm backend on this machine, or Dawn's GL backend (KILN_DAWN_FLAGS=backend=opengles, with EGL_PLATFORM=surfaceless where there is no display)"
          : "use the reference or wasm backend on this machine",
      });
    }
    const matrix = this.#matrixUnits() ? [MATRIX_FEATURE] : [];
    const want = ["shader-f16", "timestamp-query", "subgroups", ...matrix].filter((f) =>
      adapter.features.has(f as GPUFeatureName)
    ) as GPUFeatureName[];
    const device = await adapter.requestDevice({
      requiredFeatures: want,
      requiredLimits: {
        maxStorageBuffersPerShaderStage: adapter.limits.maxStorageBuffersPerShaderStage,
        maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
        maxBufferSize: adapter.limits.maxBufferSize,
        maxComputeWorkgroupsPerDimension: adapter.limits.maxComputeWorkgroupsPerDimension,
        maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
        // Matrix tiles that split K take 512 invocations (`SPLIT` in `matrix_matmul.ts`, where
        // their time is); at WebGPU's default 256 they never ran.
        maxComputeInvocationsPerWorkgroup: adapter.limits.maxComputeInvocationsPerWorkgroup,
        maxComputeWorkgroupSizeX: adapter.limits.maxComputeWorkgroupSizeX,
        maxComputeWorkgroupSizeY: adapter.limits.maxComputeWorkgroupSizeY,
      },
    });
    const generation = ++this.#generation;
    device.lost.then((info) => {
      if (generation !== this.#generation) return;
      this.#lost = true;
      this.#lostReason = info.message || info.reason || "unknown reason";
    });
    this.#adapter = adapter;
    this.#device = device;
    this.#lost = false;
    this.#entry = gpu;
    const wake = this.#options.clockWake ?? envVar("KILN_CLOCK_WAKE") !== "0";
    this.#clock = wake && !isSoftwareAdapter(adapter) && lowersClock(adapter.info)
      ? new ClockWindow()
      : undefined;
    const cap = this.#options.poolCapBytes ??
      Math.min(2 ** 31, device.limits.maxStorageBufferBindingSize * 8) / 2;
    this.#pool = new BufferPool(device, cap);
    this.#residents = new Residents(this.#pool);
    // Only auto weighs it, and auto leaves a software adapter out anyway (22 ms a prepare).
    this.#readbackMs = this.capabilities().software ? undefined : await readbackMs(device);
  }

  /** The WebGPU entry point the options (or `KILN_GPU`) name. */
  async #gpu(): Promise<GPU> {
    const choice = this.#options.gpu ?? gpuChoice();
    if (typeof choice === "object") {
      // A GPU given that is not the runtime's own is the webgpu package's (what the docs name for
      // Node): Dawn in this process, so it takes Dawn's ways (pipelines made as `#pipeline`
      // says, mappings read in place). Taken as Deno's, each pipeline was awaited through Dawn's
      // asynchronous creation (13 of them 5.6-6.4 s on the H200 against 1.3-1.7 s).
      this.#dawn = !WebGpuBackend.available() || choice !== navigatorGpu();
      return choice;
    }
    if (choice === "auto") {
      const navigator = WebGpuBackend.available() ? navigatorGpu() : undefined;
      const chosen = await fastestGpu({ navigator, loadDawn: () => this.#dawnGpu() });
      this.#dawn = chosen.dawn;
      this.#probed = chosen.adapter;
      return chosen.gpu;
    }
    this.#dawn = choice === "dawn";
    if (choice === "dawn") return await this.#dawnGpu();
    if (!WebGpuBackend.available()) {
      throw new KilnError("WebGPU is not available in this runtime", {
        code: "backend",
        fix:
          'run under Deno (navigator.gpu), or pass gpu: "dawn" (KILN_GPU=dawn) with the webgpu npm package installed',
      });
    }
    return navigatorGpu();
  }

  /** Dawn, with the flags given, else with those this machine needs. */
  #dawnGpu(): Promise<GPU> {
    return machineDawnGpu(givenDawnFlags(this.#options), this.#matrixUnits());
  }

  /** Whether the matrix units are wanted (the option, else `KILN_MATRIX_UNITS`). */
  #matrixUnits(): boolean {
    return this.#options.matrixUnits ?? envVar("KILN_MATRIX_UNITS") !== "0";
  }

  /** Waits for submitted work. */
  async flush(): Promise<void> {
    await this.#device?.queue.onSubmittedWorkDone();
  }

  /** Releases the device. */
  dispose(): void {
    this.#pool?.dispose();
    this.#device?.destroy();
    this.#device = undefined;
    this.#generation++;
  }

  /** Acquires a new device after a loss; programs built before must be recompiled. */
  async recover(): Promise<void> {
    this.#pool?.dispose();
    this.#device = undefined;
    this.#generation++;
    this.#lost = false;
    await this.prepare();
  }

  /** The device (for tests that simulate loss with `device.destroy()`). */
  get device(): GPUDevice | undefined {
    return this.#device;
  }

  /**
   * The program of `kernels` (attention groups fused into one kernel each), with each kernel's
   * WGSL from `artifact(i)` (the kernel cache) or generated now.
   */
  async #program(
    graph: Graph,
    planned: readonly KernelIR[],
    constants: ReadonlyMap<number, HostTensor>,
    artifact: (i: number) => string | undefined,
    partial?: readonly boolean[],
  ): Promise<Program> {
    const io = planOf(graph);
    const wgsl = this.#wgsl();
    const { kernels, fused, from } = withFusedAttention(planned, new Set(io.outputs), wgsl);
    // Kernels of the same code (a repeated block) share one pipeline, compiled once.
    const compiled = new Map<string, Promise<GPUComputePipeline>>();
    const pipelineOf = (k: KernelIR, code: string) => {
      let pipeline = compiled.get(code);
      if (!pipeline) compiled.set(code, pipeline = this.#pipeline(k, code));
      return pipeline;
    };
    const pipelines = await Promise.all(kernels.map((k, i) => {
      if (k.opaque) {
        const code = artifact(from[i]) || this.#custom(k);
        return code === undefined ? undefined : pipelineOf(k, code);
      }
      const group = fused.get(k);
      return pipelineOf(k, group ? groupWgsl(group, wgsl) : artifact(from[i]) || this.#generate(k));
    }));
    const layouts = kernels.map((k) => {
      const group = fused.get(k);
      if (k.opaque) return undefined;
      return group ? groupLayout(group, wgsl) : kernelLayout(k, wgsl);
    });
    await this.#keepClock();
    return gpuProgram(this.#context(), {
      ...io,
      kernels,
      pipelines,
      layouts,
      constants,
      partial: partial && from.map((i) => partial[i]),
    });
  }

  /** After a compile that outlasted the clock's window, raises it again (`clock_wake.ts`). */
  async #keepClock(): Promise<void> {
    if (!this.#clock?.passed()) return;
    await raiseClock(this.#entry!, { powerPreference: this.#options.powerPreference });
    this.#clock.raised();
  }

  /** What generated kernels may use on this device (WebGPU's defaults before `prepare()`). */
  #wgsl(): WgslOptions {
    const software = this.#adapter !== undefined && isSoftwareAdapter(this.#adapter);
    return {
      maxInvocations: this.#device?.limits.maxComputeInvocationsPerWorkgroup ?? 256,
      half: this.#device?.features.has("shader-f16") ?? false,
      workgroupBytes: this.#device?.limits.maxComputeWorkgroupStorageSize ?? 16384,
      bindingBytes: this.capabilities().maxStorageBufferBytes || undefined,
      splitK: this.#options.splitK ?? !software,
      flash: this.#options.flashAttention ?? (software ? false : undefined),
      bindings: this.#device && storageBindings(this.#device.limits),
      matrix: matrixUnitsUsable(this.#adapter, this.#device),
      byteMatrix: byteMatricesUsable(this.#adapter, this.#device),
      subgroupSize: (this.#options.subgroups ?? envVar("KILN_SUBGROUPS") !== "0")
        ? shuffleSize(this.#adapter, this.#device)
        : undefined,
      packedDots: this.#packedDots,
    };
  }

  /** A custom op's registered WGSL for an opaque kernel, if it has one. */
  #custom(kernel: KernelIR): string | undefined {
    const op = kernel.opaque;
    if (!op || !customKernel(op.op, this.id)) return undefined;
    return customArtifact(this.id, op, kernel, { artifact: "text" }) as string;
  }

  #generate(kernel: KernelIR): string {
    return generateWgsl(kernel, this.#wgsl());
  }

  #context(): GpuContext {
    const device = this.#device!, pool = this.#pool!, generation = this.#generation;
    return {
      device,
      pool,
      residents: this.#residents!,
      wgsl: this.#wgsl(),
      timestamps: (this.#options.profile ?? false) && device.features.has("timestamp-query"),
      half: device.features.has("shader-f16"),
      // Deno's own WebGPU copies a read mapping's range; Dawn's is the mapping.
      copiedRanges: !this.#dawn && "Deno" in globalThis,
      check: () => {
        if (this.#lost || generation !== this.#generation) {
          throw new KilnError(`The WebGPU device was lost (${this.#lostReason || "replaced"})`, {
            code: "backend",
            fix:
              "call recover() on the webgpu backend and compile again (the auto policy falls back to the CPU meanwhile)",
          });
        }
      },
    };
  }

  async #pipeline(kernel: KernelIR, code: string): Promise<GPUComputePipeline> {
    await this.prepare();
    const device = this.#device!;
    device.pushErrorScope("validation");
    const module = device.createShaderModule({ code, label: kernel.name });
    const desc: GPUComputePipelineDescriptor = {
      layout: "auto",
      compute: { module, entryPoint: "main" },
      label: kernel.name,
    };
    let pipeline: GPUComputePipeline | Error, error: GPUError | null;
    if (this.#dawn) {
      // Dawn's asynchronous creation resolves at its binding's next event tick, often a second
      // after the driver is done (13 pipelines one by one: 5.6-6.4 s awaited, 1.3-1.7 s created
      // synchronously, H200). So every kernel of the program starts its pipeline on Dawn's
      // threads, and only then is each created synchronously, which takes what they compiled:
      // 56 pipelines in 1.5-2.0 s against 2.8-3.0 s created synchronously alone. Not on a
      // software adapter: Dawn's GL backend compiles on this thread either way, and starting
      // first took 1.9x as long there (43 pipelines, 1761 against 942 ms; the ways are timed by
      // bench/pipeline_creation.ts).
      if (!isSoftwareAdapter(this.#adapter!)) {
        device.createComputePipelineAsync(desc).catch(() => undefined);
      }
      const moduleError = device.popErrorScope();
      await null;
      device.pushErrorScope("validation");
      try {
        pipeline = device.createComputePipeline(desc);
      } catch (e) {
        pipeline = e as Error; // reported below as the kernel's, like a rejected async creation
      }
      const pipelineError = device.popErrorScope();
      error = (await moduleError) ?? (await pipelineError);
    } else {
      pipeline = await device.createComputePipelineAsync(desc).catch((e) => e as Error);
      error = await device.popErrorScope();
    }
    const info = await module.getCompilationInfo();
    const messages = info.messages.filter((m) => m.type === "error");
    if (messages.length || error || pipeline instanceof Error) {
      const m = messages[0];
      const line = m ? code.split("\n")[m.lineNum - 1]?.trim() : undefined;
      throw new KilnError(
        `WGSL for kernel ${kernel.name} (${kernel.ops.join(", ")}) failed: ${
          m?.message ?? error?.message ?? (pipeline as Error).message
        }${line ? ` at line ${m!.lineNum}: ${line}` : ""}`,
        {
          code: "backend",
          fix: "report this with the kernel (kiln explain); use the reference backend meanwhile",
        },
      );
    }
    return pipeline as GPUComputePipeline;
  }

  /** One kernel on host data (used when a plan mixes backends): upload, dispatch, read back. */
  #single(kernel: KernelIR, pipeline: GPUComputePipeline): PreparedKernel {
    return {
      run: async (inputs, _into, active) => {
        // Inputs are bound positionally (duplicates share one value id); outputs follow them.
        const n = kernel.inputs.length;
        const renumbered: KernelIR = {
          ...kernel,
          inputs: kernel.inputs.map((b, i) => ({ ...b, value: i })),
          outputs: kernel.outputs.map((o, k) => ({ ...o, value: n + k })),
        };
        const program = gpuProgram(this.#context(), {
          bindings: kernel.inputs.map((_, i) => ({ value: i, resident: false })),
          outputs: kernel.outputs.map((_, k) => n + k),
          kernels: [renumbered],
          pipelines: [pipeline],
          layouts: [kernel.opaque ? undefined : kernelLayout(kernel, this.#wgsl())],
          constants: new Map(),
          partial: [active !== undefined],
        });
        const out: TensorData[] = await program.run(
          inputs,
          kernel.outputs.map((_, k) => k),
          active,
        );
        program.dispose();
        return out;
      },
    };
  }
}

/**
 * The least of two timed readbacks of 4 bytes on `device` (see `DeviceProfile.readbackMs`; the
 * first also warms the queue up).
 */
async function readbackMs(device: GPUDevice): Promise<number> {
  // Numeric flags: Node's `webgpu` package has no GPUBufferUsage or GPUMapMode globals.
  const source = device.createBuffer({ size: 4, usage: STORAGE });
  const read = device.createBuffer({ size: 4, usage: STAGING });
  let least = Infinity;
  for (let i = 0; i < 2; i++) {
    const t0 = performance.now();
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(source, 0, read, 0, 4);
    device.queue.submit([encoder.finish()]);
    await read.mapAsync(MAP_READ);
    least = Math.min(least, performance.now() - t0);
    read.unmap();
  }
  source.destroy();
  read.destroy();
  return least;
}

/** WGSL's language feature of packed byte dot products (`dot4I8Packed`, `pack4xI8`). */
const PACKED_DOTS = "packed_4x8_integer_dot_product";

/** Whether `gpu`'s WGSL has language feature `name` (implementations without the list: no). */
function languageFeature(gpu: GPU, name: string): boolean {
  const features = (gpu as { wgslLanguageFeatures?: ReadonlySet<string> }).wgslLanguageFeatures;
  return features?.has(name) ?? false;
}

/** Deno's `navigator.gpu`. */
function navigatorGpu(): GPU {
  return (navigator as unknown as { gpu: GPU }).gpu;
}
