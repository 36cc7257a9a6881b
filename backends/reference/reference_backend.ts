/**
 * The reference backend: plain TypeScript kernels for every op and every dtype, accumulating in
 * float64. It is the oracle every other backend is tested against, so it favours clarity over
 * speed and implements composite ops directly rather than through their decompositions.
 *
 * @module
 */
import type { TensorData } from "../../jit/ir/dtype.ts";
import { KilnError, settled } from "../../jit/support/errors.ts";
import { customOp } from "../../jit/runtime/custom_op.ts";
import { checkHostTensor, type HostTensor } from "../../jit/ir/host_tensor.ts";
import { InferContext } from "../../jit/ops/mod.ts";
import { formatShape, sizeOf } from "../../jit/ir/shape.ts";
import type {
  Artifact,
  BackendKind,
  DeviceProfile,
  KernelCodegen,
  NodeInfo,
  PreparedKernel,
} from "../../jit/runtime/backend.ts";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import { kernelText } from "../../jit/ir/expr_table.ts";
import { interpretKernel } from "./kernel_interpreter.ts";
import { BackendBase } from "../backend_base.ts";
import type { Kernel } from "./kernel.ts";
import { elementwiseKernels } from "./kernels_elementwise.ts";
import { movementKernels } from "./kernels_movement.ts";
import { nnKernels } from "./kernels_nn.ts";
import { quantKernels } from "./kernels_quant.ts";
import { integerKernels } from "./kernels_integer.ts";
import { ortKernels } from "./kernels_ort.ts";
import { qoperatorKernels } from "./kernels_qoperator.ts";
import { lossKernels } from "./kernels_loss.ts";
import { trainingKernels } from "./kernels_training.ts";
import { einsumKernels } from "./kernels_einsum.ts";
import { spectralKernels } from "./kernels_spectral.ts";
import { recurrentKernels } from "./kernels_recurrent.ts";
import { rankingKernels } from "./kernels_ranking.ts";
import { resizeKernels } from "./kernels_resize.ts";
import { oneHotKernels } from "./kernels_one_hot.ts";
import { spaceDepthKernels } from "./kernels_space_depth.ts";
import { gridSampleKernels } from "./kernels_grid_sample.ts";
import { scatterKernels } from "./kernels_scatter.ts";
import { poolKernels } from "./kernels_pool.ts";
import { convTransposeKernels } from "./kernels_conv_transpose.ts";
import { llmKernels } from "./kernels_llm.ts";
import { samplingKernels } from "./kernels_sampling.ts";
import { attentionKernels } from "./kernels_attention.ts";
import { tfidfKernels } from "./kernels_tfidf.ts";
import { reduceKernels } from "./kernels_reduce.ts";
import { sourceKernels } from "./kernels_source.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";

const kernels: Record<string, Kernel> = {
  ...elementwiseKernels,
  ...reduceKernels,
  ...movementKernels,
  ...scatterKernels,
  ...poolKernels,
  ...convTransposeKernels,
  ...llmKernels,
  ...samplingKernels,
  ...attentionKernels,
  ...tfidfKernels,
  ...nnKernels,
  ...quantKernels,
  ...integerKernels,
  ...ortKernels,
  ...lossKernels,
  ...trainingKernels,
  ...einsumKernels,
  ...spectralKernels,
  ...recurrentKernels,
  ...rankingKernels,
  ...resizeKernels,
  ...oneHotKernels,
  ...spaceDepthKernels,
  ...gridSampleKernels,
  ...sourceKernels,
};
// The QOperator ops run the float op they wrap through this table.
Object.assign(kernels, qoperatorKernels((op) => kernels[op]));

/** The reference backend (id `reference`). */
export class ReferenceBackend extends BackendBase {
  /** Always `"reference"`. */
  readonly id: string = "reference";
  /** Implementation version. */
  readonly version: string = "0.1.0";
  /** Plain CPU. */
  readonly kind: BackendKind = "cpu";
  /** Every built-in op. */
  protected readonly nativeOps: ReadonlySet<string> = new Set(Object.keys(kernels));

  /**
   * The fused path: the "generated code" of a kernel is its canonical IR text, which the
   * interpreter runs; opaque kernels run the op's reference kernel.
   */
  readonly codegen: KernelCodegen = {
    format: "kernel-ir-2",
    generate: (kernel: KernelIR): Artifact => kernelText(kernel),
    load: (kernel: KernelIR): PreparedKernel => this.#load(kernel),
  };

  #load(kernel: KernelIR): PreparedKernel {
    if (!kernel.opaque) return interpretKernel(kernel);
    const node: NodeInfo = {
      op: kernel.opaque.op,
      attrs: kernel.opaque.attrs,
      inputs: kernel.inputs,
      outputs: kernel.outputs,
      label: kernel.ops[0] ?? kernel.opaque.op,
    };
    return {
      run: (inputs, into) =>
        this.#execute(node, inputs).map((data, k) => {
          const slot = into?.[k] as Exclude<TensorData, BigInt64Array> | undefined;
          if (!slot) return data;
          slot.set(data as Exclude<TensorData, BigInt64Array>);
          return slot;
        }),
    };
  }

  /** A single-threaded CPU without SIMD. */
  capabilities(): DeviceProfile {
    return {
      name: "TypeScript reference interpreter",
      f16: false,
      f64: true,
      subgroups: false,
      simd: false,
      threads: 1,
      maxWorkgroupSize: 0,
      maxStorageBufferBytes: 0,
      maxBindings: 0,
      timestampQuery: false,
      bf16: false,
      matrixUnits: false,
      interpreter: true,
    };
  }

  /** Every op, custom ones included (through their reference implementation). */
  override supports(node: NodeInfo): boolean {
    // Placement ops are copies; the scheduler decides which memory space runs them.
    return this.nativeOps.has(node.op) || customOp(node.op) !== undefined;
  }

  /** Runs one node with its reference kernel. */
  protected override executeNode(
    node: NodeInfo,
    inputs: readonly RefTensor[],
  ): Promise<TensorData[]> {
    return settled(() => this.#execute(node, inputs));
  }

  /** Runs one node synchronously (see {@linkcode evaluateNode}). */
  evaluate(node: NodeInfo, inputs: readonly RefTensor[]): TensorData[] {
    return this.#execute(node, inputs);
  }

  #execute(node: NodeInfo, inputs: readonly RefTensor[]): TensorData[] {
    const custom = customOp(node.op);
    if (custom) return runCustom(node, inputs, custom.reference);
    const kernel = kernels[node.op];
    if (!kernel) {
      throw new KilnError(`${node.label}: the reference backend has no kernel for ${node.op}`, {
        code: "internal",
        fix: "report this: every built-in op needs a reference kernel",
      });
    }
    const ctx = new InferContext({
      op: node.op,
      where: node.label,
      inputs: node.inputs,
      attrs: node.attrs,
    });
    return kernel({ inputs, attrs: node.attrs, outputs: node.outputs, ctx });
  }
}

function runCustom(
  node: NodeInfo,
  inputs: readonly RefTensor[],
  reference: NonNullable<ReturnType<typeof customOp>>["reference"],
): TensorData[] {
  const raw = reference(inputs, node.attrs);
  const list = Array.isArray(raw) ? raw : [raw];
  if (list.length !== node.outputs.length) {
    throw new KilnError(
      `${node.label}: the reference returned ${list.length} outputs, the op declares ${node.outputs.length}`,
      {
        code: "backend",
        fix: "return one array per output from the custom op's reference",
      },
    );
  }
  return list.map((r, i) => {
    const want = node.outputs[i];
    const t = ArrayBuffer.isView(r)
      ? { data: r as TensorData, shape: want.shape, dtype: want.dtype }
      : (r as HostTensor);
    if (
      t.dtype !== want.dtype || t.data?.length !== sizeOf(want.shape) ||
      sizeOf(t.shape) !== sizeOf(want.shape)
    ) {
      throw new KilnError(
        `${node.label}: output ${i} of the reference has ${t.data?.length} ${t.dtype} elements, inferShape said ${want.dtype}${
          formatShape(want.shape)
        }`,
        { code: "backend", fix: "make the custom op's reference agree with its inferShape" },
      );
    }
    checkHostTensor(t, `${node.label} output ${i}`);
    return t.data;
  });
}

/**
 * Evaluates one node synchronously on the reference kernels: what importers use to fold
 * constant subgraphs (ONNX shape arithmetic) at build time.
 */
export function evaluateNode(node: NodeInfo, inputs: readonly RefTensor[]): TensorData[] {
  return folder.evaluate(node, inputs);
}

const folder = new ReferenceBackend();
