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
import { RANDOM_OPS } from "../../jit/passes/random_inputs.ts";
import { evaluateNode } from "../../backends/reference/reference_backend.ts";
import { type DType, narrowI64 } from "../../jit/ir/dtype.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { checkBudget } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { type Attrs, inferNode } from "../../jit/ops/mod.ts";
import { type Shape, sizeOf } from "../../jit/ir/shape.ts";
import { converterOf } from "../convert/mod.ts";
import { workCounter } from "./import_limits.ts";
import { checkDeclaredOutput, checkOpset, domainVersion } from "./declarations.ts";
import { carriesSentinel, int64Wrapped, sentinelError } from "./int64_guard.ts";
import { assertCheck, checkName } from "../../jit/runtime/checks.ts";
import { bindShape, onnxInputs } from "./inputs.ts";
import {
  attribute,
  BF16,
  clean,
  initializerOf,
  type Known,
  type NodeContext,
  type None,
  type OpFn,
  type Producer,
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

/** Largest constant the importer folds eagerly (elements). */
const FOLD_LIMIT = 1 << 20;

/** Imports model bytes as a graph. */
export function importOnnx(bytes: Uint8Array, options: OnnxImportOptions = {}): Graph {
  return importModel(decodeModel(bytes), options);
}

/** Imports an already decoded model (what {@linkcode importOnnx} and `OnnxModel` share). */
export function importModel(model: ModelProto, options: OnnxImportOptions = {}): Graph {
  const opset = checkOpset(model);
  const charge = workCounter();
  /** Check outputs (see `jit/runtime/checks.ts`): int64 results that must not have wrapped. */
  const checks: { name: string; value: Known }[] = [];
  const g = model.graph;
  const unnamed = [
    ...g.input.filter((i) => !i.name).map(() => "an input"),
    ...g.initializer.filter((t) => !t.name).map(() => "an initializer"),
    ...g.output.filter((o) => !o.name).map(() => "an output"),
  ];
  if (unnamed.length) {
    throw new KilnError(`The model's graph has ${unnamed[0]} with an empty name`, {
      code: "invalid-graph",
      fix: "name every graph input, initializer and output (re-export the model)",
    });
  }
  const unknown = [
    ...new Set(
      g.node.filter((n) => !converterOf(n.domain, n.opType, domainVersion(model, n.domain))).map((
        n,
      ) => `${n.domain ? `${n.domain}::` : ""}${n.opType}`),
    ),
  ];
  if (unknown.length) {
    throw new KilnError(
      `The model uses ops kiln cannot import: ${
        unknown.join(", ")
      } (no kiln backend — reference, wasm or webgpu — implements them)`,
      {
        code: "unknown-op",
        fix:
          "re-export without them, or register them: registerOp (the kiln op) and registerOnnxOp (its ONNX name)",
      },
    );
  }

  const b = new GraphBuilder();
  const env = new Map<string, Known>();
  const symbols = new Map<Known, string>();
  /** Initializers by their constant, so each becomes a named param (found in O(1)). */
  const initializers = new Map<Known, string>();
  for (const t of g.initializer) {
    const k = initializerOf(t);
    env.set(t.name!, k);
    initializers.set(k, t.name!);
  }
  const bf16Inputs = new Set(
    g.input.filter((i) => i.type?.tensorType?.elemType === BF16).map((i) => i.name),
  );
  const absent = new Set<string>();
  const boundSequences = new Map<string, readonly Known[]>();
  for (const input of onnxInputs(model)) {
    if (input.dtype === "string") {
      throw new KilnError(`Input "${input.name}" is a tensor of strings`, {
        code: "unsupported",
        fix: "run the model with OnnxModel.runValues: string ops run on the host around the graph",
      });
    }
    const shapes = options.inputShapes ?? {};
    if (input.kind === "sequence") {
      // Element i is bound as the graph input `name[i]`, for as many elements as were given.
      const items: Known[] = [];
      for (let i = 0; shapes[`${input.name}[${i}]`]; i++) {
        const name = `${input.name}[${i}]`, shape = bindShape({ ...input, name }, shapes[name]);
        b.input(name, shape, input.dtype);
        const dtype = input.dtype === "i64" ? "i32" : input.dtype;
        items.push({ kind: "value", name, type: { shape, dtype }, i64: input.dtype === "i64" });
      }
      if (items.length === 0 && input.optional && !shapes[`${input.name}[]`]) {
        absent.add(input.name);
      } else boundSequences.set(input.name, items);
      continue;
    }
    if (input.optional && !shapes[input.name] && !options.inputValues?.[input.name]) {
      absent.add(input.name);
      continue;
    }
    const value = options.inputValues?.[input.name];
    if (value) {
      // i64-ness is the model's: the value may come narrowed to i32 already.
      const i64 = input.dtype === "i64";
      const wide = value.dtype === "i64";
      // Range-checked: a wrapped value would specialise the model on another shape or number.
      const data = wide
        ? narrowI64(value.data as BigInt64Array, `input "${input.name}"`)
        : value.data;
      const dtype = wide ? "i32" : value.dtype as DType;
      env.set(input.name, { kind: "const", tensor: { data, shape: value.shape, dtype }, i64 });
      continue;
    }
    const shape = bindShape(input, options.inputShapes?.[input.name]);
    b.input(input.name, shape, input.dtype);
    env.set(input.name, {
      kind: "value",
      name: input.name,
      type: { shape, dtype: input.dtype === "i64" ? "i32" : input.dtype },
      i64: input.dtype === "i64",
      bf16: bf16Inputs.has(input.name),
    });
  }

  const params = new Set<string>();
  /** The graph value of `k`: constants become params (initializers) or Constant nodes. */
  const symbol = (k: Known): string => {
    if (k.kind === "value") return k.name;
    let name = symbols.get(k);
    if (name) return name;
    const init = initializers.get(k);
    // An input given a value at import (inputValues) may shadow an initializer of its name.
    if (init !== undefined && env.get(init) === k && !params.has(init)) {
      params.add(init);
      b.param(init, k.tensor.shape, k.tensor.dtype, k.tensor.data);
      name = init;
    } else {
      name = b.constant(k.tensor.data, k.tensor.shape, k.tensor.dtype).name;
    }
    symbols.set(k, name);
    return name;
  };

  const written = new Map<string, string>(
    [...env.keys()].map((name) => [name, "a graph input or initializer"]),
  );
  const top: Scope = { values: env, sequences: boundSequences, written, absent, made: new Map() };
  runNodes(g.node, top);

  /** Whether `name` is an empty optional in `scope` or an enclosing one. */
  function isAbsent(scope: Scope, name: string): boolean {
    for (let s: Scope | undefined = scope; s; s = s.parent) {
      if (s.absent.has(name)) return true;
      if (s.values.has(name) || s.sequences.has(name)) return false;
    }
    return false;
  }

  /** A name's tensor or sequence in `scope` or an enclosing one. */
  function lookup(scope: Scope, name: string): Known | Sequence | undefined {
    for (let s: Scope | undefined = scope; s; s = s.parent) {
      const k = s.values.get(name);
      if (k) return k;
      const items = s.sequences.get(name);
      if (items) return { kind: "sequence", items };
    }
    return undefined;
  }

  /** Converts `nodes` in order, defining their outputs in `scope`. */
  function runNodes(nodes: readonly NodeProto[], scope: Scope): void {
    nodes.forEach((node, index) => {
      const name = node.name || node.output[0] || `#${index}`;
      const label = `node "${name}" (${node.opType})`;
      charge(label);
      const convert = converterOf(node.domain, node.opType, domainVersion(model, node.domain));
      if (!convert) {
        throw new KilnError(`${label}: kiln cannot import op ${node.opType} (in a subgraph)`, {
          code: "unknown-op",
          fix:
            "re-export without it, or register it: registerOp (the kiln op) and registerOnnxOp (its ONNX name)",
        });
      }
      const found = node.input.map((name) => {
        if (name === "" || isAbsent(scope, name)) return undefined;
        const k = lookup(scope, name);
        if (!k) {
          throw new KilnError(`${label}: input "${name}" is not defined before it is used`, {
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
        opset,
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
          emit(op, ins, clean(attrs), outputs, label, name),
        check: (bad, why) => check(bad, why, label, name),
        subgraph: (name, args) => runSubgraph(ctx, name, args, scope),
        producer: (name) => {
          for (let s: Scope | undefined = scope; s; s = s.parent) {
            const p = s.made.get(name);
            if (p) return p;
          }
          return undefined;
        },
        value: (name) => {
          const k = lookup(scope, name);
          return k?.kind === "sequence" ? undefined : k;
        },
        absent: (i) => !!node.input[i] && isAbsent(scope, node.input[i]),
      };
      const outs = convert(ctx);
      const unread = unreadAttributes(node).filter((a) =>
        a !== "consumed_inputs" && !IGNORABLE[node.opType]?.includes(a)
      );
      if (unread.length) {
        throw new KilnError(
          `${label}: kiln does not know attribute${unread.length > 1 ? "s" : ""} ${
            unread.join(", ")
          } of ${node.opType}; ignoring ${
            unread.length > 1 ? "them" : "it"
          } could change the result`,
          {
            code: "unsupported",
            fix: "remove the attribute (or re-export the model with a standard opset)",
          },
        );
      }
      node.output.forEach((name, i) => {
        const out = outs[i];
        if (name === "" || !out) return;
        // A value written twice would silently take the later node's result.
        if (scope.written.has(name)) {
          throw new KilnError(
            `${label}: output "${name}" is already written by ${scope.written.get(name)}`,
            {
              code: "duplicate-name",
              fix: "give every node output a unique name (re-export the model)",
            },
          );
        }
        scope.written.set(name, label);
        scope.made.set(name, { node, inputs });
        if (out.kind === "sequence") scope.sequences.set(name, out.items);
        else if (out.kind === "none") scope.absent.add(name);
        else scope.values.set(name, out);
      });
    });
  }

  /**
   * Inlines graph attribute `name` of the node `c` converts: its inputs bound to `args`, its
   * initializers constants, outer names visible; returns its outputs.
   */
  function runSubgraph(
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
    const scope: Scope = {
      values: new Map(),
      sequences: new Map(),
      written: new Map(),
      made: new Map(),
      absent: new Set(),
      parent: outer,
    };
    for (const t of body.initializer ?? []) {
      scope.values.set(t.name!, initializerOf(t));
    }
    if (args.length !== (body.input ?? []).length) {
      throw new KilnError(
        `${c.label}: its ${name} subgraph takes ${
          (body.input ?? []).length
        } inputs, given ${args.length}`,
        {
          code: "invalid-graph",
          fix: "re-export the model",
        },
      );
    }
    (body.input ?? []).forEach((input, i) => {
      const a = args[i];
      if (a.kind === "sequence") scope.sequences.set(input.name, a.items);
      else if (a.kind === "none") scope.absent.add(input.name);
      else scope.values.set(input.name, a);
      scope.written.set(input.name, "a subgraph input");
    });
    runNodes(body.node ?? [], scope);
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

  function emit(
    op: string,
    ins: readonly Known[],
    attrs: Attrs,
    outputs: number,
    label: string,
    name: string,
  ): Known[] {
    charge(label);
    const types = inferNode(
      op,
      ins.map((
        k,
      ) => (k.kind === "const" ? { shape: k.tensor.shape, dtype: k.tensor.dtype } : k.type)),
      attrs,
      label,
    );
    const i64 = ins.some((k) => k.i64) && types.every((t) => t.dtype === "i32");
    // bfloat16 arithmetic is f32 arithmetic: the type carries on, rounded where the model asks.
    const bf16 = ins.some((k) => k.bf16) && types.every((t) => t.dtype === "f32");
    const sentinel = carriesSentinel(op, ins, label);
    if (
      ins.every((k) => k.kind === "const") && types.every((t) => sizeOf(t.shape) <= FOLD_LIMIT) &&
      !RANDOM_OPS.has(op) // drawn anew on every run
    ) {
      const tensors = ins.map((k) => (k as Extract<Known, { kind: "const" }>).tensor);
      // A folded value is a tensor too: the budget holds before it is computed.
      for (const t of types) checkBudget(t.shape, t.dtype, label);
      const data = evaluateNode({ op, attrs, inputs: tensors, outputs: types, label }, tensors);
      if (sentinel) data.forEach(markSaturated);
      const out: Known[] = types.map((t, i) => ({
        kind: "const",
        tensor: { data: data[i], shape: t.shape, dtype: t.dtype },
        i64,
        bf16,
      }));
      guard(op, ins, attrs, out, i64, label, name);
      return out;
    }
    // The graph labels nodes `node "NAME" (Op)` itself: it gets the bare ONNX name.
    const syms = b.opN(op, ins.map(symbol), attrs, outputs, { name });
    const out: Known[] = syms.map((s, i) => ({
      kind: "value",
      name: s.name,
      type: types[i],
      i64,
      bf16,
    }));
    guard(op, ins, attrs, out, i64, label, name);
    return out;
  }

  /** A wrap check on the int64 result of `op` where it can leave the 32-bit range. */
  function guard(
    op: string,
    ins: readonly Known[],
    attrs: Attrs,
    out: readonly Known[],
    i64: boolean,
    label: string,
    name: string,
  ): void {
    if (!i64 || out.length !== 1 || sizeOf(typeOf(out[0]).shape) === 0) return;
    const one: OpFn = (o, xs, a = {}) => emit(o, xs, a, 1, label, name)[0];
    const wrapped = int64Wrapped(one, op, ins, attrs, out[0]);
    if (wrapped) {
      check(
        wrapped,
        `${label}: its int64 result leaves the 32-bit range kiln holds int64 in`,
        label,
        name,
      );
    }
  }

  /** {@linkcode NodeContext.check}: thrown now where `bad` is constant, else a check output. */
  function check(bad: Known, why: string, label: string, name: string): void {
    if (bad.kind === "const") return assertCheck(checkName(why, 0), bad.tensor.data);
    if (sizeOf(bad.type.shape) === 0) return;
    const rank = bad.type.shape.length;
    const flag = emit("Cast", [bad], { to: "i32" }, 1, label, name)[0];
    const any = rank
      ? emit("ReduceMax", [flag], { axes: [...Array(rank).keys()], keepdims: 0 }, 1, label, name)[0]
      : flag;
    checks.push({ name: checkName(why, checks.length), value: any });
  }

  for (const o of g.output) {
    // An empty optional output has no graph output; a sequence's element i is output `name[i]`.
    if (top.absent.has(o.name)) continue;
    const items = top.sequences.get(o.name);
    if (items) {
      items.forEach((k, i) =>
        b.output(`${o.name}[${i}]`, symbol(k), { dtype: k.i64 ? "i64" : undefined })
      );
      continue;
    }
    let k = env.get(o.name);
    if (!k) {
      throw new KilnError(`Output "${o.name}" is not produced by any node`, {
        code: "dangling-input",
        fix: "re-export the model",
      });
    }
    checkDeclaredOutput(o, k);
    if (k.kind === "const" && isSaturated(k.tensor.data)) throw sentinelError(`output "${o.name}"`);
    // A bfloat16 output holds bfloat16 values, whatever f32 arithmetic produced it.
    if (o.type?.tensorType?.elemType === BF16) {
      k = roundToBf16(
        (op, xs, a = {}) => emit(op, xs, a, 1, `output "${o.name}"`, `${o.name}.bf16`)[0],
        k,
      );
    }
    b.output(o.name, symbol(k), { dtype: k.i64 ? "i64" : undefined });
  }
  for (const c of checks) b.output(c.name, symbol(c.value));
  return b.build();
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

/** Names in scope while a graph or an inlined subgraph is converted. */
interface Scope {
  /** Tensors by name. */
  readonly values: Map<string, Known>;
  /** Sequences by name. */
  readonly sequences: Map<string, readonly Known[]>;
  /** Which node wrote each name (duplicates are errors). */
  readonly written: Map<string, string>;
  /** Names bound to an empty optional. */
  readonly absent: Set<string>;
  /** The node that made each name, with its inputs (what Gradient differentiates). */
  readonly made: Map<string, Producer>;
  /** The enclosing graph's scope (a subgraph sees outer names). */
  readonly parent?: Scope;
}

/** The error of a sequence given where a tensor is needed. */
function notTensor(label: string, i: number): never {
  throw new KilnError(`${label}: input ${i} is a sequence; the op needs a tensor`, {
    code: "invalid-graph",
    fix: "pass a tensor (SequenceAt or ConcatFromSequence make one from a sequence)",
  });
}

/** The error of a tensor (or nothing) given where a sequence is needed. */
function notSequence(label: string, i: number): never {
  throw new KilnError(`${label}: input ${i} is not a sequence`, {
    code: "invalid-graph",
    fix: "pass a sequence (SequenceConstruct makes one from tensors)",
  });
}

/** The error of a required input the model leaves out (absent, or named ""). */
function missingInput(label: string, i: number): never {
  throw new KilnError(`${label}: input ${i} is required but missing`, {
    code: "invalid-graph",
    fix:
      "give the node every input its op requires (see the ONNX operator spec); re-export the model",
  });
}
