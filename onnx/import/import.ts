/**
 * ONNX import: model bytes → a validated kiln `Graph`. Initializers become params (weights stay
 * out of the structural hash, and `setParam` can replace them); symbolic input dimensions are
 * bound from the shapes the caller supplies; every node whose inputs are all known constants is
 * evaluated at import time on the reference kernels, which folds PyTorch's `Shape`/`Gather`/
 * `Concat` shape arithmetic into the static attributes kiln needs. Every unsupported op is
 * reported at once.
 *
 * @module
 */
import { mergeSiblingProducts } from "./siblings.ts";
import { RANDOM_OPS } from "../../jit/passes/random_inputs.ts";
import { evaluateNode } from "../../backends/reference/reference_backend.ts";
import { type BoundaryDType, internalData, internalDType } from "../../jit/ir/dtype.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { checkBudget } from "../../jit/runtime/budget.ts";
import { checkOptions, KilnError } from "../../jit/support/errors.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { handOver } from "../../jit/ir/hand_over.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { type Attrs, inferNode, type ValueType } from "../../jit/ops/mod.ts";
import { type Shape, sizeOf } from "../../jit/ir/shape.ts";
import { converterOf } from "../convert/mod.ts";
import { workCounter } from "./import_limits.ts";
import { expand, EXPANDED, type KnownEmit } from "./expand.ts";
import {
  checkDeclaredOutput,
  checkNames,
  checkOps,
  checkOpset,
  domainVersion,
} from "./declarations.ts";
import {
  carriesI64,
  carriesSentinel,
  int64Widths,
  int64Wrapped,
  sentinelError,
} from "./int64_guard.ts";
import { assertCheck, checkName } from "../../jit/runtime/checks.ts";
import { bindShape, checkInputShapes, type OnnxInputInfo, onnxInputs } from "./inputs.ts";
import {
  innerScope,
  isAbsent,
  lookup,
  missingInput,
  notSequence,
  notTensor,
  producerOf,
  type Scope,
} from "./scope.ts";
import {
  attribute,
  BF16,
  clean,
  folds,
  initializerOf,
  type Known,
  type NodeContext,
  type None,
  type OpFn,
  roundToBf16,
  type Sequence,
  typeOf,
  unreadAttributes,
} from "./node_context.ts";
import {
  decodeModel,
  isSaturated,
  markSaturated,
  type ModelProto,
  type NodeProto,
} from "../wire/proto.ts";

/** Options of {@linkcode importOnnx}. */
export interface OnnxImportOptions {
  /** Concrete shapes for inputs with symbolic dimensions. */
  readonly inputShapes?: Readonly<Record<string, Shape>>;
  /**
   * Values of inputs that decide shapes or attributes (a Reshape's target, Slice bounds, …):
   * they become constants and leave the graph's inputs (`OnnxModel` supplies them).
   */
  readonly inputValues?: Readonly<Record<string, HostTensor>>;
}

/** Imports model bytes as a graph. */
export function importOnnx(bytes: Uint8Array, options: OnnxImportOptions = {}): Graph {
  checkOptions(options, ["inputShapes", "inputValues"], "importOnnx()");
  return importModel(decodeModel(bytes), options);
}

/**
 * Imports an already decoded model (what {@linkcode importOnnx} and `OnnxModel` share), in
 * phases: sibling products merged (`siblings.ts`) → the model's declarations checked (names, ops)
 * → inputs bound → nodes converted (constant ones folded as they come) → outputs and int64 wrap
 * checks written.
 */
export function importModel(given: ModelProto, options: OnnxImportOptions = {}): Graph {
  const model = mergeSiblingProducts(given);
  const opset = checkOpset(model);
  checkNames(model);
  checkOps(model);
  const importer = new Importer(model, options, opset);
  const top = importer.bindInputs();
  importer.runNodes(model.graph.node, top);
  return importer.finish(top);
}

/** One model's import: the graph being built and what is known of each ONNX value. */
class Importer {
  #model: ModelProto;
  #options: OnnxImportOptions;
  #opset: number;
  #charge = workCounter();
  /** Check outputs (see `jit/runtime/checks.ts`): int64 results that must not have wrapped. */
  #checks: { name: string; value: Known }[] = [];
  #b = new GraphBuilder();
  /** Graph values of constants already written (params or Constant nodes). */
  #symbols = new Map<Known, string>();
  /** Initializers by their constant, so each becomes a named param (found in O(1)). */
  #initializers = new Map<Known, string>();
  /** Initializers written as params. */
  #params = new Set<string>();
  /** The main graph's tensors by name: initializers, bound inputs, then node outputs. */
  #env = new Map<string, Known>();

  constructor(model: ModelProto, options: OnnxImportOptions, opset: number) {
    this.#model = model;
    this.#options = options;
    this.#opset = opset;
  }

  /** The top scope: initializers, then every declared input bound to a shape or a value. */
  bindInputs(): Scope {
    const g = this.#model.graph;
    const env = this.#env;
    for (const t of g.initializer) {
      const k = initializerOf(t);
      env.set(t.name!, k);
      this.#initializers.set(k, t.name!);
    }
    const top: Scope = {
      values: env,
      sequences: new Map(),
      written: new Map(),
      absent: new Set(),
      made: new Map(),
    };
    const inputs = onnxInputs(this.#model);
    checkInputShapes(inputs, this.#options.inputShapes ?? {});
    for (const input of inputs) {
      if (input.dtype === "string") {
        throw new KilnError(`Input "${input.name}" is a tensor of strings`, {
          code: "unsupported",
          fix:
            "run the model with OnnxModel.runValues: string ops run on the host around the graph",
        });
      }
      if (input.kind === "sequence") this.#bindSequence(input, top);
      else this.#bindTensor(input, top);
    }
    for (const name of env.keys()) top.written.set(name, "a graph input or initializer");
    return top;
  }

  /** A sequence input: element i is the graph input `name[i]`, for as many as were given. */
  #bindSequence(input: OnnxInputInfo, top: Scope): void {
    const shapes = this.#options.inputShapes ?? {};
    const items: Known[] = [];
    for (let i = 0; shapes[`${input.name}[${i}]`]; i++) {
      const name = `${input.name}[${i}]`;
      const shape = bindShape({ ...input, name }, shapes[name]);
      const dtype = input.dtype as BoundaryDType;
      this.#b.input(name, shape, dtype);
      items.push({
        kind: "value",
        name,
        type: { shape, dtype: internalDType(dtype) },
        i64: dtype === "i64",
      });
    }
    if (items.length === 0 && input.optional && !shapes[`${input.name}[]`]) {
      top.absent.add(input.name);
    } else top.sequences.set(input.name, items);
  }

  /** A tensor input: absent, a value it was given (a constant), or a graph input of its shape. */
  #bindTensor(input: OnnxInputInfo, top: Scope): void {
    const { inputShapes, inputValues } = this.#options;
    const value = inputValues?.[input.name];
    if (input.optional && !inputShapes?.[input.name] && !value) {
      top.absent.add(input.name);
      return;
    }
    const dtype = input.dtype as BoundaryDType;
    // i64-ness and bfloat16-ness are the model's: a value may come as i32 or f32 already.
    const i64 = dtype === "i64", bf16 = dtype === "bf16";
    if (value) {
      // Range-checked: a wrapped value would specialise the model on another shape or number.
      const data = internalData(value.data, value.dtype, `input "${input.name}"`);
      const tensor = { data, shape: value.shape, dtype: internalDType(value.dtype) };
      top.values.set(input.name, { kind: "const", tensor, i64, bf16 });
      return;
    }
    const shape = bindShape(input, inputShapes?.[input.name]);
    this.#b.input(input.name, shape, dtype);
    top.values.set(input.name, {
      kind: "value",
      name: input.name,
      type: { shape, dtype: internalDType(dtype) },
      i64,
      bf16,
    });
  }

  /** The graph value of `k`: constants become params (initializers) or Constant nodes. */
  #symbol(k: Known): string {
    if (k.kind === "value") return k.name;
    let name = this.#symbols.get(k);
    if (name) return name;
    const init = this.#initializers.get(k);
    // An input given a value at import (inputValues) may shadow an initializer of its name.
    if (init !== undefined && this.#env.get(init) === k && !this.#params.has(init)) {
      this.#params.add(init);
      this.#b.param(init, k.tensor.shape, k.tensor.dtype, k.tensor.data);
      name = init;
    } else {
      name = this.#b.constant(k.tensor.data, k.tensor.shape, k.tensor.dtype).name;
    }
    this.#symbols.set(k, name);
    return name;
  }

  /** Converts `nodes` in order, defining their outputs in `scope`. */
  runNodes(nodes: readonly NodeProto[], scope: Scope): void {
    nodes.forEach((node, index) => {
      const name = node.name || node.output[0] || `#${index}`;
      const label = `node "${name}" (${node.opType})`;
      this.#charge(label);
      const convert = converterOf(
        node.domain,
        node.opType,
        domainVersion(this.#model, node.domain),
      );
      if (!convert) {
        throw new KilnError(`${label}: kiln cannot import op ${node.opType} (in a subgraph)`, {
          code: "unknown-op",
          fix:
            "re-export without it, or register it: registerOp (the kiln op) and registerOnnxOp (its ONNX name)",
        });
      }
      const { ctx, inputs } = this.#context(node, { name, label }, scope);
      const outs = convert(ctx);
      checkAttributesRead(node, label);
      defineOutputs(node, outs, { label, inputs }, scope);
    });
  }

  /** What a converter of `node` works with (see {@linkcode NodeContext}). */
  #context(
    node: NodeProto,
    { name, label }: { name: string; label: string },
    scope: Scope,
  ): { ctx: NodeContext; inputs: (Known | undefined)[] } {
    const found = node.input.map((input) => {
      if (input === "" || isAbsent(scope, input)) return undefined;
      const k = lookup(scope, input);
      if (!k) {
        throw new KilnError(`${label}: input "${input}" is not defined before it is used`, {
          code: "dangling-input",
          fix:
            "the model must list nodes in topological order and declare every input; re-export it",
        });
      }
      return k;
    });
    const inputs = found.map((k) => (k?.kind === "sequence" ? undefined : k));
    const ctx: NodeContext = {
      node,
      label,
      opset: this.#opset,
      input: (i) => inputs[i],
      required: (i) =>
        inputs[i] ??
          (found[i]?.kind === "sequence" ? notTensor(label, i) : missingInput(label, i)),
      sequence: (i) => {
        const k = found[i];
        return k?.kind === "sequence" ? k.items : notSequence(label, i);
      },
      inputs: () => {
        const n = inputs.findLastIndex((k) => k !== undefined) + 1;
        return inputs.slice(0, n).map((k, i) => k ?? missingInput(label, i));
      },
      emit: (op, ins, attrs = {}, outputs = 1) =>
        this.#emit(op, ins, clean(attrs), outputs, { label, name }),
      check: (bad, why) => this.#check(bad, why, { label, name }),
      held: (k) =>
        k.kind === "value" ? k : {
          kind: "value",
          name: this.#symbol(k),
          type: { shape: k.tensor.shape, dtype: k.tensor.dtype },
          i64: k.i64,
          bf16: k.bf16,
        },
      subgraph: (attr, args) => this.#runSubgraph(ctx, attr, args, scope),
      producer: (made) => producerOf(scope, made),
      value: (named) => {
        const k = lookup(scope, named);
        return k?.kind === "sequence" ? undefined : k;
      },
      absent: (i) => !!node.input[i] && isAbsent(scope, node.input[i]),
    };
    return { ctx, inputs };
  }

  /**
   * Inlines graph attribute `name` of the node `c` converts: its inputs bound to `args`, its
   * initializers constants, outer names visible; returns its outputs.
   */
  #runSubgraph(
    c: NodeContext,
    name: string,
    args: readonly (Known | Sequence | None)[],
    outer: Scope,
  ): (Known | Sequence | None)[] {
    const body = attribute(c, name)?.g;
    if (!body) {
      throw new KilnError(`${c.label}: its ${name} subgraph is missing`, {
        code: "invalid-graph",
        fix: `give the node its ${name} attribute`,
      });
    }
    const scope = innerScope(outer);
    for (const t of body.initializer ?? []) scope.values.set(t.name!, initializerOf(t));
    const declared = body.input ?? [];
    if (args.length !== declared.length) {
      throw new KilnError(
        `${c.label}: its ${name} subgraph takes ${declared.length} inputs, given ${args.length}`,
        { code: "invalid-graph", fix: "re-export the model" },
      );
    }
    declared.forEach((input, i) => {
      const a = args[i];
      if (a.kind === "sequence") scope.sequences.set(input.name, a.items);
      else if (a.kind === "none") scope.absent.add(input.name);
      else scope.values.set(input.name, a);
      scope.written.set(input.name, "a subgraph input");
    });
    this.runNodes(body.node ?? [], scope);
    return (body.output ?? []).map((o): Known | Sequence | None => {
      if (isAbsent(scope, o.name)) return { kind: "none" };
      const k = lookup(scope, o.name);
      if (!k) {
        throw new KilnError(`${c.label}: its ${name} subgraph never computes "${o.name}"`, {
          code: "dangling-input",
          fix: "re-export the model",
        });
      }
      return k;
    });
  }

  /**
   * Op `op` of `ins`: folded into constants where every input is one (and the result small and
   * not drawn anew each run), else a node of the graph; int64 results get their wrap check.
   */
  #emit(op: string, given: readonly Known[], attrs: Attrs, outputs: number, at: At): Known[] {
    if (EXPANDED.has(op)) {
      const emit: KnownEmit = (o, xs, a, n) => this.#emit(o, xs, a, n, at);
      return this.#fold(op, given, attrs, at) ??
        expand(emit, [op, given, attrs, outputs], at.label);
    }
    const p = this.#prepared(op, given, attrs, at);
    const out = this.#folded(op, attrs, p, at) ?? this.#node(op, [attrs, outputs], p, at);
    return this.#checked(op, attrs, p, at, out);
  }

  /** Op `op` of constants `given` folded where the importer folds it, else `undefined`. */
  #fold(op: string, given: readonly Known[], attrs: Attrs, at: At): Known[] | undefined {
    if (!given.every((k) => k.kind === "const")) return undefined;
    const p = this.#prepared(op, given, attrs, at);
    const out = this.#folded(op, attrs, p, at);
    return out && this.#checked(op, attrs, p, at, out);
  }

  /** `op` of `p` as a node of the graph (the graph labels it `node "NAME" (Op)` itself). */
  #node(op: string, [attrs, outputs]: [Attrs, number], p: Prepared, at: At): Known[] {
    const syms = this.#b.opN(op, p.ins.map((k) => this.#symbol(k)), attrs, outputs, {
      name: at.name,
    });
    return syms.map((s, i) => ({
      kind: "value",
      name: s.name,
      type: p.types[i],
      i64: p.i64,
      bf16: p.bf16,
    }));
  }

  /** `out` with its wrap check where an int64 result is held in 32 bits (folded, or too large). */
  #checked(op: string, attrs: Attrs, p: Prepared, at: At, out: Known[]): Known[] {
    if (p.i64 && p.types.every((t) => t.dtype === "i32")) this.#guard(op, p.ins, attrs, out, at);
    return out;
  }

  /** `op`'s inputs at their int64 widths, its result types and what they carry. */
  #prepared(op: string, given: readonly Known[], attrs: Attrs, at: At): Prepared {
    this.#charge(at.label);
    const ins = this.#widths(op, given, at);
    const types = inferNode(
      op,
      ins.map((
        k,
      ) => (k.kind === "const" ? { shape: k.tensor.shape, dtype: k.tensor.dtype } : k.type)),
      attrs,
      at.label,
    );
    const i64 = carriesI64(op, ins) && types.every((t) => t.dtype === "i32" || t.dtype === "i64");
    // bfloat16 arithmetic is f32 arithmetic: the type carries on, rounded where the model asks.
    const bf16 = ins.some((k) => k.bf16) && types.every((t) => t.dtype === "f32");
    return { ins, types, i64, bf16, sentinel: carriesSentinel(op, ins, at.label) };
  }

  /** The constants `op` of `p` folds into, or `undefined` where it stays a node. */
  #folded(op: string, attrs: Attrs, p: Prepared, at: At): Known[] | undefined {
    const { ins, types } = p;
    if (!ins.every((k) => k.kind === "const") || !folds(ins, types) || RANDOM_OPS.has(op)) {
      return undefined;
    }
    const tensors = ins.map((k) => (k as Extract<Known, { kind: "const" }>).tensor);
    // A folded value is a tensor too: the budget holds before it is computed.
    for (const t of types) checkBudget(t.shape, t.dtype, at.label);
    // A Constant is its value (the graph copies it where its maker kept it); the reference's copy
    // of a decomposition's 85M-element constants took 0.3 s of a quantized BERT-base's import.
    const value = op === "Constant" ? (attrs.value as HostTensor).data : undefined;
    const inputs = { op, attrs, inputs: tensors, outputs: types, label: at.label };
    const data = value ? [value] : evaluateNode(inputs, tensors);
    if (p.sentinel) data.forEach(markSaturated);
    // A result in a buffer of its own is the fold's: the graph keeps it without a copy (shifted
    // weights: 0.4 s on the 2-core VM); one viewing an input (a Reshape's) keeps its guard.
    const own = (d: HostTensor["data"]) =>
      !value && tensors.every((t) => t.data.buffer !== d.buffer);
    return types.map((t, i) => ({
      kind: "const",
      tensor: { data: own(data[i]) ? handOver(data[i]) : data[i], shape: t.shape, dtype: t.dtype },
      i64: p.i64,
      bf16: p.bf16,
    }));
  }

  /** `ins` at the widths `op` computes int64 in (see {@linkcode int64Widths}). */
  #widths(op: string, ins: readonly Known[], at: At): readonly Known[] {
    const one: OpFn = (o, xs, a = {}) => this.#emit(o, xs, a, 1, at)[0];
    return int64Widths(
      op,
      ins,
      one,
      (bad) =>
        this.#check(
          bad,
          `${at.label}: reads an int64 value past the 32-bit range it computes in`,
          at,
        ),
    );
  }

  /** A wrap check on the int64 result of `op`, held in 32 bits, where it can leave that range. */
  #guard(op: string, ins: readonly Known[], attrs: Attrs, out: readonly Known[], at: At): void {
    if (out.length !== 1 || sizeOf(typeOf(out[0]).shape) === 0) return;
    const one: OpFn = (o, xs, a = {}) => this.#emit(o, xs, a, 1, at)[0];
    const wrapped = int64Wrapped(one, op, ins, attrs, out[0]);
    if (wrapped) {
      this.#check(
        wrapped,
        `${at.label}: its int64 result leaves the 32-bit range kiln holds int64 in`,
        at,
      );
    }
  }

  /** {@linkcode NodeContext.check}: thrown now where `bad` is constant, else a check output. */
  #check(bad: Known, why: string, at: At): void {
    if (bad.kind === "const") return assertCheck(checkName(why, 0), bad.tensor.data);
    if (sizeOf(bad.type.shape) === 0) return;
    const rank = bad.type.shape.length;
    const flag = this.#emit("Cast", [bad], { to: "i32" }, 1, at)[0];
    const any = rank
      ? this.#emit("ReduceMax", [flag], { axes: [...Array(rank).keys()], keepdims: 0 }, 1, at)[0]
      : flag;
    this.#checks.push({ name: checkName(why, this.#checks.length), value: any });
  }

  /** The graph, with the model's outputs (as declared) and the check outputs. */
  finish(top: Scope): Graph {
    for (const o of this.#model.graph.output) {
      // An empty optional output has no graph output; a sequence's element i is output `name[i]`.
      if (top.absent.has(o.name)) continue;
      const items = top.sequences.get(o.name);
      if (items) {
        items.forEach((k, i) =>
          this.#b.output(`${o.name}[${i}]`, this.#symbol(k), { dtype: k.i64 ? "i64" : undefined })
        );
        continue;
      }
      let k = this.#env.get(o.name);
      if (!k) {
        throw new KilnError(`Output "${o.name}" is not produced by any node`, {
          code: "dangling-input",
          fix: "re-export the model",
        });
      }
      checkDeclaredOutput(o, k);
      if (k.kind === "const" && isSaturated(k.tensor.data)) {
        throw sentinelError(`output "${o.name}"`);
      }
      // A bfloat16 output leaves as bfloat16 bits, rounded from whatever f32 arithmetic made it.
      const bf16 = o.type?.tensorType?.elemType === BF16;
      if (bf16) {
        const at = { label: `output "${o.name}"`, name: `${o.name}.bf16` };
        k = roundToBf16((op, xs, a = {}) => this.#emit(op, xs, a, 1, at)[0], k);
      }
      this.#b.output(o.name, this.#symbol(k), { dtype: k.i64 ? "i64" : bf16 ? "bf16" : undefined });
    }
    for (const c of this.#checks) this.#b.output(c.name, this.#symbol(c.value));
    return this.#b.build();
  }
}

/** Where an emitted op comes from: the node's label (for errors) and its ONNX name. */
interface At {
  readonly label: string;
  readonly name: string;
}

/** An op's inputs and result types, and what its results carry (see `#prepared`). */
interface Prepared {
  readonly ins: readonly Known[];
  readonly types: readonly ValueType[];
  readonly i64: boolean;
  readonly bf16: boolean;
  readonly sentinel: boolean;
}

/** Refuses an attribute of `node` that its converter did not read (ignoring it could mislead). */
function checkAttributesRead(node: NodeProto, label: string): void {
  const unread = unreadAttributes(node).filter((a) =>
    a !== "consumed_inputs" && !IGNORABLE[node.opType]?.includes(a)
  );
  if (!unread.length) return;
  throw new KilnError(
    `${label}: kiln does not know attribute${unread.length > 1 ? "s" : ""} ${
      unread.join(", ")
    } of ${node.opType}; ignoring ${unread.length > 1 ? "them" : "it"} could change the result`,
    {
      code: "unsupported",
      fix: "remove the attribute (or re-export the model with a standard opset)",
    },
  );
}

/** `node`'s outputs `outs` defined in `scope`: a name written twice is an error. */
function defineOutputs(
  node: NodeProto,
  outs: readonly (Known | Sequence | None | undefined)[],
  from: { label: string; inputs: (Known | undefined)[] },
  scope: Scope,
): void {
  node.output.forEach((name, i) => {
    const out = outs[i];
    if (name === "" || !out) return;
    // A value written twice would silently take the later node's result.
    if (scope.written.has(name)) {
      throw new KilnError(
        `${from.label}: output "${name}" is already written by ${scope.written.get(name)}`,
        {
          code: "duplicate-name",
          fix: "give every node output a unique name (re-export the model)",
        },
      );
    }
    scope.written.set(name, from.label);
    scope.made.set(name, { node, label: from.label, inputs: from.inputs });
    if (out.kind === "sequence") scope.sequences.set(name, out.items);
    else if (out.kind === "none") scope.absent.add(name);
    else scope.values.set(name, out);
  });
}

/**
 * Attributes that do not change an inference result, which converters need not read: training
 * settings (BatchNormalization's momentum, is_test before opset 7; Dropout's seed and, before
 * opset 12, its ratio) and Gemm's pre-opset-7 `broadcast` flag (kiln always broadcasts). Opset
 * 1–5's `consumed_inputs` (an in-place memory hint) is ignorable on every op.
 */
const IGNORABLE: Readonly<Record<string, readonly string[]>> = {
  BatchNormalization: ["momentum", "is_test"],
  Dropout: ["seed", "ratio", "is_test"],
  Gemm: ["broadcast"],
};
