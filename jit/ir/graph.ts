/**
 * The graph IR: an immutable, validated DAG of op nodes over typed values. {@linkcode Graph.create}
 * is the only way to make one, and it checks everything once — names, ops, arity, attributes,
 * dangling references, cycles, shapes, dtypes — so every later stage (legalize, fuse, schedule,
 * codegen) can trust what it receives. Nodes are stored in topological order and nodes that no
 * output depends on are dropped.
 *
 * @module
 */
import { checkBudget } from "../runtime/budget.ts";
import {
  type BoundaryDType,
  type DType,
  internalData,
  internalDType,
  isDType,
  type TensorData,
} from "./dtype.ts";
import { KilnError, shown } from "../support/errors.ts";
import { checkHostTensor, type HostTensor } from "./host_tensor.ts";
import { type Attrs, inferNode } from "../ops/mod.ts";
import { canonicalize } from "./canonical.ts";
import { formatShape, isValidShape, type Shape } from "./shape.ts";
import { handOver, isHandedOver } from "./hand_over.ts";

/** A graph input as declared in a {@linkcode GraphSpec}. */
export interface InputSpec {
  /** Name the caller passes data under. */
  readonly name: string;
  /** Static shape. */
  readonly shape: Shape;
  /** Element type (`i64` is accepted and held as `i32`). */
  readonly dtype: BoundaryDType;
}

/** A named parameter (weights): an input with optional initial data, settable with `setParam`. */
export interface ParamSpec extends InputSpec {
  /** Initial data; copied when the graph is created. */
  readonly data?: TensorData;
}

/** A node as declared in a {@linkcode GraphSpec}: inputs and outputs are value names. */
export interface NodeSpec {
  /** Op name. */
  readonly op: string;
  /** Names of the input values, in order. */
  readonly inputs: readonly string[];
  /** Names for the output values, in order. */
  readonly outputs: readonly string[];
  /** Attributes. */
  readonly attrs?: Attrs;
  /** Optional node name for messages and `explain`. */
  readonly name?: string;
}

/** A graph output: which value is exposed under which name. */
export interface OutputSpec {
  /** The name results are returned under. */
  readonly name: string;
  /** The value exposed. */
  readonly value: string;
  /** `i64` to widen an `i32` (or f64) result at the boundary. */
  readonly dtype?: BoundaryDType;
}

/** The raw description {@linkcode Graph.create} validates; nodes may come in any order. */
export interface GraphSpec {
  /** Graph inputs. */
  readonly inputs: readonly InputSpec[];
  /** Parameters. */
  readonly params?: readonly ParamSpec[];
  /** Nodes, in any order. */
  readonly nodes: readonly NodeSpec[];
  /** Graph outputs. */
  readonly outputs: readonly OutputSpec[];
}

/** A typed value of a {@linkcode Graph}. */
export interface Value {
  /** Index in `graph.values`. */
  readonly id: number;
  /** The value's name. */
  readonly name: string;
  /** Static shape. */
  readonly shape: Shape;
  /** Element type. */
  readonly dtype: DType;
  /** Index of the producing node, or -1 for inputs and params. */
  readonly producer: number;
}

/** A node of a {@linkcode Graph}, referring to values by id. */
export interface Node {
  /** Index in `graph.nodes` (topological order). */
  readonly id: number;
  /** Op name. */
  readonly op: string;
  /** Input value ids. */
  readonly inputs: readonly number[];
  /** Output value ids. */
  readonly outputs: readonly number[];
  /** Attributes. */
  readonly attrs: Attrs;
  /** Label for messages, e.g. `node "fc1" (MatMul)`. */
  readonly label: string;
  /** The node's name (its first output's when it was given none), e.g. `fc1`. */
  readonly name: string;
}

/** A graph input or parameter bound to a value. */
export interface GraphInput {
  /** The input's name. */
  readonly name: string;
  /** The value id. */
  readonly value: number;
  /** Boundary dtype (may be `i64`). */
  readonly dtype: BoundaryDType;
  /** The declared shape. */
  readonly shape: Shape;
}

/** A parameter bound to a value, with its initial data (internal dtype) if any. */
export interface GraphParam extends GraphInput {
  /** Initial data, already narrowed to the internal dtype. */
  readonly data?: TensorData;
}

/** A graph output bound to a value. */
export interface GraphOutput {
  /** The output's name. */
  readonly name: string;
  /** The value id. */
  readonly value: number;
  /** Boundary dtype (may be `i64`). */
  readonly dtype: BoundaryDType;
}

const internal = internalDType;

/** An immutable, validated tensor graph. Build one with `GraphBuilder` or {@linkcode Graph.create}. */
export class Graph {
  /** Every value, indexed by id. */
  readonly values: readonly Value[];
  /** Nodes in topological order. */
  readonly nodes: readonly Node[];
  /** Graph inputs, in declaration order. */
  readonly inputs: readonly GraphInput[];
  /** Parameters, in declaration order. */
  readonly params: readonly GraphParam[];
  /** Graph outputs, in declaration order. */
  readonly outputs: readonly GraphOutput[];
  #canonical?: { text: string; hash: string };
  #structure?: string;
  #consumers?: number[][];

  private constructor(parts: GraphParts) {
    this.values = Object.freeze(parts.values.map((v) => Object.freeze(v)));
    this.nodes = Object.freeze(parts.nodes.map((n) => Object.freeze(n)));
    this.inputs = Object.freeze(parts.inputs.map((v) => Object.freeze(v)));
    this.params = Object.freeze(parts.params.map((v) => Object.freeze(v)));
    this.outputs = Object.freeze(parts.outputs.map((v) => Object.freeze(v)));
  }

  /**
   * Validates `spec` and builds the graph. Throws a {@linkcode KilnError} naming the node, op and
   * shapes involved, with a `Fix:` hint, for any defect.
   */
  static create(spec: GraphSpec): Graph {
    return new Graph(validate(checkSpec(spec)));
  }

  /** Structural hash: equal for isomorphic graphs, whatever the node order or value names. */
  hash(): string {
    return (this.#canonical ??= canonicalize(this)).hash;
  }

  /** Canonical serialization the hash is taken of; caches compare it to rule out collisions. */
  canonical(): string {
    return (this.#canonical ??= canonicalize(this)).text;
  }

  /**
   * The hash of the graph's structure: as {@linkcode Graph.hash}, with constants past 64 bytes
   * by type alone (graphs that differ only in their weights' values run alike).
   */
  structureHash(): string {
    return this.#structure ??= canonicalize(this, { bytes: false }).hash;
  }

  /** Ids of the nodes that read value `id`. */
  consumers(id: number): readonly number[] {
    if (!this.#consumers) {
      this.#consumers = this.values.map(() => []);
      for (const n of this.nodes) for (const v of n.inputs) this.#consumers[v].push(n.id);
    }
    return this.#consumers[id];
  }

  /** A readable listing of the graph. */
  toString(): string {
    const t = (id: number) =>
      `${this.values[id].name}: ${this.values[id].dtype}${formatShape(this.values[id].shape)}`;
    const lines = [
      ...this.inputs.map((i) => `input ${t(i.value)}`),
      ...this.params.map((p) => `param ${t(p.value)}`),
      ...this.nodes.map((n) =>
        `${n.outputs.map(t).join(", ")} = ${n.op}(${
          n.inputs.map((i) => this.values[i].name).join(", ")
        })`
      ),
      ...this.outputs.map((o) => `output ${o.name} = ${this.values[o.value].name}`),
    ];
    return lines.join("\n");
  }
}

/**
 * The inputs, params and outputs of `graph` as a {@linkcode GraphSpec} declares them, for a pass
 * that rebuilds the graph around new nodes; `name` renames the output values (default: theirs).
 */
export function boundaryOf(
  graph: Graph,
  name: (value: number) => string = (v) => graph.values[v].name,
): Pick<GraphSpec, "inputs" | "outputs"> & { params: ParamSpec[] } {
  return {
    inputs: graph.inputs.map((i) => ({ name: i.name, shape: i.shape, dtype: i.dtype })),
    params: graph.params.map((p) => ({
      name: p.name,
      shape: p.shape,
      dtype: graph.values[p.value].dtype,
      data: p.data,
    })),
    outputs: graph.outputs.map((o) => ({ name: o.name, value: name(o.value), dtype: o.dtype })),
  };
}

/**
 * Node `n` of `graph` as a {@linkcode NodeSpec} for a pass that rebuilds the graph, its values by
 * name; `input` names its inputs (default: their own names, as `boundaryOf` names values).
 */
export function nodeSpecOf(
  graph: Graph,
  n: Node,
  input: (value: number) => string = (v) => graph.values[v].name,
): NodeSpec {
  return {
    op: n.op,
    inputs: n.inputs.map(input),
    outputs: n.outputs.map((v) => graph.values[v].name),
    attrs: n.attrs,
    name: n.name,
  };
}

/** The node of `graph` that makes value `id`, or `undefined` for an input or param. */
export function producerOf(graph: Graph, id: number): Node | undefined {
  return graph.nodes[graph.values[id].producer];
}

/** How many times value `id` of `graph` is read: by nodes' inputs and as a graph output. */
export function readCount(graph: Graph, id: number): number {
  return graph.consumers(id).length + graph.outputs.filter((o) => o.value === id).length;
}

/** The one node of `graph` that reads value `id` (`undefined`: none, several, or a graph output). */
export function soleReader(graph: Graph, id: number): Node | undefined {
  return readCount(graph, id) === 1 ? graph.nodes[graph.consumers(id)[0]] : undefined;
}

/**
 * Names for values a rewrite of `graph` adds: `base` where no value has it, else `base_1`,
 * `base_2`, … (each name given once).
 */
export function freshNames(graph: Graph): (base: string) => string {
  const taken = new Set(graph.values.map((v) => v.name));
  return (base) => {
    let n = base;
    for (let i = 1; taken.has(n); i++) n = `${base}_${i}`;
    taken.add(n);
    return n;
  };
}

function fail(what: string, fix: string, code: KilnError["code"]): never {
  throw new KilnError(what, { code, fix });
}

function checkDecl(decl: InputSpec, kind: string): void {
  if (typeof decl.name !== "string" || decl.name === "") {
    fail(`${kind} has no name`, `give every ${kind} a non-empty name`, "invalid-graph");
  }
  if (!isValidShape(decl.shape)) {
    fail(
      `${kind} "${decl.name}": shape ${shown(decl.shape)} is invalid`,
      "use a list of non-negative integers",
      "invalid-graph",
    );
  }
  if (!isDType(decl.dtype)) {
    fail(
      `${kind} "${decl.name}": unknown dtype ${shown(decl.dtype)}`,
      "use f32, f16, bf16, i32, u32, i8, u8, bool or i64",
      "dtype-mismatch",
    );
  }
}

/** `data` to keep in a graph: a copy, unless handed over or kept by a graph already. */
function owned(data: TensorData): TensorData {
  return isHandedOver(data) ? data : handOver(data.slice());
}

function paramData(p: ParamSpec): TensorData | undefined {
  if (p.data === undefined) return undefined;
  const t = checkHostTensor({ data: p.data, shape: p.shape, dtype: p.dtype }, `param "${p.name}"`);
  return keptData(t, `param "${p.name}"`);
}

/** A boundary tensor's data as a graph keeps it: converted (`internalData`), else its own copy. */
function keptData(t: HostTensor, where: string): TensorData {
  const data = internalData(t.data, t.dtype, where);
  return data === t.data ? owned(data) : data;
}

/** Copies Constant tensors so later writes by the caller cannot change the graph. */
function ownAttrs(attrs: Attrs | undefined, where: string): Attrs {
  const out: Record<string, Attrs[string]> = {};
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined) continue;
    if (typeof v === "object" && !Array.isArray(v)) {
      const t = checkHostTensor(v, `${where} attribute ${k}`);
      const data = keptData(t, where);
      out[k] = Object.freeze({
        data,
        shape: Object.freeze([...t.shape]),
        dtype: internal(t.dtype),
      }) as HostTensor;
    } else {
      out[k] = Array.isArray(v) ? Object.freeze([...v]) : v;
    }
  }
  return Object.freeze(out);
}

interface GraphParts {
  values: Value[];
  nodes: Node[];
  inputs: GraphInput[];
  params: GraphParam[];
  outputs: GraphOutput[];
}

/** The values of a graph being validated: defined once each, by name, within the budget. */
class ValueTable {
  readonly values: Value[] = [];
  readonly byName = new Map<string, number>();

  /** Defines value `name`, produced by node `producer` (−1: an input or param). */
  define(name: string, shape: Shape, dtype: DType, producer: number, what: string): number {
    if (this.byName.has(name)) {
      fail(
        `${what}: the name "${name}" is defined twice`,
        "give every input, param and node output a unique name",
        "duplicate-name",
      );
    }
    checkBudget(shape, dtype, what);
    const id = this.values.length;
    this.values.push({ id, name, shape: Object.freeze([...shape]), dtype, producer });
    this.byName.set(name, id);
    return id;
  }
}

/** `spec` where its lists are lists (else a field's `map` had failed inside as a TypeError). */
function checkSpec(spec: GraphSpec): GraphSpec {
  const optional = (k: string) => k === "params" && spec.params === undefined;
  const wrong = typeof spec !== "object" || spec === null
    ? "spec"
    : (["inputs", "nodes", "outputs", "params"] as const).find((k) =>
      !Array.isArray(spec[k]) && !optional(k)
    );
  if (wrong === undefined) return spec;
  throw new KilnError(`Graph.create: ${wrong} is ${shown(wrong === "spec" ? spec : spec[wrong])}`, {
    code: "bad-input",
    fix: "pass { inputs: [...], nodes: [...], outputs: [...] } (params optional), or build the " +
      "graph with GraphBuilder",
  });
}

/**
 * `input` where it is a graph (by shape: a graph of another copy of kiln's modules counts), else
 * a typed error naming `what` took it: a fusion plan, a builder or nothing had failed inside.
 */
export function checkGraph(input: unknown, what: string): Graph {
  const g = input as Partial<Graph> | undefined;
  if (typeof g?.hash === "function" && Array.isArray(g.nodes) && Array.isArray(g.outputs)) {
    return input as Graph;
  }
  const kernels = (input as { kernels?: unknown })?.kernels !== undefined;
  throw new KilnError(
    `${what} takes a Graph, got ${kernels ? "fuse()'s kernel plan" : shown(input)}`,
    {
      code: "bad-input",
      fix: kernels
        ? "pass the graph itself: compile() fuses it (fuse() is for inspecting the plan)"
        : "build a Graph (GraphBuilder.build(), importOnnx, or a Tensor's graph) and pass it",
    },
  );
}

/**
 * A spec checked and made a graph: declarations defined, nodes that no output depends on
 * dropped, the rest in topological order with their types inferred, outputs checked.
 */
function validate(spec: GraphSpec): GraphParts {
  const table = new ValueTable();
  const inputs = spec.inputs.map((i): GraphInput => {
    checkDecl(i, "input");
    return {
      name: i.name,
      dtype: i.dtype,
      shape: [...i.shape],
      value: table.define(i.name, i.shape, internal(i.dtype), -1, `input "${i.name}"`),
    };
  });
  const params = (spec.params ?? []).map((p): GraphParam => {
    checkDecl(p, "param");
    const data = paramData(p);
    return {
      name: p.name,
      dtype: p.dtype,
      shape: [...p.shape],
      data,
      value: table.define(p.name, p.shape, internal(p.dtype), -1, `param "${p.name}"`),
    };
  });
  const producerOf = producers(spec, table.byName);
  const sorted = topologicalOrder(spec, liveNodes(spec, table.byName, producerOf), producerOf);
  const nodes: Node[] = sorted.map((i, id) => {
    const n = spec.nodes[i];
    const where = `node ${label(n, i)}`;
    const ins = n.inputs.map((x) => table.byName.get(x)!);
    const attrs = ownAttrs(n.attrs, where);
    const types = inferNode(n.op, ins.map((v) => table.values[v]), attrs, `${where} (${n.op})`);
    if (types.length !== n.outputs.length) {
      fail(
        `${where} (${n.op}) produces ${types.length} outputs, ${n.outputs.length} are named`,
        `name exactly ${types.length} outputs`,
        "invalid-graph",
      );
    }
    const outs = types.map((t, k) => table.define(n.outputs[k], t.shape, t.dtype, id, where));
    const name = n.name ?? n.outputs[0] ?? `#${i}`;
    return { id, op: n.op, inputs: ins, outputs: outs, attrs, label: `${where} (${n.op})`, name };
  });
  const outputs = graphOutputs(spec, table);
  return { values: table.values, nodes, inputs, params, outputs };
}

/** Every node output's producing node (by spec index), so inputs resolve in any node order. */
function producers(spec: GraphSpec, declared: ReadonlyMap<string, number>): Map<string, number> {
  const producerOf = new Map<string, number>();
  spec.nodes.forEach((n, i) => {
    for (const o of n.outputs) {
      if (producerOf.has(o) || declared.has(o)) {
        fail(
          `node ${label(n, i)}: output name "${o}" is defined twice`,
          "give every value a unique name",
          "duplicate-name",
        );
      }
      producerOf.set(o, i);
    }
  });
  return producerOf;
}

/** The nodes some graph output depends on; a name nothing defines is an error. */
function liveNodes(
  spec: GraphSpec,
  declared: ReadonlyMap<string, number>,
  producerOf: ReadonlyMap<string, number>,
): Set<number> {
  const live = new Set<number>();
  const stack: string[] = [];
  for (const o of spec.outputs) {
    if (!declared.has(o.value) && !producerOf.has(o.value)) {
      fail(
        `output "${o.name}" refers to "${o.value}", which nothing defines`,
        "output a declared input or a node's output",
        "dangling-input",
      );
    }
    stack.push(o.value);
  }
  while (stack.length) {
    const name = stack.pop()!;
    const i = producerOf.get(name);
    if (i === undefined || live.has(i)) continue;
    live.add(i);
    for (const input of spec.nodes[i].inputs) {
      if (!declared.has(input) && !producerOf.has(input)) {
        fail(
          `node ${
            label(spec.nodes[i], i)
          }: input "${input}" is not defined by any input, param or node`,
          "declare it with input()/param() or add the node that produces it",
          "dangling-input",
        );
      }
      stack.push(input);
    }
  }
  return live;
}

/** The `live` nodes in topological order (Kahn's, in spec order); a cycle is an error. */
function topologicalOrder(
  spec: GraphSpec,
  live: ReadonlySet<number>,
  producerOf: ReadonlyMap<string, number>,
): number[] {
  const order = [...live].sort((a, b) => a - b);
  const pending = new Map(
    order.map((i) => [i, spec.nodes[i].inputs.filter((x) => producerOf.has(x)).length]),
  );
  const ready = order.filter((i) => pending.get(i) === 0);
  const sorted: number[] = [];
  const users = new Map<string, number[]>();
  for (const i of order) {
    for (const x of spec.nodes[i].inputs) {
      if (producerOf.has(x)) users.set(x, [...(users.get(x) ?? []), i]);
    }
  }
  while (ready.length) {
    const i = ready.shift()!;
    sorted.push(i);
    for (const o of spec.nodes[i].outputs) {
      for (const u of users.get(o) ?? []) {
        const left = pending.get(u)! - 1;
        pending.set(u, left);
        if (left === 0) ready.push(u);
      }
    }
  }
  // Whatever is left over sits on a cycle.
  if (sorted.length !== order.length) {
    const stuck = order.filter((i) => !sorted.includes(i)).map((i) => label(spec.nodes[i], i));
    fail(
      `the graph has a cycle through ${stuck.join(", ")}`,
      "a node cannot depend on its own output; break the loop (state belongs in a state binding)",
      "cycle",
    );
  }
  return sorted;
}

/** The graph's outputs: dtypes as declared (i32 may widen to i64), names unique, at least one. */
function graphOutputs(spec: GraphSpec, table: ValueTable): GraphOutput[] {
  const outputs = spec.outputs.map((o): GraphOutput => {
    const value = table.byName.get(o.value)!;
    const own = table.values[value].dtype;
    const dtype = o.dtype ?? own;
    // An i64 leaves from the i32 or f64 a compile holds it in (see `jit/passes/int64.ts`).
    const int64 = dtype === "i64" && own === "f64";
    if (dtype !== own && internalDType(dtype) !== own && !int64) {
      fail(
        `output "${o.name}" is ${own} but is declared ${dtype}`,
        "declare the value's dtype (i32 may widen to i64, as may f64; f32 narrow to bf16), or Cast it",
        "dtype-mismatch",
      );
    }
    return { name: o.name, value, dtype };
  });
  if (new Set(outputs.map((o) => o.name)).size !== outputs.length) {
    fail("two outputs share a name", "give every output a unique name", "duplicate-name");
  }
  if (outputs.length === 0) {
    fail("the graph has no outputs", "mark at least one value with output()", "invalid-graph");
  }
  return outputs;
}

function label(n: NodeSpec, i: number): string {
  return JSON.stringify(n.name ?? n.outputs[0] ?? `#${i}`);
}
