/**
 * The f16 matmul on a GPU's matrix units (tensor cores), through WGSL's subgroup matrices
 * (Dawn's `chromium-experimental-subgroup-matrix`): a workgroup of `sm`×`sn` subgroups of 32
 * computes a TM×TN output tile, each subgroup `fm`×`fn` result matrices of 16×16 held in f32 (f16
 * products summed in f32, as the precision policy promises). K advances {@linkcode TK} at a time:
 * the threads fill f16 tiles of both operands in workgroup memory through the generic index-map
 * code (so transposed, broadcast and batched operands work as in the tiled kernel), then each
 * subgroup loads its left and right matrices from them and multiplies, while the next step's
 * operands travel into registers.
 * The epilogue runs per output: each result matrix goes through a 16×16 slice of workgroup memory
 * that the subgroup's own threads read back, calling the same epilogue helper as the tiled kernel.
 *
 * It applies to f16 matmuls (an f16 sum of products of two f16 loads, affine views of their
 * inputs: convolutions' patches stay on the tiled kernel) that the tiled kernel takes, and whose
 * tiles fill the GPU, on a device that lists the feature with a 16×16×16 f16 → f32 configuration and
 * subgroups of exactly 32 (the tile's subgroups are counted in 32s); elsewhere the tiled kernel
 * runs them. CI's software adapter has no matrix units: the kernels are generated and checked
 * there as text, and run against float64 on the H200 by `bench/gpu_kernels.ts --only matmul`
 * (its f16 rows; the tiled kernel's f16 beside them).
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import { type KernelIR, type Load, sumsHalfProducts } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { KernelLowering } from "./expr.ts";
import { epilogueHelper, type MatmulTile, type MatrixShape, tileOf } from "./matmul.ts";
import { allOf } from "./prelude.ts";

/** A result matrix's rows, columns and K (the 16×16×16 configuration). */
const MK = 16;

/** K a step through workgroup memory: two matrix multiplies a step. */
const TK = 32;

/** f16 elements a tile row is padded by: rows start 16 bytes apart from the banks' pattern. */
const PAD = 8;

/**
 * Matrix tile shapes, largest first, as tiles of the tiled kernel's kind (`threads` × `per`
 * giving the same output tile, `threads` the workgroup's invocations, 32 along x: Dawn requires
 * the x size to be a multiple of the subgroup size in a kernel with subgroup matrices): 128×128
 * in 8 subgroups of 32×64, 64×64 in 4 of 32×32, 32×32 in 4 of 16×16.
 */
const SHAPES: readonly (Pick<MatmulTile, "threads" | "per"> & { matrix: MatrixShape })[] = [
  { threads: [32, 8], per: [16, 4], matrix: { sm: 4, sn: 2, fm: 2, fn: 4 } },
  { threads: [32, 4], per: [16, 2], matrix: { sm: 2, sn: 2, fm: 2, fn: 2 } },
  { threads: [32, 4], per: [8, 1], matrix: { sm: 2, sn: 2, fm: 1, fn: 1 } },
];

/** Workgroups a matrix tile shape should yield before it is chosen over a smaller one. */
const FILL = 256;

/**
 * `tile` (the tiled kernel's choice for `kernel`, without K slices) as a matrix tile of at most
 * `most` threads, where the kernel is an f16 matmul: the largest shape that yields
 * {@linkcode FILL} workgroups, none where no shape does: the tiled kernel splits K there (on the
 * H200 ResNet-50 b8 in f16 took 48.5 ms with every convolution on matrix tiles, its deep ones
 * 56-98 tiles of 32×32, against 16.5 tiled).
 */
export function matrixTile(
  kernel: KernelIR,
  tile: MatmulTile,
  most: number,
): MatmulTile | undefined {
  const fit = SHAPES.filter((s) => s.threads[0] * s.threads[1] <= most);
  if (!sumsHalfProducts(kernel) || tile.slices !== 1 || !fit.length) return undefined;
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
  const tiles = ([tm, tn]: [number, number]) =>
    batch * Math.ceil(tile.m / tm) * Math.ceil(tile.n / tn);
  // Too few tiles leave matrix units idle where the tiled kernel splits K among slices instead.
  const shape = fit.find((s) => tiles(tileOf(s)) >= FILL);
  if (!shape) return undefined;
  return { ...tile, threads: shape.threads, per: shape.per, matrix: shape.matrix };
}

/** The WGSL a matrix kernel needs enabled, after `enable f16`. */
export const MATRIX_ENABLES: readonly string[] = [
  "enable subgroups;",
  "enable chromium_experimental_subgroup_matrix;",
];

/** The builtins a matrix kernel's entry point takes besides the usual ones. */
export const MATRIX_BUILTINS =
  "@builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32";

/** The kernel body, the epilogue helper and the workgroup arrays of a matrix tile. */
export function emitMatrixMatmul(
  l: KernelLowering,
  tile: MatmulTile,
): { helpers: string[]; decls: string[] } {
  const { sm, fm, fn } = tile.matrix!;
  const { nb, m: M, n: N, k: K } = tile;
  const [TM, TN] = tileOf(tile);
  const threads = tile.threads[0] * tile.threads[1];
  const [mAx, nAx] = [nb, nb + 1];
  const e = l.e;
  for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
  e.line(`let t = i32(lid.y * ${tile.threads[0]}u + lid.x);`);
  e.line(`let m0 = i32(wid.y) * ${TM};`);
  e.line(`let n0 = i32(wid.x) * ${TN};`);
  l.unravel(l.coords.slice(0, nb).map((_, i) => i), "i32(wid.z)");
  // This subgroup's first row and column in the tile.
  e.line(`let sgm = i32(sg) % ${sm} * ${fm * MK};`);
  e.line(`let sgn = i32(sg) / ${sm} * ${fn * MK};`);
  for (let i = 0; i < fm; i++) {
    for (let j = 0; j < fn; j++) {
      e.line(`var acc_${i}_${j} = subgroup_matrix_result<f32, ${MK}, ${MK}>();`);
    }
  }
  const whole = K % TK === 0;
  const fill = (name: string, op: Load, ax: number, o0: string, bound: number, rows: number) =>
    tileFill(l, { name, op, ax, o0, bound, rows, threads, whole, stride: rows + PAD });
  const fillA = fill("tileA", tile.a, mAx, "m0", M, TM);
  const fillB = fill("tileB", tile.b, nAx, "n0", N, TN);
  stepLoop(l, tile, fillA, fillB);
  resultEpilogues(l, tile);
  return {
    helpers: epilogueHelper({ l, M, N, mAx, nAx, x: l.coords }),
    decls: [
      `var<workgroup> tileA: array<f16, ${TK * (TM + PAD)}>;`,
      `var<workgroup> tileB: array<f16, ${TK * (TN + PAD)}>;`,
      `var<workgroup> stage: array<f32, ${(threads / 32) * MK * MK}>;`,
    ],
  };
}

/**
 * The K steps: each step's tiles stored from registers, the next step's read into them while
 * the subgroups multiply this one (a barrier pair a step, as in the tiled kernel).
 */
function stepLoop(l: KernelLowering, tile: MatmulTile, fillA: Fill, fillB: Fill): void {
  const { fm, fn } = tile.matrix!;
  const [TM, TN] = tileOf(tile);
  const { e, coords: x } = l;
  const [mAx, nAx] = [tile.nb, tile.nb + 1];
  const load = (k0: string) => {
    e.line(`${x[nAx]} = 0;`);
    fillA.load(k0);
    e.line(`${x[mAx]} = 0;`);
    fillB.load(k0);
  };
  load("0");
  // Both tiles k-major (a row of M or N a K): the left matrices are read column-major.
  const [SA, SB] = [TM + PAD, TN + PAD];
  const left = `subgroup_matrix_left<f16, ${MK}, ${MK}>`;
  const right = `subgroup_matrix_right<f16, ${MK}, ${MK}>`;
  e.block(`for (var k0 = 0; k0 < ${tile.k}; k0 += ${TK}) {`, () => {
    fillA.store();
    fillB.store();
    e.line("workgroupBarrier();");
    e.block(`if (k0 + ${TK} < ${tile.k}) {`, () => load(`k0 + ${TK}`));
    for (let kk = 0; kk < TK; kk += MK) {
      for (let i = 0; i < fm; i++) {
        const at = `u32(${kk * SA} + sgm + ${i * MK})`;
        e.line(`let a${kk}_${i} = subgroupMatrixLoad<${left}, col_major>(&tileA, ${at}, ${SA}u);`);
      }
      for (let j = 0; j < fn; j++) {
        const at = `u32(${kk * SB} + sgn + ${j * MK})`;
        e.line(`let b${kk}_${j} = subgroupMatrixLoad<${right}, row_major>(&tileB, ${at}, ${SB}u);`);
        for (let i = 0; i < fm; i++) {
          const acc = `acc_${i}_${j}`;
          e.line(`${acc} = subgroupMatrixMultiplyAccumulate(a${kk}_${i}, b${kk}_${j}, ${acc});`);
        }
      }
    }
    e.line("workgroupBarrier();");
  });
}

/**
 * Each result matrix through the subgroup's 16×16 slice of `stage`, read back by the subgroup's
 * own threads, its elements to the epilogue.
 */
function resultEpilogues(l: KernelLowering, tile: MatmulTile): void {
  const { fm, fn } = tile.matrix!;
  const batch = l.coords.slice(0, tile.nb);
  const e = l.e;
  for (let i = 0; i < fm; i++) {
    for (let j = 0; j < fn; j++) {
      e.line(`subgroupMatrixStore<row_major>(&stage, sg * ${MK * MK}u, acc_${i}_${j}, ${MK}u);`);
      e.line("workgroupBarrier();");
      e.block(`for (var q = lane; q < ${MK * MK}u; q += 32u) {`, () => {
        const m = `m0 + sgm + ${i * MK} + i32(q / ${MK}u)`;
        const n = `n0 + sgn + ${j * MK} + i32(q % ${MK}u)`;
        e.line(`epilogue(${[...batch, m, n, "0"].join(", ")}, stage[sg * ${MK * MK}u + q]);`);
      });
      e.line("workgroupBarrier();");
    }
  }
}

/** An operand tile's fill: `load(k0)` reads a step into registers, `store()` puts it in the tile. */
interface Fill {
  load(k0: string): void;
  store(): void;
}

/**
 * The fill of `name`, an f16 tile of {@linkcode TK} rows of K, each `rows` wide (the operand's M
 * or N from `o0`) and `stride` apart: `rows · TK / threads` elements a thread, held in registers
 * `${name}_r` between `load` and `store`, consecutive threads along the operand's contiguous axis,
 * zero past `bound` and K (where the shape is not whole).
 */
function tileFill(
  l: KernelLowering,
  o: {
    name: string;
    op: Load;
    ax: number;
    o0: string;
    bound: number;
    rows: number;
    threads: number;
    whole: boolean;
    stride: number;
  },
): Fill {
  const { e, coords: x, kernel } = l;
  const kAx = kernel.space.length - 1;
  const K = kernel.space[kAx];
  const access = affineOffset(o.op.steps, kernel.space, kernel.inputs[o.op.input].shape);
  const alongK = access !== undefined && access.weights[kAx] === 1;
  const count = (o.rows * TK) / o.threads;
  const guarded = !(o.whole && o.bound % o.rows === 0);
  const regs = `${o.name}_r`;
  e.line(`var ${regs}: array<f16, ${count}>;`);
  // Element `p` of this thread: its row `r` (of M or N) and its K `kq` in the step.
  const place = () =>
    e.line(
      alongK
        ? `let s = t + p * ${o.threads}; let kq = s % ${TK}; let r = s / ${TK};`
        : `let s = t + p * ${o.threads}; let r = s % ${o.rows}; let kq = s / ${o.rows};`,
    );
  const load = (k0: string) =>
    e.block(`for (var p = 0; p < ${count}; p++) {`, () => {
      place();
      e.line(`${x[kAx]} = ${k0} + kq;`);
      e.line(`${x[o.ax]} = ${o.o0} + r;`);
      const fill = () => e.line(`${regs}[p] = f16(${l.value(o.op, new Map())});`);
      if (!guarded) return fill();
      e.block(`if (${allOf(`${x[o.ax]} < ${o.bound}`, `${x[kAx]} < ${K}`)}) {`, fill);
      e.block("else {", () => e.line(`${regs}[p] = f16(0.0);`));
    });
  const store = () =>
    e.block(`for (var p = 0; p < ${count}; p++) {`, () => {
      place();
      e.line(`${o.name}[kq * ${o.stride} + r] = ${regs}[p];`);
    });
  return { load, store };
}
