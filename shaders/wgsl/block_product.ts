/**
 * Products by block-quantized weights in WGSL: fusion's `blockProduct` kernels (a BlockMatMul of
 * few rows, `jit/ops/block_matmul.ts`) as rows whose threads each take whole blocks of the
 * weight's row, read as vec4s of packed words, unpacked in registers and summed regrouped as
 * Σ_b scale_b · (Σ_j v_j · a_j − zero_b · Σ_j a_j). The kernel's own expression unpacks each value
 * through integer division by a table of powers and reads its scale and zero point per value:
 * a decode step's products ran at 40-90 GB/s on an H200 that way.
 *
 * Consecutive threads take consecutive blocks of one output's row, so a warp's loads are
 * contiguous; A is read as vec4s (it is small and stays in cache). The threads' sums combine as
 * any row's (`rows.ts`), and the outputs are the kernel's row outputs, epilogue included.
 *
 * @module
 */
import type { BlockProduct, KernelIR } from "../../jit/ir/kernel_ir.ts";
import { walk } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { KernelLowering } from "./expr.ts";
import { allOf } from "./prelude.ts";
import { combineAcross, type RowTiling, storeRowOutputs } from "./rows.ts";

/** A block product's sizes: values a word, vec4s of words a block, blocks a row, N and K. */
function sizes(kernel: KernelIR, tag: BlockProduct) {
  const per = 32 / tag.bits, quads = tag.block / per / 4, [n, k] = kernel.space.slice(-2);
  const blocks = sizeOf(kernel.inputs[tag.words].shape) / n / (quads * 4);
  return { per, quads, blocks, n, k };
}

/**
 * The row tiling of a block product's kernel in workgroups of at most `most` threads, where this
 * generator takes it: one f32 sum over K, A's rows of K a multiple of 4, and no output that
 * reads A or the words (they are bound as vec4s). Threads a row: the blocks' count rounded up to
 * a power of two, from 8 to 64.
 */
export function blockTiling(kernel: KernelIR, most: number): RowTiling | undefined {
  const tag = kernel.blockProduct;
  if (!tag || kernel.reductions.length !== 1) return undefined;
  const [r] = kernel.reductions;
  const { blocks, k } = sizes(kernel, tag);
  if (r.op !== "sum" || r.dtype !== "f32" || k % 4 !== 0 || !Number.isInteger(blocks)) {
    return undefined;
  }
  if (kernel.reduced.length !== 1 || kernel.reduced[0] !== kernel.space.length - 1) {
    return undefined;
  }
  let readsTables = false;
  for (const o of kernel.outputs) {
    walk(o.expr, (x) => {
      if (x.kind === "load" && (x.input === tag.a || x.input === tag.words)) readsTables = true;
    });
    if (o.level !== "row") return undefined;
  }
  if (readsTables) return undefined;
  const threads = Math.min(64, most, Math.max(8, 2 ** Math.ceil(Math.log2(blocks))));
  return {
    threads,
    rows: Math.max(1, most / threads),
    slots: 0,
    width: 1,
    vectors: new Set([tag.a, tag.words]),
    vectorStores: false,
    blocks: true,
  };
}

/**
 * The body of a block product's kernel (`tiling` from {@linkcode blockTiling}). Returns the
 * workgroup arrays.
 */
export function emitBlockProduct(
  l: KernelLowering,
  tiling: RowTiling,
  tag: BlockProduct,
): string[] {
  const { kernel, e } = l;
  const { threads, rows } = tiling;
  const { per, quads, blocks, n, k } = sizes(kernel, tag);
  const kept = kernel.space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
  const total = sizeOf(kept.map((i) => kernel.space[i]));
  e.line(`let lane = lid.x % ${threads}u;`);
  e.line(`let raw = i32(wid.x + wid.y * nwg.x) * ${rows} + i32(lid.x / ${threads}u);`);
  e.line(`let row = min(raw, ${total - 1});`);
  e.line(`let live = raw < ${total};`);
  for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
  l.unravel(kept, "row");
  // Output n of A's row `row / n` (A's rows of K lie contiguous, see `plainTables`).
  e.line(`let col = row % ${n};`);
  e.line(`let arow = row / ${n};`);
  e.line("var acc0: f32 = 0.0;");
  // The kernel's other inputs (the expression's tables of powers) are bound all the same: a
  // phony read keeps each in the pipeline's layout.
  const used = [tag.a, tag.words, tag.scales, tag.zeros];
  kernel.inputs.forEach((_, i) => used.includes(i) || e.line(`_ = ${l.inputs[i]}[0];`));
  const mask = (1 << tag.bits) - 1;
  // Past K (the last block cut short) A reads as zero, from a clamped address.
  const cut = blocks * tag.block > k;
  e.block(`for (var b: i32 = i32(lane); b < ${blocks}; b += ${threads}) {`, () => {
    e.line(`let wq = (col * ${blocks} + b) * ${quads};`);
    e.line(`let kb = b * ${tag.block};`);
    e.line("var dot = vec4<f32>(0.0);");
    e.line("var asum = vec4<f32>(0.0);");
    for (let g = 0; g < quads; g++) {
      e.line(`let w${g} = ${l.inputs[tag.words]}[u32(wq + ${g})];`);
      for (let lane = 0; lane < 4; lane++) {
        for (let part = 0; part < per / 4; part++) {
          // Values (4g + lane)·per + 4·part + 0..3 of the block: one vec4 of A.
          const first = (4 * g + lane) * per + 4 * part;
          const shifts = [0, 1, 2, 3].map((j) => `${(4 * part + j) * tag.bits}u`).join(", ");
          const at = `kb + ${first}`;
          const a = cut
            ? `select(vec4<f32>(0.0), ${
              l.quad(tag.a, `arow * ${k} + min(${at}, ${k - 4})`)
            }, ${at} < ${k})`
            : l.quad(tag.a, `arow * ${k} + ${at}`);
          const q = `vec4<f32>((vec4<u32>(w${g}.${
            "xyzw"[lane]
          }) >> vec4<u32>(${shifts})) & vec4<u32>(${mask}u))`;
          e.line(`{ let a = ${a}; dot += ${q} * a; asum += a; }`);
        }
      }
    }
    const cell = `u32(col * ${blocks} + b)`;
    const zero = tag.zeros === undefined ? `${2 ** (tag.bits - 1)}.0` : l.element(tag.zeros, cell);
    e.line(`let scale = ${l.element(tag.scales, cell)};`);
    e.line(
      `acc0 += scale * ((dot.x + dot.y + dot.z + dot.w) - ${zero} * (asum.x + asum.y + asum.z + asum.w));`,
    );
  });
  const t = combineAcross(l, kernel.reductions[0], 0, threads, k, `lid.x - lane`);
  storeRowOutputs(l, allOf("lane == 0u", "live"));
  return [`var<workgroup> sh_${t}: array<${t}, ${threads * rows}>;`];
}
