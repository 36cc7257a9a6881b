/**
 * kiln: a JIT codegen runtime for tensor compute graphs.
 *
 * Build a graph (with {@linkcode GraphBuilder} or the lazy {@linkcode Tensor} API), `compile` it
 * for a backend, and run it. The pipeline is graph → legalize → (fuse → schedule) → codegen →
 * cache → execute → handle; the reference backend is the oracle every backend is tested against.
 *
 * @example Lazy tensors
 * ```ts
 * import * as kiln from "./mod.ts";
 * const x = kiln.tensor([[1, 2, 3], [4, 5, 6]]);
 * const y = x.mul(2).add(1).softmax(-1);
 * console.log(await y.data());
 * ```
 *
 * @example A graph, compiled and run
 * ```ts
 * import * as kiln from "./mod.ts";
 * const b = new kiln.GraphBuilder();
 * const x = b.input("x", [2, 3]);
 * b.output("y", b.op("Relu", [x]));
 * const exe = await kiln.compile(b.build());
 * const { y } = await exe.run({ x: kiln.hostTensor(new Float32Array([1, -2, 3, -4, 5, -6]), [2, 3]) });
 * console.log(y.data); // Float32Array [1, 0, 3, 0, 5, 0]
 * ```
 *
 * @module
 */
import { defaultBackends } from "./backends/registry.ts";
import { setDefaultBackends } from "./jit/compile.ts";

export { KilnError, type KilnErrorCode, type KilnErrorOptions } from "./jit/support/errors.ts";
export {
  type BoundaryDType,
  byteSize,
  type DType,
  DTYPES,
  fromF16Bits,
  type TensorData,
  toF16Bits,
  type TypedArrayFor,
} from "./jit/ir/dtype.ts";
export type { Shape } from "./jit/ir/shape.ts";
export { type HostTensor, hostTensor, type TensorSpec } from "./jit/ir/host_tensor.ts";
export {
  Graph,
  type GraphInput,
  type GraphOutput,
  type GraphParam,
  type GraphSpec,
  type InputSpec,
  type Node,
  type NodeSpec,
  type OutputSpec,
  type ParamSpec,
  type Value,
} from "./jit/ir/graph.ts";
export { GraphBuilder, type OpOptions, type Sym } from "./jit/frontend/graph_builder.ts";
export { type Attrs, type AttrValue, opNames, type ValueType } from "./jit/ops/mod.ts";
export {
  type CustomKernel,
  type CustomKernelArgs,
  type CustomOpSpec,
  registerOp,
} from "./jit/runtime/custom_op.ts";
export { legalize } from "./jit/passes/legalize.ts";
export { fuse, type FuseOptions, type FusionResult } from "./jit/passes/fuse.ts";
export type {
  Alu,
  AluOp,
  AluOperands,
  BlockProduct,
  BlockTables,
  Expr,
  GatherStep,
  IndexStep,
  KernelBuffer,
  KernelIR,
  KernelOutput,
  KernelPattern,
  Load,
  Packing,
  ReduceOp,
  Reduction,
} from "./jit/ir/kernel_ir.ts";
export { ALU_OPS } from "./jit/ir/kernel_ir.ts";
export {
  type CacheSource,
  defaultKernelCache,
  KernelCache,
  type KernelCacheOptions,
  type KernelCacheStats,
} from "./jit/runtime/kernel_cache.ts";
export type { MemoryPlan } from "./jit/schedule/memory_plan.ts";
export { type Policy, type Schedule, type Transfer } from "./jit/schedule/schedule.ts";
export { type BackendRates, setBackendRates } from "./jit/schedule/cost_model.ts";
export { explain, type ExplainedKernel, type Explanation } from "./jit/runtime/explain.ts";
export { estimateWork } from "./jit/schedule/workload.ts";
export {
  checkBudget,
  MAX_ELEMENTS,
  type MemoryBudget,
  memoryBudget,
  setMemoryBudget,
} from "./jit/runtime/budget.ts";
export { compile, type CompileOptions, type WorkloadHint } from "./jit/compile.ts";
export type { Progress, ProgressCallback, ProgressPhase } from "./jit/runtime/progress.ts";
export type { Precision, Widened } from "./jit/passes/precision.ts";
export type { DrawnInput } from "./jit/passes/random_inputs.ts";
export { runOp, type RunOpOptions } from "./jit/runtime/run_op.ts";
export {
  type DeviceTensorMap,
  Executable,
  type ExecutableInit,
  type InputMap,
  type PlanInfo,
  type RunOptions,
  type TensorMap,
} from "./jit/runtime/executable.ts";
export {
  type Allocator,
  type DeviceStorage,
  DeviceTensor,
  type ElementRange,
  type StorageRange,
} from "./jit/runtime/device_tensor.ts";
export type { IntoMap } from "./jit/runtime/into.ts";
export { RunHandle, type RunTiming } from "./jit/runtime/run_handle.ts";
export {
  concat,
  type LiveTensorInfo,
  liveTensors,
  type NestedArray,
  Tensor,
  tensor,
  where,
} from "./jit/frontend/tensor.ts";
export {
  clearRealizeCache,
  configureTensors,
  type RealizeStats,
  realizeStats as cacheStats,
  type TensorRuntimeOptions,
} from "./jit/frontend/realize.ts";
export type {
  Artifact,
  AssemblyPlan,
  Backend,
  BackendCompileOptions,
  BackendKind,
  BackendSet,
  Cost,
  DeviceProfile,
  KernelCodegen,
  KernelTime,
  NodeInfo,
  PreparedKernel,
  Program,
  ResidentRunOptions,
  Workload,
} from "./jit/runtime/backend.ts";
export { BackendBase } from "./backends/backend_base.ts";
export { BackendRegistry, defaultBackends } from "./backends/registry.ts";
export { ReferenceBackend } from "./backends/reference/reference_backend.ts";
export type { RefTensor } from "./jit/ir/host_tensor.ts";
export type { CounterName } from "./jit/runtime/counters.ts";
export { prometheusText, stats } from "./jit/runtime/telemetry.ts";
export {
  type CacheLayout,
  generate,
  type GenerateOptions,
  Generation,
  type GenerationStats,
  importOnnx,
  KILN_DOMAIN,
  type ModelSummary,
  type OnnxImportOptions,
  type OnnxInputInfo,
  type OnnxLoadOptions,
  OnnxModel,
  type OnnxOpMapping,
  type OnnxValue,
  OPSETS,
  registerOnnxOp,
  type SamplingOptions,
  type StringTensor,
  toOnnx,
  type ValueSummary,
} from "./onnx/mod.ts";
export type { BucketPlan } from "./jit/schedule/buckets.ts";
export { WebGpuBackend, type WebGpuOptions } from "./backends/webgpu/webgpu_backend.ts";
export type { GpuName } from "./backends/webgpu/gpu_choice.ts";
export type { PoolStats } from "./backends/webgpu/buffer_pool.ts";
export { WasmBackend, type WasmBackendOptions } from "./backends/wasm/wasm_backend.ts";
export type { TierOptions } from "./backends/wasm/optimizing_tier.ts";

// The core names no concrete backend; the public entry supplies the built-in registry.
setDefaultBackends(defaultBackends);
