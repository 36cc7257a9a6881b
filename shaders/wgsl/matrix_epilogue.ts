/**
 * The epilogues of a matrix kernel (`matrix_matmul.ts`): each result matrix through workgroup
 * memory (`stage`) to the kernel's own epilogue helper, a call an output, or, where the outputs
 * lie in aligned fours along the axis they run on, a call a four ({@linkcode quadEpilogue}).
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import { type Expr, type KernelIR, walk } from "../../jit/ir/kernel_ir.ts";
import { KernelLowering, rounded } from "./expr.ts";
import { Emitter } from "./emit.ts";
import { epilogueHelper, LOOPED_EPILOGUE } from "./matmul.ts";
import { allOf } from "./prelude.ts";
import { quadAligned, quadInputs, storeLanes, vectorLanes } from "./quads.ts";
import { type MatmulTile, tileOf } from "./tile_shapes.ts";

/** A result matrix's rows and columns. */
const MK = 16;

/** How a tile's results reach its epilogue. */
interface EpilogueForm {
  /** Each thread's calls written out (a short epilogue), not a loop. */
  readonly unrolled: boolean;
  /** The outputs run down M: results stored to `stage` by columns. */
  readonly columns: boolean;
  /** Four outputs a call along the axis they run on (`quadEpilogue`). */
  readonly quads: boolean;
}

/**
 * The epilogue helper and the calls after the K steps of a matrix tile: a call a four where
 * `quads` (the inputs it reads as vec4s: {@linkcode quadEpilogue}) is given, else a call an output.
 */
export function emitEpilogues(
  l: KernelLowering,
  tile: MatmulTile,
  quads: ReadonlySet<number> | undefined,
): string[] {
  const { nb, m: M, n: N } = tile;
  const [mAx, nAx] = [nb, nb + 1];
  const sum = tile.bytes ? "i32" : "f32";
  const T = { l, M, N, mAx, nAx, x: l.coords, sum };
  const columns = storesDown(l.kernel, mAx, nAx);
  const helpers = quads ? quadHelper(T, quads, columns ? mAx : nAx) : epilogueHelper(T);
  if (tile.slices > 1) splitEpilogues(l, tile, columns);
  else {
    const form = { unrolled: helpers.length <= LOOPED_EPILOGUE, columns, quads: !!quads };
    resultEpilogues(l, tile, form);
  }
  return helpers;
}

/**
 * The inputs a matrix tile's epilogue reads as vec4s where it takes its outputs four at a time:
 * an f16 product (no split K) whose every output is stored in aligned fours along N (rows of a
 * product, NCHW planes of a 1×1 convolution's pixels), or along M where its outputs run down its
 * rows (`storesDown`: a 3×3 convolution's pixels), that axis a multiple of 4. Each call then loads
 * a residual as one vec4 and stores four halves at once where it had computed every element's
 * index and moved two bytes at a time: on the H200 (device time, session 79) ResNet-50 b8's
 * f16 1×1 convolutions that add the residual took 0.147 ms against 0.220 (stage 2, four), 0.106
 * against 0.164 (stage 3), 0.177 against 0.226 (stage 4, six), the model 2.60-2.64 ms against
 * 2.80-2.86 (its f32 form 4.33); four rows a call down M took it on to 2.58-2.61 against
 * 2.66-2.68 (the stage-4 3×3 convolutions' partial sums 0.344 → 0.324 ms). Only a short
 * epilogue (one a call an output would write out, `LOOPED_EPILOGUE`): four lanes make its code
 * four times as long. `undefined` where the tile keeps a call an output; the set holds the
 * epilogue's loads that are aligned fours too (none read by the product).
 */
export function quadEpilogue(kernel: KernelIR, tile: MatmulTile): Set<number> | undefined {
  const [mAx, nAx] = [tile.nb, tile.nb + 1];
  const down = storesDown(kernel, mAx, nAx);
  const [axis, extent] = down ? [mAx, tile.m] : [nAx, tile.n];
  if (!tile.matrix || tile.bytes || tile.slices > 1 || extent % 4 !== 0) return undefined;
  const aligned = kernel.outputs.every((o) =>
    o.combine || quadAligned(o.steps, kernel.space, o.shape, axis)
  );
  if (!aligned) return undefined;
  const l = new KernelLowering(kernel, { half: true });
  const T = { l, M: tile.m, N: tile.n, mAx, nAx, x: l.coords };
  if (epilogueHelper(T).length > LOOPED_EPILOGUE) return undefined;
  const product = new Set<number>();
  for (const r of kernel.reductions) {
    walk(r.expr, (x) => x.kind === "load" && product.add(x.input));
  }
  const quads = quadInputs(kernel, kernel.outputs.map((o) => o.expr), axis);
  return new Set([...quads].filter((i) => !product.has(i)));
}

/**
 * The epilogue helper of four outputs along `axis` (N, or M down the rows): `epilogue(coords…,
 * sums: vec4<f32>)` at the first of them, each sum rounded once to the product's dtype, the
 * outputs stored as vec4s.
 */
function quadHelper(
  T: { l: KernelLowering; M: number; N: number; mAx: number; nAx: number; x: readonly string[] },
  vectors: ReadonlySet<number>,
  axis: number,
): string[] {
  const { l, M, N, mAx, nAx, x } = T;
  const main = l.e;
  l.e = new Emitter();
  const dtype = l.kernel.reductions[0].dtype;
  const sums = new Set<Expr>();
  for (const o of l.kernel.outputs) walk(o.expr, (e) => e.kind === "acc" && sums.add(e));
  l.e.block(`if (${allOf(`${x[mAx]} < ${M}`, `${x[nAx]} < ${N}`)}) {`, () => {
    for (let j = 0; j < 4; j++) l.e.line(`let acc_${j} = ${rounded(`sums[${j}]`, dtype)};`);
    const seed = (j: number) => new Map([...sums].map((e) => [e, `acc_${j}`]));
    storeLanes(l, vectorLanes(l, axis, vectors, seed));
  });
  const helpers = [
    `fn epilogue(${x.map((c) => `${c}: i32`).join(", ")}, sums: vec4<f32>) {`,
    ...l.e.lines,
    "}",
  ];
  l.e = main;
  return helpers;
}

/**
 * Whether the kernel's outputs lie contiguous along the product's rows (M) rather than its
 * columns: a convolution whose rows are its patches' pixels stores NCHW, a pixel's channels a
 * plane apart. Its epilogue then hands consecutive threads consecutive rows, so that a subgroup's
 * stores fill whole 32-byte sectors instead of two bytes of 16 sectors each. On the H200 at batch
 * 8 in f16 (`bench/gpu_kernels.ts --only conv --half`, device time, session 78) ResNet-50's stem
 * took 0.131 → 0.108 ms, its stage-2 3×3 0.081 → 0.074, the strided 1×1 into stage 3 0.092 →
 * 0.078; its deeper convolutions, bound elsewhere, the same.
 */
export function storesDown(kernel: KernelIR, mAx: number, nAx: number): boolean {
  let down = 0;
  for (const o of kernel.outputs) {
    const weights = affineOffset(o.steps, kernel.space, o.shape)?.weights;
    if (weights?.[mAx] === 1 && weights[nAx] !== 1) down++;
    if (weights?.[nAx] === 1) down--;
  }
  return down > 0;
}

/**
 * Each result matrix through the subgroup's 16×16 slice of `stage`, read back by the subgroup's
 * own threads, its elements to the epilogue: a thread's eight calls written out where the
 * epilogue is short (`unrolled`), so that their loads (a residual's, a bias's) are in flight
 * together. In a loop, each call's loads waited for the one before: on the H200 ResNet-50 b8's
 * stage-2 1×1 convolutions with the residual added took 0.125 ms in f16 where the same
 * convolution without it took 0.051 (session 66, `bench/profile_model.ts --precision f16`).
 * A product over bytes first puts the sums its result matrices share (a column's, or a row's)
 * in the subgroup's slice of `tileA`, and adds 128 times them to each element.
 */
function resultEpilogues(l: KernelLowering, tile: MatmulTile, form: EpilogueForm): void {
  const { unrolled, columns, quads } = form;
  const { fm, fn } = tile.matrix!;
  const batch = l.coords.slice(0, tile.nb);
  const e = l.e;
  const slice = `sg * ${MK * MK}u`;
  // Stored by columns where the outputs run down M: element q is then row q % 16, column q / 16.
  const major = columns ? "col_major" : "row_major";
  const [down, across] = columns ? ["%", "/"] : ["/", "%"];
  const byColumns = tile.bytes === "a";
  for (let outer = 0; outer < (byColumns ? fn : fm); outer++) {
    if (tile.bytes) {
      e.line(`subgroupMatrixStore<${major}>(&tileA, ${slice}, sums_${outer}, ${MK}u);`);
    }
    for (let inner = 0; inner < (byColumns ? fm : fn); inner++) {
      const [i, j] = byColumns ? [inner, outer] : [outer, inner];
      e.line(`subgroupMatrixStore<${major}>(&stage, ${slice}, acc_${i}_${j}, ${MK}u);`);
      e.line("workgroupBarrier();");
      const sum = tile.bytes
        ? `stage[${slice} + q] + 128 * tileA[${slice} + q]`
        : `stage[${slice} + q]`;
      const call = () => {
        const m = `m0 + sgm + ${i * MK} + i32(q ${down} ${MK}u)`;
        const n = `n0 + sgn + ${j * MK} + i32(q ${across} ${MK}u)`;
        e.line(`epilogue(${[...batch, m, n, "0"].join(", ")}, ${sum});`);
      };
      // Four columns a call: quad q is row q / 4, columns 4·(q % 4) and the three after (by
      // columns: column q / 4, rows 4·(q % 4) and the three after, as `stage` holds them).
      const quad = () => {
        e.line(`let at = ${slice} + q / 4u * ${MK}u + q % 4u * 4u;`);
        const [fours, ones] = [`i32(q % 4u) * 4`, `i32(q / 4u)`];
        const m = `m0 + sgm + ${i * MK} + ${columns ? fours : ones}`;
        const n = `n0 + sgn + ${j * MK} + ${columns ? ones : fours}`;
        const sums = [0, 1, 2, 3].map((k) => `stage[at + ${k}u]`).join(", ");
        e.line(`epilogue(${[...batch, m, n, "0"].join(", ")}, vec4<f32>(${sums}));`);
      };
      for (let u = 0; quads && u < (MK * MK) / 4 / 32; u++) {
        e.block("{", () => {
          e.line(`let q = lane + ${32 * u}u;`);
          quad();
        });
      }
      if (!unrolled && !quads) e.block(`for (var q = lane; q < ${MK * MK}u; q += 32u) {`, call);
      for (let u = 0; unrolled && !quads && u < (MK * MK) / 32; u++) {
        e.block("{", () => {
          e.line(`let q = lane + ${32 * u}u;`);
          call();
        });
      }
      e.line("workgroupBarrier();");
    }
  }
}

/**
 * The epilogue of a tile whose subgroups split K: each subgroup's result matrices into its own
 * slices of `stage`, then every thread of the workgroup sums the parts of its outputs (the
 * subgroups' along K) and calls the epilogue on them, a loop over the tile's outputs.
 */
function splitEpilogues(l: KernelLowering, tile: MatmulTile, columns: boolean): void {
  const { sm, sn, fm, fn } = tile.matrix!;
  const [TM, TN] = tileOf(tile);
  const threads = tile.threads[0] * tile.threads[1] * tile.slices;
  const batch = l.coords.slice(0, tile.nb);
  const e = l.e;
  const major = columns ? "col_major" : "row_major";
  for (let i = 0; i < fm; i++) {
    for (let j = 0; j < fn; j++) {
      const at = `(sg * ${fm * fn}u + ${i * fn + j}u) * ${MK * MK}u`;
      e.line(`subgroupMatrixStore<${major}>(&stage, ${at}, acc_${i}_${j}, ${MK}u);`);
    }
  }
  e.line("workgroupBarrier();");
  e.block(`for (var o = t; o < ${TM * TN}; o += ${threads}) {`, () => {
    // The output's row and column in the tile, the subgroup that holds it, its matrix and place:
    // consecutive threads along the outputs' contiguous axis.
    e.line(columns ? `let r = o % ${TM};` : `let r = o / ${TN};`);
    e.line(columns ? `let c = o / ${TM};` : `let c = o % ${TN};`);
    e.line(`let holder = (c / ${fn * MK}) * ${sm} + r / ${fm * MK};`);
    e.line(`let slot = (r % ${fm * MK}) / ${MK} * ${fn} + (c % ${fn * MK}) / ${MK};`);
    e.line(
      columns
        ? `let q = (c % ${MK}) * ${MK} + r % ${MK};`
        : `let q = (r % ${MK}) * ${MK} + c % ${MK};`,
    );
    e.line(`var sum = 0.0;`);
    for (let k = 0; k < tile.slices; k++) {
      const part = `(${k * sm * sn} + holder) * ${fm * fn} + slot`;
      e.line(`sum += stage[u32((${part}) * ${MK * MK} + q)];`);
    }
    e.line(`epilogue(${[...batch, "m0 + r", "n0 + c", "0"].join(", ")}, sum);`);
  });
}
