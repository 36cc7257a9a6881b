/**
 * Realization of lazy tensors: the pending expression DAG behind a tensor becomes a graph whose
 * inputs are the leaf tensors' data, in discovery order. Because leaves are inputs (not constants)
 * and names are generated, two identical chains over different data give the same structural
 * hash, so the compiled executable is found in the cache instead of being compiled again.
 *
 * @module
 */
import { compile, registeredBackends } from "../compile.ts";
import type { TensorData } from "../ir/dtype.ts";
import type { Executable } from "../runtime/executable.ts";
import { Graph, type NodeSpec } from "../ir/graph.ts";
import type { Attrs, ValueType } from "../ops/mod.ts";
import { checkOptions, KilnError, shown } from "../support/errors.ts";

/**
 * A lazily computed value: output `src.index` of a pending op until realized, host data after.
 * Realizing swaps `src` for `data`, so every chain that reads the value reuses the result and the
 * producing subgraph can be collected.
 */
export interface Lazy {
  /** Shape and dtype. */
  readonly type: ValueType;
  /** The data, once known. */
  data?: TensorData;
  /** The pending op and output index, until realized. */
  src?: { readonly node: LazyOp; readonly index: number };
}

/** A pending op shared by all of its outputs. */
export interface LazyOp {
  /** Op name. */
  readonly op: string;
  /** Inputs. */
  readonly inputs: readonly Lazy[];
  /** Attributes. */
  readonly attrs: Attrs;
  /** Output types. */
  readonly outputs: readonly ValueType[];
}

/** Counters of the realization cache. */
export interface RealizeStats {
  /** Realizations served by a cached executable. */
  hits: number;
  /** Realizations that compiled. */
  misses: number;
  /** Hash matches whose canonical forms differed (compiled anyway). */
  collisions: number;
  /** Milliseconds spent compiling. */
  compileMs: number;
  /** Executables held. */
  entries: number;
  /** Executables evicted (least recently used). */
  evictions: number;
}

/** Options of the lazy Tensor runtime. */
export interface TensorRuntimeOptions {
  /** Backend id that realizes tensors (default `"reference"`). */
  backend?: string;
  /** Most executables kept (default 256). */
  maxEntries?: number;
}

const options: Required<TensorRuntimeOptions> = { backend: "reference", maxEntries: 256 };
const cache = new Map<string, { canonical: string; exe: Executable }>();
const ZERO: Readonly<RealizeStats> = {
  hits: 0,
  misses: 0,
  collisions: 0,
  compileMs: 0,
  entries: 0,
  evictions: 0,
};
const stats: RealizeStats = { ...ZERO };

/** Changes the Tensor runtime's options; a new backend clears the cache. */
export function configureTensors(next: TensorRuntimeOptions): void {
  checkOptions(next, ["backend", "maxEntries"], "configureTensors");
  const most = next.maxEntries;
  if (most !== undefined && !(Number.isSafeInteger(most) && most >= 1)) {
    throw new KilnError(
      `configureTensors: maxEntries must be a whole number >= 1, got ${shown(most)}`,
      {
        code: "bad-input",
        fix: "pass maxEntries: 1 or more (default 256)",
      },
    );
  }
  if (next.backend !== undefined) registeredBackends().get(next.backend);
  if (next.backend !== undefined && next.backend !== options.backend) clearRealizeCache();
  Object.assign(options, next);
}

/** A copy of the realization cache counters. */
export function realizeStats(): RealizeStats {
  return { ...stats, entries: cache.size };
}

/** Empties the realization cache (disposing its executables) and resets its counters. */
export function clearRealizeCache(): void {
  for (const { exe } of cache.values()) exe.dispose();
  cache.clear();
  Object.assign(stats, ZERO);
}

/**
 * Builds the graph computing `target`, with the leaves it reads in input order. The walk keeps
 * its own stack: a chain of thousands of ops would overflow the call stack of a recursive one.
 */
export function graphOf(target: Lazy): { graph: Graph; leaves: Lazy[] } {
  const leaves: Lazy[] = [];
  const names = new Map<Lazy | LazyOp, string>();
  const nodes: NodeSpec[] = [];
  const isLeaf = (v: Lazy) => v.data !== undefined || !v.src;
  const ref = (v: Lazy): string => {
    if (!isLeaf(v)) return `${names.get(v.src!.node)}.${v.src!.index}`;
    let name = names.get(v);
    if (!name) {
      names.set(v, name = `in${leaves.length}`);
      leaves.push(v);
    }
    return name;
  };
  // Depth first, inputs left to right, a node named once its inputs are: the order (and so the
  // names and the hash) a recursive walk gives.
  const pending: { node: LazyOp; next: number }[] = [];
  const open = (v: Lazy) => {
    if (isLeaf(v)) ref(v);
    else if (!names.has(v.src!.node)) pending.push({ node: v.src!.node, next: 0 });
  };
  open(target);
  while (pending.length) {
    const top = pending[pending.length - 1];
    if (top.next < top.node.inputs.length) {
      open(top.node.inputs[top.next++]);
      continue;
    }
    pending.pop();
    const base = `v${nodes.length}`;
    names.set(top.node, base);
    nodes.push({
      op: top.node.op,
      inputs: top.node.inputs.map(ref),
      outputs: top.node.outputs.map((_, i) => `${base}.${i}`),
      attrs: top.node.attrs,
    });
  }
  const graph = Graph.create({
    inputs: leaves.map((l, i) => ({ name: `in${i}`, shape: l.type.shape, dtype: l.type.dtype })),
    nodes,
    outputs: [{ name: "out", value: ref(target) }],
  });
  return { graph, leaves };
}

/** Computes `target`'s data, compiling its graph unless an isomorphic one is cached. */
export async function realize(target: Lazy): Promise<TensorData> {
  if (target.data !== undefined) return target.data;
  const { graph, leaves } = graphOf(target);
  const key = `${options.backend}:${graph.hash()}`;
  let entry = cache.get(key);
  if (entry && entry.canonical !== graph.canonical()) {
    stats.collisions++;
    entry = undefined;
  }
  if (entry) {
    stats.hits++;
    cache.delete(key);
  } else {
    stats.misses++;
    const exe = await compile(graph, { backend: options.backend });
    stats.compileMs += exe.compileMs;
    entry = { canonical: graph.canonical(), exe };
  }
  cache.set(key, entry);
  while (cache.size > options.maxEntries) {
    const [oldest, { exe }] = cache.entries().next().value!;
    cache.delete(oldest);
    exe.dispose();
    stats.evictions++;
  }
  const inputs = Object.fromEntries(leaves.map((l, i) => [`in${i}`, { ...l.type, data: l.data! }]));
  const result = await entry.exe.run(inputs);
  target.data = result.out.data;
  target.src = undefined;
  return target.data;
}
