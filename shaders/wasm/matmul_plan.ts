/**
 * Matmul planning for the WebAssembly generator: whether a kernel contracts, the shape of the
 * product, whether A is packed (and its gather table for convolutions), and the scratch and
 * prepacked bytes the arena must hold. The emitters are `shaders/wasm/matmul.ts`.
 *
 * @module
 */
import { blockScratchBytes } from "./block_product.ts";
import { type AffineOffset, affineOffset, batchAffineOffset } from "../../jit/ir/access.ts";
import {
  applyStep,
  contractionOperands,
  type Expr,
  gathers,
  type KernelIR,
  linearIndex,
  type Load,
  type MatmulOperands,
  matmulOperands,
  rowCount,
  storedA,
  sumsHalfProducts,
  walk,
} from "../../jit/ir/kernel_ir.ts";
/** Rows of a matmul tile (each two f32x4 accumulators wide). */
export const TILE_ROWS = 6;

/** Bytes of one output tile in a matmul's scratch; packed rows of A follow it. */
export const TILE_BYTES = 32 * TILE_ROWS;

/** Whether `kernel` runs through the matmul paths (a matmul, or a convolution as implicit GEMM). */
export function contracts(kernel: KernelIR): boolean {
  // An empty contraction (K = 0) takes the generic reduction, which sums nothing to 0; a block
  // product sums each output on its own, so its rows split as a reduction's do.
  if (kernel.pattern === "matmul" && kernel.space.at(-1) === 0) return false;
  if (kernel.blockProduct) return false;
  return kernel.pattern === "matmul" || productOperands(kernel) !== undefined;
}

/**
 * A product's operands as the tiles read them: an f32 matmul's loads (see `matmulOperands`), or
 * an integer product's i16 or byte loads under the Casts that widen them to its i32 sum (fusion's
 * IntegerMatMul and IntegerConv: K counts elements, not the integer tiles' words).
 */
export function productOperands(kernel: KernelIR): MatmulOperands | undefined {
  return matmulOperands(kernel) ?? integerOperands(kernel);
}

/** The operand types of integer products: shifted 8-bit values (i16), or bytes. */
const INTEGER_OPERANDS = new Set(["i16", "u8", "i8"]);

/**
 * {@linkcode productOperands} of an integer product: an i32 sum of widened integer loads (or, in
 * its {@linkcode integerView}, the same products summed as f32).
 */
function integerOperands(kernel: KernelIR): MatmulOperands | undefined {
  const widened = (e: Expr) =>
    e.kind === "alu" && e.op === "Cast" && e.dtype === "i32" && e.args[0].kind === "load" &&
      INTEGER_OPERANDS.has(e.args[0].dtype) && !gathers(e.args[0].steps)
      ? e.args[0]
      : undefined;
  return contractionOperands(kernel, (d) => d === "i32" || d === "f32", widened);
}

/**
 * Most scratch bytes a call spends on packed rows of A: it packs and multiplies its rows in
 * blocks of as many rows as fit (see {@linkcode packBlockRows}).
 */
const PACK_LIMIT = 1 << 22;

/**
 * Most bytes of a convolution's indirection table (see {@linkcode indirectionFill}); a larger A
 * gathers through its index map instead. Factored into taps (see {@linkcode tableTaps}),
 * ResNet-18's largest takes 1.8 MB (25088 pixels × 49 taps of its stem); whole, 14.7 MB.
 */
const TABLE_LIMIT = 1 << 24;

/** Bytes of B's panels: 8 columns each (the last zero-padded), k-major. */
export const panelsBytes = (n: number, k: number) => Math.ceil(n / 8) * 32 * k;

/** Rows of A: the product's rows over every batch (of a packed A's indirection table too). */
export const rowsOfA = (kernel: KernelIR, n: number) => rowCount(kernel) / n;

/**
 * Most rows of A whose product splits B's panels among threads rather than its rows (the first
 * call of a row split is 11 tiles: 66 rows).
 */
const PANEL_SPLIT_ROWS = 64;

/**
 * Most rows of an A read in place along k (not packed, which each call would do for every row
 * again) whose product of at least {@linkcode PANEL_SPLIT_PANELS} panels splits them. A
 * transformer's sequence of 128-197 tokens split by rows gave each of 16 threads 8-12 rows and
 * had every thread stream all of B (9.4 MB for BERT-base's MLP) from the shared L3 per call: 16
 * threads ran its products at 11 GFLOP/s a thread against 22 on one. Split by panels on the
 * 16-core H200 host: GPT-2 small 192 -> 157 ms, ViT-B/16 198 -> 177 (16 threads). ResNet-50's
 * convolutions lost (57 -> 62 ms at batch 1; 56.5 -> 73.6 with packed patches split too): its
 * 1×1 convolutions of 196 pixels make 25 panels, too few to share evenly.
 */
const PANEL_SPLIT_ROWS_IN_PLACE = 256;

/** Fewest panels a product of more than {@linkcode PANEL_SPLIT_ROWS} rows splits. */
const PANEL_SPLIT_PANELS = 64;

/** Whether A's rows are read in place, k-contiguous (see {@linkcode PANEL_SPLIT_ROWS_IN_PLACE}). */
function rowsInPlace(kernel: KernelIR): boolean {
  const access = aAccess(kernel);
  return access?.offset?.weights[access.nb + 2] === 1;
}

/**
 * A product's A as the tiles walk it: its affine offset (undefined where A is gathered, and so
 * packed); undefined for a kernel that is no product.
 */
function aAccess(kernel: KernelIR): { offset?: AffineOffset; nb: number } | undefined {
  const operands = productOperands(kernel);
  if (!operands) return undefined;
  const { a, nb } = operands;
  return { offset: affineOffset(a.steps, kernel.space, kernel.inputs[a.input].shape), nb };
}

/**
 * Panels of 8 columns a tiled matmul's calls range over, where its threads split B's columns
 * rather than its rows; 0 where they split rows. A product of few rows (a batch of one to a few
 * dozen through a linear layer) split by rows gave each thread a tile or two of rows (two-row
 * tiles compute at half the rate) and every thread streamed all of B: mlp's 8 × 784 × 256 layer
 * ran no faster on 16 threads than on one. Split by panels, each thread streams its share of B
 * and keeps whole row tiles.
 */
export function panelSplit(kernel: KernelIR): number {
  // A member of a group (attention's) splits by rows, as the group does (`chainsOf`).
  if (kernel.group !== undefined) return 0;
  const n = kernel.space.at(-2)!, rows = rowsOfA(kernel, n);
  const many = n >= 8 * PANEL_SPLIT_PANELS && rowsInPlace(kernel);
  const most = many ? PANEL_SPLIT_ROWS_IN_PLACE : PANEL_SPLIT_ROWS;
  if (rows > most || n <= 8) return 0;
  // Its calls compute every row, also under shape buckets, whose runs compute the active rows
  // only: rows past them hold stale data, harmless except as a gather's index (a fault).
  let gather = false;
  const visit = (e: Expr) => void (gather ||= e.kind === "load" && gathers(e.steps));
  for (const x of [...kernel.reductions, ...kernel.outputs]) walk(x.expr, visit);
  return gather ? 0 : Math.ceil(n / 8);
}

/**
 * Batch axes along which a matmul's B changes (a grouped convolution's groups, attention's
 * batches and heads): the tiled path packs a set of B's panels for each such batch.
 */
export function batchAxesOfB(kernel: KernelIR): number[] {
  const operands = matmulOperands(kernel);
  if (!operands) return [];
  const wb = bAccess(kernel, operands);
  if (!wb) return [];
  // A weight of NaN: B moves along the axis by no one stride (each batch's panels all the same).
  return [...Array(operands.nb).keys()].filter((i) => kernel.space[i] !== 1 && wb.weights[i] !== 0);
}

/**
 * B's access as the tiles walk it: affine, or affine within each batch (grouped-query
 * attention's keys, shared by several heads: see `batchAffineOffset`), whose panels are packed
 * per batch from each batch's own base. Took the i-k-j loop before: the scores of a 0.5B
 * decoder's prefill (14 heads of 2 key-value heads, 128 × 128 × 64) at 2.6 GFLOP/s on 2 cores.
 */
export function bAccess(
  kernel: KernelIR,
  { nb, b }: { nb: number; b: MatmulOperands["b"] },
): AffineOffset | undefined {
  const known = accessOfB.get(kernel) ?? new Map<object, AffineOffset | undefined>();
  accessOfB.set(kernel, known);
  if (known.has(b)) return known.get(b);
  const shape = kernel.inputs[b.input].shape;
  let access = affineOffset(b.steps, kernel.space, shape);
  // A product of fewer rows than a tile reads B once either way: packing it per batch only adds
  // work (a decode step's scores, one row: 11.5-11.9 -> 9.7-10.1 tokens/s on 2 cores).
  if (!access && kernel.space[nb] >= TILE_ROWS) {
    access = batchAffineOffset(b.steps, kernel.space, shape, nb);
  }
  known.set(b, access);
  return access;
}

/**
 * {@linkcode bAccess} by kernel and B's load: planning and generation ask for it several times,
 * and proving it batch by batch takes an access analysis a batch.
 */
const accessOfB = new WeakMap<KernelIR, Map<object, AffineOffset | undefined>>();

/** Sets of B's panels a matmul packs: one per batch of B (see {@linkcode batchAxesOfB}). */
export const batchesOfB = (kernel: KernelIR): number =>
  batchAxesOfB(kernel).reduce((p, i) => p * kernel.space[i], 1);

/**
 * Whether the tiled path packs A: its load is not affine (a convolution's patches, or a reshape
 * that splits an index, as attention's head merge does), so its rows are gathered once into
 * the scratch and read contiguously, instead of evaluating the index map for every
 * multiply-add.
 */
export function packsA(kernel: KernelIR): boolean {
  const access = aAccess(kernel);
  return access !== undefined && access.offset === undefined;
}

/**
 * Rows of A a call packs at once: all of its rows where A fits {@linkcode PACK_LIMIT}, else
 * blocks of as many (at least a tile's) as fit. Before, an A past the limit was not packed at
 * all, and ResNet-18's 56×56 convs took the per-element path: 0.4 GFLOP/s against 30.
 */
export function packBlockRows(kernel: KernelIR): number {
  const [n, k] = kernel.space.slice(-2);
  return Math.min(rowsOfA(kernel, n), Math.max(TILE_ROWS, Math.floor(PACK_LIMIT / (4 * k))));
}

/**
 * The fill of a packed A's indirection table (as XNNPACK's indirect convolution), if it takes
 * one: the table holds the element offset A's index map reaches for every row and k (or, where it
 * factors, for every row and tap: see {@linkcode tableTaps}), or the fill's cell where it reads
 * the fill. The packing call builds it in WebAssembly, once per change of B (see `tiledGemm`),
 * and each call's gather walks it. Built here at code generation it cost shufflenet 0.10 s of
 * its first run on 2 cores and 6.4 MB of data segments to write, cache and compile. `undefined`
 * when A is not packed, its index map reads data (a gather: the table would outlive the index it
 * read), its out-of-bounds reads have different fills, or the table would pass 16 MB.
 */
export function indirectionFill(kernel: KernelIR): number | undefined {
  const fill = fillOf(kernel);
  return fill !== undefined && tableBytes(kernel) <= TABLE_LIMIT ? fill : undefined;
}

/** {@linkcode indirectionFill} at any table size. */
function fillOf(kernel: KernelIR): number | undefined {
  if (!packsA(kernel)) return undefined;
  const { a } = productOperands(kernel)!;
  if (a.steps.some((s) => s.kind === "gather")) return undefined;
  const fills = a.steps.flatMap((s) => (s.kind === "affine" && s.bounds ? [s.fill ?? 0] : []));
  return fills.every((f) => Object.is(f, fills[0])) ? fills[0] ?? 0 : undefined;
}

/**
 * How a convolution's indirection table factors: A's element `k = c·taps + t` of a row is its
 * tap `t`'s element plus `c·stride` (a channel further on), in bounds exactly where tap `t` is.
 * The table then holds a row's taps only (XNNPACK's indirection buffer: per output pixel and
 * kernel point), 1/C of the entries: ResNet-18's took 20M entries and 0.74 s of its first run.
 */
export interface TableTaps {
  /** Kernel points (the table's entries a row). */
  readonly taps: number;
  /** Channels a group (A's row is `channels · taps` long). */
  readonly channels: number;
  /** Elements between a tap's consecutive channels. */
  readonly stride: number;
  /**
   * Where a row whose taps are all in bounds reads each kernel row's `length` taps from
   * consecutive elements, kernel rows `stride` elements apart (a conv without dilation along
   * its width): its gather copies vectors rather than scalars through the table.
   */
  readonly lines?: { readonly length: number; readonly stride: number };
}

/** Rows sampled to check a factorization: both ends, the middle, a quarter in, and beside them. */
const SAMPLED_ROWS = (rows: number) =>
  [...new Set([0, 1, rows >> 2, rows >> 1, rows - 2, rows - 1])].filter((r) => r >= 0 && r < rows);

/**
 * The factorization of a convolution's indirection table (see {@linkcode TableTaps}), where its
 * patches come from a conv's 8-D window space and A's index map, evaluated at every tap of
 * sampled rows (the first and last hold padded taps) and sampled channels, bears it out;
 * `undefined` otherwise.
 */
export function tableTaps(kernel: KernelIR): TableTaps | undefined {
  if (!factored.has(kernel)) factored.set(kernel, factorTable(kernel));
  return factored.get(kernel);
}

/** {@linkcode tableTaps} by kernel: the planning asks for it several times. */
const factored = new WeakMap<KernelIR, TableTaps | undefined>();

/** Sampled channels of a factorization's check (the ends and the middle of them). */
const SAMPLED_CHANNELS = (channels: number) =>
  [...new Set([1, 2, channels >> 1, channels - 1])].filter((c) => c >= 1 && c < channels);

/** {@linkcode tableTaps}, worked out. */
function factorTable(kernel: KernelIR): TableTaps | undefined {
  if (fillOf(kernel) === undefined || kernel.pattern !== "conv") return undefined;
  const { a, nb, n, k } = productOperands(kernel)!;
  const window = a.steps.find((s) => s.kind === "reshape" && s.to.length === 8);
  if (window?.kind !== "reshape") return undefined;
  const [channels, kh, kw] = window.to.slice(5), taps = kh * kw;
  if (channels < 2 || channels * taps !== k) return undefined;
  const shape = kernel.inputs[a.input].shape, outer = kernel.space.slice(0, nb + 1);
  /** A's element offset at (row, k), or undefined where it reads the fill. */
  const at = (row: number, kk: number) => {
    const coords: number[] = [];
    for (let i = outer.length - 1, rest = row; i >= 0; i--) {
      coords[i] = rest % outer[i];
      rest = Math.floor(rest / outer[i]);
    }
    let x: number[] | undefined = [...coords, 0, kk];
    for (const st of a.steps) if (x) x = applyStep(st, x);
    return x ? linearIndex(x, shape) : undefined;
  };
  let stride: number | undefined;
  for (const row of SAMPLED_ROWS(rowsOfA(kernel, n))) {
    for (let t = 0; t < taps; t++) {
      const base = at(row, t);
      for (const c of SAMPLED_CHANNELS(channels)) {
        const v = at(row, c * taps + t);
        if ((v === undefined) !== (base === undefined)) return undefined;
        if (v === undefined || base === undefined) continue;
        stride ??= (v - base) / c;
        if (v !== base + c * stride) return undefined;
      }
    }
  }
  if (stride === undefined) return undefined;
  const lines = linesOf(at, rowsOfA(kernel, n), kh, kw, stride);
  return { taps, channels, stride, ...(lines && { lines }) };
}

/** Rows past each of a quarter and half of them checked for {@linkcode TableTaps.lines}. */
const LINE_ROWS = 64;

/**
 * A factored table's {@linkcode TableTaps.lines}, where every row with every tap in bounds among
 * up to `2·LINE_ROWS` checked (the sampled rows are mostly border pixels) reads them as kernel
 * rows of consecutive elements, the same distance apart, and one element past a kernel row lies
 * no further than the next kernel row or channel (a gather's vector may read it).
 */
function linesOf(
  at: (row: number, k: number) => number | undefined,
  rows: number,
  kh: number,
  kw: number,
  channelStride: number,
): TableTaps["lines"] {
  let stride: number | undefined;
  const checked = [rows >> 2, rows >> 1].flatMap((r) =>
    [...Array(LINE_ROWS).keys()].map((i) => r + i).filter((row) => row < rows)
  );
  for (const row of new Set(checked)) {
    const reads = [...Array(kh * kw).keys()].map((t) => at(row, t));
    if (reads.some((v) => v === undefined)) continue;
    const base = reads[0]!, step = kh > 1 ? reads[kw]! - base : 0;
    stride ??= step;
    if (step !== stride || reads.some((v, t) => v !== base + Math.floor(t / kw) * step + t % kw)) {
      return undefined;
    }
  }
  if (stride === undefined || (kh > 1 && stride < kw)) return undefined;
  return channelStride < (kh - 1) * stride + kw ? undefined : { length: kw, stride };
}

/** Bytes of a matmul's indirection table: 8 a tap (address and mask) or 4 an element. */
function tableBytes(kernel: KernelIR): number {
  const { n, k } = productOperands(kernel)!;
  const taps = tableTaps(kernel);
  return rowsOfA(kernel, n) * (taps ? 8 * taps.taps : 4 * k);
}

/**
 * Rows of a matmul's indirection table (0 without one). The packing call builds the rows it is
 * given, `[−1 − start, end)`, so the program builds a table over several calls: V8 optimizes a
 * function between calls only, and ResNet-18's tables, 20M entries built in one call each, took
 * 0.74 s of its first run in unoptimized code.
 */
export function tableRows(kernel: KernelIR): number {
  return indirectionFill(kernel) === undefined ? 0 : rowsOfA(kernel, kernel.space.at(-2)!);
}

/**
 * Bytes a matmul keeps beside the arena for a prepacked B: its panels of 8 columns (the last
 * zero-padded), k-major, then a packed A's indirection table and the cell holding its fill,
 * copied there once instead of per call.
 */
export function prepackBytes(kernel: KernelIR): number {
  const [n, k] = kernel.space.slice(-2);
  const table = indirectionFill(kernel) !== undefined ? tableBytes(kernel) + 4 : 0;
  return panelsBytes(n, k) * batchesOfB(kernel) + table;
}

/**
 * Scratch bytes a kernel needs: a matmul's tile and packed A rows, or its row of accumulators.
 */
export function scratchBytes(kernel: KernelIR): number {
  if (kernel.blockProduct && storedA(kernel.blockProduct)) {
    return blockScratchBytes(kernel, kernel.blockProduct);
  }
  if (!contracts(kernel)) return 0;
  const [n, k] = kernel.space.slice(-2);
  // An integer product packs A's rows as i16 pairs: 2 bytes an element.
  const packed = packsA(kernel)
    ? packBlockRows(kernel) * k * 4
    : integerOperands(kernel)
    ? packBlockRows(kernel) * k * 2
    : 0;
  return Math.max(TILE_BYTES + packed, 4 * n);
}

/** What the i-k-j path needs to know about a matmul kernel. */
export interface MatmulPlan {
  /** Number of batch axes. */
  readonly nb: number;
  /** Output columns. */
  readonly n: number;
  /** Contraction length. */
  readonly k: number;
  /** The A operand load (independent of n). */
  readonly a: Extract<Expr, { kind: "load" }>;
  /** The B operand load (independent of m). */
  readonly b: Extract<Expr, { kind: "load" }>;
  /** Whether B's elements for consecutive n are consecutive in memory (no bounds). */
  readonly contiguous: boolean;
}

/**
 * The plan of an integer product kernel (fusion's IntegerMatMul or IntegerConv: an i32 sum of
 * products of i16 or byte loads widened, every output per row) for the integer tiles, which step
 * K in pairs of i16 (`k` is K/2: one `i32x4.dot_i16x8_s` takes two k of four columns) or, where
 * `byteDot`, in quads of bytes (K/4: relaxed SIMD's byte dot product takes four): `undefined` for
 * any other kernel, a K those do not divide, or an operand read through a gather.
 */
export function integerPlan(kernel: KernelIR, byteDot = false): IntegerPlan | undefined {
  const operands = integerOperands(kernel);
  if (!operands) return undefined;
  const { nb, n, k, a, b } = operands;
  const plan = { nb, n, a, b, contiguous: false };
  if (a.dtype === "i16" && b.dtype === "i16") {
    return k % 2 === 0 ? { ...plan, k: k / 2, lanes: 2 } : undefined;
  }
  const bytes = [a.dtype, b.dtype].sort().join() === "i8,u8" && k % 4 === 0;
  return bytes && byteDot ? { ...plan, k: k / 4, lanes: 4 } : undefined;
}

/**
 * An integer product's plan: K in words of `lanes` values (`k` words), i16 pairs
 * (`i32x4.dot_i16x8_s`) or byte quads (relaxed SIMD's byte dot product, one operand unsigned).
 */
export interface IntegerPlan extends MatmulPlan {
  /** Values a 32-bit word of the packed operands holds: 2 (i16) or 4 (bytes). */
  readonly lanes: 2 | 4;
}

/**
 * An integer matmul (see {@linkcode integerPlan}) whose outputs read its i32 sum only through a
 * Cast to f32 (the dequantization that follows every quantized product), as the integer tiles
 * generate it: the tiles convert the sums (`f32x4.convert_i32x4_s` rounds as the Cast does), so
 * the outputs read an f32 sum and the epilogue walks vectors as the f32 tiles' does; point by
 * point it took a third of a 128 × 768 × 3072 product. `undefined` where an output reads the i32
 * sum itself.
 */
export function integerView(kernel: KernelIR): KernelIR | undefined {
  const sum: Expr = { kind: "acc", index: 0, dtype: "f32" };
  let plain = true;
  const view = withF32Sum(kernel, (e) => {
    if (e.kind === "alu" && e.op === "Cast" && e.dtype === "f32" && isSum(e.args[0])) return sum;
    // The i32 sum itself, read other than through a Cast to f32.
    if (isSum(e)) plain = false;
    return undefined;
  });
  return plain ? view : undefined;
}

/** The input whose panels a tiled matmul packs (B: of an f32 or an integer product). */
export function packedInput(kernel: KernelIR): number {
  return productOperands(kernel)!.b.input;
}

/** The i-k-j plan of an f32 matmul kernel whose outputs are all per-row, if it is one. */
export function matmulPlan(kernel: KernelIR): MatmulPlan | undefined {
  const operands = matmulOperands(kernel);
  if (!operands) return undefined;
  const { nb, n, k, a, b } = operands;
  const contiguous = n > 1 && consecutiveAlong(kernel, b, nb + 1);
  return { nb, n, k, a, b, contiguous };
}

/**
 * Whether `load` reads consecutive elements as the coordinate of `axis` counts up from 0 (the
 * others at the middle of the space), with no bounds and no gathers: a pointer walks it.
 */
export function consecutiveAlong(kernel: KernelIR, load: Load, axis: number): boolean {
  const stride = strideAlong(kernel, load, axis);
  return stride === 1 || (stride === 0 && kernel.space[axis] <= 1);
}

/**
 * The stride in elements of `load`'s element as the kernel's coordinate `axis` steps, where it
 * is one stride all along the axis (an affine view, no gather and no bounds; 0 for an axis of
 * one), else `undefined`.
 */
export function strideAlong(kernel: KernelIR, load: Load, axis: number): number | undefined {
  if (load.steps.some((s) => s.kind === "gather" || (s.kind === "affine" && s.bounds))) {
    return undefined;
  }
  const probe = kernel.space.map((d) => Math.floor(d / 2));
  const at = (v: number) => {
    let x: number[] | undefined = probe.map((c, i) => (i === axis ? v : c));
    for (const s of load.steps) if (x) x = applyStep(s, x);
    return x ? linearIndex(x, kernel.inputs[load.input].shape) : NaN;
  };
  const stride = kernel.space[axis] > 1 ? at(1) - at(0) : 0;
  const linear = [...Array(kernel.space[axis]).keys()].every((v) => at(v) - at(0) === v * stride);
  return linear ? stride : undefined;
}

/**
 * An f16 matmul (an f16 sum of products of f16 loads) as the tiles compute it: exact products
 * summed in f32, rounded to f16 once where the outputs read the sum. The WGSL tiles do the same
 * (f32 accumulation, as the precision policy promises); the per-element path rounded every product
 * to f16 and took 14.5 ms for one 2×16×512×128 matmul of an fp16 transformer block.
 */
export function halfMatmulView(kernel: KernelIR): KernelIR {
  if (!sumsHalfProducts(kernel)) return kernel;
  const sum: Expr = { kind: "acc", index: 0, dtype: "f32" };
  const once: Expr = { kind: "alu", op: "Cast", args: [sum], dtype: "f16" };
  return withF32Sum(kernel, (e) => (isSum(e) ? once : undefined));
}

/** Whether `e` reads the kernel's one sum. */
const isSum = (e: Expr) => e.kind === "acc" && e.index === 0;

/**
 * `kernel` with its one reduction summed in f32 and its outputs rewritten where `swap` gives a
 * replacement for a node (shared subexpressions rewritten once): how the tiles compute a sum of
 * another type, and what the outputs read of it.
 */
function withF32Sum(kernel: KernelIR, swap: (e: Expr) => Expr | undefined): KernelIR {
  const r = kernel.reductions[0];
  const memo = new Map<Expr, Expr>();
  const read = (e: Expr): Expr => {
    let out = memo.get(e);
    if (!out) {
      out = swap(e) ?? (e.kind === "alu" ? { ...e, args: e.args.map(read) } : e);
      memo.set(e, out);
    }
    return out;
  };
  return {
    ...kernel,
    reductions: [{ ...r, dtype: "f32", expr: { ...r.expr, dtype: "f32" } }],
    outputs: kernel.outputs.map((o) => ({ ...o, expr: read(o.expr) })),
  };
}

/**
 * Custom section of a module whose matmul takes prepacked B: its {@linkcode prepackBytes}
 * (rounded up to 16) and {@linkcode tableRows}, two little-endian u32. The program lays out its
 * arena from them before instantiating anything; working them out again from the kernel IR took
 * unet 14-19 ms of a compile from the disk cache on 2 cores (the table's factorization check).
 */
export const PACKS_SECTION = "kiln.packs";

/** The {@linkcode PACKS_SECTION} of `kernel`'s module. */
export function packsSection(kernel: KernelIR): Uint8Array {
  const bytes = new Uint8Array(8), view = new DataView(bytes.buffer);
  view.setUint32(0, Math.ceil(prepackBytes(kernel) / 16) * 16, true);
  view.setUint32(4, tableRows(kernel), true);
  return bytes;
}

/** What a prepacked B needs: its bytes and its table's rows (`undefined`: it takes none). */
export interface Packs {
  /** Bytes of B's panels and the table (see {@linkcode prepackBytes}). */
  readonly bytes: number;
  /** Rows of the indirection table (see {@linkcode tableRows}). */
  readonly tableRows: number;
}

/** The {@linkcode Packs} `module` declares in its {@linkcode PACKS_SECTION}. */
export function packsOf(module: WebAssembly.Module): Packs | undefined {
  const [section] = WebAssembly.Module.customSections(module, PACKS_SECTION);
  if (!section) return undefined;
  const view = new DataView(section);
  return { bytes: view.getUint32(0, true), tableRows: view.getUint32(4, true) };
}
