/**
 * Flash attention: an attention group of any length (`scores → softmax → values`, see
 * `attentionGroup`) as one WGSL kernel that never stores the scores. A workgroup takes `rows`
 * query rows of one batch item; its query tile stays in workgroup memory while key and value
 * tiles of `KEYS` keys stream through it. Each tile is two small matmuls, laid out as the tiled
 * matmul's are (k-major vec4 tiles, a thread 4 rows × 4 keys of scores and 4 rows × 4·G output
 * columns, the threads of a warp reading consecutive vec4s): scores = Q·Kᵀ, then the online
 * softmax, then out += P·V with P through workgroup memory. The softmax weighs a tile's scores
 * against the rows' running maxima as they stand, with no exchange between threads, and only
 * where a weight would pass e^8 (the first tile, a score rising that far, a NaN or an infinity)
 * does the tile exchange the rows' maxima through workgroup memory, rescale what the rows hold
 * and weigh again: a tile then has three barriers (two of them the uniform load of that verdict)
 * where exchanging every tile took four. The
 * next tile's keys and values are read into registers while the current tile computes, as the
 * tiled matmul does, and stored once every thread is past the tile's scores (keys) and products
 * (values). The scores' epilogue (scale, masks) and the softmax's prologue run per score through
 * a helper function of the group's own lowerings; the values' epilogue runs once per output at
 * the end. Where a mask can make scores −∞ whatever their dot (an added or selected −∞: a causal
 * mask), a summary kernel runs first (`shaders/wgsl/tile_summary.ts`) and the loop runs over the key
 * tiles that must be computed (`shaders/wgsl/masks.ts`): a tile whose scores are all masked adds exactly
 * nothing where its values are finite and its dots bounded. A mask the same for every query row
 * (padding over the keys) needs no summary: each workgroup reads its T entries itself.
 *
 * It applies where the softmax is the plain one (max, then the sum of exp(x − max), then
 * exp(x − max) / sum over the same x), heads are at most `MAX_HEAD` wide and the tiles fit the
 * device's workgroup memory. A workgroup's rows share their keys, so they stay within one batch
 * item: a query axis of no multiple of them (a prompt of any length) takes whole workgroups an
 * item, the last one's rows past the queries idle, and computes every key tile (no skips). It
 * runs where the group's scores do not fit the device's largest storage binding (a long sequence:
 * the three kernels could not run there at all), by default where it was measured faster than
 * those three kernels (`flashPays`: heads over 32, 128 keys or more, 256 workgroups or more), and
 * everywhere with `new WebGpuBackend({ flashAttention: true })`. On
 * the H200 (device time, `bench/gpu_kernels.ts`, 2026-11-26, codegen webgpu 0.6.22) it ran
 * B8 H16 T1024 D64 in 1.59 ms against 2.27 ms for the three kernels (21.6 TFLOP/s; the
 * one-thread-a-row kernel it succeeds took 42.0 ms).
 *
 * @module
 */
import type { DType } from "../../jit/ir/dtype.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { Expr, KernelBuffer, KernelIR } from "../../jit/ir/kernel_ir.ts";
import { matmulOperands } from "../../jit/ir/kernel_ir.ts";
import type { Attention } from "./attention_group.ts";
import { storageBindings, storedType } from "./expr.ts";
import { outputType } from "./combined.ts";
import { Structure } from "./cancel.ts";
import { type KernelLayout, rowsLayout, type WgslOptions } from "./codegen.ts";
import { streamedRows } from "./rows.ts";
import type { TileMask } from "./masks.ts";

/** Widest head (query, key and value rows) a flash kernel takes. */
export const MAX_HEAD = 64;

/** Keys (and values) a tile streams through workgroup memory. */
export const KEYS = 32;

/**
 * Steps of an inner loop unrolled together. Every workgroup-memory read then has a constant
 * offset from its chunk's base (the unrolled loops ran 1.7× faster than the kept ones), while
 * the tile's code stays small enough for the instruction cache: with both of a tile's matmuls
 * unrolled whole (some 3000 instructions), each alone ran at 36-39 TFLOP/s but the two together
 * at 21 (H200, B8 H16 T1024 D64, ablations of 2026-11-26); in chunks of 16 the kernel took 1.645
 * ms against 2.13, of 8 1.685, of 4 1.851.
 */
export const CHUNK = 16;

/** Threads across a tile's keys (4 keys each) and across the output's columns (4·G each). */
export const TX = KEYS / 4;

/** An attention group that runs as one flash kernel. */
export interface Flash extends Attention {
  /** Query rows of a workgroup (4 a thread). */
  readonly rows: number;
  /**
   * Whether the softmax's weights are guarded as PyTorch's SDPA export guards them,
   * `Where(IsNaN(w), 0, w)` (see {@linkcode guardedSoftmax}).
   */
  readonly guarded?: boolean;
  /**
   * Where masked key tiles are skipped: the mask, and the value of the summary the kernel reads
   * as its last input (see `shaders/wgsl/tile_summary.ts`); no summary where the mask is the same
   * for every query row, which the flash kernel reads itself (`keyRange` in `masks.ts`).
   */
  readonly skip?: {
    readonly mask: TileMask;
    readonly summary?: KernelBuffer;
    /** Whether the mask is the same for every batch item: the first item's words serve all. */
    readonly shared: boolean;
  };
}

/** Output columns the value tile holds: the head's width rounded up to 32 or 64. */
export function paddedWidth(e: number): number {
  return e <= 32 ? 32 : 64;
}

/** Where key `j`'s row of the weight tile starts, in vec4s (`rq` of them a key, a pad every 4). */
export function weightRow(j: number, rq: number): number {
  return j * rq + (j >> 2);
}

/**
 * Workgroup memory of a flash kernel: query, key, weight and value tiles (the key and value rows
 * padded, as they may be), the row partials and the verdict.
 */
export function flashBytes(d: number, e: number, rows: number): number {
  const vec4s = d * rows / 4 + d * (TX + 1) + weightRow(KEYS, rows / 4) +
    KEYS * (paddedWidth(e) / 4 + 1);
  return 16 * vec4s + 4 * rows * TX + 16;
}

/**
 * Bits of e^8 as an f32: a tile whose weights against the running maxima stay below it needs no
 * exchange of the maxima (see `flashWgsl` in `flash_kernel.ts`).
 */
export const LAZY_BITS = new Uint32Array(new Float32Array([Math.exp(8)]).buffer)[0];

/** Threads a workgroup has for each of its query rows (a thread takes 4 rows × `TX` threads). */
export const THREADS_A_ROW = TX / 4;

/**
 * Query rows of a workgroup, best first: 64 (128 threads), then 32 and 16 (64 and 32 threads)
 * where the query axis or the device's workgroup memory allows no more. On the H200 at B8 H16
 * T1024 D64 (before the prefetch), 64 rows took 5.66 ms, 32 rows 12.9 ms, and 64 rows of 8 a
 * thread 8.99 ms.
 */
const ROWS: readonly number[] = [64, 32, 16];

/**
 * Keys and workgroups from which the flash kernel runs by default, where it was measured faster
 * than the three kernels it replaces (H200 device time, 2026-11-26, codegen webgpu 0.6.22,
 * `bench/gpu_kernels.ts`, D = 64): B8 H16 at 128 keys 0.049 against 0.059 ms, 256 0.132 against
 * 0.202, 512 0.448 against 0.640, 1024 1.59 against 2.27, B1 H16 T4096 3.00 against 4.45. A
 * workgroup takes a tile of 64 query rows, so fewer rows than some 256 tiles would leave most of
 * the GPU idle, where the three kernels' matmuls split K or take smaller tiles. Heads of 32 or
 * fewer (a value tile of 32 columns, less work a tile for the same barriers) were not measured:
 * they keep the three kernels.
 */
const FLASH_KEYS = 128, FLASH_WORKGROUPS = 256;

/** Whether `plan` is where the flash kernel was measured faster than three kernels. */
export function flashPays(plan: Flash): boolean {
  const s = matmulOperands(plan.scores)!;
  const batch = sizeOf(plan.scores.space.slice(0, s.nb));
  const v = matmulOperands(plan.values)!;
  return s.k > 32 && v.n > 32 && s.n >= FLASH_KEYS &&
    batch * s.m / plan.rows >= FLASH_WORKGROUPS;
}

/** The flash form of an attention `group` on a device with `options`, if it applies. */
export function flashAttention(group: Attention, options: WgslOptions): Flash | undefined {
  const { scores, weights, values } = group;
  const s = matmulOperands(scores)!, v = matmulOperands(values)!;
  if (s.k > MAX_HEAD || v.n > MAX_HEAD || weights.reductions.length !== 2) return undefined;
  const fits = (r: number) =>
    r * THREADS_A_ROW <= options.maxInvocations &&
    flashBytes(s.k, v.n, r) <= (options.workgroupBytes ?? 16384);
  // Whole query tiles where some size divides the query axis; else (a prompt of any length) the
  // largest, each item's last tile partly past its rows (`raggedRows`).
  const rows = ROWS.find((r) => s.m % r === 0 && fits(r)) ??
    (s.m % ROWS[ROWS.length - 1] !== 0 ? ROWS.find(fits) : undefined);
  if (!rows) return undefined;
  if (guardedSoftmax(weights)) return { ...group, rows, guarded: true };
  return plainSoftmax(weights) ? { ...group, rows } : undefined;
}

/**
 * Whether `weights` is the plain softmax: max(x), then Σ exp(x − max), then exp(x − max) / Σ over
 * the same x (the form the flash kernel computes on its own).
 */
export function plainSoftmax(weights: KernelIR): boolean {
  const form = softmaxForm(weights);
  return form !== undefined && form.is(weights.outputs[0].expr, form.weight);
}

/**
 * Whether `weights` is the plain softmax with its weights guarded as PyTorch's SDPA export writes
 * it, `Where(IsNaN(w), 0, w)`. A weight is NaN only where its row's maximum is not finite (every
 * key −∞, a NaN or a +∞ score): then every weight of the row is, and the guarded row sums its
 * values times 0. The flash kernel gives such a row what its products summed with the weights it
 * held (0 for a row of −∞: exactly the reference's), or 0 where a NaN or +∞ score poisoned them
 * (the reference's too, but where one of the row's values is itself not finite, then NaN).
 */
export function guardedSoftmax(weights: KernelIR): boolean {
  const form = softmaxForm(weights);
  if (!form) return false;
  const w = form.weight, dtype = w.dtype;
  const nan: Expr = { kind: "alu", op: "IsNaN", args: [w], dtype: "bool" };
  const zero: Expr = { kind: "const", value: 0, dtype };
  return form.is(weights.outputs[0].expr, {
    kind: "alu",
    op: "Where",
    args: [nan, zero, w],
    dtype,
  });
}

/**
 * Whether `weights` reduces as a softmax: max(x), then Σ exp(x − max) over the same x, whatever
 * its output does with them (the matrix attention kernel evaluates that as the kernel wrote it:
 * exporters guard the weights, `Where(IsNaN(w), 0, w)` after PyTorch's SDPA).
 */
export function softmaxReductions(weights: KernelIR): boolean {
  return softmaxForm(weights) !== undefined;
}

/** The plain softmax's weight over `weights`' x, and structural equality, if it reduces as one. */
function softmaxForm(
  weights: KernelIR,
): { weight: Expr; is: (a: Expr, b: Expr) => boolean } | undefined {
  if (weights.reductions.length !== 2) return undefined;
  const [max, sum] = weights.reductions;
  const x = max.expr;
  // In the softmax's own float type (an f16 precision's softmax is f16 throughout).
  const dtype = x.dtype;
  const acc = (index: number): Expr => ({ kind: "acc", index, dtype });
  const alu = (op: "Exp" | "Sub" | "Div", args: Expr[]): Expr => ({ kind: "alu", op, args, dtype });
  const p = alu("Exp", [alu("Sub", [x, acc(0)])]);
  const structure = new Structure();
  const is = (a: Expr, b: Expr) => structure.of(a) === structure.of(b);
  if (max.op !== "max" || sum.op !== "sum" || !is(sum.expr, p)) return undefined;
  return { weight: alu("Div", [p, acc(1)]), is };
}

/**
 * The binding names of kernel `k`'s inputs in a kernel for its whole group (`in…` by position in
 * `plan.inputs`; the group's intermediates, which are not bound, get "").
 */
export function groupInputNames({ inputs }: Attention, k: KernelIR): string[] {
  return k.inputs.map((b) => {
    const i = inputs.findIndex((x) => x.value === b.value);
    return i < 0 ? "" : `in${i}`;
  });
}

/**
 * The bindings of a kernel for a whole group: `plan.inputs` and `extra`, then the values'
 * outputs (or `outputs`); f16 buffers as 16-bit words where `half` (after `enable f16`).
 */
export function groupBindings(
  { inputs, values }: Attention,
  { half = false, extra = [], outputs = values.outputs }: {
    half?: boolean;
    extra?: readonly KernelBuffer[];
    outputs?: readonly KernelBuffer[];
  } = {},
): string[] {
  const type = (b: { dtype: DType }) => storedType(b.dtype, half);
  const ins = [...inputs, ...extra].map(type);
  const outs = outputs.map((o) => outputType(o, type(o)));
  const enable = [...ins, ...outs].includes("f16") ? ["enable f16;"] : [];
  return [...enable, ...storageBindings(ins, outs)];
}

/**
 * The words of a summary for `plan` (see `shaders/wgsl/tile_summary.ts`): per batch item, a word per
 * query tile and key tile, then one per key tile.
 */
export function summaryGeometry(
  plan: Flash,
): { items: number; queryTiles: number; keyTiles: number; words: number } {
  const s = matmulOperands(plan.scores)!;
  const items = sizeOf(plan.scores.space.slice(0, s.nb));
  const queryTiles = s.m / plan.rows, keyTiles = Math.ceil(s.n / KEYS);
  return { items, queryTiles, keyTiles, words: (queryTiles + 1) * keyTiles };
}

/**
 * The flash kernel's layout: `rows` query rows of one batch item a workgroup of `rows / 4 · 8`
 * threads (an item's last workgroup partly past its rows where they are no multiple of `rows`).
 */
export function flashLayout(plan: Flash): KernelLayout {
  const segment = matmulOperands(plan.scores)!.m;
  return rowsLayout({ ...streamedRows(THREADS_A_ROW, plan.rows), segment });
}

/**
 * Whether `plan`'s query axis is no multiple of its workgroup's rows: each batch item then takes
 * whole workgroups, its last one's rows past the queries reading zeros and storing nothing.
 */
export function raggedRows(plan: Flash): boolean {
  return matmulOperands(plan.scores)!.m % plan.rows !== 0;
}
