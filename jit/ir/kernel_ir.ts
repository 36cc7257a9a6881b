/**
 * The kernel IR: one representation of a fused kernel that every code generator lowers (and the
 * reference backend interprets). A kernel iterates over a `space`; some of its axes may be
 * `reduced`. It evaluates, per point of the space, an expression DAG over typed loads:
 *
 * - a {@linkcode Load} reads an input buffer through an {@linkcode IndexStep} chain that maps the
 *   kernel's coordinates to the buffer's: affine steps express broadcast, transpose, slice, pad
 *   (bounds + fill), strided windows (conv, pool); reshape steps re-linearize. No movement op
 *   ever copies data inside a kernel.
 * - reductions run in order, one pass each over the reduced axes of a row; a later reduction (and
 *   every output) may use earlier results through `acc` (softmax: max, then sum of exp(x - max)).
 * - each output stores an expression through its own step chain: "row" outputs once per row,
 *   "full" outputs at every point of the space.
 *
 * Every ALU result is rounded to its dtype, exactly as if stored, so a fused kernel computes what
 * the unfused graph computes (up to reduction order). Ideas from tinygrad's UOps/ShapeTracker and
 * jax-js's AluExp, kept smaller and typed.
 *
 * @module
 */
import type { DType } from "./dtype.ts";
import { KilnError } from "../support/errors.ts";
import type { Attrs } from "../ops/mod.ts";
import { sameShape, type Shape, sizeOf, stridesOf } from "./shape.ts";

/**
 * One step of an index map. `affine`: `out[j] = Σ_d coeff[j][d] · in[d] + offset[j]`; with
 * `bounds`, a coordinate outside `[0, bounds[j])` makes the load return `fill`. `reshape`:
 * re-linearizes coordinates of shape `from` into shape `to`.
 */
export type IndexStep =
  | {
    readonly kind: "affine";
    readonly coeff: readonly (readonly number[])[];
    readonly offset: readonly number[];
    readonly bounds?: Shape;
    readonly fill?: number;
  }
  | { readonly kind: "reshape"; readonly from: Shape; readonly to: Shape }
  | GatherStep;

/**
 * A data-dependent step (Gather, GatherElements): reads an index through `index` at the incoming
 * coordinates and puts it in place of the `drop` coordinates starting at `axis`. A negative index
 * counts from `dim`. An index outside `[-dim, dim)` is an error (ONNX leaves the result
 * undefined): the reference and wasm raise {@linkcode gatherOutOfRange}; WebGPU, which cannot
 * raise from a shader, reads 0. No backend ever reads outside the buffer.
 */
export interface GatherStep {
  /** Discriminant. */
  readonly kind: "gather";
  /** First coordinate replaced by the index. */
  readonly axis: number;
  /** How many coordinates it replaces: the indices' rank (Gather) or 1 (GatherElements). */
  readonly drop: number;
  /** Extent of the gathered axis. */
  readonly dim: number;
  /** The index (an integer load), read at this step's incoming coordinates. */
  readonly index: Load;
}

/** The error of a gather index outside `[-dim, dim)`, which every backend that can detect it raises. */
export function gatherOutOfRange(index: number, dim: number): KilnError {
  return new KilnError(`Gather: index ${index} is out of range for an axis of size ${dim}`, {
    code: "out-of-range",
    fix: `use indices in [${-dim}, ${dim - 1}]`,
  });
}

/** Reads a load's element at coordinates of the point where it is evaluated. */
export type LoadReader = (load: Load, coords: readonly number[]) => number;

/** A read of kernel input `input` at the coordinates the steps produce. */
export interface Load {
  /** Discriminant. */
  readonly kind: "load";
  /** Index into the kernel's `inputs`. */
  readonly input: number;
  /** Steps from kernel coordinates to the buffer's coordinates. */
  readonly steps: readonly IndexStep[];
  /** Element type. */
  readonly dtype: DType;
}

/**
 * The ALU operations of kernel IR, a closed set: each backend lowers them through a table that
 * `satisfies Record<AluOp, …>`, so an op added here does not type-check until every backend has it.
 * An integer Div or Mod never sees a zero divisor and Mod is the truncated remainder: fusion
 * writes ONNX's rules around them (`integer_rules.ts`).
 */
export const ALU_OPS = [
  "Add",
  "Sub",
  "Mul",
  "Div",
  "Pow",
  "Mod",
  "Equal",
  "Greater",
  "Less",
  "And",
  "Or",
  "Not",
  "Where",
  "Neg",
  "Abs",
  "Sqrt",
  "Exp",
  "Log",
  "Erf",
  "Sin",
  "Cos",
  "Floor",
  "Ceil",
  "Round",
  "IsNaN",
  "Cast",
  "Bitcast",
] as const;

/** One of {@linkcode ALU_OPS}. */
export type AluOp = typeof ALU_OPS[number];

const ALU_SET: ReadonlySet<string> = new Set(ALU_OPS);

/** Whether `op` is an ALU operation of kernel IR. */
export function isAluOp(op: string): op is AluOp {
  return ALU_SET.has(op);
}

/**
 * What a backend's lowering of one ALU op receives: its operands already lowered to `E` (WGSL
 * text, wasm encoder expressions, …), their dtypes and the result dtype. No lowering needs the op's
 * attributes: Cast's target is the result dtype, and Mod is always the truncated remainder in
 * kernel IR (`integer_rules.ts`).
 */
export interface AluOperands<E> {
  /** Lowered operands. */
  readonly a: readonly E[];
  /** Operand dtypes. */
  readonly d: readonly DType[];
  /** Result dtype. */
  readonly out: DType;
}

/** An ALU expression node. */
export interface Alu {
  /** Discriminant. */
  readonly kind: "alu";
  /** Operation. */
  readonly op: AluOp;
  /** Operands. */
  readonly args: readonly Expr[];
  /** Result dtype. */
  readonly dtype: DType;
  /** Attributes the lowering needs (Mod's `fmod`). */
  readonly attrs?: Attrs;
}

/** An expression node of the kernel IR. */
export type Expr =
  | Load
  | { readonly kind: "const"; readonly value: number; readonly dtype: DType }
  | { readonly kind: "acc"; readonly index: number; readonly dtype: DType }
  | Alu;

/** Reduction operators. */
export type ReduceOp = "sum" | "mean" | "max" | "min";

/** A reduction over the kernel's reduced axes. */
export interface Reduction {
  /** Operator. */
  readonly op: ReduceOp;
  /** Value reduced (may use earlier reductions through `acc`). */
  readonly expr: Expr;
  /** Result dtype. */
  readonly dtype: DType;
}

/** A buffer a kernel reads or writes: a graph value. */
export interface KernelBuffer {
  /** Graph value id. */
  readonly value: number;
  /** Shape. */
  readonly shape: Shape;
  /** Element type. */
  readonly dtype: DType;
  /**
   * An 8-bit constant (a quantized model's weights) that a backend may hold four elements to a
   * 32-bit word, as they lie in memory (`bytes`), or eight where every element is below 16
   * (`nibbles`: 4-bit zero points), where it widens other 8-bit values to a word each
   * (`jit/passes/packed_constants.ts`); a backend that holds it otherwise ignores this.
   */
  readonly packed?: Packing;
}

/** How a packed constant is held: four elements to a word, or eight (see `KernelBuffer.packed`). */
export type Packing = "bytes" | "nibbles";

/** An output of a kernel. */
export interface KernelOutput extends KernelBuffer {
  /** Value stored. */
  readonly expr: Expr;
  /** Steps from kernel coordinates to the output's coordinates. */
  readonly steps: readonly IndexStep[];
  /** `row`: stored once per row (may not depend on reduced axes); `full`: at every point. */
  readonly level: "row" | "full";
  /**
   * `max`: a scalar, the largest value the output takes where `level` says, and 0 (its buffer
   * holds 0 when the kernel starts: the runtime clears it), combined as the kernel goes.
   */
  readonly combine?: "max";
}

/** What a kernel's computation is, for code generators that specialize and for `explain`. */
export type KernelPattern =
  | "elementwise"
  | "reduce"
  | "softmax"
  | "layernorm"
  | "matmul"
  | "conv"
  | "pool"
  | "opaque";

/**
 * A block-quantized weight's buffers (`jit/ops/block_matmul.ts`): which inputs hold the packed
 * words [N, blocks · words], the scales and the zero points (absent: the middle value)
 * [N, blocks], all laid out as their shapes say, and how the values are packed.
 */
export interface BlockTables {
  /** Input of the packed u32 words. */
  readonly words: number;
  /** Input of the scales. */
  readonly scales: number;
  /** Input of the zero points, if any. */
  readonly zeros?: number;
  /** Bits a value: 2, 4 or 8. */
  readonly bits: number;
  /** Values a block. */
  readonly block: number;
}

/**
 * A product by a block-quantized weight (`BlockMatMul`): its tables and where A comes from,
 * either an input holding its rows of K contiguous (`a`) or an expression the kernel computes A
 * by (`prologue`). The kernel's expressions compute the same product (every backend can run
 * them); a generator may compute it from these buffers directly.
 */
export interface BlockProduct extends BlockTables {
  /** Input of A, where A is stored. */
  readonly a?: number;
  /**
   * A's element at the kernel's point (its row axes and K; N plays no part), where fusion left
   * A an elementwise expression (`FuseOptions.blockPrologues`): a generator evaluates it as it
   * reads each element of A, and the kernel that would have stored A is not run. A decode
   * step's SiLU · up-projection product fed its down projection so, one dispatch a layer less.
   */
  readonly prologue?: Expr;
  /**
   * A holds whole numbers of 8 bits times a scale per block (`QuantizeRowBlocks` made it): a
   * generator may sum each block's products in integers and scale once.
   */
  readonly int8?: boolean;
  /**
   * A packed by PackRowBlocks (`jit/ops/block_matmul.ts`), read from two inputs: `words`, its
   * integers as bytes four to a word in each 32 values' nibble order, and `scales`, a scale a
   * block. The kernel's expressions unpack it; a generator may take its words into byte dot
   * products as they lie (`int8` is set too).
   */
  readonly packedA?: { readonly words: number; readonly scales: number };
  /**
   * A as it is, rounded to 8 bits a block by the kernel itself (a BlockMatMul that `rounds`;
   * `int8` is set too): the kernel's expressions read A unrounded, so only a generator that
   * rounds each block as QuantizeRowBlocks does as it packs it may run it.
   */
  readonly roundsA?: boolean;
}

/** A block product whose A is an input: what generators without prologues address. */
export type StoredBlockProduct = BlockProduct & { readonly a: number };

/** Whether `tag`'s A is an input rather than a prologue. */
export function storedA(tag: BlockProduct): tag is StoredBlockProduct {
  return tag.a !== undefined;
}

/** A fused kernel. */
export interface KernelIR {
  /** Readable unique name, e.g. `matmul_relu_1`. */
  readonly name: string;
  /** Recognized pattern. */
  readonly pattern: KernelPattern;
  /** Labels of the graph nodes fused into it. */
  readonly ops: readonly string[];
  /** Iteration space. */
  readonly space: Shape;
  /** Reduced axes of the space (sorted). */
  readonly reduced: readonly number[];
  /** Buffers read. */
  readonly inputs: readonly KernelBuffer[];
  /** Reductions, in evaluation order. */
  readonly reductions: readonly Reduction[];
  /** Buffers written. */
  readonly outputs: readonly KernelOutput[];
  /** For `opaque` kernels: the single op run through the backend's op kernels. */
  readonly opaque?: { readonly op: string; readonly attrs: Attrs };
  /** For the copy kernels of placement ops: the op, which decides the backends that may run it. */
  readonly placement?: "ToDevice" | "ToHost";
  /** A multi-kernel pattern this kernel belongs to, e.g. `attention_0`. */
  readonly group?: string;
  /** For a `matmul` kernel by a block-quantized weight: its buffers. */
  readonly blockProduct?: BlockProduct;
  /**
   * Computed to the reference's bits (`precision: "exact"`, `jit/passes/exact_math.ts`): each
   * reduction summed in the kernel's float type one term after another in the order of the reduced
   * coordinates, no product contracted into an add, no specialized generator.
   */
  readonly exact?: boolean;
  /**
   * For an elementwise kernel storing a block-quantized weight unpacked as a product reads it,
   * [K, N] (its expression computes the same): the packed buffers.
   */
  readonly blockUnpack?: BlockTables;
  /** Outputs that may be stored over an input read at their own points (`schedule/in_place.ts`). */
  readonly inPlace?: readonly { readonly output: number; readonly input: number }[];
}

/**
 * Applies one step to coordinates; `undefined` when out of bounds (the load yields `fill`).
 * Gather steps read their index through `read`, which only callers holding data pass.
 */
export function applyStep(
  step: IndexStep,
  coords: readonly number[],
  read?: LoadReader,
): number[] | undefined {
  if (step.kind === "gather") {
    if (!read) {
      throw new KilnError("a gather step was applied without data to read its index from", {
        code: "internal",
        fix: "report this",
      });
    }
    let i = read(step.index, coords);
    if (i < 0) i += step.dim;
    if (!(i >= 0 && i < step.dim)) return undefined;
    return [...coords.slice(0, step.axis), i, ...coords.slice(step.axis + step.drop)];
  }
  if (step.kind === "reshape") {
    const lin = coords.reduce((acc, c, i) => acc * step.from[i] + c, 0);
    const out = new Array<number>(step.to.length);
    let rest = lin;
    for (let i = step.to.length - 1; i >= 0; i--) {
      out[i] = rest % step.to[i];
      rest = Math.floor(rest / step.to[i]);
    }
    return out;
  }
  const out = new Array<number>(step.coeff.length);
  for (let j = 0; j < out.length; j++) {
    let v = step.offset[j];
    const row = step.coeff[j];
    for (let d = 0; d < row.length; d++) v += row[d] * coords[d];
    if (step.bounds && (v < 0 || v >= step.bounds[j])) return undefined;
    out[j] = v;
  }
  return out;
}

/** Linear element offset of `coords` in `shape`. */
export function linearIndex(coords: readonly number[], shape: Shape): number {
  const strides = stridesOf(shape);
  let off = 0;
  for (let i = 0; i < coords.length; i++) off += coords[i] * strides[i];
  return off;
}

/** Maps coordinates of `from` to `to` under NumPy broadcasting (`to` broadcasts to `from`). */
export function broadcastStep(from: Shape, to: Shape): IndexStep[] {
  if (from.length === to.length && from.every((d, i) => d === to[i])) return [];
  const lead = from.length - to.length;
  return [{
    kind: "affine",
    coeff: to.map((d, j) => from.map((_, i) => (i === j + lead && d !== 1 ? 1 : 0))),
    offset: to.map(() => 0),
  }];
}

/** A reshape step (or nothing when the shapes are equal). */
export function reshapeStep(from: Shape, to: Shape): IndexStep[] {
  if (from.length === to.length && from.every((d, i) => d === to[i])) return [];
  return [{ kind: "reshape", from, to }];
}

/**
 * Steps `first`, then `then`, without a reshape met by its inverse (a packed weight's bytes
 * reshaped by the importer and back by a decomposition were divided and multiplied again by
 * every index).
 */
function joinSteps(first: readonly IndexStep[], then: readonly IndexStep[]): IndexStep[] {
  const [a, b] = [first.at(-1), then[0]];
  const cancel = a?.kind === "reshape" && b?.kind === "reshape" && sameShape(a.from, b.to);
  return cancel ? [...first.slice(0, -1), ...then.slice(1)] : [...first, ...then];
}

/**
 * Prepends `steps` to every load of `e` (re-indexes `e` into a consumer's coordinates). A shared
 * subexpression stays shared: `memo` maps each node to its copy, so the work and the result are
 * linear in the DAG, not in the tree it unfolds to.
 */
export function reindex(
  e: Expr,
  steps: readonly IndexStep[],
  memo: Map<Expr, Expr> = new Map(),
): Expr {
  if (steps.length === 0) return e;
  const hit = memo.get(e);
  if (hit) return hit;
  let out: Expr;
  switch (e.kind) {
    case "load":
      out = { ...e, steps: joinSteps(steps, e.steps) };
      break;
    case "alu":
      out = { ...e, args: e.args.map((a) => reindex(a, steps, memo)) };
      break;
    default:
      return e;
  }
  memo.set(e, out);
  return out;
}

/**
 * Calls `visit` on every node of `e` (children first), once per distinct object. The index loads
 * of gather steps are not nodes of the expression (they are read at the step's coordinates, not
 * the kernel's): {@linkcode buffersRead} includes them.
 */
export function walk(e: Expr, visit: (e: Expr) => void, seen: Set<Expr> = new Set()): void {
  if (seen.has(e)) return;
  seen.add(e);
  if (e.kind === "alu") { for (const a of e.args) walk(a, visit, seen); }
  visit(e);
}

/** Whether any buffer, reduction or subexpression of kernel `k` is f64. */
export function usesF64(k: KernelIR): boolean {
  if ([...k.inputs, ...k.outputs, ...k.reductions].some((b) => b.dtype === "f64")) return true;
  let found = false;
  for (const x of [...k.reductions, ...k.outputs]) {
    walk(x.expr, (e) => (found ||= e.dtype === "f64"));
  }
  return found;
}

/** Every buffer `e` reads, the indices of its gather steps included. */
export function buffersRead(e: Expr, into: Set<number> = new Set()): Set<number> {
  walk(e, (x) => {
    if (x.kind !== "load") return;
    into.add(x.input);
    for (const s of x.steps) if (s.kind === "gather") buffersRead(s.index, into);
  });
  return into;
}

/** Whether a step chain reads data (has a gather step). */
export function gathers(steps: readonly IndexStep[]): boolean {
  return steps.some((s) => s.kind === "gather");
}

/**
 * Rewrites every load of `e`, the index loads of gather steps included (innermost first). Pass one
 * `memo` to several calls to keep nodes shared between the expressions of one kernel.
 */
export function mapLoads(
  e: Expr,
  f: (load: Load) => Load,
  memo: Map<Expr, Expr> = new Map(),
): Expr {
  const hit = memo.get(e);
  if (hit) return hit;
  let out: Expr;
  switch (e.kind) {
    case "load": {
      const steps = e.steps.map((s) =>
        s.kind === "gather" ? { ...s, index: mapLoads(s.index, f, memo) as Load } : s
      );
      out = f({ ...e, steps });
      break;
    }
    case "alu":
      out = { ...e, args: e.args.map((a) => mapLoads(a, f, memo)) };
      break;
    default:
      return e;
  }
  memo.set(e, out);
  return out;
}

const depths = new WeakMap<Expr, number>();
/** Longest chain of ALU operations from `e` down to a leaf (memoized: linear in the DAG). */
export function exprDepth(e: Expr): number {
  if (e.kind !== "alu") return 0;
  let d = depths.get(e);
  if (d === undefined) {
    d = 1 + Math.max(0, ...e.args.map(exprDepth));
    depths.set(e, d);
  }
  return d;
}

/** Number of ALU operations in `e` (shared subexpressions counted once). */
export function aluCount(e: Expr): number {
  let n = 0;
  walk(e, (x) => x.kind === "alu" && n++);
  return n;
}

/** The shape and operands of an f32 matmul kernel (space `[...batch, m, n, k]`). */
export interface MatmulOperands {
  /** Number of batch axes. */
  readonly nb: number;
  /** Rows of the product. */
  readonly m: number;
  /** Columns of the product. */
  readonly n: number;
  /** Contraction length. */
  readonly k: number;
  /** The left operand's load. */
  readonly a: Load;
  /** The right operand's load. */
  readonly b: Load;
}

/**
 * The operands of a matmul kernel (or a convolution in its implicit-GEMM layout) that code
 * generators can tile: one f32 sum of a product of two plain loads, every output stored per row
 * (the epilogue); `undefined` otherwise.
 */
export function matmulOperands(kernel: KernelIR): MatmulOperands | undefined {
  const plain = (e: Expr) => (e.kind === "load" && !gathers(e.steps) ? e : undefined);
  return contractionOperands(kernel, (d) => d === "f32", plain);
}

/**
 * The operands of a contraction kernel (a matmul, or a convolution reduced over its last axis
 * only, as its implicit-GEMM layout is) whose one reduction, of a dtype `sums` takes, sums the
 * product of two factors that `read` takes to their loads, every output stored per row;
 * `undefined` otherwise, and for an empty contraction (the generic reduction sums nothing to 0;
 * tilers would divide by 0). A generator's integer products read theirs under widening Casts.
 */
export function contractionOperands(
  kernel: KernelIR,
  sums: (dtype: DType) => boolean,
  read: (factor: Expr) => Load | undefined,
): MatmulOperands | undefined {
  const r = kernel.reductions[0];
  const contracts = kernel.pattern === "matmul" ||
    (kernel.pattern === "conv" && kernel.reduced.join() === String(kernel.space.length - 1));
  if (
    !contracts || kernel.reductions.length !== 1 || r.op !== "sum" || !sums(r.dtype) ||
    r.expr.kind !== "alu" || r.expr.op !== "Mul" || kernel.outputs.some((o) => o.level !== "row")
  ) return undefined;
  const [a, b] = r.expr.args.map(read);
  const nb = kernel.space.length - 3;
  const [m, n, k] = kernel.space.slice(nb);
  return a && b && k > 0 ? { nb, m, n, k, a, b } : undefined;
}

/**
 * Whether `kernel`'s one reduction sums f16 products of two f16 loads (an f16 matmul): the tilers
 * sum those exact products in f32 and round once, as the precision policy promises.
 */
export function sumsHalfProducts(kernel: KernelIR): boolean {
  const r = kernel.reductions[0];
  // An f32 sum of them too: an f16 product's partial sums (K summed in parts).
  return kernel.reductions.length === 1 && (r.dtype === "f16" || r.dtype === "f32") &&
    r.op === "sum" && r.expr.kind === "alu" && r.expr.op === "Mul" && r.expr.dtype === "f16" &&
    r.expr.args.every((e) => e.kind === "load" && e.dtype === "f16");
}

/**
 * `kernel` as the GPU's tiles and attention kernels compute it: products multiplied and summed
 * in f32 registers whatever the dtypes, so an f16 matmul's sum is rounded once, in the epilogue
 * (f32 accumulation, as the precision policy promises, with exact products where the reference
 * rounds each to f16 first). Other kernels come back as they are.
 */
export function f32SumView(kernel: KernelIR): KernelIR {
  if (!sumsHalfProducts(kernel)) return kernel;
  return { ...kernel, reductions: [{ ...kernel.reductions[0], dtype: "f32" }] };
}

/** Element count of the kernel's space with reduced axes removed. */
export function rowCount(k: KernelIR): number {
  return sizeOf(k.space.filter((_, i) => !k.reduced.includes(i)));
}
