/**
 * Tile shapes of WebGPU's matrix products: what a tile is (`MatmulTile`, its matrix-unit form
 * `MatrixShape`), the shapes the tiled kernel takes and the rule that picks one (enough
 * workgroups to fill the GPU, not much past the product's edge), K split in slices where the
 * tiles are too few, and a tile's workgroup memory. The kernels are `matmul.ts` (tiled) and
 * `matrix_matmul.ts` (matrix units).
 *
 * @module
 */
import type { MatmulOperands } from "../../jit/ir/kernel_ir.ts";

/** Tile rows (f32 values, or words of four bytes) consumed per step through workgroup memory. */
export const TK = 16;

/**
 * A matrix-unit tile (`shaders/wgsl/matrix_matmul.ts`): subgroups along M and N, and 16×16
 * result matrices each subgroup holds along M and N.
 */
export interface MatrixShape {
  /** Subgroups along M. */
  readonly sm: number;
  /** Subgroups along N. */
  readonly sn: number;
  /** Result matrices a subgroup holds along M. */
  readonly fm: number;
  /** Result matrices a subgroup holds along N. */
  readonly fn: number;
  /** K a step through workgroup memory: a multiple of the configuration's K (16, or 32 for bytes). */
  readonly tk: number;
}

/** A matmul's operands with its tile shape. */
export interface MatmulTile extends MatmulOperands {
  /** Threads along N and along M. */
  readonly threads: readonly [number, number];
  /** Outputs per thread along M and along N: multiples of 4. */
  readonly per: readonly [number, number];
  /**
   * Parts of K a workgroup splits among as many groups of `threads` (1: none): each group sums
   * its part into its own registers, and the first adds the others' through workgroup memory.
   */
  readonly slices: number;
  /** On the matrix units, in this shape (the threads and outputs a thread only size the tile). */
  readonly matrix?: MatrixShape;
  /**
   * A quantized product over bytes summed in i32 (`byte_tiles.ts`), and which operand holds its
   * u8 values (the other its i8 ones): each tile word holds four K values, summed by
   * `dot4I8Packed`.
   */
  readonly bytes?: "a" | "b";
}

/**
 * Tile shapes, largest first: 128×128 and 128×64 outputs, 8×8 per thread, 64×64 of 256 threads
 * (4×4 each), then 32×64 and 32×32 (4×4 each) for products of few rows. On the H200 (device
 * time, 2026-11-25) matmul 1024 — 256 tiles of 64×64 — ran at 17.0 TFLOP/s with 256 threads a
 * tile against 13.8 with 64; 32×128 tiles of 128 threads gave 16.8, the other 64×64 splits
 * 14.4–15.6. The small tiles (2026-11-26, same call, old and new alternating): ResNet-18's late
 * convolutions (M = 98 or 392 rows of patches) had made 16-28 tiles of 64×64 (the smallest then,
 * also in 64 threads of 8×8), or too few to tile at all, and ran 0.58-0.68 ms each; with 32×32
 * tiles the model's kernels took 4.98 ms a run against 6.62, ConvNeXt-T's (its late stages'
 * matmuls of 32 and 128 rows) 4.13 against 5.03.
 */
const SHAPES: readonly Pick<MatmulTile, "threads" | "per">[] = [
  { threads: [16, 16], per: [8, 8] },
  { threads: [8, 16], per: [8, 8] },
  { threads: [16, 16], per: [4, 4] },
  { threads: [16, 8], per: [4, 4] },
  { threads: [8, 8], per: [4, 4] },
];

/**
 * Workgroups a tile shape should yield before it is chosen over a smaller one: about two per
 * compute unit of a large GPU (an H200 has 132), so none idles while the last wave runs.
 */
const FILL = 256;

/**
 * The tile shape for a matmul of `m` × `n` outputs (a batch) in `tiles(rows, cols)` tiles of each
 * size, in workgroups of at most `most` threads: the largest that yields `FILL` workgroups
 * without passing the product's edge much (see {@linkcode fillingShape}), else the smallest.
 */
export function tileShape(
  m: number,
  n: number,
  tiles: (rows: number, cols: number) => number,
  most: number,
): Pick<MatmulTile, "threads" | "per"> | undefined {
  const fit = SHAPES.filter((s) => s.threads[0] * s.threads[1] <= most);
  return fillingShape(fit, m, n, tiles, FILL) ?? fit[fit.length - 1];
}

/**
 * How much more output a shape's tiles may cover than the least cover among the shapes that fill
 * the GPU. ResNet-50's stem (64 output channels) took 128×128 tiles, half of each past the
 * product's columns. H200, batch 8, warm walls interleaved in one process (medians of five
 * rounds): in f16 (matrix tiles) its convolution took 0.123 ms, on 64×64 tiles 0.096, the model
 * 3.42 → 3.23 ms; in f32 (tiled, and the stage-5 convolutions' 49 pixels on 64×64 tiles rather
 * than 128×64) the model 5.05 → 4.92 ms. Larger tiles do more with each value they load, so a
 * modest excess stands (ViT's 197 tokens cover 1.3× theirs in tiles of 128 rows).
 */
const WASTE = 1.5;

/**
 * The first of `shapes` (largest first, or in the order the caller prefers) that yields `fill`
 * workgroups of an `m` × `n` product and whose tiles cover at most {@linkcode WASTE} times the
 * least cover of those that do (or its own `waste`); `undefined` where none fills.
 */
export function fillingShape<S extends Pick<MatmulTile, "threads" | "per"> & { waste?: number }>(
  shapes: readonly S[],
  m: number,
  n: number,
  tiles: (rows: number, cols: number) => number,
  fill: number,
): S | undefined {
  const filling = shapes.filter((s) => tiles(...tileOf(s)) >= fill);
  const cover = (s: S) => {
    const [tm, tn] = tileOf(s);
    return Math.ceil(m / tm) * tm * Math.ceil(n / tn) * tn;
  };
  const least = Math.min(...filling.map(cover));
  return filling.find((s) => cover(s) <= least * (s.waste ?? WASTE));
}

/**
 * Threads a matmul should keep in flight before its tiles stop splitting K: `FILL` workgroups of
 * 256. Counting workgroups alone left deep, narrow products latency-bound: ResNet-50's stage-5
 * 3×3 convolutions at batch 8 (49 patches by 512 channels by K = 4608) made 256 tiles of 64
 * threads, 16K threads on a GPU that holds 270K, and ran at 0.8 TFLOP/s where a stage-2 one
 * with 100K threads ran at 5.6 (H200, device time, 2026-11-29).
 */
const FILL_THREADS = FILL * 256;

/**
 * K slices for a tile of `shape` that yields `count` workgroups over a K of `k`: none where the
 * workgroups' threads fill the GPU; else up to 4, as the workgroup's `most` threads, its `bytes`
 * of workgroup memory and K (at least two steps a slice, of `perWord` K values a tile word) allow.
 */
export function sliceCount(
  shape: Pick<MatmulTile, "threads" | "per">,
  count: number,
  k: number,
  most: number,
  bytes: number,
  perWord = 1,
): number {
  const threads = shape.threads[0] * shape.threads[1];
  let slices = 1;
  while (
    slices < 4 && count * threads * slices < FILL_THREADS && k >= 2 * TK * perWord * 2 * slices &&
    threads * 2 * slices <= most &&
    tileBytes({ ...shape, slices: 2 * slices }) <= bytes
  ) slices *= 2;
  return slices;
}

/**
 * Workgroup memory of a tile: its slices' operand tiles (each row padded by a vec4, as it may
 * be: see `emitTiledMatmul`) and the partial sums they hand over.
 */
export function tileBytes(tile: Pick<MatmulTile, "threads" | "per" | "slices">): number {
  const [TM, TN] = tileOf(tile);
  return 4 * (tile.slices * TK * (TM + TN + 8) + (tile.slices - 1) * TM * TN);
}

/** Output rows and columns of one tile. */
export function tileOf(tile: Pick<MatmulTile, "threads" | "per">): [number, number] {
  return [tile.threads[1] * tile.per[0], tile.threads[0] * tile.per[1]];
}
