/**
 * The f16 matmul on a GPU's matrix units (tensor cores), through WGSL's subgroup matrices (Dawn's
 * `chromium-experimental-subgroup-matrix`): a workgroup of `sm`×`sn` subgroups of 32 computes a
 * TM×TN output tile, each subgroup `fm`×`fn` result matrices of 16×16 held in f32 (f16 products
 * summed in f32, as the precision policy promises). K advances two multiplies' K at a time (twice
 * that for products of few rows, {@linkcode FEW_ROWS}): the threads fill tiles of both operands in
 * workgroup memory (`matrix_fills.ts`), each laid out like its operand in memory (rows of K where K
 * is contiguous, rows of M or N otherwise) so that consecutive threads read and store consecutive
 * halves, four at a time as one `vec4<f16>` where the operand is aligned, at offsets worked out
 * once from the operand's affine view (transposed, broadcast and batched operands alike); then each
 * subgroup loads its left and right matrices from them and multiplies, while the next step's
 * operands travel into registers. On the H200 (device time, `bench/gpu_kernels.ts --only matmul
 * --half`) these fills took matmul 4096 from 67.6 to 121 TFLOP/s (casts included; the product alone
 * 128), where an element at a time through the generic index code had bounded the kernel.
 * The epilogue (`matrix_epilogue.ts`) runs per output, or per four along N where the outputs are
 * stored in aligned fours: each result matrix goes through a 16×16 slice of workgroup memory that
 * the subgroup's own threads read back, calling the kernel's epilogue helper.
 *
 * It applies to f16 matmuls (an f16 sum of products of two f16 loads, affine views of their
 * inputs: convolutions' patches stay on the tiled kernel) that the tiled kernel takes, and whose
 * tiles fill the GPU, on a device that lists the feature with a 16×16×16 f16 → f32 configuration and
 * subgroups of exactly 32 (the tile's subgroups are counted in 32s); elsewhere the tiled kernel
 * runs them. Quantized products over bytes (a u8 activation by i8 weights summed in i32, as
 * `byte_tiles.ts` takes them) run the same way on a 16×16×32 i8 → i32 configuration, exact: the
 * u8 operand's bytes enter less 128, and 128 times the i8 operand's sums along K, themselves
 * summed on the units by a matrix of ones, are added back in the epilogue. CI's software adapter
 * has no matrix units: the kernels are generated and checked there as text, and run against
 * float64 on the H200 by `bench/gpu_kernels.ts --only matmul` (its f16 rows; the tiled kernel's
 * f16 beside them) and, over bytes, against the reference by `bench/byte_matrices_check.ts`.
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import { type KernelIR, type Load, sumsHalfProducts } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { KernelLowering } from "./expr.ts";
import { emitEpilogues } from "./matrix_epilogue.ts";
import { fillingShape, type MatmulTile, type MatrixShape, tileOf } from "./tile_shapes.ts";
import {
  BYTES,
  type Fill,
  HALVES,
  type MatrixElement,
  PAD_BYTES,
  tileFill,
} from "./matrix_fills.ts";
import { quadAligned, readOnce } from "./quads.ts";

/** A result matrix's rows and columns. */
const MK = 16;

/** Multiplies a step through workgroup memory (twice as many for few rows). */
const STEP_MULTIPLIES = 2;

/** How `tile`'s operands are held: bytes for a product over bytes, halves otherwise. */
function elementOf(tile: Pick<MatmulTile, "bytes">): MatrixElement {
  return tile.bytes ? BYTES : HALVES;
}

/**
 * Matrix tile shapes, largest first, as tiles of the tiled kernel's kind (`threads` × `per`
 * giving the same output tile, `threads` the workgroup's invocations, 32 along x: Dawn requires
 * the x size to be a multiple of the subgroup size in a kernel with subgroup matrices): 128×128
 * in 8 subgroups of 32×64, 64×64 in 4 of 32×32, 64×32 in 4 of 32×16, 32×32 in 4 of 16×16.
 * Measured against the first at 4096 on the H200 (same call): 128×256 in 8 subgroups of 64×64
 * 114 TFLOP/s, 256×128 102, 128×128 in 4 subgroups of 64×64 95, K steps of 64 92 and of 16 98,
 * against 128. 64×32 (session 79, device time, processes alternating) took ResNet-50 b8's f16
 * stage-3 3×3 convolutions from 0.222 to 0.204 ms (four) and its 512 → 128 1×1 ones from 0.090
 * to 0.078 (three), but ViT-B/16's Q, K and V product (197 rows in tiles of 64, 1.14× the least
 * cover) from 0.304 to 0.444 ms, and 32×64 ResNet's 1024 → 256 1×1 ones from 0.158 to 0.229:
 * 64×32 stands where its tiles cover at most `waste` times the least, and 32×64 is not a shape.
 * So, against none (session 79, alternating processes): ResNet-50 b8 f16 2.587 → 2.515-2.554
 * ms, BERT-base 1.464-1.473 → 1.454-1.455, ViT-B/16 the same (2.33).
 */
const SHAPES: readonly (Pick<MatmulTile, "threads" | "per"> & {
  matrix: Omit<MatrixShape, "tk">;
  waste?: number;
})[] = [
  { threads: [32, 8], per: [16, 4], matrix: { sm: 4, sn: 2, fm: 2, fn: 4 } },
  { threads: [32, 4], per: [16, 2], matrix: { sm: 2, sn: 2, fm: 2, fn: 2 } },
  { threads: [32, 4], per: [16, 1], matrix: { sm: 2, sn: 2, fm: 2, fn: 1 }, waste: 1.1 },
  { threads: [32, 4], per: [8, 1], matrix: { sm: 2, sn: 2, fm: 1, fn: 1 } },
];

/**
 * Rows (M of one product) at most for which the 32×32 shape steps twice the K: half the steps,
 * each a subgroup's four multiplies. BERT-base's f16 products (128 tokens: Q, K and V joined, the
 * MLP's, its K = 3072 in parts) took the model from 1.98-2.00 to 1.85 ms of device time on the
 * H200 (three rounds, trees alternating, `bench/profile_model.ts`); ViT-B/16's (197 tokens) took
 * it from 2.75 to 2.99 ms (two rounds), and ResNet-50's f16 convolutions at batch 8 (rows of
 * patches, 392 or more) measured within the noise or slower (0.056 → 0.068 ms for a 3×3).
 */
const FEW_ROWS = 128;

/**
 * Fewest result matrices a subgroup holds for a product over bytes to take the matrix units: each
 * step also multiplies by the matrix of ones, `fn` of `fm·fn + fn` multiplies (half of a 32×32
 * tile's, a third of a 64×64 one's). On the H200 (device time, `bench/gpu_kernels.ts --only
 * linear`, session 70) the int8 product 1024×3072×768 took 0.123 ms on 32×32 matrix tiles against
 * 0.094 on dot4I8Packed tiles, and 1024×768×3072 on 64×64 ones 0.073 against 0.082.
 */
const BYTE_RESULTS = 4;

/**
 * Workgroups a matrix tile shape should yield before it is chosen over a smaller one. At 64
 * (H200, 2026-11-30) BERT-base's f16 products of 768 outputs took 32×32 matrix tiles and ran as
 * fast as on the tiled kernel (0.064 against 0.065 ms); their K summed in parts fills the GPU.
 * ResNet-50's f16 convolutions at batch 8 and the end-to-end runs measured 128 and 64 within the
 * machine's noise of 256.
 */
const FILL = 256;

/**
 * Subgroups along K of an f16 product whose tiles are too few to fill the GPU, each summing its
 * quarter of every step's K for the whole 32×32 tile (`MatmulTile.slices`), the parts added in
 * the epilogue: a product of 768 outputs at 128 tokens makes 96 such tiles. The workgroup is 512
 * invocations, past WebGPU's default limit (the backend asks for the adapter's): on the H200
 * 128 × 768 → 768 took 0.0119 ms so, 0.0205 on the tiled kernel (device time, session 75).
 */
const SPLIT = 4;

/** Fewest 32×32 tiles a product splits K for on the matrix units (fewer: the tiled kernel). */
const SPLIT_TILES = 32;

/**
 * Most K of a product whose matrix tile is the smallest shape that fills the GPU, not the largest:
 * its two steps of K leave the tile's time to its epilogue, a result matrix at a time through
 * `stage`, and larger tiles queue more of them behind fewer workgroups. On the H200 ResNet-50 b8's
 * f16 stage-2 1×1 convolutions that add the residual (64 → 256 channels, 400 tiles of 128×128)
 * took 0.115 ms each, the same one without the residual 0.051.
 */
const SHALLOW = 64;

/**
 * `tile` (the tiled kernel's choice for `kernel`, without K slices) as a matrix tile of at most
 * `most` threads and `bytes` of workgroup memory, where the kernel is an f16 matmul or the tile a
 * product over bytes (the caller knows which the device runs on its units): the largest
 * shape (the smallest, for a shallow K) that yields {@linkcode FILL} workgroups without passing
 * the product's edge much (`fillingShape`). Where no shape fills, an f16 product of enough tiles
 * and K splits K among a 32×32 tile's subgroups ({@linkcode SPLIT}); others get none and the
 * tiled kernel splits K (on the H200 ResNet-50 b8 in f16 took 48.5 ms with every convolution on
 * matrix tiles, its deep ones 56-98 tiles of 32×32, against 16.5 tiled).
 */
export function matrixTile(
  kernel: KernelIR,
  tile: MatmulTile,
  most: number,
  bytes: number,
): MatmulTile | undefined {
  if (!tile.bytes && !sumsHalfProducts(kernel)) return undefined;
  const element = elementOf(tile);
  const stepped = (tk: number) => (s: typeof SHAPES[number]) => ({
    ...s,
    slices: 1,
    matrix: { ...s.matrix, tk },
  });
  const fit = SHAPES.map(stepped(STEP_MULTIPLIES * element.mk)).filter((s) =>
    s.threads[0] * s.threads[1] <= most && tileBytes(s, element) <= bytes &&
    s.matrix.fm * s.matrix.fn >= (element === BYTES ? BYTE_RESULTS : 1)
  );
  if (tile.slices !== 1 || !fit.length) return undefined;
  // Affine operands only: a convolution's gathered patches, an element at a time through some
  // 20 lines of index code, kept ResNet-50's f16 at batch 8 at 16.6 ms on the H200 (the tiled
  // kernel's f16 took 16.5) and took its compile from 3.7 to 13.3 s.
  const space = kernel.space;
  if (
    [tile.a, tile.b].some((op) => !affineOffset(op.steps, space, kernel.inputs[op.input].shape))
  ) {
    return undefined;
  }
  const batch = sizeOf(kernel.space.slice(0, tile.nb));
  const tiles = (tm: number, tn: number) => batch * Math.ceil(tile.m / tm) * Math.ceil(tile.n / tn);
  // Too few tiles leave matrix units idle where the tiled kernel splits K among slices instead.
  // A shallow K is mostly its epilogue: the smallest tiles keep the most of them in flight.
  const order = tile.k <= SHALLOW ? [...fit].reverse() : fit;
  const shape = fillingShape(order, tile.m, tile.n, tiles, FILL);
  if (!shape) {
    // Too few tiles for the units to fill the GPU: the smallest, its K split among subgroups.
    const split = { ...fit[fit.length - 1], slices: SPLIT };
    const enough = tiles(...tileOf(split)) >= SPLIT_TILES && tile.k >= 2 * SPLIT * split.matrix.tk;
    const fits = split.threads[0] * split.threads[1] * SPLIT <= most &&
      tileBytes(split, element) <= bytes;
    return element === HALVES && enough && fits ? { ...tile, ...split } : undefined;
  }
  const deep = stepped(2 * STEP_MULTIPLIES * element.mk)(shape);
  const few = shape.matrix.fm === 1 && tile.m <= FEW_ROWS && tileBytes(deep, element) <= bytes;
  const { threads, per, matrix } = few ? deep : shape;
  return { ...tile, threads, per, matrix, slices: 1 };
}

/**
 * Workgroup memory a shape's kernel may take at most: both tiles in either layout, and `stage`
 * (as large again in `tileA` for a product over bytes, which keeps its sums there after the steps).
 */
function tileBytes(
  shape: Pick<MatmulTile, "threads" | "per" | "matrix" | "slices">,
  element: MatrixElement,
): number {
  const [TM, TN] = tileOf(shape);
  const tk = shape.matrix!.tk * shape.slices;
  const pad = PAD_BYTES / element.size;
  const tile = (rows: number) => element.size * Math.max(rows * (tk + pad), tk * (rows + pad));
  const stage = stageLength(shape) * 4;
  return (element === BYTES ? Math.max(tile(TM), stage) : tile(TM)) + tile(TN) + stage;
}

/**
 * Elements of `stage`: a 16×16 result matrix per subgroup, or, where subgroups split K, every
 * result matrix of every subgroup.
 */
function stageLength(shape: Pick<MatmulTile, "threads" | "matrix" | "slices">): number {
  const subgroups = (shape.threads[0] * shape.threads[1] * shape.slices) / 32;
  const matrices = shape.slices > 1 ? shape.matrix!.fm * shape.matrix!.fn : 1;
  return subgroups * matrices * MK * MK;
}

/** The WGSL a matrix kernel needs enabled (after `enable f16` where it multiplies halves). */
export const MATRIX_ENABLES: readonly string[] = [
  "enable subgroups;",
  "enable chromium_experimental_subgroup_matrix;",
];

/** The builtins a matrix kernel's entry point takes besides the usual ones. */
export const MATRIX_BUILTINS =
  "@builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32";

/**
 * The operands a matrix tile reads as `vec4<f16>` arrays: each one whose load is aligned along its
 * contiguous axis (K, or its own M or N), a multiple of 4 long there, and the only read of its
 * input. Four halves a load and one offset for them: with every element's index worked out on its
 * own, the fills, not the matrix units, bounded the kernel.
 */
export function matrixVectors(kernel: KernelIR, tile: MatmulTile): Set<number> {
  const space = kernel.space;
  const kAx = space.length - 1;
  const along = (op: Load, ax: number) => {
    const shape = kernel.inputs[op.input].shape;
    const axis = affineOffset(op.steps, space, shape)?.weights[kAx] === 1 ? kAx : ax;
    return readOnce(kernel, op.input) && space[axis] % 4 === 0 &&
      quadAligned(op.steps, space, shape, axis);
  };
  const vectors = new Set<number>();
  if (along(tile.a, tile.nb)) vectors.add(tile.a.input);
  if (along(tile.b, tile.nb + 1)) vectors.add(tile.b.input);
  return vectors;
}

/**
 * The kernel body, the epilogue helper and the workgroup arrays of a matrix tile; its epilogue a
 * call a four outputs where `quads` (the layout's `quadEpilogue`). `vectors` are the kernel's vec4
 * inputs: its fills' (read by the product alone) and, with `quads`, its epilogue's.
 */
export function emitMatrixMatmul(
  l: KernelLowering,
  tile: MatmulTile,
  vectors: ReadonlySet<number>,
  quads = false,
): { helpers: string[]; decls: string[] } {
  const { sm, sn, fm, fn, tk } = tile.matrix!;
  const { nb, m: M, n: N, slices: S } = tile;
  const [TM, TN] = tileOf(tile);
  const threads = tile.threads[0] * tile.threads[1] * S;
  const [mAx, nAx] = [nb, nb + 1];
  const element = elementOf(tile);
  const e = l.e;
  for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
  e.line(`let t = i32(lid.y * ${tile.threads[0]}u + lid.x);`);
  e.line(`let m0 = i32(wid.y) * ${TM};`);
  e.line(`let n0 = i32(wid.x) * ${TN};`);
  l.unravel(l.coords.slice(0, nb).map((_, i) => i), "i32(wid.z)");
  // This subgroup's first row and column in the tile (and, K split, its part of a step's K).
  e.line(`let sgm = i32(sg) % ${sm} * ${fm * MK};`);
  e.line(`let sgn = i32(sg) / ${sm}${S > 1 ? ` % ${sn}` : ""} * ${fn * MK};`);
  if (S > 1) e.line(`let sgk = i32(sg) / ${sm * sn} * ${tk};`);
  const result = `subgroup_matrix_result<${element.result}, ${MK}, ${MK}>`;
  for (let i = 0; i < fm; i++) {
    for (let j = 0; j < fn; j++) e.line(`var acc_${i}_${j} = ${result}();`);
  }
  // A product over bytes: the i8 operand's sums along K, its columns' (or its rows').
  for (let s = 0; tile.bytes && s < (tile.bytes === "a" ? fn : fm); s++) {
    e.line(`var sums_${s} = ${result}();`);
  }
  const fill = (name: string, op: Load, ax: number, o0: string, bound: number, rows: number) =>
    tileFill(l, {
      name,
      op,
      ax,
      o0,
      bound,
      rows,
      threads,
      tk: tk * S,
      vector: vectors.has(op.input),
      element,
      unsigned: tile.bytes === (name === "tileA" ? "a" : "b"),
    });
  const fillA = fill("tileA", tile.a, mAx, "m0", M, TM);
  const fillB = fill("tileB", tile.b, nAx, "n0", N, TN);
  stepLoop(l, tile, fillA, fillB);
  const helpers = emitEpilogues(l, tile, quads ? vectors : undefined);
  // Tile lengths in their array's elements: halves, or words of four bytes. A product over
  // bytes keeps its sums in `tileA` after the steps: at least as long as `stage`.
  const words = (size: number) => element === BYTES ? size / 4 : size;
  const lengthA = element === BYTES ? Math.max(words(fillA.size), stageLength(tile)) : fillA.size;
  return {
    helpers,
    decls: [
      `var<workgroup> tileA: array<${element.array}, ${lengthA}>;`,
      `var<workgroup> tileB: array<${element.array}, ${words(fillB.size)}>;`,
      `var<workgroup> stage: array<${element.result}, ${stageLength(tile)}>;`,
    ],
  };
}

/**
 * The K steps: each step's tiles stored from registers, the next step's read into them while
 * the subgroups multiply this one (a barrier pair a step, as in the tiled kernel). A product over
 * bytes also multiplies its i8 operand's matrices by a matrix of ones: their sums along K.
 */
function stepLoop(l: KernelLowering, tile: MatmulTile, fillA: Fill, fillB: Fill): void {
  const { fm, fn } = tile.matrix!;
  const { component, mk } = elementOf(tile);
  // K a step: each subgroup's `tk`, times the subgroups along K (`sgk` is a subgroup's part).
  const tk = tile.matrix!.tk * tile.slices;
  const at = (kk: number) => tile.slices > 1 ? `sgk + ${kk}` : kk;
  const e = l.e;
  const load = (k0: string) => {
    fillA.load(k0);
    fillB.load(k0);
  };
  load("0");
  const left = `subgroup_matrix_left<${component}, ${mk}, ${MK}>`;
  const right = `subgroup_matrix_right<${component}, ${MK}, ${mk}>`;
  if (tile.bytes) e.line(`let ones = ${tile.bytes === "a" ? left : right}(1);`);
  const mac = (acc: string, a: string, b: string) =>
    e.line(`${acc} = subgroupMatrixMultiplyAccumulate(${a}, ${b}, ${acc});`);
  e.block(`for (var k0 = 0; k0 < ${tile.k}; k0 += ${tk}) {`, () => {
    fillA.store();
    fillB.store();
    e.line("workgroupBarrier();");
    e.block(`if (k0 + ${tk} < ${tile.k}) {`, () => load(`k0 + ${tk}`));
    for (let kk = 0; kk < tile.matrix!.tk; kk += mk) {
      for (let i = 0; i < fm; i++) {
        e.line(`let a${kk}_${i} = ${fillA.matrix(left, `sgm + ${i * MK}`, at(kk))};`);
        if (tile.bytes === "b") mac(`sums_${i}`, `a${kk}_${i}`, "ones");
      }
      for (let j = 0; j < fn; j++) {
        e.line(`let b${kk}_${j} = ${fillB.matrix(right, `sgn + ${j * MK}`, at(kk))};`);
        if (tile.bytes === "a") mac(`sums_${j}`, "ones", `b${kk}_${j}`);
        for (let i = 0; i < fm; i++) mac(`acc_${i}_${j}`, `a${kk}_${i}`, `b${kk}_${j}`);
      }
    }
    e.line("workgroupBarrier();");
  });
}
