/**
 * int64 lowered to what a backend computes. An `i64` value in a graph is made by a Cast (the
 * ONNX importer casts the operands of int64 arithmetic that can leave the 32-bit range kiln holds
 * int64 in; a program may cast too); no backend has int64 arithmetic worth using (WGSL has none,
 * and wasm's would need its own kernels), so a compile rewrites every `i64` value first:
 *
 * - `"f64"` (backends with f64: the reference, wasm): int64 held in f64, which is exact for
 *   integers up to 2^53. Division truncates, Mod is computed from exact parts, a cast to int64
 *   truncates, a cast from it wraps as int64 does; each sum, product or cast that could leave
 *   ±2^53 gets a check, so a value past it is a typed error, never an inexact one.
 * - `"i32"` (WebGPU): int64 held in 32 bits, as everywhere before this pass; each op that can
 *   leave the range gets the same op in f32 beside it, whose result differs from the 32-bit one by
 *   about 2^32 exactly where that one wrapped: a check refuses the run there.
 *
 * Ops whose f64 form is not their integer form (bitwise ops, indices, shapes) read an `i64`
 * narrowed to i32, checked, and their `i64` results widen back. Checks are outputs of the graph
 * (see `jit/runtime/checks.ts`).
 *
 * @module
 */
import {
  boundaryOf,
  freshNames,
  Graph,
  type Node,
  type NodeSpec,
  nodeSpecOf,
} from "../ir/graph.ts";
import type { DType } from "../ir/dtype.ts";
import { sizeOf } from "../ir/shape.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import type { Attrs } from "../ops/mod.ts";
import { checkName } from "../runtime/checks.ts";

/** How `i64` values are held: in f64 (exact to 2^53) or in i32 (checked). */
export type Int64Mode = "f64" | "i32";

/**
 * Ops whose int64 result can leave the range it is held in: each gets a check (in f64, Mod's too:
 * a division by zero leaves NaN).
 */
const GROWS: ReadonlySet<string> = new Set([
  "Add",
  "Sub",
  "Mul",
  "Neg",
  "Abs",
  "Div",
  "Sum",
  "ReduceSum",
  "ReduceProd",
  "ReduceSumSquare",
  "CumSum",
  "MatMul",
  "Gemm",
]);

/**
 * Ops computed on f64 as on integers, and which of their inputs may be f64 (`"all"`, or the
 * positions); Div and Mod are rewritten (see {@linkcode lowerNode}).
 */
const CARRIES: ReadonlyMap<string, "all" | readonly number[]> = new Map<
  string,
  "all" | readonly number[]
>([
  ...["Add", "Sub", "Mul", "Div", "Mod", "Min", "Max", "Sum", "Equal", "Less", "Greater"]
    .map((op): [string, "all"] => [op, "all"]),
  ...["LessOrEqual", "GreaterOrEqual", "Concat", "MatMul", "Gemm"]
    .map((op): [string, "all"] => [op, "all"]),
  ...[
    "Neg",
    "Abs",
    "Sign",
    "Identity",
    "ReduceSum",
    "ReduceProd",
    "ReduceSumSquare",
    "ReduceMin",
    "ReduceMax",
    "CumSum",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Expand",
    "Slice",
    "Gather",
  ].map((op): [string, number[]] => [op, [0]]),
  ["Where", [1, 2]],
]);

/**
 * Which inputs of `op` an `i64` value reaches as it is (`"all"`, their positions, or none:
 * `undefined`); the compile narrows one read elsewhere to i32, checked.
 */
export function carriedInputs(op: string): "all" | readonly number[] | undefined {
  return CARRIES.get(op);
}

/** Whether an integer `op` can leave the range of its operands (a sum, a product). */
export function grows(op: string): boolean {
  return GROWS.has(op);
}

/** Why a cast to int64 held in 32 bits is refused. */
const PAST_I32 = "casts a value past the 32-bit range WebGPU holds int64 in";

/** 2^53: the first integer f64 does not hold with its neighbours. */
const EXACT = 2 ** 53;

/** `graph` with its `i64` values held as `mode` says; a graph without any comes back as it is. */
export function lowerInt64(input: Graph, mode: Int64Mode): Graph {
  const graph = widenedArithmetic(input, mode);
  if (!graph.values.some((v) => v.dtype === "i64")) return graph;
  const lowering = new Lowering(graph, mode);
  for (const n of graph.nodes) lowering.node(n);
  const boundary = boundaryOf(graph);
  return Graph.create({
    ...boundary,
    nodes: lowering.nodes,
    outputs: [...boundary.outputs, ...lowering.checks],
  });
}

/**
 * `graph` with the sums and products of its int64 data computed in 64 bits. Inputs and
 * parameters declared `i64` are held in i32, and what is computed from them too (the ONNX
 * importer widens its own arithmetic as it imports: see `int64Widths`; a graph built by hand
 * wraps there): each such op (see {@linkcode GROWS}) reads 64-bit operands, a chain of them
 * stays in 64 bits, and its result leaves either as an int64 output or narrowed to i32 where
 * anything else reads it, with a check that it fits (held in f64: in i32 the narrowing is exact,
 * and the op's own wrap check speaks for it).
 */
function widenedArithmetic(graph: Graph, mode: Int64Mode): Graph {
  const held = new Set(
    [...graph.inputs, ...graph.params].filter((i) => i.dtype === "i64").map((i) => i.value),
  );
  const wide = new Map<number, string>();
  const fresh = freshNames(graph), name = (v: number) => graph.values[v].name;
  const nodes: NodeSpec[] = [], checks: { name: string; value: string }[] = [];
  const int64Out = new Set(graph.outputs.filter((o) => o.dtype === "i64").map((o) => o.value));
  const push = (op: string, inputs: string[], attrs: Attrs, label: string) => {
    const y = fresh(`${label}/i64`);
    nodes.push({ op, inputs, outputs: [y], attrs, name: label });
    return y;
  };
  for (const n of graph.nodes) {
    const reads = n.inputs.some((v) => held.has(v) || wide.has(v));
    const i32 = graph.values[n.outputs[0]]?.dtype === "i32";
    if (n.op === "Cast" && wide.has(n.inputs[0])) {
      // A cast reads the 64-bit value itself (to a float: exactly).
      nodes.push({ ...nodeSpecOf(graph, n), inputs: [wide.get(n.inputs[0])!] });
      continue;
    }
    if (!reads || n.op === "Cast" || n.op === "Bitcast" || !i32) {
      nodes.push(nodeSpecOf(graph, n));
      continue;
    }
    if (!GROWS.has(n.op)) {
      nodes.push(nodeSpecOf(graph, n));
      n.outputs.forEach((v) => graph.values[v].dtype === "i32" && held.add(v));
      continue;
    }
    const carries = CARRIES.get(n.op);
    const operands = n.inputs.map((v, i) =>
      wide.get(v) ??
        (carries === "all" || carries?.includes(i)
          ? push("Cast", [name(v)], { to: "i64" }, n.name)
          : name(v))
    );
    const y = n.outputs[0], long = push(n.op, operands, n.attrs, n.name);
    wide.set(y, long);
    const elsewhere = graph.consumers(y).some((c) => !reads64(graph.nodes[c].op)) ||
      graph.outputs.some((o) => o.value === y && o.dtype !== "i64");
    if (!elsewhere) continue;
    // Read in 32 bits elsewhere: narrowed, and checked that it came back whole.
    nodes.push({
      op: "Cast",
      inputs: [long],
      outputs: [name(y)],
      attrs: { to: "i32" },
      name: n.name,
    });
    held.add(y);
    if (mode === "i32" || sizeOf(graph.values[y].shape) === 0) continue;
    const op: OpOf = (o, xs, a = {}) => push(o, xs, a, n.name);
    const bad = op("Not", [op("Equal", [op("Cast", [name(y)], { to: "i64" }), long])]);
    const why = `${n.label}: its int64 result is read in 32 bits and does not fit`;
    checks.push(checkOutput(op, bad, why, checks.length, sizeOf(graph.values[y].shape)));
  }
  if (!wide.size) return graph;
  const boundary = boundaryOf(graph, (v) => (int64Out.has(v) && wide.get(v)) || name(v));
  return Graph.create({ ...boundary, nodes, outputs: [...boundary.outputs, ...checks] });
}

/** Adds a node of one output and names its value. */
type OpOf = (op: string, inputs: string[], attrs?: Attrs) => string;

/**
 * Check output `n` saying `why` (see `jit/runtime/checks.ts`) of `bad`, a bool tensor of `size`
 * flags: reduced to one, so that a run reads back a scalar. One flag is read as it is: its
 * reduction was a kernel of its own each run (a decode step's mask sums).
 */
function checkOutput(op: OpOf, bad: string, why: string, n: number, size: number) {
  const flags = op("Cast", [bad], { to: "i32" });
  const any = size > 1 ? op("ReduceMax", [flags], { keepdims: 0 }) : flags;
  return { name: checkName(why, n), value: any };
}

/** Whether `op` reads a value {@linkcode widenedArithmetic} widened in 64 bits. */
const reads64 = (op: string) => GROWS.has(op) || op === "Cast";

/** The rewrite's state: the nodes so far, the checks, fresh names. */
class Lowering {
  readonly nodes: NodeSpec[] = [];
  readonly checks: { name: string; value: string }[] = [];
  #graph: Graph;
  #mode: Int64Mode;
  #fresh: (base: string) => string;
  /** The node being lowered: its name (for what it adds) and its label (for messages). */
  #at = { name: "", label: "" };
  /** Elements of each of the graph's values, by name. */
  #sizes: Map<string, number>;

  constructor(graph: Graph, mode: Int64Mode) {
    this.#graph = graph;
    this.#mode = mode;
    this.#fresh = freshNames(graph);
    this.#sizes = new Map(graph.values.map((v) => [v.name, sizeOf(v.shape)]));
  }

  /** Node `n`, lowered. */
  node(n: Node): void {
    const g = this.#graph, name = (v: number) => g.values[v].name;
    const wide = (v: number) => g.values[v].dtype === "i64";
    if (!n.inputs.some(wide) && !n.outputs.some(wide)) {
      this.nodes.push({
        op: n.op,
        inputs: n.inputs.map(name),
        outputs: n.outputs.map(name),
        attrs: n.attrs,
        name: n.name,
      });
      return;
    }
    this.#at = { name: n.name, label: n.label };
    const ins = n.inputs.map(name), outs = n.outputs.map(name);
    if (this.#mode === "i32") return this.#asI32(n, ins, outs);
    if (n.op === "Cast") {
      return this.#castF64(g.values[n.inputs[0]].dtype, ins[0], outs[0], n.attrs);
    }
    const carries = CARRIES.get(n.op);
    const carried = (i: number) => carries === "all" || (carries?.includes(i) ?? false);
    // Inputs it does not carry are narrowed to i32, checked; its i64 results widen back.
    const inputs = ins.map((v, i) => (wide(n.inputs[i]) && !carried(i) ? this.#narrowed(v) : v));
    const widen = carries ? [] : n.outputs.flatMap((v, i) => (wide(v) ? [i] : []));
    const results = outs.map((v, i) => (widen.includes(i) ? this.#fresh(`${v}/i32`) : v));
    const attrs = carries ? n.attrs : retyped(n.attrs, "i32");
    if (n.op === "Div" && wide(n.outputs[0])) this.#truncatedDiv(inputs, results[0]);
    else if (n.op === "Mod" && wide(n.outputs[0])) this.#mod(inputs, results[0], attrs);
    else this.#push(n.op, inputs, results, attrs);
    widen.forEach((i) => this.#push("Cast", [results[i]], [outs[i]], { to: "f64" }));
    if ((GROWS.has(n.op) || n.op === "Mod") && wide(n.outputs[0])) this.#checkExact(outs[0]);
  }

  /** Node `n` with every i64 held in i32: the dtype attributes retyped, a wrap check beside it. */
  #asI32(n: Node, ins: string[], outs: string[]): void {
    const g = this.#graph, from = g.values[n.inputs[0]]?.dtype;
    this.#push(n.op, ins, outs, retyped(n.attrs, "i32"));
    if (n.op === "Cast" && n.attrs.to === "i64" && from !== "i64") this.#checkCastI32(ins[0], from);
    if (!GROWS.has(n.op) || g.values[n.outputs[0]].dtype !== "i64") return;
    // The same op in f32: about 2^32 away from the 32-bit result exactly where that one wrapped.
    const wide = ins.map((v) => this.#op("Cast", [v], { to: "f32" }));
    const shadow = this.#op(n.op, wide, retyped(n.attrs, "f32"));
    const drift = this.#op("Abs", [
      this.#op("Sub", [this.#op("Cast", [outs[0]], { to: "f32" }), shadow]),
    ]);
    const wrapped = this.#op("Greater", [drift, this.#scalar(2 ** 31, "f32")]);
    this.#check(wrapped, outs[0], "leaves the 32-bit range WebGPU holds int64 in");
  }

  /** A cast to i64 held in i32: a float or u32 value past the 32-bit range is refused. */
  #checkCastI32(x: string, from: DType): void {
    if (from === "u32") {
      this.#check(this.#op("Greater", [x, this.#scalar(2 ** 31 - 1, "u32")]), x, PAST_I32);
      return;
    }
    if (from !== "f32" && from !== "f16" && from !== "f64") return;
    const kind = from === "f64" ? "f64" : "f32";
    const v = from === kind ? x : this.#op("Cast", [x], { to: kind });
    const high = this.#op("Not", [this.#op("Less", [v, this.#scalar(2 ** 31, kind)])]);
    const low = this.#op("Less", [v, this.#scalar(-(2 ** 31), kind)]);
    // NaN compares false on both sides: a cast leaves NaN undefined, as ONNX does.
    const high2 = this.#op("And", [high, this.#op("Equal", [v, v])]);
    this.#check(this.#op("Or", [high2, low]), x, PAST_I32);
  }

  /** A Cast to or from i64 held in f64. */
  #castF64(from: DType, x: string, y: string, attrs: Attrs): void {
    const to = attrs.to as DType;
    if (from === "i64" && to === "i64") return this.#push("Identity", [x], [y], {});
    if (to === "i64") {
      if (from !== "f32" && from !== "f16" && from !== "f64") {
        return this.#push("Cast", [x], [y], { to: "f64" });
      }
      // Toward zero, as a cast to an integer truncates; NaN (undefined in ONNX) becomes 0.
      const v = from === "f64" ? x : this.#op("Cast", [x], { to: "f64" });
      const t = this.#truncated(v);
      this.#push("Where", [this.#op("IsNaN", [v]), this.#scalar(0, "f64"), t], [y], {});
      return this.#checkExact(y);
    }
    if (to === "f32" || to === "f16" || to === "f64" || to === "bool") {
      return this.#push("Cast", [x], [y], attrs);
    }
    // To an integer: int64's low 32 bits (as two's complement), then that integer's own wrap.
    const span = this.#scalar(2 ** 32, "f64");
    const lifted = to === "u32" ? x : this.#op("Add", [x, this.#scalar(2 ** 31, "f64")]);
    const turns = this.#op("Floor", [this.#op("Div", [lifted, span])]);
    const low = this.#op("Sub", [x, this.#op("Mul", [turns, span])]);
    if (to === "u32" || to === "i32") return this.#push("Cast", [low], [y], { to });
    this.#push("Cast", [this.#op("Cast", [low], { to: "i32" })], [y], { to });
  }

  /** `a / b` truncated toward zero, as integer division is. */
  #truncatedDiv([a, b]: string[], y: string): void {
    this.#push("Identity", [this.#truncated(this.#op("Div", [a, b]))], [y], {});
  }

  /** Integer Mod in f64: fmod's sign (of the dividend) or Python's (of the divisor). */
  #mod([a, b]: string[], y: string, attrs: Attrs): void {
    if (attrs.fmod === 1) return this.#push("Mod", [a, b], [y], attrs);
    // a − b·⌊a/b⌋: the quotient's floor is exact below 2^53, and so is what is left.
    const q = this.#op("Floor", [this.#op("Div", [a, b])]);
    this.#push("Sub", [a, this.#op("Mul", [b, q])], [y], {});
  }

  /** `v` rounded toward zero. */
  #truncated(v: string): string {
    const negative = this.#op("Less", [v, this.#scalar(0, "f64")]);
    return this.#op("Where", [negative, this.#op("Ceil", [v]), this.#op("Floor", [v])]);
  }

  /** `v` (an i64 in f64) narrowed to i32 for an op that computes on integers; past it, refused. */
  #narrowed(v: string): string {
    const inside = this.#op("And", [
      this.#op("Not", [this.#op("Less", [v, this.#scalar(-(2 ** 31), "f64")])]),
      this.#op("Less", [v, this.#scalar(2 ** 31, "f64")]),
    ]);
    this.#check(
      this.#op("Not", [inside]),
      v,
      "reads an int64 value past the 32-bit range it computes in",
    );
    return this.#op("Cast", [v], { to: "i32" });
  }

  /** A check that `y` (an i64 in f64) is within ±2^53 (NaN, from a division by zero, is not). */
  #checkExact(y: string): void {
    const within = this.#op("Less", [this.#op("Abs", [y]), this.#scalar(EXACT, "f64")]);
    this.#check(
      this.#op("Not", [within]),
      y,
      "its int64 result is past ±2^53, where kiln holds int64 exactly, or undefined",
    );
  }

  /** A check output: `bad` (bool, shaped as value `like`) must hold no true after a run. */
  #check(bad: string, like: string, why: string): void {
    // An empty tensor's maximum is the lowest i32, which would read as a failed check.
    const size = this.#sizes.get(like) ?? Infinity;
    if (size === 0) return;
    const op: OpOf = (o, xs, a = {}) => this.#op(o, xs, a);
    this.checks.push(checkOutput(op, bad, `${this.#at.label}: ${why}`, this.checks.length, size));
  }

  /** A scalar constant. */
  #scalar(v: number, dtype: DType): string {
    const data = dtype === "f64"
      ? Float64Array.of(v)
      : dtype === "u32"
      ? Uint32Array.of(v)
      : Float32Array.of(v);
    const value: HostTensor = { data, shape: [], dtype };
    return this.#op("Constant", [], { value });
  }

  /** A new node of one output; its value's name. */
  #op(op: string, inputs: string[], attrs: Attrs = {}): string {
    const y = this.#fresh(`${this.#at.name}/i64`);
    this.#push(op, inputs, [y], attrs);
    return y;
  }

  #push(op: string, inputs: string[], outputs: string[], attrs: Attrs): void {
    this.nodes.push({ op, inputs, outputs, attrs, name: this.#at.name });
  }
}

/** `attrs` with each dtype attribute (`to`, `dtype`) naming i64 naming `to` instead. */
function retyped(attrs: Attrs, to: DType): Attrs {
  const named = (k: string) => (k === "to" || k === "dtype") && attrs[k] === "i64";
  if (!Object.keys(attrs).some(named)) return attrs;
  return Object.fromEntries(Object.entries(attrs).map(([k, v]) => [k, named(k) ? to : v])) as Attrs;
}
