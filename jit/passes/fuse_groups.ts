/**
 * The groups of a fusion: each group becomes one kernel. The walk (`fuse.ts`) opens groups and
 * stores values into them; this file keeps who produces each buffer, answers dependency
 * questions, and at the end merges independent elementwise groups of equal space, orders the
 * groups and emits their kernel IR.
 *
 * @module
 */
import { byteSize, type DType } from "../ir/dtype.ts";
import { KilnError } from "../support/errors.ts";
import { groupChains, rowPattern } from "./fusion_patterns.ts";
import { exactKernel } from "./exact_math.ts";
import {
  type BlockProduct,
  type BlockTables,
  buffersRead,
  type Expr,
  type KernelIR,
  type KernelOutput,
  type KernelPattern,
  mapLoads,
  type Reduction,
} from "../ir/kernel_ir.ts";
import { shareExprs } from "../ir/expr_table.ts";
import type { Attrs, ValueType } from "../ops/mod.ts";
import { sameShape, type Shape, sizeOf } from "../ir/shape.ts";

/**
 * Most bytes a merged elementwise kernel stores. Merging saves a launch, nothing on large
 * stores, and makes every store live from the merged kernel on: the weights a model unpacks
 * layer by layer (MatMulNBits kept packed), merged by shape, were all unpacked before the first
 * layer ran.
 */
const MERGE_BYTES = 1 << 24;

/**
 * Most bytes a kernel may store to merge into an earlier one: its stores then live from that
 * kernel on. A prompt's products unpack each layer's 4-bit weight (4-35 MB) into a transient
 * buffer; merged by shape three layers at a time, the prefill of a 24-layer Qwen-shaped decoder
 * planned 351 MB of intermediates. A launch saved is worth nothing against such a store.
 */
const MERGE_ALONE_BYTES = 1 << 20;

/** Bytes the stores of `g` write. */
function storedBytes(g: Group): number {
  return g.outputs.reduce((sum, o) => sum + sizeOf(o.shape) * byteSize(o.dtype), 0);
}

/** A kernel being built. */
export interface Group {
  /** Creation order (names kernels in the log). */
  readonly id: number;
  /** Iteration space. */
  readonly space: Shape;
  /** Reduced axes of `space`. */
  readonly reduced: number[];
  /** Reductions, in order (later ones may read earlier ones through `acc`). */
  readonly reductions: Reduction[];
  /** Stored values. */
  readonly outputs: KernelOutput[];
  /** Labels of the nodes it computes. */
  readonly labels: Set<string>;
  /** What it computes. */
  pattern: KernelPattern;
  /** An op kept whole, with its input buffers. */
  opaque?: { op: string; attrs: Attrs; inputs: number[] };
  /** A placement copy. */
  placement?: "ToDevice" | "ToHost";
  /** The kept axes in the order the group's values lay them out (default: space order). */
  keptOrder?: readonly number[];
  /** A product by a block-quantized weight, its buffers as graph value ids. */
  blockProduct?: BlockProduct;
  /** A block-quantized weight unpacked for a product, its buffers as graph value ids. */
  blockUnpack?: BlockTables;
}

const pick = ({ value, shape, dtype }: Omit<StoredValue, "expr">) => ({ value, shape, dtype });

/** A value a group stores: its buffer id, type and expression. */
export interface StoredValue extends ValueType {
  /** Buffer (graph value) id. */
  readonly value: number;
  /** Expression in the group's coordinates. */
  readonly expr: Expr;
}

/** The groups of one fusion and the producer of every buffer they store. */
export class KernelGroups {
  readonly #groups: Group[] = [];
  readonly #producer = new Map<number, Group>();
  readonly #log: string[];

  /** Groups that log their merges and chains to `log`. */
  constructor(log: string[]) {
    this.#log = log;
  }

  /** Opens a group. */
  create(space: Shape, reduced: number[], pattern: KernelPattern): Group {
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

  /** Records that `group` stores buffer `value`. */
  produces(group: Group, value: number): void {
    this.#producer.set(value, group);
  }

  /** The group that stores `value`, if one does. */
  producerOf(value: number): Group | undefined {
    return this.#producer.get(value);
  }

  /** The stored value `value`, if some group stores it. */
  output(value: number): KernelOutput | undefined {
    // Through the producer map: a scan of every group for every kernel input was quadratic.
    return this.#producer.get(value)?.outputs.find((o) => o.value === value);
  }

  /**
   * A placement copy of its own, tagged so the scheduler puts it where the data must live (every
   * backend generates the copy; only the tag's side may run it).
   */
  placement(op: "ToDevice" | "ToHost", out: StoredValue, label: string): void {
    const group = this.create(out.shape, [], "elementwise");
    group.placement = op;
    group.labels.add(label);
    const { value, shape, dtype, expr } = out;
    group.outputs.push({ value, shape, dtype, expr, steps: [], level: "full" });
    this.produces(group, out.value);
  }

  /** A group running op `node` whole on buffers `inputs`, storing `outputs`. */
  opaque(
    node: { op: string; attrs: Attrs },
    inputs: number[],
    outputs: readonly Omit<StoredValue, "expr">[],
    label: string,
  ): void {
    const group = this.create([], [], "opaque");
    group.opaque = { ...node, inputs };
    group.labels.add(label);
    for (const o of outputs) {
      const expr: Expr = { kind: "const", value: 0, dtype: o.dtype };
      group.outputs.push({ ...pick(o), expr, steps: [], level: "full" });
      this.produces(group, o.value);
    }
  }

  /** Whether evaluating `e` reads a buffer computed (transitively) from `target`'s results. */
  reaches(e: Expr, target: Group): boolean {
    const seen = new Set<Group>();
    const stack: Group[] = [];
    for (const v of buffersRead(e)) if (this.#producer.has(v)) stack.push(this.#producer.get(v)!);
    while (stack.length) {
      const g = stack.pop()!;
      if (g === target) return true;
      if (seen.has(g)) continue;
      seen.add(g);
      for (const v of this.loads(g)) if (this.#producer.has(v)) stack.push(this.#producer.get(v)!);
    }
    return false;
  }

  /** The buffers `g` reads. */
  loads(g: Group): Set<number> {
    const out = new Set<number>(g.opaque?.inputs ?? []);
    for (const e of [...g.reductions.map((r) => r.expr), ...g.outputs.map((o) => o.expr)]) {
      buffersRead(e, out);
    }
    return out;
  }

  /**
   * Whether `g`, reading `expr` too, reads at most `budget` buffers. Joining reductions of
   * stored values is asked for half the binding limit: the rest is left to the epilogue's reads
   * and the stores, as a group whose reductions fill the limit cannot be split by its stores (20
   * sums of 20 products, each summed whole, joined one kernel of 21 bindings).
   */
  readsWithin(g: Group, expr: Expr, budget: number): boolean {
    return budget === Infinity || buffersRead(expr, this.loads(g)).size <= budget;
  }

  /**
   * The kernels: elementwise groups of equal space merged where independent, in dependency
   * order, inputs numbered per kernel (`typeOf` gives the type of a buffer no group stores), as
   * the exact precision computes them where `options.exact` says (`exact_math.ts`).
   */
  finish(
    typeOf: (value: number) => ValueType | undefined,
    options: { readonly maxInputs: number; readonly exact: boolean },
  ): KernelIR[] {
    const { maxInputs } = options;
    // What each group reads, walked once per group rather than once per dependency query.
    const reads = new Map<Group, Set<number>>();
    const loadsOf = (g: Group) => reads.get(g) ?? reads.set(g, this.loads(g)).get(g)!;
    const live = this.#groups
      .filter((g) => g.outputs.length > 0)
      .flatMap((g) => this.#withinBindings(g, maxInputs, loadsOf));
    const merged: Group[] = [];
    // Groups that could still take another: one at the binding limit never can (merging only adds
    // bindings), and searching past thousands of those made wide graphs quadratic.
    let open: Group[] = [];
    const full = (m: Group) => loadsOf(m).size + m.outputs.length >= maxInputs + 1;
    // Bytes each group stores, kept as groups merge: summed anew for every candidate, a merged
    // group of thousands of stores made the search quadratic again.
    const bytes = new Map<Group, number>();
    const stored = (m: Group) => bytes.get(m) ?? bytes.set(m, storedBytes(m)).get(m)!;
    for (const g of live) {
      // Merged kernels stay within the binding limit: its inputs and all its outputs together
      // (`maxInputs` leaves one binding for a single output).
      const fits = (m: Group) => {
        if (stored(g) > MERGE_ALONE_BYTES || stored(m) + stored(g) > MERGE_BYTES) return false;
        // The union's size from the smaller side: a merged group may read thousands of buffers.
        const mine = loadsOf(m);
        let union = mine.size;
        for (const v of loadsOf(g)) if (!mine.has(v)) union++;
        return union + m.outputs.length + g.outputs.length <= maxInputs + 1;
      };
      // A tagged unpacking stays a kernel of its own: its generator writes that one output.
      const into = g.pattern === "elementwise" && !g.placement && !g.blockUnpack
        ? open.find((m) =>
          m.pattern === "elementwise" && !m.placement && !m.blockUnpack &&
          sameShape(m.space, g.space) &&
          fits(m) &&
          !this.#dependsOn(g, m, loadsOf) &&
          !this.#dependsOn(m, g, loadsOf)
        )
        : undefined;
      if (into) {
        // What the merged group reads: both sides' reads, kept rather than walked again.
        const grown = loadsOf(into);
        for (const v of loadsOf(g)) grown.add(v);
        bytes.set(into, stored(into) + stored(g));
        into.outputs.push(...g.outputs);
        g.labels.forEach((l) => into.labels.add(l));
        for (const o of g.outputs) this.#producer.set(o.value, into);
        this.#log.push(
          `kernel #${g.id} merged into #${into.id}: same elementwise space, independent`,
        );
        if (full(into)) open = open.filter((m) => m !== into);
      } else {
        merged.push(g);
        if (!full(g)) open.push(g);
      }
    }
    const order = this.#topo(merged);
    const kernels = order.map((g, i) => this.#kernel(g, i, typeOf, maxInputs));
    // The exact precision runs no group as one kernel: its members are what every backend sums.
    return options.exact ? kernels.map(exactKernel) : groupChains(kernels, this.#log);
  }

  /**
   * `g` as kernels that each bind at most `maxInputs + 1` buffers (its reads walked through
   * `loadsOf`, whose memo the merging reuses): where its reads and stores together pass the
   * limit, its stores are shared out among copies of it that each recompute its reductions
   * (their reads are each copy's base). A reduction whose value every layer of a
   * deep model casts and reshapes in its epilogue stored one buffer per layer: 100 bindings in
   * one kernel of a 24-layer decoder, where the device allows 16.
   */
  #withinBindings(
    g: Group,
    maxInputs: number,
    loadsOf: (g: Group) => Set<number>,
  ): Group[] {
    if (g.opaque || g.placement || loadsOf(g).size + g.outputs.length <= maxInputs + 1) {
      return [g];
    }
    const base = new Set<number>();
    for (const r of g.reductions) buffersRead(r.expr, base);
    const parts: { group: Group; reads: Set<number> }[] = [];
    for (const o of g.outputs) {
      const reads = buffersRead(o.expr);
      let part = parts.at(-1);
      const grown = part && new Set([...part.reads, ...reads]);
      if (!part || grown!.size + part.group.outputs.length + 1 > maxInputs + 1) {
        const group = this.create(g.space, g.reduced, g.pattern);
        group.reductions.push(...g.reductions);
        group.keptOrder = g.keptOrder;
        g.labels.forEach((l) => group.labels.add(l));
        part = { group, reads: new Set([...base, ...reads]) };
        parts.push(part);
      } else part.reads = grown!;
      part.group.outputs.push(o);
      this.#producer.set(o.value, part.group);
    }
    this.#log.push(
      `kernel #${g.id} split into ${parts.length} (${
        parts.map((p) => `#${p.group.id}`).join(", ")
      }): its ${g.outputs.length} stores and ${loadsOf(g).size} reads pass the binding limit`,
    );
    return parts.map((p) => p.group);
  }

  /** Whether `a` reads, transitively, a buffer `b` produces (each group visited once). */
  #dependsOn(a: Group, b: Group, loadsOf: (g: Group) => Set<number>): boolean {
    const seen = new Set<Group>([a]);
    const stack = [a];
    while (stack.length) {
      for (const v of loadsOf(stack.pop()!)) {
        const p = this.#producer.get(v);
        if (p === b) return true;
        if (p !== undefined && !seen.has(p)) {
          seen.add(p);
          stack.push(p);
        }
      }
    }
    return false;
  }

  #topo(groups: Group[]): Group[] {
    const done = new Set<Group>(), out: Group[] = [];
    const visit = (g: Group) => {
      if (done.has(g)) return;
      done.add(g);
      for (const v of this.loads(g)) {
        const p = this.#producer.get(v);
        if (p && p !== g) visit(p);
      }
      out.push(g);
    };
    groups.forEach(visit);
    return out;
  }

  #kernel(
    g: Group,
    index: number,
    known: (value: number) => ValueType | undefined,
    maxInputs: number,
  ): KernelIR {
    const ids = g.opaque ? g.opaque.inputs : [...this.loads(g)];
    const local = new Map(ids.map((v, i) => [v, i]));
    const typeOf = (v: number): { shape: Shape; dtype: DType } => {
      const t = known(v) ?? this.output(v);
      if (t) return t;
      throw new KilnError(`fusion lost buffer ${v}`, { code: "internal", fix: "report this" });
    };
    // One memo for every expression of the kernel keeps what they share shared.
    const memo = new Map<Expr, Expr>();
    const renumber = (e: Expr): Expr =>
      mapLoads(e, (l) => ({ ...l, input: local.get(l.input)! }), memo);
    if (ids.length > maxInputs) {
      this.#log.push(
        `kernel #${g.id} reads ${ids.length} buffers, over the backend's limit of ${maxInputs}`,
      );
    }
    const pattern = rowPattern(
      g.pattern,
      g.reductions.map((r) => r.op),
      g.outputs.some((o) => o.level === "full"),
    );
    return shareExprs({
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
      blockProduct: g.blockProduct && renumbered(g.blockProduct, local, renumber),
      blockUnpack: g.blockUnpack && renumbered(g.blockUnpack, local, renumber),
    });
  }
}

/**
 * A block product's or unpacking's buffers as the kernel's inputs (from graph value ids), its
 * prologue's loads renumbered as the kernel's expressions are.
 */
function renumbered<
  T extends BlockTables & {
    a?: number;
    prologue?: Expr;
    packedA?: { readonly words: number; readonly scales: number };
  },
>(
  b: T,
  local: ReadonlyMap<number, number>,
  renumber: (e: Expr) => Expr,
): T {
  const at = (v: number) => local.get(v)!;
  return {
    ...b,
    ...(b.a === undefined ? {} : { a: at(b.a) }),
    ...(b.prologue === undefined ? {} : { prologue: renumber(b.prologue) }),
    ...(b.packedA === undefined
      ? {}
      : { packedA: { words: at(b.packedA.words), scales: at(b.packedA.scales) } }),
    words: at(b.words),
    scales: at(b.scales),
    zeros: b.zeros === undefined ? undefined : at(b.zeros),
  };
}
