/**
 * Fusion: graph → kernel IR. Nodes are visited in topological order while every value is kept as
 * a symbolic expression: movement ops become index steps, elementwise ops build ALU trees,
 * reductions, MatMul, Conv and pooling open a reduction group (or join one that iterates the same
 * space, which is how softmax and layer norm become one row kernel). A value is stored to a
 * buffer only at a boundary, and every boundary is logged with its reason:
 *
 * - graph outputs, and inputs of ops kept whole (`opaque`: gathers, concat, split, cumsum, …);
 * - recomputation: a non-trivial expression read under a broadcast (or by a contraction) would be
 *   evaluated once per reuse, so it is computed once instead;
 * - an incompatible iteration space, or a read that would make a group depend on itself.
 *
 * Composite ops are expanded through their decompositions inside this pass, so "Softmax" and its
 * decomposed PyTorch form fuse identically, and kernels still name the original nodes.
 *
 * @module
 */
import type { DType } from "./dtype.ts";
import { KilnError } from "./errors.ts";
import type { Graph } from "./graph.ts";
import type { HostTensor } from "./host_tensor.ts";
import {
  aluCount,
  type AluOp,
  applyStep,
  broadcastStep,
  buffersRead,
  type Expr,
  gathers,
  type IndexStep,
  isAluOp,
  type KernelIR,
  type KernelOutput,
  type KernelPattern,
  type Load,
  mapLoads,
  type ReduceOp,
  type Reduction,
  reindex,
  reshapeStep,
} from "./kernel_ir.ts";
import { padByConcat, resolvePads, resolvePerm, resolveSlice } from "./ops/movement.ts";
import { runsWhole } from "./fusable.ts";
import { resolveWindow } from "./ops/nn.ts";
import { reduceAxes } from "./ops/reduce.ts";
import {
  type Attrs,
  type EmitRef,
  type Emitter,
  getOp,
  InferContext,
  inferNode,
  type ValueType,
} from "./ops/mod.ts";

/** A decomposition: what an op's `decompose` is. */
type Decomposition = (e: Emitter, inputs: readonly EmitRef[], attrs: Attrs) => EmitRef[];
import { fromF16Bits } from "./dtype.ts";
import { normalizeAxis, sameShape, type Shape, sizeOf } from "./shape.ts";

/** Options for {@linkcode fuse}. */
export interface FuseOptions {
  /** Most input buffers one kernel may read (a backend's binding limit); default unlimited. */
  readonly maxInputs?: number;
  /** Largest expression (ALU ops) inlined into more than one consumer; default 16. */
  readonly maxSharedOps?: number;
}

/** The kernels of a graph and the log of fusion decisions. */
export interface FusionResult {
  /** Kernels in execution order. */
  readonly kernels: KernelIR[];
  /** Why each boundary was placed, in order. */
  readonly log: string[];
  /** Constant buffers the kernels read (value id → data). */
  readonly constants: ReadonlyMap<number, HostTensor>;
}

const REDUCE: Record<string, ReduceOp> = {
  ReduceSum: "sum",
  ReduceMean: "mean",
  ReduceMax: "max",
  ReduceMin: "min",
};

interface Group {
  readonly id: number;
  readonly space: Shape;
  readonly reduced: number[];
  readonly reductions: Reduction[];
  readonly outputs: KernelOutput[];
  readonly labels: Set<string>;
  pattern: KernelPattern;
  opaque?: { op: string; attrs: Attrs; inputs: number[] };
  placement?: "ToDevice" | "ToHost";
  /** The kept axes in the order the group's values lay them out (default: space order). */
  keptOrder?: readonly number[];
}

/** A value during fusion. */
interface Sym {
  readonly type: ValueType;
  readonly expr: Expr;
  /** Tied to a reduction group: `expr` is in the group's coordinates. */
  readonly group?: Group;
  /** For tied values: steps from the group's coordinates to the value's own. */
  readonly toOwn?: readonly IndexStep[];
  /** Graph value id once stored. */
  readonly buffer?: number;
  /** Labels of the nodes this value's computation includes. */
  readonly labels: readonly string[];
  /** How many consumers read it (for the recompute rule). */
  uses: number;
}

/** Labels a consumer inherits: none from stored buffers (their kernel already counts them). */
const own = (s: Sym): readonly string[] => (s.buffer === undefined ? s.labels : []);
const isBare = (s: Sym) => s.expr.kind === "load" || s.expr.kind === "const";

/** Fuses `graph` into kernels. */
export function fuse(graph: Graph, options: FuseOptions = {}): FusionResult {
  return new Fuser(graph, options).run();
}

class Fuser {
  readonly #graph: Graph;
  readonly #opts: Required<FuseOptions>;
  readonly #groups: Group[] = [];
  readonly #producer = new Map<number, Group>();
  readonly #log: string[] = [];
  readonly #constants = new Map<number, HostTensor>();
  readonly #storedAs = new WeakMap<Sym, Sym>();
  #fresh: number;

  constructor(graph: Graph, options: FuseOptions) {
    this.#graph = graph;
    this.#opts = {
      maxInputs: options.maxInputs ?? Infinity,
      maxSharedOps: options.maxSharedOps ?? 16,
    };
    this.#fresh = graph.values.length;
  }

  run(): FusionResult {
    const g = this.#graph;
    const syms = new Map<number, Sym>();
    const uses = new Map<number, number>();
    for (const n of g.nodes) for (const v of n.inputs) uses.set(v, (uses.get(v) ?? 0) + 1);
    for (const b of [...g.inputs, ...g.params]) {
      syms.set(b.value, this.#bufferSym(b.value, g.values[b.value]));
    }
    const outputs = new Set(g.outputs.map((o) => o.value));
    for (const n of g.nodes) {
      const ins = n.inputs.map((v) => syms.get(v)!);
      const outs = this.#apply(
        n.op,
        ins,
        n.attrs,
        n.label,
        n.outputs.map((v) => g.values[v]),
        n.outputs,
      );
      n.outputs.forEach((v, k) => {
        outs[k].uses = uses.get(v) ?? 0;
        syms.set(v, outs[k]);
      });
    }
    for (const v of outputs) {
      const s = syms.get(v)!;
      if (s.buffer === v) continue;
      this.#store(s, v, `graph output "${g.values[v].name}"`);
    }
    return { kernels: this.#finish(), log: this.#log, constants: this.#constants };
  }

  #bufferSym(value: number, type: ValueType, labels: readonly string[] = []): Sym {
    return {
      type,
      expr: { kind: "load", input: value, steps: [], dtype: type.dtype },
      buffer: value,
      labels,
      uses: 0,
    };
  }

  /** Runs one op (primitive or composite) symbolically. `values` names graph values when known. */
  #apply(
    op: string,
    ins: Sym[],
    attrs: Attrs,
    label: string,
    types: readonly ValueType[],
    values?: readonly number[],
  ): Sym[] {
    const def = getOp(op);
    if (!def.primitive) return this.#expand(ins, attrs, label, def.decompose!);
    const out = (i: number) => values?.[i] ?? this.#fresh++;
    if (op === "Constant") return [this.#constant(attrs.value as HostTensor, label, out(0))];
    const inputs = ins.map((s) => s.type);
    if (runsWhole({ op, attrs, inputs, label })) {
      return this.#opaque(op, ins, attrs, label, types, types.map((_, i) => out(i)));
    }
    if (op === "ToDevice" || op === "ToHost") return [this.#placement(op, ins[0], label, out(0))];
    if (op === "Pad" && (attrs.mode ?? "constant") !== "constant") {
      return this.#expand(ins, attrs, label, padByConcat);
    }
    if (op === "Gather" || op === "GatherElements") {
      return [this.#gather(op, ins, attrs, label, types[0])];
    }
    switch (def.category) {
      case "elementwise":
        if (!isAluOp(op)) {
          throw new KilnError(`${label}: elementwise op ${op} has no ALU form`, {
            code: "internal",
            fix: "decompose it into ALU ops (its op definition's decompose) before fusion",
          });
        }
        return [this.#elementwise(op, ins, attrs, label, types[0])];
      case "movement":
        return [this.#movement(op, ins[0], attrs, label, types[0])];
      case "reduce":
        return [
          this.#reduce(
            REDUCE[op],
            ins[0],
            reduceAxes(attrs, ins[0].type.shape.length),
            label,
            types[0],
          ),
        ];
      case "matmul":
        return [this.#matmul(ins, label, types[0])];
      case "conv":
        return [this.#conv(ins, attrs, label, types[0])];
      case "pool":
        return [this.#pool(op, ins[0], attrs, label, types[0])];
    }
    throw new KilnError(`${label}: fusion has no rule for ${op}`, {
      code: "internal",
      fix: "report this",
    });
  }

  /** Expands a composite through a decomposition, routing emitted ops back into fusion. */
  #expand(ins: Sym[], attrs: Attrs, label: string, decompose: Decomposition): Sym[] {
    const refs: Sym[] = [...ins];
    const ref = (s: Sym): EmitRef => ({ id: refs.push(s) - 1 });
    const emit = (o: string, xs: readonly EmitRef[], a: Attrs = {}) => {
      const syms = xs.map((x) => refs[x.id]);
      const types = inferNode(o, syms.map((s) => s.type), a, label);
      return this.#apply(o, syms, a, label, types).map(ref);
    };
    const outs = decompose(
      {
        op: (o, xs, a) => emit(o, xs, a)[0],
        opN: (o, xs, a) => emit(o, xs, a),
        scalar: (value, dtype) =>
          ref({
            type: { shape: [], dtype },
            expr: { kind: "const", value, dtype },
            labels: [],
            uses: 0,
          }),
        typeOf: (r) => refs[r.id].type,
      },
      ins.map((_, i) => ({ id: i })),
      attrs,
    );
    return outs.map((r) => refs[r.id]);
  }

  #constant(t: HostTensor, label: string, value: number): Sym {
    if (sizeOf(t.shape) === 1) {
      const raw = t.dtype === "f16"
        ? fromF16Bits((t.data as Uint16Array)[0])
        : Number((t.data as ArrayLike<number>)[0]);
      const dtype = t.dtype as DType;
      return {
        type: { shape: t.shape, dtype },
        expr: { kind: "const", value: raw, dtype },
        labels: [label],
        uses: 0,
      };
    }
    this.#constants.set(value, t);
    return this.#bufferSym(value, { shape: t.shape, dtype: t.dtype as DType }, [label]);
  }

  /**
   * A placement op is a copy kernel of its own, tagged so the scheduler puts it where the data
   * must live (every backend generates the copy; only the tag's side may run it).
   */
  #placement(op: "ToDevice" | "ToHost", x: Sym, label: string, value: number): Sym {
    const from = this.#stored(x, `input of ${label}, which pins where data lives`);
    const group = this.#newGroup(x.type.shape, [], "elementwise");
    group.placement = op;
    group.labels.add(label);
    group.outputs.push({
      value,
      shape: x.type.shape,
      dtype: x.type.dtype,
      expr: from.expr,
      steps: [],
      level: "full",
    });
    this.#producer.set(value, group);
    return this.#bufferSym(value, x.type, [label]);
  }

  #opaque(
    op: string,
    ins: Sym[],
    attrs: Attrs,
    label: string,
    types: readonly ValueType[],
    values: number[],
  ): Sym[] {
    const inputs = ins.map((s) =>
      this.#stored(s, `input of ${label}, which runs as its own kernel`)
    );
    const group = this.#newGroup([], [], "opaque");
    group.opaque = { op, attrs, inputs: inputs.map((x) => x.buffer!) };
    group.labels.add(label);
    return types.map((t, k) => {
      group.outputs.push({
        value: values[k],
        shape: t.shape,
        dtype: t.dtype,
        expr: { kind: "const", value: 0, dtype: t.dtype },
        steps: [],
        level: "full",
      });
      this.#producer.set(values[k], group);
      return this.#bufferSym(values[k], t, [label]);
    });
  }

  #elementwise(op: AluOp, ins: Sym[], attrs: Attrs, label: string, type: ValueType): Sym {
    const shape = type.shape;
    // A tied input decides the group; inputs tied to other groups are stored first.
    const tied = ins.filter((s) => s.group).map((s) => s.group!);
    let group = tied.length ? tied.reduce((a, b) => (a.id > b.id ? a : b)) : undefined;
    let toOwn: IndexStep[] | undefined;
    if (group) {
      toOwn = this.#relation(group, shape);
      if (!toOwn) {
        this.#log.push(
          `${label}: shape [${shape}] does not iterate like kernel #${group.id}; its inputs are stored`,
        );
        group = undefined;
      }
    }
    const args: Expr[] = [];
    const pending: { sym: Sym; steps: IndexStep[] }[] = ins.map((s) => ({
      sym: s.group && s.group !== group ? this.#stored(s, `read by ${label} in another kernel`) : s,
      steps: broadcastStep(shape, s.type.shape),
    }));
    if (group) {
      const blocked = pending.some(({ sym, steps }) =>
        sym.group
          ? sym.group !== group || !sameMap(group!, [...toOwn!, ...steps], sym.toOwn!)
          : this.#reaches(sym.expr, group!)
      );
      if (blocked) {
        this.#log.push(
          `${label}: reading its inputs inside kernel #${group.id} would be inconsistent or cyclic; inputs are stored`,
        );
        group = undefined;
      }
    }
    const used: Sym[] = [];
    for (const { sym, steps } of pending) {
      let s = sym;
      if (s.group && s.group !== group) s = this.#stored(s, `read by ${label} outside its kernel`);
      if (!s.group && !isBare(s) && broadcasts(shape, s.type.shape)) {
        s = this.#stored(s, `${label} reads it under a broadcast (recomputation)`);
      }
      if (!s.group && !isBare(s) && s.uses > 1 && aluCount(s.expr) > this.#opts.maxSharedOps) {
        s = this.#stored(s, `read by ${s.uses} consumers and too large to recompute`);
      }
      args.push(s.group ? s.expr : reindex(s.expr, group ? [...toOwn!, ...steps] : steps));
      used.push(s);
    }
    this.#bindingLimit(
      args,
      used,
      pending.map((p) => (group ? [...toOwn!, ...p.steps] : p.steps)),
      group,
      label,
    );
    const expr: Expr = { kind: "alu", op, args, dtype: type.dtype, attrs: aluAttrs(op, attrs) };
    const labels = unique([...used.flatMap(own), label]);
    if (group) labels.forEach((l) => group!.labels.add(l));
    return { type, expr, group, toOwn: group ? toOwn : undefined, labels, uses: 0 };
  }

  /**
   * Keeps a kernel within the backend's binding limit: while the expression would read more
   * buffers than allowed, the operand reading the most is stored (one buffer instead of many).
   */
  #bindingLimit(
    args: Expr[],
    used: Sym[],
    steps: IndexStep[][],
    group: Group | undefined,
    label: string,
  ): void {
    const budget = this.#opts.maxInputs;
    if (budget === Infinity) return;
    const total = () =>
      new Set([...args.flatMap((a) => [...buffersRead(a)]), ...(group ? this.#loads(group) : [])])
        .size;
    while (total() > budget) {
      let widest = -1, width = 1;
      used.forEach((s, i) => {
        const w = !s.group && !isBare(s) ? buffersRead(s.expr).size : 0;
        if (w > width) [widest, width] = [i, w];
      });
      if (widest < 0) {
        this.#log.push(`${label}: reads more than ${budget} buffers with nothing left to store`);
        return;
      }
      used[widest] = this.#stored(
        used[widest],
        `${label} would read more than ${budget} buffers (binding limit)`,
      );
      args[widest] = reindex(used[widest].expr, steps[widest]);
    }
  }

  #movement(op: string, s: Sym, attrs: Attrs, label: string, type: ValueType): Sym {
    const from = s.type.shape, to = type.shape;
    const ctx = new InferContext({ op, where: label, inputs: [s.type], attrs });
    let steps: IndexStep[];
    switch (op) {
      case "Transpose": {
        const perm = resolvePerm(ctx, from.length);
        steps = [{
          kind: "affine",
          coeff: from.map((_, j) => to.map((_, d) => (perm[d] === j ? 1 : 0))),
          offset: from.map(() => 0),
        }];
        break;
      }
      case "Slice": {
        const axes = resolveSlice(ctx, from);
        steps = [{
          kind: "affine",
          coeff: from.map((_, j) => to.map((_, d) => (d === j ? axes[j].step : 0))),
          offset: axes.map((a) => a.start),
        }];
        break;
      }
      case "Expand":
        steps = broadcastStep(to, from);
        break;
      case "Pad": {
        const { before } = resolvePads(ctx, from.length);
        steps = [{
          kind: "affine",
          coeff: from.map((_, j) => to.map((_, d) => (d === j ? 1 : 0))),
          offset: before.map((b) => -b),
          bounds: from,
          fill: ctx.float("value", 0),
        }];
        if (!isBare(s)) s = this.#stored(s, `${label} pads it (fill applies to stored values)`);
        break;
      }
      default:
        steps = reshapeStep(to, from);
    }
    if (s.group) {
      const toOwn = this.#relation(s.group, to);
      if (toOwn && sameMap(s.group, [...toOwn, ...steps], s.toOwn!)) {
        return { ...s, type, toOwn, labels: unique([...s.labels, label]), uses: 0 };
      }
      s = this.#stored(s, `${label} moves it out of its kernel's iteration order`);
    }
    if (steps.length === 0) return { ...s, type, labels: unique([...s.labels, label]), uses: 0 };
    if (!isBare(s) && sizeOf(to) > sizeOf(from)) {
      s = this.#stored(s, `${label} reads it under a broadcast (recomputation)`);
    }
    return {
      type,
      expr: reindex(s.expr, steps),
      labels: unique([...(s.buffer === undefined ? s.labels : []), label]),
      uses: 0,
    };
  }

  /**
   * Gather and GatherElements as a data-dependent index step on the data's loads: the indices
   * (stored unless already a plain load) are read at the output's coordinates, so a gather fuses
   * into whatever consumes it (an embedding lookup and the positional add are one kernel). A
   * constant index is an affine step instead.
   */
  #gather(op: string, [data, indices]: Sym[], attrs: Attrs, label: string, type: ValueType): Sym {
    const from = data.type.shape, to = type.shape;
    const axis = normalizeAxis((attrs.axis as number | undefined) ?? 0, from.length, label);
    const dim = from[axis];
    const drop = op === "Gather" ? indices.type.shape.length : 1;
    let ix = indices;
    if (ix.group || !isBare(ix)) ix = this.#stored(ix, `indices of ${label}`);
    const outer = (j: number) => (j < axis ? j : j - 1 + drop);
    let step: IndexStep;
    if (ix.expr.kind === "const") {
      const c = ix.expr.value < 0 ? ix.expr.value + dim : ix.expr.value;
      step = {
        kind: "affine",
        coeff: from.map((_, j) => to.map((_, d) => (j !== axis && d === outer(j) ? 1 : 0))),
        offset: from.map((_, j) => (j === axis ? c : 0)),
        bounds: from,
        fill: 0,
      };
    } else {
      // Gather reads its indices at the output axes they span; GatherElements at every axis.
      const select: IndexStep[] = op === "Gather"
        ? [{
          kind: "affine",
          coeff: indices.type.shape.map((_, j) => to.map((_, d) => (d === axis + j ? 1 : 0))),
          offset: indices.type.shape.map(() => 0),
        }]
        : [];
      step = { kind: "gather", axis, drop, dim, index: reindex(ix.expr, select) as Load };
    }
    let s = data;
    if (s.group) s = this.#stored(s, `${label} gathers from it`);
    if (!isBare(s) && sizeOf(to) > sizeOf(from)) {
      s = this.#stored(s, `${label} reads it more often than it has elements (recomputation)`);
    }
    return {
      type,
      expr: reindex(s.expr, [step]),
      labels: unique([...own(s), ...own(ix), label]),
      uses: 0,
    };
  }

  #reduce(op: ReduceOp, s: Sym, axes: number[], label: string, type: ValueType): Sym {
    const shape = s.type.shape;
    const sorted = [...axes].sort((a, b) => a - b);
    let group: Group | undefined;
    if (
      s.group &&
      (s.toOwn!.length > 0 || !sameShape(s.group.space, shape) ||
        !sameAxes(s.group.reduced, sorted))
    ) {
      s = this.#stored(s, `${label} reduces it over another iteration space`);
    }
    if (s.group) {
      group = s.group;
      this.#log.push(
        `${label}: joins kernel #${group.id} as reduction ${
          group.reductions.length + 1
        } over the same rows`,
      );
    } else {
      group = this.#newGroup(shape, sorted, "reduce");
    }
    return this.#reduction(group, op, s.expr, label, type, own(s));
  }

  #reduction(
    group: Group,
    op: ReduceOp,
    expr: Expr,
    label: string,
    type: ValueType,
    labels: readonly string[],
  ): Sym {
    group.reductions.push({ op, expr, dtype: type.dtype });
    [...labels, label].forEach((l) => group.labels.add(l));
    const toOwn = this.#relation(group, type.shape)!;
    return {
      type,
      expr: { kind: "acc", index: group.reductions.length - 1, dtype: type.dtype },
      group,
      toOwn,
      labels: [label],
      uses: 0,
    };
  }

  /** MatMul as a contraction over K in the space [...batch, M, N, K]. */
  #matmul(ins: Sym[], label: string, type: ValueType): Sym {
    const [a, b] = ins.map((s) => this.#operand(s, label));
    const as = a.type.shape.length === 1 ? [1, a.type.shape[0]] : a.type.shape;
    const bs = b.type.shape.length === 1 ? [b.type.shape[0], 1] : b.type.shape;
    const batch = broadcastBatch(as.slice(0, -2), bs.slice(0, -2));
    const m = as[as.length - 2], k = as[as.length - 1], n = bs[bs.length - 1];
    const space = [...batch, m, n, k];
    const nb = batch.length;
    const pick = (own: Shape, dims: (number | undefined)[]): IndexStep => ({
      kind: "affine",
      coeff: own.map((d, j) => space.map((_, i) => (dims[j] === i && d !== 1 ? 1 : 0))),
      offset: own.map(() => 0),
    });
    const batchDims = (own: Shape) => own.slice(0, -2).map((_, j) => j + nb - (own.length - 2));
    const aSteps = [pick(as, [...batchDims(as), nb, nb + 2]), ...reshapeStep(as, a.type.shape)];
    const bSteps = [pick(bs, [...batchDims(bs), nb + 2, nb + 1]), ...reshapeStep(bs, b.type.shape)];
    const group = this.#newGroup(space, [nb + 2], "matmul");
    const product: Expr = {
      kind: "alu",
      op: "Mul",
      args: [reindex(a.expr, aSteps), reindex(b.expr, bSteps)],
      dtype: type.dtype,
    };
    return this.#reduction(group, "sum", product, label, type, [...own(a), ...own(b)]);
  }

  /**
   * 2-D Conv as a contraction over [Cg, KH, KW] in the space [N, G, Mg, OH, OW, Cg, KH, KW]. With
   * plain operands it is laid out as a matmul (implicit GEMM): [N, G, OH·OW, Mg, Cg·KH·KW], rows
   * of patches times the filters, so backends run it through their matmul kernels.
   */
  #conv(ins: Sym[], attrs: Attrs, label: string, type: ValueType): Sym {
    const [x, w, bias] = ins.map((s) => this.#operand(s, label));
    const [nImg, c, h, wd] = x.type.shape;
    const [m, cg, kh, kw] = w.type.shape;
    const ctx = new InferContext({
      op: "Conv",
      where: label,
      inputs: ins.map((s) => s.type),
      attrs,
    });
    const groups = ctx.int("group", 1);
    const win = resolveWindow(ctx, [h, wd], [kh, kw]);
    const mg = m / groups;
    const space = [nImg, groups, mg, win.out[0], win.out[1], cg, kh, kw];
    const row = (coef: Record<number, number>) => space.map((_, i) => coef[i] ?? 0);
    const xStep: IndexStep = {
      kind: "affine",
      coeff: [
        row({ 0: 1 }),
        row({ 1: cg, 5: 1 }),
        row({ 3: win.strides[0], 6: win.dilations[0] }),
        row({ 4: win.strides[1], 7: win.dilations[1] }),
      ],
      offset: [0, 0, -win.padsBegin[0], -win.padsBegin[1]],
      bounds: [nImg, c, h, wd],
      fill: 0,
    };
    const wStep: IndexStep = {
      kind: "affine",
      coeff: [row({ 1: mg, 2: 1 }), row({ 5: 1 }), row({ 6: 1 }), row({ 7: 1 })],
      offset: [0, 0, 0, 0],
    };
    // The GEMM layout reaches the 8-D coordinates through a permutation and a reshape.
    const gemm = x.expr.kind === "load" && w.expr.kind === "load";
    const [pixels, depth] = [win.out[0] * win.out[1], cg * kh * kw];
    const view: IndexStep[] = gemm
      ? [
        {
          kind: "affine",
          coeff: [0, 1, 3, 2, 4].map((a) => [0, 1, 2, 3, 4].map((b) => (a === b ? 1 : 0))),
          offset: [0, 0, 0, 0, 0],
        },
        { kind: "reshape", from: [nImg, groups, mg, pixels, depth], to: space },
      ]
      : [];
    const group = gemm
      ? this.#newGroup([nImg, groups, pixels, mg, depth], [4], "conv")
      : this.#newGroup(space, [5, 6, 7], "conv");
    if (gemm) group.keptOrder = [0, 1, 3, 2];
    const product: Expr = {
      kind: "alu",
      op: "Mul",
      args: [reindex(x.expr, [...view, xStep]), reindex(w.expr, [...view, wStep])],
      dtype: type.dtype,
    };
    const acc = this.#reduction(group, "sum", product, label, type, [...own(x), ...own(w)]);
    if (!bias) return acc;
    const bStep: IndexStep = { kind: "affine", coeff: [row({ 1: mg, 2: 1 })], offset: [0] };
    const expr: Expr = {
      kind: "alu",
      op: "Add",
      args: [acc.expr, reindex(bias.expr, [...view, bStep])],
      dtype: type.dtype,
    };
    return { ...acc, expr, labels: unique([...acc.labels, ...own(bias)]) };
  }

  /** MaxPool / AveragePool as a reduction over the window in [N, C, ...out, ...kernel]. */
  #pool(op: string, s: Sym, attrs: Attrs, label: string, type: ValueType): Sym {
    const x = this.#operand(s, label);
    const shape = x.type.shape;
    const ctx = new InferContext({ op, where: label, inputs: [x.type], attrs });
    const spatial = shape.slice(2);
    const win = resolveWindow(ctx, spatial, ctx.ints("kernel_shape"));
    const r = spatial.length;
    const space = [shape[0], shape[1], ...win.out, ...win.kernel];
    const row = (coef: Record<number, number>) => space.map((_, i) => coef[i] ?? 0);
    const step: IndexStep = {
      kind: "affine",
      coeff: [
        row({ 0: 1 }),
        row({ 1: 1 }),
        ...spatial.map((_, i) => row({ [2 + i]: win.strides[i], [2 + r + i]: win.dilations[i] })),
      ],
      offset: [0, 0, ...win.padsBegin.map((p) => -p)],
      bounds: shape,
      fill: op === "MaxPool" ? -Infinity : 0,
    };
    const group = this.#newGroup(space, spatial.map((_, i) => 2 + r + i), "pool");
    return this.#reduction(
      group,
      op === "MaxPool" ? "max" : "mean",
      reindex(x.expr, [step]),
      label,
      type,
      x.labels,
    );
  }

  /** An operand read many times by a contraction: bare loads stay inline, the rest is stored. */
  #operand(s: Sym, label: string): Sym {
    if (s.group || !isBare(s)) {
      return this.#stored(s, `operand of ${label}, read many times by a contraction`);
    }
    return s;
  }

  /** Steps from `group`'s coordinates to a value of `shape` iterating with it, if one does. */
  #relation(group: Group, shape: Shape): IndexStep[] | undefined {
    if (sameShape(shape, group.space)) return [];
    const keptAxes = group.keptOrder ??
      group.space.flatMap((_, i) => (group.reduced.includes(i) ? [] : [i]));
    const kept = keptAxes.map((i) => group.space[i]);
    if (group.reduced.length === 0 || sizeOf(shape) !== sizeOf(kept)) return undefined;
    const drop: IndexStep = {
      kind: "affine",
      coeff: keptAxes.map((axis) => group.space.map((_, i) => (i === axis ? 1 : 0))),
      offset: keptAxes.map(() => 0),
    };
    return [drop, ...reshapeStep(kept, shape)];
  }

  /** Stores `s` (if it is not a buffer yet) and returns a load of it. */
  #stored(s: Sym, why: string): Sym {
    if (s.buffer !== undefined && s.expr.kind === "load" && s.expr.steps.length === 0) return s;
    const done = this.#storedAs.get(s);
    if (done) return done;
    const value = this.#fresh++;
    this.#store(s, value, why);
    const stored = this.#bufferSym(value, s.type, s.labels);
    this.#storedAs.set(s, stored);
    return stored;
  }

  #store(s: Sym, value: number, why: string): void {
    let group = s.group;
    if (!group) {
      group = this.#newGroup(s.type.shape, [], "elementwise");
      s.labels.forEach((l) => group!.labels.add(l));
    }
    group.outputs.push({
      value,
      shape: s.type.shape,
      dtype: s.type.dtype,
      expr: s.expr,
      steps: s.toOwn ?? [],
      level: s.toOwn && s.toOwn.length ? "row" : "full",
    });
    this.#producer.set(value, group);
    this.#log.push(
      `boundary: ${s.labels.at(-1) ?? "value"} stored by kernel #${group.id} (${why})`,
    );
  }

  #newGroup(space: Shape, reduced: number[], pattern: KernelPattern): Group {
    const g: Group = {
      id: this.#groups.length,
      space,
      reduced,
      reductions: [],
      outputs: [],
      labels: new Set(),
      pattern,
    };
    this.#groups.push(g);
    return g;
  }

  /** Whether evaluating `e` reads a buffer computed (transitively) from `target`'s results. */
  #reaches(e: Expr, target: Group): boolean {
    const seen = new Set<Group>();
    const stack: Group[] = [];
    for (const v of buffersRead(e)) if (this.#producer.has(v)) stack.push(this.#producer.get(v)!);
    while (stack.length) {
      const g = stack.pop()!;
      if (g === target) return true;
      if (seen.has(g)) continue;
      seen.add(g);
      for (const v of this.#loads(g)) if (this.#producer.has(v)) stack.push(this.#producer.get(v)!);
    }
    return false;
  }

  #loads(g: Group): Set<number> {
    const out = new Set<number>(g.opaque?.inputs ?? []);
    for (const e of [...g.reductions.map((r) => r.expr), ...g.outputs.map((o) => o.expr)]) {
      buffersRead(e, out);
    }
    return out;
  }

  /** Merges elementwise kernels of equal space, orders kernels, and numbers their inputs. */
  #finish(): KernelIR[] {
    const live = this.#groups.filter((g) => g.outputs.length > 0);
    const merged: Group[] = [];
    for (const g of live) {
      const into = g.pattern === "elementwise" && !g.placement
        ? merged.find((m) =>
          m.pattern === "elementwise" && !m.placement && sameShape(m.space, g.space) &&
          !this.#dependsOn(g, m) &&
          !this.#dependsOn(m, g)
        )
        : undefined;
      if (into) {
        into.outputs.push(...g.outputs);
        g.labels.forEach((l) => into.labels.add(l));
        for (const o of g.outputs) this.#producer.set(o.value, into);
        this.#log.push(
          `kernel #${g.id} merged into #${into.id}: same elementwise space, independent`,
        );
      } else merged.push(g);
    }
    const order = this.#topo(merged);
    return groupAttention(order.map((g, i) => this.#kernel(g, i)), this.#log);
  }

  #dependsOn(a: Group, b: Group): boolean {
    return [...this.#loads(a)].some((v) => {
      const p = this.#producer.get(v);
      return p !== undefined && (p === b || this.#dependsOn(p, b));
    });
  }

  #topo(groups: Group[]): Group[] {
    const done = new Set<Group>(), out: Group[] = [];
    const visit = (g: Group) => {
      if (done.has(g)) return;
      done.add(g);
      for (const v of this.#loads(g)) {
        const p = this.#producer.get(v);
        if (p && p !== g) visit(p);
      }
      out.push(g);
    };
    groups.forEach(visit);
    return out;
  }

  #kernel(g: Group, index: number): KernelIR {
    const g0 = this.#graph;
    const ids = g.opaque ? g.opaque.inputs : [...this.#loads(g)];
    const local = new Map(ids.map((v, i) => [v, i]));
    const typeOf = (v: number): ValueType => {
      if (v < g0.values.length) return g0.values[v];
      const c = this.#constants.get(v);
      if (c) return { shape: c.shape, dtype: c.dtype as DType };
      for (const k of this.#groups) for (const o of k.outputs) if (o.value === v) return o;
      throw new KilnError(`fusion lost buffer ${v}`, { code: "internal", fix: "report this" });
    };
    const renumber = (e: Expr): Expr => mapLoads(e, (l) => ({ ...l, input: local.get(l.input)! }));
    if (ids.length > this.#opts.maxInputs) {
      this.#log.push(
        `kernel #${g.id} reads ${ids.length} buffers, over the backend's limit of ${this.#opts.maxInputs}`,
      );
    }
    const pattern = refinePattern(g);
    return {
      name: `${pattern}_${index}`,
      pattern,
      ops: [...g.labels],
      space: g.space,
      reduced: g.reduced,
      inputs: ids.map((v) => ({ value: v, shape: typeOf(v).shape, dtype: typeOf(v).dtype })),
      reductions: g.reductions.map((r) => ({ ...r, expr: renumber(r.expr) })),
      outputs: g.outputs.map((o) => ({ ...o, expr: renumber(o.expr) })),
      opaque: g.opaque ? { op: g.opaque.op, attrs: g.opaque.attrs } : undefined,
      placement: g.placement,
    };
  }
}

/**
 * Tags matmul → softmax → matmul chains (scores, attention weights, weighted values) as one
 * attention group: each link's output is read only by the next link.
 */
function groupAttention(kernels: KernelIR[], log: string[]): KernelIR[] {
  const readers = (value: number) => kernels.filter((k) => k.inputs.some((b) => b.value === value));
  const onlyInto = (from: KernelIR, to: KernelIR) =>
    from.outputs.length === 1 && readers(from.outputs[0].value).length === 1 &&
    readers(from.outputs[0].value)[0] === to;
  let count = 0;
  const out = [...kernels];
  kernels.forEach((scores) => {
    if (scores.pattern !== "matmul") return;
    const weights = kernels.find((k) => k.pattern === "softmax" && onlyInto(scores, k));
    const values = weights && kernels.find((k) => k.pattern === "matmul" && onlyInto(weights, k));
    if (!weights || !values) return;
    const group = `attention_${count++}`;
    for (const k of [scores, weights, values]) {
      out[kernels.indexOf(k)] = { ...out[kernels.indexOf(k)], group };
    }
    log.push(
      `${group}: ${scores.name} → ${weights.name} → ${values.name} form one attention group`,
    );
  });
  return out;
}

/** Names row kernels after what they compute: softmax (max, sum of exp), layer norm (two means). */
function refinePattern(g: Group): KernelPattern {
  const ops = g.reductions.map((r) => r.op).join(",");
  if (g.pattern === "reduce" && ops === "max,sum" && g.outputs.some((o) => o.level === "full")) {
    return "softmax";
  }
  if (g.pattern === "reduce" && ops === "mean,mean" && g.outputs.some((o) => o.level === "full")) {
    return "layernorm";
  }
  return g.pattern;
}

function aluAttrs(op: string, attrs: Attrs): Attrs | undefined {
  if (op === "Cast") return { to: attrs.to };
  if (op === "Mod") return { fmod: attrs.fmod ?? 0 };
  return undefined;
}

function broadcasts(out: Shape, input: Shape): boolean {
  return sizeOf(out) > sizeOf(input);
}

function broadcastBatch(a: Shape, b: Shape): number[] {
  const rank = Math.max(a.length, b.length);
  return [...Array(rank).keys()].map((i) =>
    Math.max(a[i - rank + a.length] ?? 1, b[i - rank + b.length] ?? 1)
  );
}

function sameAxes(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function unique<T>(xs: readonly T[]): T[] {
  return [...new Set(xs)];
}

/**
 * Whether two step chains from `group`'s coordinates agree: checked by evaluating both on every
 * point of small spaces and on a fixed sample of large ones (the chains are affine/reshape maps,
 * so disagreement shows on generic points).
 */
function sameMap(group: Group, a: readonly IndexStep[], b: readonly IndexStep[]): boolean {
  // Data-dependent chains cannot be probed without data: only identical ones agree.
  if (gathers(a) || gathers(b)) return JSON.stringify(a) === JSON.stringify(b);
  const space = group.space;
  const n = sizeOf(space);
  const probes = n <= 4096
    ? [...Array(n).keys()]
    : [...Array(512).keys()].map((i) =>
      Math.floor(((i * 2654435761) % 4294967296) / 4294967296 * n)
    );
  for (const lin of probes) {
    const coords: number[] = new Array(space.length);
    let rest = lin;
    for (let i = space.length - 1; i >= 0; i--) {
      coords[i] = rest % space[i];
      rest = Math.floor(rest / space[i]);
    }
    const run = (steps: readonly IndexStep[]) => {
      let c: number[] | undefined = coords;
      for (const s of steps) if (c) c = applyStep(s, c);
      return c;
    };
    const x = run(a), y = run(b);
    if (
      x === undefined || y === undefined
        ? x !== y
        : x.length !== y.length || x.some((v, i) => v !== y[i])
    ) {
      return false;
    }
  }
  return true;
}
