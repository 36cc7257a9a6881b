/**
 * {@linkcode BackendBase}: the base of graph-level backends. A backend with a whole-graph compiler
 * overrides `compile`; a backend with per-op kernels overrides `executeNode` and gets `compile` as
 * an interpreter that frees each intermediate after its last use. Overriding neither is reported
 * when a graph is compiled. Single ops run through the public `runOp`, on any backend.
 *
 * @module
 */
import type { TensorData } from "../jit/ir/dtype.ts";
import { KilnError } from "../jit/support/errors.ts";
import type { Graph } from "../jit/ir/graph.ts";
import { customOp } from "../jit/runtime/custom_op.ts";
import { getOp, opNames } from "../jit/ops/mod.ts";
import {
  type Backend,
  type BackendCompileOptions,
  type BackendKind,
  type DeviceProfile,
  type NodeInfo,
  nodeInfo,
  type Program,
} from "../jit/runtime/backend.ts";
import type { RefTensor } from "../jit/ir/host_tensor.ts";

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

  /** The ops this backend runs as they are: its own, and custom ones with a kernel for it. */
  ops(): readonly string[] {
    const custom = opNames().filter((op) =>
      getOp(op).category === "custom" && customOp(op)?.kernels?.[this.id] !== undefined
    );
    return [...new Set([...this.nativeOps, ...custom])].sort();
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

  /**
   * Runs one node on host buffers: what a per-op backend implements (the default `compile`
   * interprets a graph with it). Backends with a whole-graph compiler override `compile` instead.
   */
  protected executeNode(_node: NodeInfo, _inputs: readonly RefTensor[]): Promise<TensorData[]> {
    return Promise.reject(neither(this.id));
  }

  /** Nothing to acquire by default. */
  prepare(): Promise<void> {
    return Promise.resolve();
  }
  /** Nothing in flight by default. */
  flush(): Promise<void> {
    return Promise.resolve();
  }
  /** Nothing held by default. */
  dispose(): void {}
  /** Clears the lost flag. */
  recover(): Promise<void> {
    this.dispose();
    this.#lost = false;
    return Promise.resolve();
  }
}

function neither(id: string): KilnError {
  return new KilnError(`Backend "${id}" implements neither compile() nor executeNode()`, {
    code: "backend",
    fix: "override one of them in the backend class",
  });
}
