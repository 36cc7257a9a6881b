/**
 * Products by block-quantized weights in WGSL: fusion's `blockProduct` kernels (a BlockMatMul of
 * few rows, `jit/ops/block_matmul.ts`) as rows whose threads each take whole blocks of the
 * weight's row, read as vec4s of packed words, unpacked in registers and summed regrouped as
 * Σ_b scale_b · (Σ_j v_j · a_j − zero_b · Σ_j a_j). The kernel's own expression unpacks each value
 * through integer division by a table of powers and reads its scale and zero point per value:
 * a decode step's products ran at 40-90 GB/s on an H200 that way.
 *
 * Consecutive threads take consecutive blocks of one output's row, so a warp's loads of the
 * words are contiguous. Where a workgroup's outputs share one row of A (a decode step's single
 * row always does), A goes through workgroup memory a chunk at a time (a block a thread), each
 * thread's block at a stride of one vec4 more than a block so that a quarter-warp's vec4 reads
 * fall in distinct banks: read straight from memory, a warp's read of A touched 32 cache lines
 * at once, and the products ran at 2–17 % of the H200's copy bandwidth. Sharing A, a row's
 * threads take several outputs at once (up to 8, while the workgroups stay many), so each read
 * of A serves all of them and each thread has that many words' loads in flight
 * (`bench/gpu_kernels.ts --only gemv4`, H200: the vocabulary's 896 → 151936 product 151 → 59 µs,
 * a Qwen2.5-0.5B layer's 9.4–19.3 → 8.1–11.0 µs).
 *
 * Where fusion left A an elementwise expression (`BlockProduct.prologue`: a gated MLP's SiLU times
 * its up projection, the rows a view picks), each element of A is computed by it where A is read,
 * into the stage or into a block's vec4s, so the kernel that would have stored A is not run.
 *
 * The threads' sums combine as any row's (`rows.ts`), and the outputs are the kernel's row
 * outputs, epilogue included, stored once per output.
 *
 * @module
 */
import type { BlockProduct, Expr, KernelIR } from "../../jit/ir/kernel_ir.ts";
import { storedA, walk } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { KernelLowering } from "./expr.ts";
import { allOf } from "./prelude.ts";
import { combineAcross, combiner, type RowTiling, storeRowOutputs } from "./rows.ts";
import {
  integerBlocks,
  integerLoop,
  integerStageBytes,
  packedBlocks,
  packedLoop,
} from "./block_product_int8.ts";

/** Workgroups a product should keep before its threads take several outputs each. */
const MANY_WORKGROUPS = 512;

/** A block product's sizes: values a word, vec4s of words a block, blocks a row, N, K, rows. */
function sizes(kernel: KernelIR, tag: BlockProduct) {
  const per = 32 / tag.bits, quads = tag.block / per / 4, [n, k] = kernel.space.slice(-2);
  const blocks = sizeOf(kernel.inputs[tag.words].shape) / n / (quads * 4);
  const total = sizeOf(kernel.space.filter((_, i) => !kernel.reduced.includes(i)));
  return { per, quads, blocks, n, k, total };
}

/**
 * The row tiling of a block product's kernel in workgroups of at most `most` threads and
 * `bytes` of workgroup memory, where this generator takes it: one f32 sum over K, A's rows of K
 * a multiple of 4, whole vec4s of words a block, and no output that reads A or the words (they
 * are bound as vec4s). Threads a row: the blocks' count rounded up to a power of two, from 8 to
 * 64. With `packedDots` (WGSL's `packed_4x8_integer_dot_product`) a staged product of A rounded
 * to 8 bits sums in integers, and one of A packed by its producer reads its words as they lie
 * (`block_product_int8.ts`).
 */
export function blockTiling(
  kernel: KernelIR,
  most: number,
  bytes: number,
  packedDots = false,
): RowTiling | undefined {
  const tag = kernel.blockProduct;
  // Reductions before the product's are a prologue's (a normalization's rows, `prologueProduct`).
  const pre = kernel.reductions.length - 1;
  if (!tag || pre < 0 || (pre > 0 && !tag.prologue)) return undefined;
  const r = kernel.reductions[pre];
  if (kernel.reductions.some((x) => x.dtype !== "f32")) return undefined;
  const { blocks, k, n, quads, total } = sizes(kernel, tag);
  if (r.op !== "sum" || k % 4 !== 0 || !Number.isInteger(blocks)) {
    return undefined;
  }
  if (!Number.isInteger(quads) || kernel.reduced.length !== 1) return undefined;
  if (kernel.reduced[0] !== kernel.space.length - 1) return undefined;
  let readsTables = false;
  for (const o of kernel.outputs) {
    walk(o.expr, (x) => {
      if (x.kind === "load" && (x.input === tag.a || x.input === tag.words)) readsTables = true;
    });
    if (o.level !== "row") return undefined;
  }
  if (readsTables) return undefined;
  // A packed by its producer sums in byte dot products, or runs as the generic kernel.
  const packed = tag.packedA !== undefined;
  if (packed && !(packedDots && packedBlocks(tag))) return undefined;
  // A prologue's buffers are read an element at a time, whatever else reads them.
  const vectors = new Set(
    packed ? [tag.packedA!.words, tag.words] : storedA(tag) ? [tag.a, tag.words] : [tag.words],
  );
  const threads = Math.min(64, most, Math.max(8, 2 ** Math.ceil(Math.log2(blocks))));
  const rows = Math.max(1, most / threads);
  const share = (outputs: number) => total === n || n % (outputs * rows) === 0;
  // A product rounding its A packs it as it stages it, in integers only (`roundsA`).
  const rounds = tag.roundsA === true && packedDots && integerBlocks(tag, k);
  // A chunk of A (a block a thread, padded; packed where the product rounds it; none where A
  // comes packed) and the combining steps' floats.
  const chunk = packed
    ? 0
    : rounds
    ? integerStageBytes(threads, tag.block)
    : threads * (tag.block / 4 + 1) * 16;
  const stage = chunk + most * 4;
  const staged = share(1) && stage <= bytes;
  // A prologue's reductions are the workgroup's, over the one row of A it stages.
  if (pre > 0 && !staged) return undefined;
  let outputs = 1;
  // Without subgroups a group's outputs combine through workgroup memory, a float each a thread.
  const combining = (n: number) => (n > 1 ? 4 * most * n : 0);
  while (staged && outputs < 8 && share(outputs * 2)) {
    if (total / (outputs * 2 * rows) < MANY_WORKGROUPS) break;
    if (stage + combining(outputs * 2) > bytes) break;
    outputs *= 2;
  }
  // Packing A costs a group as much as one output's sums save: with one output a group the
  // integer form was slower (H200, 4864 → 896: 12.2-12.7 µs against 10.7-11.2).
  const integers = packed || rounds && staged ||
    outputs > 1 && packedDots && integerBlocks(tag, k) &&
      stage + combining(outputs) + integerStageBytes(threads, tag.block) <= bytes;
  // A rounding product's expressions read A unrounded: no other form computes it.
  if (tag.roundsA && !integers) return undefined;
  const base = { threads, rows, slots: 0, width: 1 as const, vectors, vectorStores: false };
  return { ...base, blocks: { outputs, staged, integers } };
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
  const { outputs, staged } = tiling.blocks!;
  const { n, total } = sizes(kernel, tag);
  const kept = kernel.space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
  e.line(`let lane = lid.x % ${threads}u;`);
  // A group's outputs are consecutive rows of the kernel's kept space.
  const first = `(i32(wid.x + wid.y * nwg.x) * ${rows} + i32(lid.x / ${threads}u)) * ${outputs}`;
  e.line(`let first = ${first};`);
  for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
  for (let r = 0; r < outputs; r++) {
    // Output n of A's row `row / n` (A's rows of K lie contiguous, see `plainTables`). In u32:
    // i32's signed remainders and products cost the H200's vocabulary product (896 → 151936)
    // 1.2-1.7 µs of 28 (`bench/gemv_bytes.ts --kiln`, session 82).
    e.line(`let col${r} = u32(min(first + ${r}, ${total - 1})) % ${n}u;`);
    e.line(`var part${r}: f32 = 0.0;`);
  }
  // The kernel's other inputs (the expression's tables of powers) are bound all the same: a
  // phony read keeps each in the pipeline's layout.
  const used = [tag.a, tag.words, tag.scales, tag.zeros, tag.packedA?.words, tag.packedA?.scales];
  if (tag.prologue) walk(tag.prologue, (x) => x.kind === "load" && used.push(x.input));
  kernel.inputs.forEach((_, i) => used.includes(i) || e.line(`_ = ${l.inputs[i]}[0];`));
  // A's row of the group's first output (of all its outputs where A is staged).
  // One row of A (a decode step's) is row 0: no signed division a lane.
  e.line(`let arow = ${total === n ? "0" : `min(first, ${total - 1}) / ${n}`};`);
  if (tag.prologue) prologueRow(l);
  rowReductions(l, tiling, kernel.reductions.length - 1);
  const decls = tag.packedA
    ? packedLoop(l, tag, { threads, outputs }, sizes(kernel, tag))
    : staged
    ? stagedLoop(l, tiling, tag)
    : plainLoop(l, tiling, tag);
  return [...decls, ...storeOutputs(l, tiling, kept)];
}

/**
 * The loop over a row's blocks reading A from memory (one output a group): `(b, a(j))` per block
 * where `a(j)` is the block's j-th vec4 of A. Returns no workgroup arrays.
 */
function plainLoop(l: KernelLowering, tiling: RowTiling, tag: BlockProduct): string[] {
  const { e, kernel } = l;
  const { blocks, k } = sizes(kernel, tag);
  // Past K (the last block cut short) A reads as zero, from a clamped address.
  const cut = blocks * tag.block > k;
  e.block(`for (var b: i32 = i32(lane); b < ${blocks}; b += ${tiling.threads}) {`, () => {
    const a = (j: number) => {
      const at = `b * ${tag.block} + ${4 * j}`;
      const quad = (from: string) => aQuad(l, tag, from);
      return cut
        ? `select(vec4<f32>(0.0), ${quad(`min(${at}, ${k - 4})`)}, ${at} < ${k})`
        : quad(at);
    };
    blockSums(l, tag, a, 1);
  });
  return [];
}

/**
 * The loop over a row's blocks a chunk at a time, the chunk of A (the workgroup's one row) first
 * copied to workgroup memory by all threads. Returns the chunk's workgroup array.
 */
function stagedLoop(l: KernelLowering, tiling: RowTiling, tag: BlockProduct): string[] {
  const { e, kernel } = l;
  const { threads, rows } = tiling;
  const { blocks, k } = sizes(kernel, tag);
  const quads = tag.block / 4, stride = quads + 1, size = threads * quads;
  const { outputs, integers } = tiling.blocks!;
  if (integers) {
    const counts = { threads, all: threads * rows, outputs };
    return integerLoop(l, tag, counts, { blocks, k }, (at) => aQuad(l, tag, at));
  }
  e.block(`for (var c: i32 = 0; c < ${blocks}; c += ${threads}) {`, () => {
    // The chunk's earlier readers are done before it is overwritten.
    e.line("workgroupBarrier();");
    e.block(`for (var i: i32 = i32(lid.x); i < ${size}; i += ${threads * rows}) {`, () => {
      // Past K (the last block cut short, or no block at all) A is zero, read from a clamped
      // address.
      e.line(`let q = c * ${quads} + i;`);
      const a = aQuad(l, tag, `min(q, ${k / 4 - 1}) * 4`);
      e.line(
        `sh_a[(i / ${quads}) * ${stride} + i % ${quads}] = select(vec4<f32>(0.0), ${a}, q < ${
          k / 4
        });`,
      );
    });
    e.line("workgroupBarrier();");
    e.line("let b = c + i32(lane);");
    e.block(`if (b < ${blocks}) {`, () => {
      blockSums(l, tag, (j) => `sh_a[lane * ${stride}u + ${j}u]`, outputs);
    });
  });
  return [`var<workgroup> sh_a: array<vec4<f32>, ${threads * stride}>;`];
}

/**
 * The kernel's coordinates at the group's row of A (`arow`), for a prologue: the row axes (which
 * precede N and K) unravelled, N's at 0 (A does not depend on it).
 */
function prologueRow(l: KernelLowering): void {
  const axes = l.kernel.space.length;
  l.unravel([...Array(axes - 2).keys()], "arow");
  l.e.line(`${l.coords[axes - 2]} = 0;`);
}

/**
 * The reductions a prologue reads (a normalization's), over the workgroup's one row of A (after
 * `prologueRow`), one after another (a later one may read an earlier one, as a layer norm's
 * variance reads its mean): each thread takes a stride of K, then the workgroup combines them
 * into `acc${j}`, which the prologue reads as its accumulators.
 */
function rowReductions(l: KernelLowering, tiling: RowTiling, count: number): void {
  const { e, kernel } = l;
  const all = tiling.threads * tiling.rows, k = kernel.space[kernel.space.length - 1];
  kernel.reductions.slice(0, count).forEach((r, j) => {
    const { init, combine } = combiner(r);
    e.line(`var acc${j}: f32 = ${init};`);
    e.block(`for (var i: i32 = i32(lid.x); i < ${k}; i += ${all}) {`, () => {
      e.line(`${l.coords[l.coords.length - 1]} = i;`);
      e.line(`acc${j} = ${combine(`acc${j}`, l.value(r.expr, new Map<Expr, string>()))};`);
    });
    // The workgroup's threads are one row here: `lane` is each one's place among them all.
    e.block("{", () => {
      e.line("let lane = lid.x;");
      combineAcross(l, r, j, all, k, "0u");
    });
  });
}

/**
 * Four consecutive elements of A's row `arow` from `k` on (an i32 expression), as a vec4<f32>:
 * read from its input, or computed by its prologue at each element's K (after `prologueRow`).
 */
function aQuad(l: KernelLowering, tag: BlockProduct, k: string): string {
  if (storedA(tag)) return l.quad(tag.a, `arow * ${l.kernel.space.at(-1)} + ${k}`);
  const lanes = [0, 1, 2, 3].map((j) => {
    l.e.line(`${l.coords.at(-1)} = ${k} + ${j};`);
    return l.value(tag.prologue!, new Map());
  });
  return `vec4<f32>(${lanes.join(", ")})`;
}

/**
 * Adds block `b`'s products to each output's `part${r}`: A's vec4s read once (`a(j)`, the
 * block's j-th), each output's words unpacked by vector shifts.
 */
function blockSums(
  l: KernelLowering,
  tag: BlockProduct,
  a: (j: number) => string,
  outputs: number,
): void {
  const { e, kernel } = l;
  const { per, quads, blocks } = sizes(kernel, tag);
  const mask = (1 << tag.bits) - 1;
  const count = tag.block / 4;
  for (let j = 0; j < count; j++) e.line(`let a${j} = ${a(j)};`);
  const sums = Array.from({ length: count }, (_, j) => `a${j}`);
  e.line(`let asum = dot(${sums.join(" + ")}, vec4<f32>(1.0));`);
  for (let r = 0; r < outputs; r++) {
    e.line(`let cell${r} = col${r} * ${blocks}u + u32(b);`);
    for (let g = 0; g < quads; g++) {
      e.line(`let w${r}_${g} = ${l.inputs[tag.words]}[cell${r} * ${quads}u + ${g}u];`);
    }
  }
  for (let r = 0; r < outputs; r++) {
    const terms: string[] = [];
    for (let g = 0; g < quads; g++) {
      for (let lane = 0; lane < 4; lane++) {
        for (let part = 0; part < per / 4; part++) {
          // Values (4g + lane)·per + 4·part + 0..3 of the block: one vec4 of A.
          const j = (4 * g + lane) * per / 4 + part;
          const shifts = [0, 1, 2, 3].map((i) => `${(4 * part + i) * tag.bits}u`).join(", ");
          const word = `vec4<u32>(w${r}_${g}.${"xyzw"[lane]})`;
          terms.push(
            `dot(vec4<f32>((${word} >> vec4<u32>(${shifts})) & vec4<u32>(${mask}u)), a${j})`,
          );
        }
      }
    }
    const cell = `cell${r}`;
    // A u8 zero point reads as u32 (`element`), an f32 one as it is.
    const zero = tag.zeros === undefined
      ? `${2 ** (tag.bits - 1)}.0`
      : `f32(${l.element(tag.zeros, cell)})`;
    e.line(
      `part${r} += ${l.element(tag.scales, cell)} * ((${terms.join(" + ")}) - ${zero} * asum);`,
    );
  }
}

/**
 * Combines each output's sums over its row's threads and stores the kernel's row outputs:
 * output after output through `combineAcross` where a group takes one, else all at once
 * (`combineOutputs`). Returns the combining steps' workgroup arrays.
 */
function storeOutputs(l: KernelLowering, tiling: RowTiling, kept: number[]): string[] {
  const { kernel, e } = l;
  const { threads, rows } = tiling;
  const { outputs } = tiling.blocks!;
  const total = sizeOf(kept.map((i) => kernel.space[i]));
  const k = kernel.space[kernel.space.length - 1];
  // The product's sum is the last reduction (a prologue's come first), an f32 sum (`blockTiling`).
  const m = kernel.reductions.length - 1;
  e.line(`var acc${m}: f32 = 0.0;`);
  const store = (at: string, lanes: string) =>
    e.block("{", () => {
      e.line(`let row = min(first + ${at}, ${total - 1});`);
      l.unravel(kept, "row");
      storeRowOutputs(l, allOf(lanes, `first + ${at} < ${total}`));
    });
  const shared = `var<workgroup> sh_f32: array<f32, ${threads * rows}>;`;
  if (outputs === 1) {
    e.line(`acc${m} = part0;`);
    combineAcross(l, kernel.reductions[m], m, threads, k, `lid.x - lane`);
    store("0", "lane == 0u");
    return [shared];
  }
  const { at, lanes, decls } = combineOutputs(l, tiling, m);
  store(at, lanes);
  return [shared, ...decls];
}

/**
 * Sums each of a group's `outputs` parts over its threads into `acc${m}` of one lane an output.
 * Within a subgroup by a butterfly that halves the outputs a lane holds at each step (each lane
 * keeps one half and sends the other to the lane `d` away, for d = threads / 2, threads / 4, …),
 * then sums its own output's copies: log2(threads) + outputs − 1 shuffles where an output at a
 * time took log2(threads) + 1 each (a vocabulary's product of 8 outputs a group of 32: 10 against
 * 48). Elsewhere through workgroup memory, the first `outputs` lanes each summing one output's
 * parts. Returns the output a lane holds (`at`, i32), which lanes store, and the workgroup arrays.
 */
function combineOutputs(
  l: KernelLowering,
  tiling: RowTiling,
  m: number,
): { at: string; lanes: string; decls: string[] } {
  const { e } = l;
  const { threads, rows } = tiling;
  const { outputs } = tiling.blocks!;
  const size = l.subgroup ?? 1;
  if (size > 1 && threads <= size) {
    l.usesSubgroups = true;
    let parts = [...Array(outputs).keys()].map((r) => `part${r}`);
    let d = threads >> 1;
    for (; parts.length > 1; d >>= 1) {
      // Lanes with bit d set keep the upper half of their parts.
      const half = parts.length / 2, upper = `(lane & ${d}u) != 0u`;
      parts = parts.slice(0, half).map((low, j) => {
        const high = parts[j + half];
        e.line(`let keep${d}_${j} = select(${low}, ${high}, ${upper});`);
        e.line(`let give${d}_${j} = select(${high}, ${low}, ${upper});`);
        e.line(`let sum${d}_${j} = keep${d}_${j} + subgroupShuffleXor(give${d}_${j}, ${d}u);`);
        return `sum${d}_${j}`;
      });
    }
    e.line(`acc${m} = ${parts[0]};`);
    for (; d >= 1; d >>= 1) e.line(`acc${m} = acc${m} + subgroupShuffleXor(acc${m}, ${d}u);`);
    const span = threads / outputs;
    return { at: `i32(lane / ${span}u)`, lanes: `lane % ${span}u == 0u`, decls: [] };
  }
  for (let r = 0; r < outputs; r++) e.line(`sh_p[lid.x * ${outputs}u + ${r}u] = part${r};`);
  e.line("workgroupBarrier();");
  e.block(`if (lane < ${outputs}u) {`, () => {
    e.block(`for (var j: u32 = 0u; j < ${threads}u; j++) {`, () => {
      e.line(`acc${m} += sh_p[(lid.x - lane + j) * ${outputs}u + lane];`);
    });
  });
  const decls = [`var<workgroup> sh_p: array<f32, ${threads * rows * outputs}>;`];
  return { at: "i32(lane)", lanes: `lane < ${outputs}u`, decls };
}
