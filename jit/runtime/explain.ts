/**
 * `explain`: the compiled plan of a graph or executable, for people (text), for tools (JSON-ready
 * objects) and for pictures (Graphviz DOT): every kernel with its backend, pattern and the graph
 * nodes fused into it, multi-kernel groups (attention), the buffers that cross between kernels,
 * the memory plan, and the fusion log that says why each boundary is where it is.
 *
 * @module
 */
import { compile, type CompileOptions } from "../compile.ts";
import type { Executable } from "./executable.ts";
import type { Graph } from "../ir/graph.ts";

import { formatShape } from "../ir/shape.ts";

/** One kernel in an explanation. */
export interface ExplainedKernel {
  /** Kernel name. */
  readonly name: string;
  /** Backend that runs it. */
  readonly backend: string;
  /** Estimated milliseconds on that backend (the cost figure that placed it). */
  readonly estimatedMs?: number;
  /**
   * Milliseconds it took on the device in the executable's last run, where the backend measures
   * it (WebGPU with `profile: true` on a device with `timestamp-query`).
   */
  readonly deviceMs?: number;
  /** Recognized pattern. */
  readonly pattern: string;
  /** Ops of the graph nodes fused into it. */
  readonly ops: string[];
  /** The graph nodes fused into it. */
  readonly nodes: string[];
  /** Multi-kernel group, if any. */
  readonly group?: string;
  /** Buffers read: `dtype[shape]`. */
  readonly inputs: string[];
  /** Buffers written: `dtype[shape]`. */
  readonly outputs: string[];
  /** Iteration space and reduced axes. */
  readonly space: { shape: readonly number[]; reduced: readonly number[] };
}

/** The plan of one compiled graph. */
export interface Explanation {
  /** Backend the plan was compiled for. */
  readonly backend: string;
  /** Kernels in execution order. */
  readonly kernels: ExplainedKernel[];
  /** Multi-kernel groups and their members. */
  readonly groups: Record<string, string[]>;
  /** Buffers passed from one kernel to another. */
  readonly edges: { from: string; to: string; tensor: string }[];
  /** Buffers moved between memory spaces (host ↔ device). */
  readonly transfers: { value: number; from: string; to: string; bytes: number }[];
  /** Why kernels are placed where they are. */
  readonly placement: string;
  /** Intermediate memory: planned bytes and bytes without reuse. */
  readonly memory: { plannedBytes: number; naiveBytes: number; slots: number };
  /** Fusion decisions. */
  readonly log: readonly string[];
  /** Where kernel code came from. */
  readonly cache: Readonly<{ memory: number; disk: number; generated: number }>;
  /** The plan as text. */
  text(): string;
  /** The plan as a Graphviz digraph (kernels as boxes, buffers as edges). */
  dot(): string;
}

const opOf = (label: string) => /\(([^()]+)\)$/.exec(label)?.[1] ?? label;

/** Explains an executable, or compiles a graph with `options` and explains that. */
export async function explain(
  target: Graph | Executable,
  options: CompileOptions = {},
): Promise<Explanation> {
  // Anything else goes to compile, which refuses what is not a graph with a KilnError.
  const runs = typeof target === "object" && target !== null && "run" in target;
  const exe = runs ? target : await compile(target, options);
  const plan = exe.plan;
  if (!plan) {
    const backend = exe.backend.id;
    const nodes = exe.graph.nodes.map((n) => n.label);
    const kernels: ExplainedKernel[] = exe.graph.nodes.map((n) => ({
      name: n.op,
      backend,
      pattern: "node",
      ops: [n.op],
      nodes: [n.label],
      inputs: n.inputs.map((v) =>
        `${exe.graph.values[v].dtype}${formatShape(exe.graph.values[v].shape)}`
      ),
      outputs: n.outputs.map((v) =>
        `${exe.graph.values[v].dtype}${formatShape(exe.graph.values[v].shape)}`
      ),
      space: { shape: exe.graph.values[n.outputs[0]].shape, reduced: [] },
    }));
    return explanation({
      backend,
      kernels,
      groups: {},
      edges: [],
      transfers: [],
      placement: exe.reason ?? `named: ${backend}`,
      memory: { plannedBytes: 0, naiveBytes: 0, slots: 0 },
      log: [`${backend} runs ${nodes.length} nodes one by one (no kernel IR)`],
      cache: { memory: 0, disk: 0, generated: 0 },
    });
  }
  const measured = new Map(exe.deviceTimes().map((t) => [t.kernel, t.ms]));
  const kernels = plan.kernels.map((k, i): ExplainedKernel => ({
    name: k.name,
    backend: plan.schedule.placement[i],
    estimatedMs: plan.schedule.kernelMs[i],
    deviceMs: measured.get(k.name),
    pattern: k.pattern,
    ops: [...new Set(k.ops.map(opOf))],
    nodes: [...k.ops],
    group: k.group,
    inputs: k.inputs.map((b) => `${b.dtype}${formatShape(b.shape)}`),
    outputs: k.outputs.map((b) => `${b.dtype}${formatShape(b.shape)}`),
    space: { shape: k.space, reduced: k.reduced },
  }));
  const groups: Record<string, string[]> = {};
  for (const k of kernels) if (k.group) (groups[k.group] ??= []).push(k.name);
  const producer = new Map(
    plan.kernels.flatMap((k) => k.outputs.map((o) => [o.value, k.name] as const)),
  );
  const edges = plan.kernels.flatMap((k) =>
    k.inputs.flatMap((b) =>
      producer.has(b.value)
        ? [{
          from: producer.get(b.value)!,
          to: k.name,
          tensor: `${b.dtype}${formatShape(b.shape)}`,
        }]
        : []
    )
  );
  return explanation({
    backend: plan.backend,
    kernels,
    groups,
    edges,
    transfers: [...plan.schedule.transfers],
    placement: plan.schedule.reason,
    memory: {
      plannedBytes: plan.memory.plannedBytes,
      naiveBytes: plan.memory.naiveBytes,
      slots: plan.memory.slots.length,
    },
    log: plan.log,
    cache: plan.sources,
  });
}

function explanation(e: Omit<Explanation, "text" | "dot">): Explanation {
  return {
    ...e,
    text: () => {
      const lines = [
        `plan on ${e.backend}: ${e.kernels.length} kernel(s), intermediates ${e.memory.plannedBytes} B planned (${e.memory.naiveBytes} B without reuse)`,
        `placement: ${e.placement}; ${e.transfers.length} transfer(s), ${
          e.transfers.reduce((s, t) => s + t.bytes, 0)
        } B`,
      ];
      for (const k of e.kernels) {
        lines.push(
          `  ${k.name}${k.group ? ` [${k.group}]` : ""} on ${k.backend}: ${k.ops.join(" + ")}  (${
            k.inputs.join(", ")
          } → ${k.outputs.join(", ")})${
            k.deviceMs === undefined ? "" : `  device ${k.deviceMs.toFixed(3)} ms`
          }`,
        );
      }
      if (e.log.length) lines.push("fusion log:", ...e.log.map((l) => `  ${l}`));
      return lines.join("\n");
    },
    dot: () => {
      const q = (s: string) => JSON.stringify(s);
      const lines = ["digraph kiln {", "  rankdir=LR;", "  node [shape=box, fontname=monospace];"];
      for (const k of e.kernels) {
        lines.push(
          // Real newlines: q() writes them as DOT's \n escape (a line break in the label).
          `  ${q(k.name)} [label=${q(`${k.name}\n${k.ops.join(" + ")}\n${k.backend}`)}];`,
        );
      }
      for (const edge of e.edges) {
        lines.push(`  ${q(edge.from)} -> ${q(edge.to)} [label=${q(edge.tensor)}];`);
      }
      for (const [g, members] of Object.entries(e.groups)) {
        lines.push(
          `  subgraph ${q(`cluster_${g}`)} { label=${q(g)}; ${members.map(q).join("; ")}; }`,
        );
      }
      lines.push("}");
      return lines.join("\n");
    },
  };
}
