/**
 * Fusion: graph → kernel IR. Nodes are visited in topological order while every value is kept as
 * a symbolic expression: movement ops become index steps, elementwise ops build ALU trees,
 * reductions, MatMul, Conv and pooling open a reduction group (or join one that iterates the same
 * space, which is how softmax and layer norm become one row kernel). A value is stored to a
 * buffer only at a boundary, and every boundary is logged with its reason:
 *
 * - graph outputs, and inputs of ops kept whole (`opaque`: custom ops, see `fusable.ts`);
 * - recomputation: a non-trivial expression read under a broadcast (or by a contraction) would be
 *   evaluated once per reuse, so it is computed once instead;
 * - an incompatible iteration space, or a read that would make a group depend on itself.
 *
 * Composite ops are expanded through their decompositions inside this pass, so "Softmax" and its
 * decomposed PyTorch form fuse identically, and kernels still name the original nodes.
 *
 * This file is the walk. The index maps of movement ops and contractions are `index_maps.ts`
 * (pure), the contractions (MatMul, Conv, pooling) `fuse_contractions.ts`, the symbolic values
 * `fuse_values.ts`, the groups that become kernels `fuse_groups.ts`, and the named patterns
 * (softmax, layer norm, attention chains) `fusion_patterns.ts`.
 *
 * @module
 */
import type { DType } from "../ir/dtype.ts";
import { KilnError } from "../support/errors.ts";
import { checkGraph, type Graph } from "../ir/graph.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import {
  aluCount,
  type AluOp,
  broadcastStep,
  buffersRead,
  type Expr,
  exprDepth,
  type IndexStep,
  isAluOp,
  type ReduceOp,
  reindex,
} from "../ir/kernel_ir.ts";
import { type Group, KernelGroups } from "./fuse_groups.ts";
import { OutputViews } from "./fuse_outputs.ts";
import { type FuseOptions, type FusionResult, withDefaults } from "./fuse_options.ts";
import {
  acrossColumns,
  aluAttrs,
  broadcasts,
  bufferSym,
  cheapUnderBroadcast,
  EqualValues,
  everywhere,
  inlineOperand,
  isBare,
  keepWithinBindings,
  normedOperand,
  own,
  plainInput,
  plainTables,
  prologueOperand,
  rareBranch,
  REDUCE,
  sameAxes,
  scalarSym,
  type Sym,
  uniform,
  unique,
  varyingOps,
} from "./fuse_values.ts";
import { withIntegerRules } from "../ir/integer_rules.ts";
import { keptRelations, movementSteps, relation, sameMap } from "../ir/index_maps.ts";
import { gatherSym } from "./fuse_gather.ts";
import { combinedRange, type RangeWalk } from "./fuse_ranges.ts";
import { loweringOf } from "../ops/window_lowering.ts";
import { type Decomposition, expandSymbols } from "./fuse_expand.ts";
import { runsWhole } from "./fusable.ts";
import { convSym, matmulSym, poolSym, prologueProduct, type Walk } from "./fuse_contractions.ts";
import { integerProduct } from "./fuse_integer.ts";
import { reduceAxes } from "../ops/reduce.ts";
import { type Attrs, getOp, InferContext, type ValueType } from "../ops/mod.ts";
import { blockWeight, nativeBlockMatMul, packedOperand } from "../ops/block_matmul.ts";
import { sameShape, type Shape, sizeOf } from "../ir/shape.ts";

export type { FuseOptions, FusionResult } from "./fuse_options.ts";

/** Fuses `graph` into kernels. */
export function fuse(graph: Graph, options: FuseOptions = {}): FusionResult {
  return new Fuser(checkGraph(graph, "fuse()"), options).run();
}

class Fuser {
  readonly #graph: Graph;
  readonly #opts: Required<FuseOptions>;
  readonly #log: string[] = [];
  readonly #groups = new KernelGroups(this.#log);
  readonly #constants = new Map<number, HostTensor>();
  /** The tensor of each constant's symbol: what a decomposition may read (`Emitter.constantOf`). */
  readonly #tensors = new WeakMap<Sym, HostTensor>();
  readonly #storedAs = new WeakMap<Sym, Sym>();
  readonly #outputs = new OutputViews({
    store: (s, v, why) => this.#store(s, v, why),
    buffer: (v, type) => this.#bufferSym(v, type),
    name: (v) => this.#graph.values[v].name,
  });
  /** The shape of each buffer a load reads (graph values and the values fusion stores). */
  readonly #shapes = new Map<number, Shape>();
  readonly #equal = new EqualValues();
  /**
   * Reduction kernels of stored values by their space and axes: a reduction of a stored value of
   * the same shape over the same axes (DynamicQuantizeLinear's min beside its max, or the minimum
   * of its rows' minima beside the maximum of their maxima) joins the kernel, one pass (and one
   * dispatch) instead of two.
   */
  readonly #reduced = new Map<string, Group>();
  #fresh: number;
  /** What the contractions (`fuse_contractions.ts`) need of this walk. */
  readonly #walk: Walk = {
    operand: (s, label) => this.#operand(s, label),
    stored: (s, why) => this.#stored(s, why),
    storesPatches: (macs) => macs >= this.#opts.patchesFrom,
    keysAlong: (b, label) =>
      sizeOf(b.type.shape) >= this.#opts.keysFrom && acrossColumns(b, this.#shapes)
        ? this.#stored(b, `${label} reads it across its columns`)
        : b,
    splitsSums: () => this.#opts.splitSums,
    halfPatches: () => this.#opts.halfPatches,
    inline: (a, b) => this.#opts.inlineOperands && inlineOperand(a, b) && !this.#tooDeep(b),
    group: (space, reduced, pattern) => this.#groups.create(space, reduced, pattern),
    reduction: (group, op, expr, label, type, labels) =>
      this.#reduction(group, op, expr, label, type, labels),
  };

  /** What a combined range (`fuse_ranges.ts`) needs of this walk. */
  readonly #ranges: RangeWalk = {
    stored: (s, why) => this.#stored(s, why),
    groups: this.#groups,
    shapes: this.#shapes,
    fresh: () => this.#fresh++,
    log: this.#log,
  };

  constructor(graph: Graph, options: FuseOptions) {
    this.#graph = graph;
    this.#opts = withDefaults(options);
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
      const types = n.outputs.map((v) => g.values[v]);
      const outs = this.#apply(n.op, ins, n.attrs, n.label, types, n.outputs);
      n.outputs.forEach((v, k) => {
        outs[k].uses = uses.get(v) ?? 0;
        syms.set(v, outs[k]);
        if (outputs.has(v)) this.#outputs.note(outs[k], v);
      });
    }
    this.#outputs.storeRest(outputs, syms);
    const typeOf = (v: number): ValueType | undefined => {
      if (v < g.values.length) return g.values[v];
      const c = this.#constants.get(v);
      return c && { shape: c.shape, dtype: c.dtype as DType };
    };
    const kernels = this.#groups.finish(typeOf, this.#opts);
    return { kernels, log: this.#log, constants: this.#constants };
  }

  #bufferSym(value: number, type: ValueType, labels: readonly string[] = []): Sym {
    return bufferSym(this.#shapes, value, type, labels);
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
    const dots = this.#opts.integerDot, type = types[0];
    const integer = dots && integerProduct(this.#walk, op, ins, attrs, { label, type, dots });
    if (integer) return [integer];
    const block = op === "BlockMatMul" && this.#opts.blockProducts &&
      this.#blockProduct(ins, attrs, label, type);
    if (block) return [block];
    if (op === "RangeWithZero" && this.#opts.combinedRanges) {
      return combinedRange(this.#ranges, ins[0], label, types);
    }
    if (!def.primitive) return this.#expand(ins, attrs, label, def.decompose!);
    const out = (i: number) => values?.[i] ?? this.#fresh++;
    if (op === "Constant") return [this.#constant(attrs.value as HostTensor, label, out(0))];
    const inputs = ins.map((s) => s.type);
    if (runsWhole({ op, attrs, inputs, label })) {
      return this.#opaque(op, ins, attrs, label, types, types.map((_, i) => out(i)));
    }
    if (op === "ToDevice" || op === "ToHost") return [this.#placement(op, ins[0], label, out(0))];
    const lowering = loweringOf(op, inputs, attrs);
    if (lowering) return this.#expand(ins, attrs, label, lowering);
    if (op === "Gather" || op === "GatherElements") {
      return [gatherSym((x, why) => this.#stored(x, why), op, ins, { attrs, label, type })];
    }
    switch (def.category) {
      case "elementwise":
        if (!isAluOp(op)) {
          throw new KilnError(`${label}: elementwise op ${op} has no ALU form`, {
            code: "internal",
            fix: "decompose it into ALU ops (its op definition's decompose) before fusion",
          });
        }
        return [this.#elementwise(op, ins, attrs, label, type)];
      case "movement":
        return [this.#movement(op, ins[0], attrs, label, type)];
      case "reduce":
        return [
          this.#reduce(
            REDUCE[op],
            ins[0],
            reduceAxes(attrs, ins[0].type.shape.length),
            label,
            type,
          ),
        ];
      case "matmul":
        return [this.#matmul(ins, label, type)];
      case "conv":
        return [convSym(this.#walk, ins, attrs, label, type)];
      case "pool":
        return [this.#pool(op, ins[0], attrs, label, type)];
    }
    throw new KilnError(`${label}: fusion has no rule for ${op}`, {
      code: "internal",
      fix: "report this",
    });
  }

  /** Expands a composite through a decomposition, routing emitted ops back into fusion. */
  #expand(ins: Sym[], attrs: Attrs, label: string, decompose: Decomposition): Sym[] {
    const expander = {
      apply: (o: string, xs: Sym[], a: Attrs, l: string, types: readonly ValueType[]) =>
        this.#apply(o, xs, a, l, types),
      tensorOf: (s: Sym) => this.#tensors.get(s),
    };
    return expandSymbols(expander, ins, { attrs, label }, decompose);
  }

  #constant(t: HostTensor, label: string, value: number): Sym {
    const sym = scalarSym(t, label) ?? this.#equal.constant(t, () => {
      this.#constants.set(value, t);
      return this.#bufferSym(value, { shape: t.shape, dtype: t.dtype as DType }, [label]);
    });
    this.#tensors.set(sym, t);
    return sym;
  }

  /**
   * A placement op is a copy kernel of its own, tagged so the scheduler puts it where the data
   * must live (every backend generates the copy; only the tag's side may run it).
   */
  #placement(op: "ToDevice" | "ToHost", x: Sym, label: string, value: number): Sym {
    const from = this.#stored(x, `input of ${label}, which pins where data lives`);
    this.#groups.placement(op, { ...x.type, value, expr: from.expr }, label);
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
    const outputs = types.map((t, k) => ({ ...t, value: values[k] }));
    this.#groups.opaque({ op, attrs }, inputs.map((x) => x.buffer!), outputs, label);
    return types.map((t, k) => this.#bufferSym(values[k], t, [label]));
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
    if (group && pending.some((p) => p.sym.group === group && this.#tooDeep(p.sym))) {
      this.#log.push(`${label}: kernel #${group.id} reached the expression depth limit`);
      group = undefined;
    }
    if (group) {
      const blocked = pending.some(({ sym, steps }) =>
        sym.group
          ? sym.group !== group ||
            !sameMap(group!.space, [...toOwn!, ...steps], sym.toOwn!, sym.type.shape)
          : this.#groups.reaches(sym.expr, group!)
      );
      if (blocked) {
        this.#log.push(
          `${label}: reading its inputs inside kernel #${group.id} would be inconsistent or cyclic; inputs are stored`,
        );
        group = undefined;
      }
    }
    const used: Sym[] = [];
    const rare = this.#opts.keptStores ? rareBranch(op, ins, shape, this.#opts.donated) : -1;
    for (const [j, { sym, steps }] of pending.entries()) {
      let s = sym;
      if (s.group && s.group !== group) s = this.#stored(s, `read by ${label} outside its kernel`);
      const broadcast = !s.group && !isBare(s) && broadcasts(shape, s.type.shape) && j !== rare;
      if (broadcast && !cheapUnderBroadcast(s, this.#shapes, this.#constants)) {
        s = this.#stored(s, `${label} reads it under a broadcast (recomputation)`);
      }
      if (!s.group && !isBare(s) && this.#tooDeep(s)) {
        s = this.#stored(s, `the expression ${label} extends reached the depth limit`);
      }
      const ops = !s.group && !isBare(s) && s.uses > 1 ? varyingOps(s.expr, this.#shapes) : 0;
      if (ops > this.#opts.maxSharedOps) {
        s = this.#stored(s, `read by ${s.uses} consumers and too large to recompute`);
      }
      args.push(s.group ? s.expr : reindex(s.expr, group ? [...toOwn!, ...steps] : steps));
      used.push(s);
    }
    keepWithinBindings({
      args,
      used,
      steps: pending.map((p) => (group ? [...toOwn!, ...p.steps] : p.steps)),
      alsoRead: group ? this.#groups.loads(group) : [],
      budget: this.#opts.maxInputs,
      store: (s, why) => this.#stored(s, why),
      log: this.#log,
      label,
    });
    const expr = withIntegerRules({
      kind: "alu",
      op,
      args,
      dtype: type.dtype,
      attrs: aluAttrs(op, attrs),
    });
    const labels = unique([...used.flatMap(own), label]);
    if (group) labels.forEach((l) => group!.labels.add(l));
    return { type, expr, group, toOwn: group ? toOwn : undefined, labels, uses: 0 };
  }

  #movement(op: string, s: Sym, attrs: Attrs, label: string, type: ValueType): Sym {
    const from = s.type.shape, to = type.shape;
    const ctx = new InferContext({ op, where: label, inputs: [s.type], attrs });
    const steps = movementSteps(ctx, from, to);
    // A concat's pads (`masked`) are never read outside the input: a small expression is padded
    // as it is, evaluated at every point of the concat (its select reads each part there); one
    // the same everywhere is read so everywhere, so that its kernel computes it once.
    const masked = op === "Pad" && attrs.masked === 1 &&
      aluCount(s.expr) <= this.#opts.maxSharedOps;
    if (masked && uniform(s, this.#shapes)) {
      const expr = everywhere(s, to.length, this.#shapes);
      return { type, expr, labels: unique([...own(s), label]), uses: 0 };
    }
    if (op === "Pad" && !isBare(s) && !masked) {
      s = this.#stored(s, `${label} pads it (fill applies to stored values)`);
    }
    if (s.group) {
      // The group's kept order, then its axes in order: a transpose back to a contraction's row
      // order (ViT's patch embedding, a conv's [N, C, P] read as [N, P, C]) is stored by the
      // contraction in that order, contiguous along its columns, rather than stored as the conv
      // lays it out and read by the next kernel a channel plane apart.
      const { space, reduced, keptOrder } = s.group;
      for (const toOwn of keptRelations(space, reduced, to, keptOrder)) {
        if (sameMap(space, [...toOwn, ...steps], s.toOwn!, from)) {
          return { ...s, type, toOwn, labels: unique([...s.labels, label]), uses: 0 };
        }
      }
      s = this.#stored(s, `${label} moves it out of its kernel's iteration order`);
    }
    if (steps.length === 0) return { ...s, type, labels: unique([...s.labels, label]), uses: 0 };
    const cheap = cheapUnderBroadcast(s, this.#shapes, this.#constants);
    if (!isBare(s) && !masked && !cheap && sizeOf(to) > sizeOf(from)) {
      s = this.#outputs.read(s) ??
        this.#stored(s, `${label} reads it under a broadcast (recomputation)`);
    }
    return {
      type,
      expr: reindex(s.expr, steps),
      labels: unique([...(s.buffer === undefined ? s.labels : []), label]),
      uses: 0,
      viewOf: this.#outputs.after(s, steps),
    };
  }

  #reduce(op: ReduceOp, s: Sym, axes: number[], label: string, type: ValueType): Sym {
    const shape = s.type.shape;
    const sorted = [...axes].sort((a, b) => a - b);
    if (
      s.group &&
      (s.toOwn!.length > 0 || !sameShape(s.group.space, shape) ||
        !sameAxes(s.group.reduced, sorted))
    ) {
      s = this.#stored(s, `${label} reduces it over another iteration space`);
    }
    // Reductions of stored values over one space share a kernel, as do reductions of expressions
    // of the same buffers (DynamicQuantizeLinear's maximum and minimum of a GELU's output, an
    // int64 sum beside its f32 shadow that checks it): one pass over them instead of two.
    const space = `${shape.join()} ${sorted.join()}`;
    const reads = `${space} reads ${[...buffersRead(s.expr)].sort((a, b) => a - b).join()}`;
    const key = s.group ? undefined : isBare(s) ? space : reads;
    const sibling = key === undefined ? undefined : this.#reduced.get(key);
    const joins = sibling && sameAxes(sibling.reduced, sorted) && !sibling.outputs.length &&
      this.#groups.readsWithin(sibling, s.expr, this.#opts.maxInputs / 2);
    const joined = s.group ?? (joins ? sibling : undefined);
    const group = joined ?? this.#groups.create(shape, sorted, "reduce");
    const nth = group.reductions.length + 1;
    if (joined) this.#log.push(`${label}: joins kernel #${group.id} as reduction ${nth}`);
    else if (key !== undefined) {
      // A stored value's reduction is found by expressions of that value too.
      for (const k of new Set([key, reads])) this.#reduced.set(k, group);
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

  /** MatMul (a block product's B inline) as a contraction. */
  #matmul(
    ins: Sym[],
    label: string,
    type: ValueType,
    { inlineB = false, inlineA = false } = {},
  ): Sym {
    return matmulSym(this.#walk, ins, label, type, { widen: false, inlineB, inlineA });
  }

  /**
   * A BlockMatMul whose buffers are plain (see `plainTables`): of few rows, one matmul kernel
   * tagged with its packed buffers, the weight's unpacking inline; of more, the weight unpacked
   * once into [K, N] by a kernel tagged with them, then the tiled product.
   */
  #blockProduct(ins: Sym[], attrs: Attrs, label: string, type: ValueType): Sym | undefined {
    if (attrs.packed) return this.#packedProduct(ins, attrs, label, type);
    const rows = sizeOf(ins[0].type.shape.slice(0, -1));
    const few = nativeBlockMatMul(rows) ||
      (attrs.int8 === 1 && rows <= this.#opts.integerBlockRows);
    // A product rounding its A is one kernel only where the generator rounds (packed_rows.ts).
    if (attrs.rounds ? !(few && this.#opts.roundingProducts) : !few && !this.#opts.blockUnpacks) {
      return undefined;
    }
    const weight = plainTables(ins.slice(1), attrs);
    if (!weight) return undefined;
    const int8 = attrs.int8 ? { int8: true, ...(attrs.rounds === 1 && { roundsA: true }) } : {};
    const normed = normedOperand(ins[0], attrs, this.#opts.maxDepth);
    if (
      few && this.#opts.blockPrologues &&
      (normed || prologueOperand(ins[0], attrs, this.#opts.maxDepth))
    ) {
      const [w] = this.#expand(ins, attrs, label, blockWeight);
      // The product takes the normalization's reductions: its group never runs, so no later
      // reduction may join it (a decode step's next layer's norm had, and ran on its own).
      if (normed) {
        this.#reduced.forEach((g, key) => g === ins[0].group && this.#reduced.delete(key));
      }
      const what = normed ? "takes its A's normalization into" : "computes its A in";
      this.#log.push(`${label}: ${what} its own kernel (a prologue)`);
      const tables = { ...weight, ...int8 };
      return prologueProduct(this.#walk, ins[0], w, { label, type, tables });
    }
    let a = this.#operand(ins[0], label);
    if (plainInput(a) === undefined && few) {
      // A of few rows through a view (the rows a generation step picks) is stored, a few words,
      // so the kernel reads it plainly: left a view, the weight was unpacked generically.
      a = this.#stored(a, `rows of ${label}, read plainly by its block product`);
    }
    const input = plainInput(a);
    if (input === undefined) return undefined;
    const [w] = this.#expand([a, ...ins.slice(1)], attrs, label, blockWeight);
    if (few) {
      const product = this.#matmul([a, w], label, type, { inlineB: true });
      product.group!.blockProduct = { ...weight, ...int8, a: input };
      return product;
    }
    const stored = this.#stored(w, `weight of ${label}, unpacked once for its rows`);
    this.#groups.producerOf(stored.buffer!)!.blockUnpack = weight;
    return this.#matmul([a, stored], label, type);
  }

  /** A BlockMatMul of A packed by PackRowBlocks: one kernel, A unpacked inline too (`packedA`). */
  #packedProduct(ins: Sym[], attrs: Attrs, label: string, type: ValueType): Sym | undefined {
    const stored = ins.slice(0, 2).map((s) => this.#operand(s, label));
    const [words, scales] = stored.map(plainInput), weight = plainTables(ins.slice(2), attrs);
    if (!weight || words === undefined || scales === undefined) return undefined;
    const [a] = this.#expand(stored, attrs, label, packedOperand);
    const [w] = this.#expand([a, ...ins.slice(2)], attrs, label, blockWeight);
    const product = this.#matmul([a, w], label, type, { inlineA: true, inlineB: true });
    product.group!.blockProduct = { ...weight, int8: true, packedA: { words, scales } };
    return product;
  }

  /** MaxPool / AveragePool (see `poolSym`), an average's edge divisors a constant map. */
  #pool(op: string, s: Sym, attrs: Attrs, label: string, type: ValueType): Sym {
    const { pooled, divisors } = poolSym(this.#walk, op, s, attrs, label, type);
    if (!divisors) return pooled;
    const scale = this.#constant(divisors, label, this.#fresh++);
    return this.#apply("Mul", [pooled, scale], {}, label, [type])[0];
  }

  /** An operand read many times by a contraction: bare loads stay inline, the rest is stored. */
  #operand(s: Sym, label: string): Sym {
    if (s.group || !isBare(s)) {
      return this.#stored(s, `operand of ${label}, read many times by a contraction`);
    }
    return s;
  }

  /** Whether extending `s`'s expression would pass the depth limit. */
  #tooDeep(s: Sym): boolean {
    return exprDepth(s.expr) >= this.#opts.maxDepth;
  }

  /** Steps from `group`'s coordinates to a value of `shape` iterating with it, if one does. */
  #relation(group: Group, shape: Shape): IndexStep[] | undefined {
    return relation(group.space, group.reduced, shape, group.keptOrder);
  }

  /** Stores `s` (if it is not a buffer yet) and returns a load of it. */
  #stored(s: Sym, why: string): Sym {
    if (s.buffer !== undefined && s.expr.kind === "load" && s.expr.steps.length === 0) return s;
    const done = this.#storedAs.get(s);
    if (done) return done;
    const stored = this.#equal.stored(s, () => {
      const value = this.#fresh++;
      this.#store(s, value, why);
      return this.#bufferSym(value, s.type, s.labels);
    });
    this.#storedAs.set(s, stored);
    return stored;
  }

  #store(s: Sym, value: number, why: string): void {
    let group = s.group;
    if (!group) {
      group = this.#groups.create(s.type.shape, [], "elementwise");
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
    this.#groups.produces(group, value);
    this.#log.push(
      `boundary: ${s.labels.at(-1) ?? "value"} stored by kernel #${group.id} (${why})`,
    );
  }
}
