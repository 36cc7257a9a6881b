/**
 * {@linkcode BackendBase}: the contract's two sides, each defined in terms of the other, so a
 * backend author implements one. A backend with a whole-graph compiler overrides `compile` and
 * gets the per-op helpers (`add`, `matmul`, …) by compiling one-node graphs; a backend with
 * per-op kernels overrides `executeNode` and gets `compile` as an interpreter that frees each
 * intermediate after its last use. Overriding neither is reported, not looped.
 *
 * @module
 */
import type { TensorData } from "../jit/dtype.ts";
import { KilnError } from "../jit/errors.ts";
import { Graph } from "../jit/graph.ts";
import { checkHostTensor, type HostTensor } from "../jit/host_tensor.ts";
import { customOp } from "../jit/custom_op.ts";
import { type Attrs, getOp, inferNode } from "../jit/ops/mod.ts";
import type {
  Backend,
  BackendCompileOptions,
  BackendKind,
  Cost,
  DeviceProfile,
  NodeInfo,
  Program,
  Workload,
} from "./backend.ts";
import type { RefTensor } from "./reference/tensor_io.ts";

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

/** Base class for backends; see the module documentation. */
export abstract class BackendBase implements Backend {
  /** Unique id. */
  abstract readonly id: string;
  /** Implementation version. */
  abstract readonly version: string;
  /** Hardware kind. */
  abstract readonly kind: BackendKind;
  /** Built-in ops this backend implements natively. */
  protected abstract readonly nativeOps: ReadonlySet<string>;
  #lost = false;
  #oneNode = new Map<string, Promise<Program>>();

  /** The device's capabilities. */
  abstract capabilities(): DeviceProfile;

  /** Whether the device is lost. */
  get deviceLost(): boolean {
    return this.#lost;
  }

  /** Marks the device lost or recovered (for subclasses handling device events). */
  protected setDeviceLost(lost: boolean): void {
    this.#lost = lost;
  }

  /** Native built-ins, and custom ops that carry a kernel for this backend. */
  supports(node: NodeInfo): boolean {
    const def = getOp(node.op);
    if (def.category === "custom") return customOp(node.op)?.kernels?.[this.id] !== undefined;
    return this.nativeOps.has(node.op);
  }

  /** A default estimate: a fixed rate for compute, nothing for transfers. */
  estimateCost(_graph: Graph, workload: Workload): Cost {
    return { compute: workload.flops / 1e9 + workload.bytes / 1e10, transfer: 0 };
  }

  /** Default: an interpreter over {@linkcode executeNode}. */
  compile(graph: Graph, _options?: BackendCompileOptions): Promise<Program> {
    if (this.executeNode === BackendBase.prototype.executeNode) {
      return Promise.reject(neither(this.id));
    }
    const lastUse = new Map<number, number>();
    graph.nodes.forEach((n) => n.inputs.forEach((v) => lastUse.set(v, n.id)));
    for (const o of graph.outputs) lastUse.set(o.value, Infinity);
    const infos = graph.nodes.map((_, i) => nodeInfo(graph, i));
    const run = async (args: readonly RefTensor[], outputs: readonly number[]) => {
      const env = new Map<number, RefTensor>();
      [...graph.inputs, ...graph.params].forEach((b, i) => env.set(b.value, args[i]));
      for (const n of graph.nodes) {
        const ins = n.inputs.map((v) => env.get(v)!);
        const outs = await this.executeNode(infos[n.id], ins);
        n.outputs.forEach((v, k) => env.set(v, { data: outs[k], ...graph.values[v] }));
        for (const v of n.inputs) if (lastUse.get(v) === n.id) env.delete(v);
      }
      return outputs.map((i) => env.get(graph.outputs[i].value)!.data);
    };
    return Promise.resolve({ run, dispose: () => {} });
  }

  /** Default: compiles `node` as a one-node graph (cached per signature) and runs it. */
  protected async executeNode(node: NodeInfo, inputs: readonly RefTensor[]): Promise<TensorData[]> {
    if (this.compile === BackendBase.prototype.compile) throw neither(this.id);
    const names = inputs.map((_, i) => `in${i}`);
    const graph = Graph.create({
      inputs: inputs.map((t, i) => ({ name: names[i], shape: t.shape, dtype: t.dtype })),
      nodes: [{
        op: node.op,
        inputs: names,
        outputs: node.outputs.map((_, i) => `out${i}`),
        attrs: node.attrs,
      }],
      outputs: node.outputs.map((_, i) => ({ name: `out${i}`, value: `out${i}` })),
    });
    const key = graph.canonical();
    let program = this.#oneNode.get(key);
    if (!program) this.#oneNode.set(key, program = this.compile(graph, { name: node.op }));
    return (await program).run(inputs, node.outputs.map((_, i) => i));
  }

  /** Runs one op on host tensors. */
  async op(op: string, inputs: readonly HostTensor[], attrs: Attrs = {}): Promise<HostTensor[]> {
    const ins = inputs.map((t, i) => checkHostTensor(t, `${op} input ${i}`)) as RefTensor[];
    if (ins.some((t) => (t.dtype as string) === "i64")) {
      throw new KilnError(`${op}: i64 tensors are only accepted at a graph's boundary`, {
        code: "bad-input",
        fix: "pass i32 data to per-op helpers, or compile a graph with an i64 input",
      });
    }
    const label = `op ${op}`;
    const outputs = inferNode(op, ins, attrs, label);
    const data = await this.executeNode({ op, attrs, inputs: ins, outputs, label }, ins);
    return outputs.map((t, i) => ({ data: data[i], shape: t.shape, dtype: t.dtype }));
  }

  async #one(op: string, inputs: readonly HostTensor[], attrs?: Attrs): Promise<HostTensor> {
    return (await this.op(op, inputs, attrs))[0];
  }

  /** Elementwise `a + b` with broadcasting. */
  add(a: HostTensor, b: HostTensor): Promise<HostTensor> {
    return this.#one("Add", [a, b]);
  }
  /** Elementwise `a - b` with broadcasting. */
  sub(a: HostTensor, b: HostTensor): Promise<HostTensor> {
    return this.#one("Sub", [a, b]);
  }
  /** Elementwise `a * b` with broadcasting. */
  mul(a: HostTensor, b: HostTensor): Promise<HostTensor> {
    return this.#one("Mul", [a, b]);
  }
  /** Elementwise `a / b` with broadcasting. */
  div(a: HostTensor, b: HostTensor): Promise<HostTensor> {
    return this.#one("Div", [a, b]);
  }
  /** Elementwise `e^x`. */
  exp(x: HostTensor): Promise<HostTensor> {
    return this.#one("Exp", [x]);
  }
  /** Batched matrix product with NumPy semantics. */
  matmul(a: HostTensor, b: HostTensor): Promise<HostTensor> {
    return this.#one("MatMul", [a, b]);
  }
  /** Sum over `axes` (all when omitted). */
  reduceSum(x: HostTensor, axes?: readonly number[], keepdims = true): Promise<HostTensor> {
    return this.#one("ReduceSum", [x], { axes, keepdims: keepdims ? 1 : 0 });
  }
  /** Reshape to `shape` (0 copies a dimension, -1 infers one). */
  reshape(x: HostTensor, shape: readonly number[]): Promise<HostTensor> {
    return this.#one("Reshape", [x], { shape });
  }
  /** Permute axes. */
  transpose(x: HostTensor, perm?: readonly number[]): Promise<HostTensor> {
    return this.#one("Transpose", [x], { perm });
  }

  /** Nothing to acquire by default. */
  prepare(): Promise<void> {
    return Promise.resolve();
  }
  /** Nothing in flight by default. */
  flush(): Promise<void> {
    return Promise.resolve();
  }
  /** Drops cached one-node programs. */
  dispose(): void {
    for (const p of this.#oneNode.values()) p.then((prog) => prog.dispose(), () => {});
    this.#oneNode.clear();
  }
  /** Clears the lost flag and cached programs. */
  recover(): Promise<void> {
    this.dispose();
    this.#lost = false;
    return Promise.resolve();
  }
}

/**
 * Runs one op on `backend` as a one-node graph through the whole pipeline (legalize, fuse,
 * codegen, run): the per-op side for backends whose primary path is whole-graph compilation.
 */
export async function runOpAsGraph(
  backend: Backend,
  op: string,
  inputs: readonly HostTensor[],
  attrs: Attrs = {},
): Promise<HostTensor[]> {
  // Imported on use: compile depends on the registry, which depends on the backends.
  const { compile } = await import("../jit/compile.ts");
  const names = inputs.map((_, i) => `x${i}`);
  const types = inputs.map((t) => ({
    shape: t.shape,
    dtype: t.dtype === "i64" ? "i32" as const : t.dtype,
  }));
  const outputs = inferNode(op, types, attrs, `op ${op}`).map((_, i) => `y${i}`);
  const graph = Graph.create({
    inputs: inputs.map((t, i) => ({ name: names[i], shape: t.shape, dtype: t.dtype })),
    nodes: [{ op, inputs: names, outputs, attrs }],
    outputs: outputs.map((name) => ({ name, value: name })),
  });
  const exe = await compile(graph, { backend });
  try {
    const result = await exe.run(Object.fromEntries(inputs.map((t, i) => [names[i], t])));
    return outputs.map((name) => result[name]);
  } finally {
    exe.dispose();
  }
}

function neither(id: string): KilnError {
  return new KilnError(`Backend "${id}" implements neither compile() nor executeNode()`, {
    code: "backend",
    fix: "override one of them in the backend class",
  });
}
