/**
 * The values of fusion: each graph value is a symbolic expression ({@linkcode Sym}), stored to a
 * buffer only at a kernel boundary; and the small rules the walk applies to them.
 *
 * @module
 */
import type { Group } from "./fuse_groups.ts";
import {
  aluCount,
  type BlockTables,
  buffersRead,
  type Expr,
  exprDepth,
  type IndexStep,
  mapLoads,
  type ReduceOp,
  reindex,
  walk,
} from "../ir/kernel_ir.ts";
import type { Attrs, ValueType } from "../ops/mod.ts";
import { type DType, fromF16Bits } from "../ir/dtype.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { sameShape, type Shape, sizeOf } from "../ir/shape.ts";
import { ExprTable } from "../ir/expr_table.ts";
import { affineOffset, sameEverywhere } from "../ir/access.ts";

/** A value during fusion. */
export interface Sym {
  /** Its type. */
  readonly type: ValueType;
  /** Its expression (loads of buffers, constants, ALU ops, accumulators). */
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
  /** A graph output's value (`sym`, not yet stored) through reshapes (`steps`), element for element. */
  readonly viewOf?: { readonly sym: Sym; readonly steps: readonly IndexStep[] };
}

/**
 * Whether `b` (a product's B of rank ≥ 3) is a view of a buffer (shapes by value in `shapes`)
 * laid along its contraction rather than its columns: attention's keys through a transposing
 * view.
 */
export function acrossColumns(b: Sym, shapes: ReadonlyMap<number, Shape>): boolean {
  const e = b.expr, shape = b.type.shape, rank = shape.length;
  const stored = e.kind === "load" ? shapes.get(e.input) : undefined;
  if (e.kind !== "load" || rank < 3 || !stored) return false;
  const at = affineOffset(e.steps, shape, stored);
  return at !== undefined && at.weights[rank - 1] !== 1 && at.weights[rank - 2] === 1;
}

/** Labels a consumer inherits: none from stored buffers (their kernel already counts them). */
export const own = (s: Sym): readonly string[] => (s.buffer === undefined ? s.labels : []);
/** Whether `s` is a plain load or a constant (free to recompute). */
export const isBare = (s: Sym) => s.expr.kind === "load" || s.expr.kind === "const";

/** Most operations of an expression of scalars and constants computed again under a broadcast. */
const BROADCAST_OPS = 32;

/**
 * Whether `s`, read under a broadcast, stays inline rather than becoming a kernel of its own: a
 * few operations on scalars and constants (`constants`; other buffers' shapes in `shapes`), as a
 * joined integer product's per-column scales (a Concat of Expands of each member's scalar scale)
 * are. Computed again for every element it is read at, it costs about what a load of it stored
 * would; stored, it was a kernel and a dispatch a layer.
 */
export function cheapUnderBroadcast(
  s: Sym,
  shapes: ReadonlyMap<number, Shape>,
  constants: ReadonlyMap<number, unknown>,
): boolean {
  if (aluCount(s.expr) > BROADCAST_OPS) return false;
  let constant = true;
  walk(s.expr, (e) => {
    if (e.kind !== "load" || constants.has(e.input)) return;
    const shape = shapes.get(e.input);
    if (!shape || sizeOf(shape) > 1) constant = false;
  });
  return constant;
}

/**
 * The argument of `Where(c, input, y)` that its kernel computes only where `c` fails: `y`, where
 * `input` is a `donated` graph input read as it lies at the output's shape. A backend stores such
 * an output over its input (`jit/schedule/in_place.ts`) and skips the points where the input
 * stays, so `y` under a broadcast is computed at the few points written, not recomputed at every
 * one: a decode step's new cache entry (its rotary embedding) at its slot, which as a kernel of
 * its own had cost a dispatch a layer. −1 for any other op.
 */
export function rareBranch(
  op: string,
  ins: readonly Sym[],
  shape: Shape,
  donated: ReadonlySet<number>,
): number {
  const kept = ins[1]?.expr;
  if (op !== "Where" || ins.length !== 3 || kept?.kind !== "load") return -1;
  const plain = kept.steps.length === 0 && donated.has(kept.input) &&
    sameShape(ins[1].type.shape, shape);
  return plain ? 2 : -1;
}

/**
 * The ALU operations of `e` that vary from point to point: those that read, through their
 * operands, a buffer of more than one element (`shapes` by buffer). What each reader of `e`
 * recomputes at every point; its operations on scalars alone (a DynamicQuantizeLinear's scale and
 * zero point from its two range words) are the same everywhere and cost each reader a few
 * instructions, however many.
 */
export function varyingOps(e: Expr, shapes: ReadonlyMap<number, Shape>): number {
  const varies = new Map<Expr, boolean>();
  let n = 0;
  walk(e, (x) => {
    const v = x.kind === "load"
      ? sizeOf(shapes.get(x.input) ?? [2]) > 1 || x.steps.some((s) => s.kind === "gather")
      : x.kind === "alu" && x.args.some((a) => varies.get(a));
    varies.set(x, v);
    if (v && x.kind === "alu") n++;
  });
  return n;
}

/**
 * Whether `s` is the same at every point: it reads only one-element buffers (`shapes` by
 * buffer), without gathers or bounds.
 */
export function uniform(s: Sym, shapes: ReadonlyMap<number, Shape>): boolean {
  return !s.group && sameEverywhere(s.expr, (v) => sizeOf(shapes.get(v) ?? [2]) === 1);
}

/**
 * {@linkcode uniform} `s`'s expression read at every point of a value of rank `rank`: each of its
 * loads takes its buffer's one element wherever the point is (`shapes` by buffer).
 */
export function everywhere(s: Sym, rank: number, shapes: ReadonlyMap<number, Shape>): Expr {
  return mapLoads(s.expr, (l) => {
    const zeros = shapes.get(l.input)!.map(() => 0);
    const coeff = zeros.map(() => Array<number>(rank).fill(0));
    return { ...l, steps: [{ kind: "affine", coeff, offset: zeros }] };
  });
}

/**
 * Most rows (batch · M) of a contraction's A whose B may stay an elementwise expression, computed
 * as the product reads it (once per row) instead of stored first; and most buffers that expression
 * may read. A decoder's token step multiplies one row by every weight: its 4-bit weights (kept
 * packed, MatMulNBits) were unpacked into f32 [K, N] buffers every step, 2 GB of them for a
 * Qwen2.5-0.5B-shaped model, past the GPU pool's cap.
 */
const INLINE = { rows: 4, buffers: 8 };

/** Whether a contraction of `a` by `b` reads `b`'s elementwise expression inline (see `INLINE`). */
export function inlineOperand(a: Sym, b: Sym): boolean {
  return sizeOf(a.type.shape.slice(0, -1)) <= INLINE.rows && !b.group && !isBare(b) &&
    buffersRead(b.expr).size <= INLINE.buffers;
}

/**
 * The largest A a block product computes as a prologue (see {@linkcode prologueOperand}): buffers
 * it reads and operations an element, evaluated again by each workgroup that reads A. A decode
 * step's SiLU of the gate times the up projection reads one buffer in 4 operations.
 */
const PROLOGUE = { buffers: 4, ops: 16 };

/**
 * Whether a block product's A (of few rows) may be computed in the product's kernel as it reads
 * it (`BlockProduct.prologue`): an A that is not a buffer as it lies, an elementwise expression
 * (or view) of a few buffers and few operations under the depth limit, not part of a kernel still
 * forming (a normalization's rows), not rounded to 8 bits before it (those products read A's
 * integers; one that `rounds` A rounds what the prologue computes).
 */
export function prologueOperand(a: Sym, attrs: Attrs, maxDepth: number): boolean {
  return unrounded(attrs) && !a.group && plainInput(a) === undefined &&
    withinPrologue(a.expr, maxDepth);
}

/** Whether a block product's A is as its producer computed it: not rounded before it. */
function unrounded(attrs: Attrs): boolean {
  return !attrs.int8 || attrs.rounds === 1;
}

/** Whether `e` is small enough for a prologue (`PROLOGUE`) and under the depth limit. */
function withinPrologue(e: Expr, maxDepth: number): boolean {
  return buffersRead(e).size <= PROLOGUE.buffers && aluCount(e) <= PROLOGUE.ops &&
    exprDepth(e) < maxDepth;
}

/**
 * Whether a block product's A of few rows is an elementwise expression over a row reduction still
 * forming (a normalization: x over its rows' root mean square, times a gain) that the product's
 * kernel can take whole: the group reduces A's last axis over A's own shape in f32, stores
 * nothing yet and A is a full point of it, within the prologue's limits. Each workgroup then
 * reduces the row it reads, and the normalization's kernel is not run.
 */
export function normedOperand(a: Sym, attrs: Attrs, maxDepth: number): boolean {
  const g = a.group;
  if (!g || !unrounded(attrs) || g.pattern !== "reduce" || g.outputs.length || g.keptOrder) {
    return false;
  }
  const last = a.type.shape.length - 1;
  const exprs = [a.expr, ...g.reductions.map((r) => r.expr)];
  return sameShape(g.space, a.type.shape) && g.reduced.length === 1 && g.reduced[0] === last &&
    (a.toOwn ?? []).length === 0 && g.reductions.every((r) => r.dtype === "f32") &&
    exprs.every((e) => withinPrologue(e, maxDepth));
}

/** Bytes a constant's key samples: all of a small one, spread over a large one. */
const SAMPLED = 64;

/** Up to {@linkcode SAMPLED} of `bytes`, evenly spread, as hex. */
function sampled(bytes: Uint8Array): string {
  const step = Math.max(1, Math.floor(bytes.length / SAMPLED));
  let text = "";
  for (let i = 0; i < bytes.length && text.length < 2 * SAMPLED; i += step) {
    text += bytes[i].toString(16).padStart(2, "0");
  }
  return text;
}

/** Whether two byte arrays are equal, 32 bits at a time where both are aligned. */
function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  if (a === b || (a.buffer === b.buffer && a.byteOffset === b.byteOffset)) return true;
  const words = a.byteOffset % 4 === 0 && b.byteOffset % 4 === 0 ? a.length >> 2 : 0;
  const x = new Uint32Array(a.buffer, a.byteOffset, words);
  const y = new Uint32Array(b.buffer, b.byteOffset, words);
  for (let i = 0; i < words; i++) if (x[i] !== y[i]) return false;
  for (let i = words * 4; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The symbol of stored value `value` (a plain load of it), its shape noted in `shapes`. */
export function bufferSym(
  shapes: Map<number, Shape>,
  value: number,
  type: ValueType,
  labels: readonly string[] = [],
): Sym {
  shapes.set(value, type.shape);
  return {
    type,
    expr: { kind: "load", input: value, steps: [], dtype: type.dtype },
    buffer: value,
    labels,
    uses: 0,
  };
}

/** A one-element constant as a constant expression, or `undefined` for a larger one. */
export function scalarSym(t: HostTensor, label: string): Sym | undefined {
  if (sizeOf(t.shape) !== 1) return undefined;
  const dtype = t.dtype as DType;
  const value = dtype === "f16"
    ? fromF16Bits((t.data as Uint16Array)[0])
    : Number((t.data as ArrayLike<number>)[0]);
  return constSym(value, { shape: t.shape, dtype }, [label]);
}

/** A symbol of one constant value of `type` (a scalar, or a tensor of size one). */
export function constSym(value: number, type: ValueType, labels: readonly string[] = []): Sym {
  return { type, expr: { kind: "const", value, dtype: type.dtype }, labels, uses: 0 };
}

/** The buffer `s` reads as it lies (a load through reshapes at most), as a graph value id. */
export function plainInput(s: Sym): number | undefined {
  return s.expr.kind === "load" && s.expr.steps.every((step) => step.kind === "reshape")
    ? s.expr.input
    : undefined;
}

/**
 * The packed buffers of a BlockMatMul's weight operands `[words, scales, zeros?]` as graph value
 * ids, where each is a buffer read as it lies and a block is whole vectors of four words: what
 * the generators that know the tags address themselves.
 */
export function plainTables(ins: readonly Sym[], attrs: Attrs): BlockTables | undefined {
  const [bits, block] = [attrs.bits as number, attrs.block as number];
  if (((block * bits) / 32) % 4 !== 0) return undefined;
  const values = ins.map(plainInput);
  if (values.some((v) => v === undefined)) return undefined;
  const [words, scales, zeros] = values as number[];
  return { words, scales, zeros, bits, block };
}

/** The reduction of each reduce op. */
export const REDUCE: Record<string, ReduceOp> = {
  ReduceSum: "sum",
  ReduceMean: "mean",
  ReduceMax: "max",
  ReduceMin: "min",
};

/** The attributes an ALU node keeps (Cast's and Bitcast's target, Mod's mode). */
export function aluAttrs(op: string, attrs: Attrs): Attrs | undefined {
  if (op === "Cast" || op === "Bitcast") return { to: attrs.to };
  if (op === "Mod") return { fmod: attrs.fmod ?? 0 };
  return undefined;
}

/** Whether reading `input` at `out`'s shape reads elements more than once. */
export function broadcasts(out: Shape, input: Shape): boolean {
  return sizeOf(out) > sizeOf(input);
}

/** Whether two axis lists are equal. */
export function sameAxes(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** `xs` without repeats, in first-seen order. */
export function unique<T>(xs: readonly T[]): T[] {
  return [...new Set(xs)];
}

/**
 * Keeps a kernel within the backend's binding limit: while the expression (its `args`, plus the
 * buffers its kernel already reads, `alsoRead`) would read more than `budget` buffers, the
 * operand reading the most is stored (one buffer instead of many) and read through its `steps`.
 */
export function keepWithinBindings(o: {
  args: Expr[];
  used: Sym[];
  steps: readonly (readonly IndexStep[])[];
  alsoRead: Iterable<number>;
  budget: number;
  store: (s: Sym, why: string) => Sym;
  log: string[];
  label: string;
}): void {
  const { args, used, budget, label } = o;
  if (budget === Infinity) return;
  const also = [...o.alsoRead];
  const total = () => new Set([...args.flatMap((a) => [...buffersRead(a)]), ...also]).size;
  while (total() > budget) {
    let widest = -1, width = 1;
    used.forEach((s, i) => {
      const w = !s.group && !isBare(s) ? buffersRead(s.expr).size : 0;
      if (w > width) [widest, width] = [i, w];
    });
    if (widest < 0) {
      o.log.push(`${label}: reads more than ${budget} buffers with nothing left to store`);
      return;
    }
    used[widest] = o.store(
      used[widest],
      `${label} would read more than ${budget} buffers (binding limit)`,
    );
    args[widest] = reindex(used[widest].expr, o.steps[widest]);
  }
}

/**
 * Values fusion finds equal, so that each is computed and stored once: decompositions repeat
 * work per node (each layer's grouped-query attention makes the same tables of positions and
 * derives the same masks from the sequence lengths), which made a 24-layer decode step 41 kernels
 * of copies of one another. Equal constants (type and bytes) are one buffer; a value computed by
 * the same expression from the same buffers (in the same reduction group, if any) is stored once.
 */
export class EqualValues {
  readonly #exprs = new ExprTable();
  readonly #stored = new Map<string, Sym>();
  readonly #constants = new Map<string, { bytes: Uint8Array; sym: Sym }[]>();

  /**
   * The buffer of a constant equal to `t`, made by `make` the first time. Constants are found by
   * their type and a sample of their bytes, then compared whole: a digest of every constant had
   * cost a 4-bit 0.5B decoder's first compile 0.7 s for its 316 MB of weights, nearly all unique.
   */
  constant(t: HostTensor, make: () => Sym): Sym {
    const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    const key = `${t.dtype}[${t.shape}]:${sampled(bytes)}`;
    let same = this.#constants.get(key);
    if (!same) this.#constants.set(key, same = []);
    const found = same.find((c) => equalBytes(c.bytes, bytes));
    if (found) return found.sym;
    const sym = make();
    same.push({ bytes, sym });
    return sym;
  }

  /** The stored form of a value equal to `s`, made by `make` the first time. */
  stored(s: Sym, make: () => Sym): Sym {
    const own = s.toOwn ? JSON.stringify(this.#exprs.stepsKey(s.toOwn)) : "";
    const key = `${s.group?.id ?? ""}|${s.type.dtype}[${s.type.shape}]|${own}|${
      this.#exprs.id(s.expr)
    }`;
    let sym = this.#stored.get(key);
    if (!sym) this.#stored.set(key, sym = make());
    return sym;
  }
}
