/**
 * How a program's kernels split among threads: which are worth it, in what shares and calls.
 * The arena program (`arena_program.ts`) takes these rules; the worker crew runs the shares.
 *
 * @module
 */
import { aluCount, type Expr, type KernelIR, rowCount, walk } from "../../jit/ir/kernel_ir.ts";
import { keptForm } from "../../jit/schedule/in_place.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { contracts, strideAlong, TILE_ROWS } from "../../shaders/wasm/matmul_plan.ts";
import { COLUMNS } from "../../shaders/wasm/block_product.ts";
import type { Split } from "./worker_crew.ts";

/**
 * How kernel `k`'s rows split: a thread's share is a multiple of `unit` rows, and its calls
 * (see {@linkcode CHUNK_WORK}) of `tile` rows. A matmul's rows are output rows times columns;
 * its shares are pairs of output rows, its calls whole tiles (shares of whole tiles split W5's
 * 64 rows 36/28 on two threads; 32/32 took it from 1.12 to 1.06 ms).
 */
function rowUnit(k: KernelIR): { unit: number; tile: number } {
  // A weight's unpacking goes a block of K at a time (its points are [K, N]).
  if (k.blockUnpack) {
    const block = k.blockUnpack.block * k.space[1];
    return { unit: block, tile: block };
  }
  // A block product's rows are its columns, computed four at a time: shares of four let a 0.5B
  // decoder's 896 columns go 56 to each of 16 threads, where shares of 16 left two threads idle.
  if (k.blockProduct) return { unit: COLUMNS, tile: 16 };
  const n = k.space[k.space.length - 2];
  return contracts(k) ? { unit: 2 * n, tile: TILE_ROWS * n } : { unit: 16, tile: 16 };
}

/**
 * Element-operations below which a kernel runs on the calling thread alone. Workers spin through
 * a run (see `worker_crew.ts`), so a hand-off costs a few microseconds, not a wake-up: on the
 * 16-core H200 host, 2^20 left shufflenet's depthwise convs and vit's row kernels on one thread
 * (shufflenet 21 -> 9 ms, vit 2.8 -> 1.7 ms at 2^16; 2 cores: 10.1 -> 8.4, 2.5 -> 1.8 ms).
 */
const THREADED_WORK = 1 << 16;

/**
 * Element-operations each thread of a split kernel gets at least: a kernel takes as many threads
 * as its work fills, not every thread there is (waking fifteen workers for a kernel two could
 * finish cost more than it saved on a 16-core machine).
 */
const PART_WORK = 1 << 14;

/**
 * Pieces per thread of a split kernel that is not a matmul split by rows (see `Split.pieces`).
 * A product split by B's panels (see `panelSplit`) takes as many: each of its calls streams only
 * its own panels, so a late thread's share goes to the others at no cost in B. On the 2-core VM
 * (two threads, device time, one piece a thread → four, processes in turn): BERT-base-shaped
 * 337, 340, 254 → 313, 295, 235 ms; GPT-2-shaped 491, 440 → 450, 400; ViT-B/16-shaped (wall) 606,
 * 526 → 505, 472; ResNet-50-shaped 114-118 ms either way.
 */
const PIECES = 4;

/**
 * Element-operations of a kernel's first call in a run; each further call takes twice the rows
 * of the one before. A fresh module runs in V8's baseline tier until its optimized code is
 * ready, and a running call never switches tiers: one call would run a first 4096² matmul ten
 * times slower than the next. Short first calls switch within milliseconds, and doubling keeps
 * the calls few (a matmul call streams all of B's panels, so its calls must not stay short).
 */
const CHUNK_WORK = 1 << 24;

/**
 * Element-operations of kernel `k` (its space times the ALU ops per point, at least one). A cache
 * stored over its past (every output `Where(c, past, y)` with `c` the same along the last axis)
 * tests `c` once a segment of that axis and leaves the kept ones alone (`keptSegments` in
 * `shaders/wasm/linear.ts`): its work is a segment's, not a point's. A 0.5B decoder's present
 * caches (2 heads × 256 entries × 64) had counted 393K and split over every thread: 16-20 µs a
 * layer on 2 and 16 threads, against 4.5 on one (2-core VM, profiled).
 */
export function workOf(k: KernelIR): number {
  if (k.opaque) return sizeOf(k.outputs[0]?.shape ?? []);
  const ops = [...k.reductions, ...k.outputs].reduce((n, x) => n + 1 + aluCount(x.expr), 0);
  return (sizeOf(k.space) * ops) / (keptAlongLast(k) ? Math.max(1, k.space.at(-1)!) : 1);
}

/** Whether every output of `k` is kept over its input by a condition fixed along the last axis. */
function keptAlongLast(k: KernelIR): boolean {
  const last = k.space.length - 1;
  const fixed = (c: Expr) => {
    let moves = false;
    walk(c, (x) => {
      moves ||= x.kind === "acc" || (x.kind === "load" && strideAlong(k, x, last) !== 0);
    });
    return !moves;
  };
  return last >= 0 && k.outputs.length > 0 && k.outputs.every((_, i) => {
    const kept = keptForm(k, i);
    return kept !== undefined && fixed(kept.c);
  });
}

/** Element-operations of a program's kernels together. */
export function totalWork(kernels: readonly KernelIR[]): number {
  return kernels.reduce((sum, k) => sum + workOf(k), 0);
}

/**
 * Element-operations of a program from which its runs take every core rather than the default
 * share (see `threadsFor`, a quarter of the cores left to V8's own threads): a run of tens of
 * milliseconds loses less to a preempted worker's scheduler tick than it gains from the cores.
 * On the 16-core H200 host, 16 threads against 12: BERT-base 105.7 against 122.1 ms, GPT-2 small
 * 192 against 254 (both about 2^36 element-operations), ResNet-50 at batch 1 (2^33) 49.9 against
 * 59.3. The small models that chose 12 (vit_tiny, unet, transformer_block) are under 2^28.
 */
export const ALL_CORES_WORK = 2 ** 32;

/**
 * Threads the runs of a program of `kernels` take: `most` (every core) for the heaviest, else
 * the backend's default `threads`. A decode step of a Qwen2.5-0.5B-shaped decoder (2^32.8
 * element-operations in 196 split kernels of 2^25.2 on average) had kept the default 12 of the
 * 16-core host's threads while each join woke the calling thread from `Atomics.wait` (12 threads
 * 39.6-47.6 tokens/s, 16 30.7-41.5); with joins that spin (`worker_crew.ts`) 16 threads decoded
 * 53.9, 59.3, 63.3 against 49.5, 52.9, 58.4 on 12 in one call (and 62.4 against 59.0 profiled).
 */
export function threadsOfProgram(
  kernels: readonly KernelIR[],
  threads: number,
  most: number,
): number {
  if (threads <= 1 || totalWork(kernels) < ALL_CORES_WORK) return threads;
  return Math.max(threads, most);
}

/** Whether `k` is worth splitting. */
export function threadable(k: KernelIR): boolean {
  return !k.opaque && workOf(k) >= THREADED_WORK;
}

/** How each kernel's rows split among threads (see {@linkcode Split}). */
export function splitsOf(kernels: readonly KernelIR[], panels: readonly number[]): Split[] {
  return kernels.map((k, i): Split => {
    const parts = Math.max(1, Math.floor(workOf(k) / PART_WORK));
    if (panels[i]) return { unit: 1, chunk: panels[i], parts, pieces: PIECES };
    const { unit, tile } = rowUnit(k), work = workOf(k) / Math.max(1, rowCount(k));
    // A matmul call streams all of B's panels: its calls start at 11 tiles (66 rows) to
    // amortize that.
    const least = contracts(k) ? 11 : 1;
    return {
      unit,
      chunk: tile * Math.max(least, Math.floor(CHUNK_WORK / (work * tile))),
      parts,
      // A late thread's share goes to the others in quarters; a matmul keeps one piece a
      // thread, as each call streams B's panels, and so does a block product, whose calls each
      // prepare A's row first (16-core H200 host, a 0.5B decoder's decode step: 15.5 ms, warm
      // 49.1-57.3 tokens/s against 47.2-55.6 in quarters).
      pieces: contracts(k) || k.blockProduct ? 1 : PIECES,
    };
  });
}

/**
 * Kernels of one group (`KernelIR.group`: attention's scores → softmax → weighted values) split
 * as one job: a thread runs every member over its share of the group's rows, so the scores it
 * made stay in its cache for the next member and the group joins its threads once, not once a
 * member. `rows` are the group's (a member's rows are `per` times as many); `kernels` its members.
 */
export interface Chain {
  /** The members' kernel indices, in order. */
  readonly kernels: readonly number[];
  /** Each member's rows per row of the chain. */
  readonly per: readonly number[];
  /** The chain's rows (those of its member with fewest). */
  readonly rows: number;
  /** How they split among threads. */
  readonly split: Split;
}

/**
 * The chains of `kernels` (see {@linkcode Chain}): groups of two or more adjacent members each
 * `eligible` (not opaque; a group's products split by rows, `panelSplit`), whose rows divide into
 * the group's, worth splitting together. Their values need places no member's share writes
 * while another reads them: the arena's memory plan keeps them until the last member.
 */
export function chainsOf(
  kernels: readonly KernelIR[],
  rowsOf: readonly number[],
  eligible: (i: number) => boolean,
): Chain[] {
  const chains: Chain[] = [];
  for (let i = 0, j = 1; i < kernels.length; i = j, j = i + 1) {
    const group = kernels[i].group;
    while (group !== undefined && j < kernels.length && kernels[j].group === group) j++;
    const members = Array.from({ length: j - i }, (_, m) => i + m);
    const rows = Math.min(...members.map((m) => rowsOf[m]));
    const work = totalWork(members.map((m) => kernels[m]));
    if (members.length < 2 || work < THREADED_WORK || !members.every(eligible)) continue;
    if (members.some((m) => rowsOf[m] % rows !== 0)) continue;
    const per = members.map((m) => rowsOf[m] / rows);
    // A share of the chain's rows is a whole share of each member's: pairs of a product's
    // output rows; any rows of a row kernel (softmax), which computes any range of them.
    const unit = members.reduce((u, m, x) => {
      const k = kernels[m];
      const own = k.reductions.length && !contracts(k) ? 1 : rowUnit(k).unit;
      return lcm(u, own / gcd(own, per[x]));
    }, 1);
    const parts = Math.max(1, Math.floor(work / PART_WORK));
    chains.push({
      kernels: members,
      per,
      rows,
      split: { unit, chunk: rows, parts, pieces: PIECES },
    });
  }
  return chains;
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
const lcm = (a: number, b: number) => (a / gcd(a, b)) * b;

/**
 * Element-operations of a kernel that gains from the threads however short the run around it,
 * about 0.1 ms on one thread: a program with one is not presumed single-threaded for its short
 * runs (see `ALONE_MS` in `warm_up.ts`), its tuner decides in the warm-up. mlp's 8 × 784 × 256
 * layer (9.6M) ran 0.13-0.17 ms a run alone and 0.08-0.09 threaded on the 16-core host, where the
 * presumption kept its first 32 runs alone: medians of runs 4-63 there, four processes each,
 * 0.116-0.257 ms presumed and 0.099-0.174 decided (2 cores: 0.16-0.26 against 0.14-0.17).
 * lenet's largest kernel (5.8M) and the other small models' (under 5M) stay presumed: letting
 * the tuner decide for every short program slowed mobile_block and llama_dynamo's early runs.
 */
export const SPLIT_PAYS: number = 1 << 23;
