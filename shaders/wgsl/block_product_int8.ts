/**
 * Block products in integers for the WGSL generator: a `blockProduct` kernel whose A was rounded
 * to 8 bits a block before it (`QuantizeRowBlocks`, MatMulNBits of `accuracy_level` 4, the
 * default of onnxruntime-genai's CPU and WebGPU models) and whose weight is 4-bit sums each block
 * with `dot4I8Packed` (WGSL's `packed_4x8_integer_dot_product`: four byte products and their sum
 * in one instruction where the GPU has one, as NVIDIA's `dp4a`), where the f32 form
 * (`block_product.ts`) shifts, masks, converts and multiplies every value: a decode step's
 * products are bound by those instructions, not by their loads (`bench/REPORT-generate.md`,
 * session 52). The result is the f32 form's within rounding: each block's integer sum is exact
 * and scaled once.
 *
 * Each chunk of A's row is read from memory and each block quantized again from its rounded
 * values (its largest magnitude over 127, then round(a · 127 / largest)), which gives back the
 * same integers: they are at most 127 and the rounding moved each by far less than half (the
 * WebAssembly generator does the same, `shaders/wasm/block_product_int8.ts`). A product that
 * rounds A itself (`BlockProduct.roundsA`) reads it unrounded (stored, or computed by its
 * prologue: a decode layer's normalization or gate) and rounds each block here, as
 * QuantizeRowBlocks does, with IEEE divisions. A packed
 * word holds values 8t … 8t + 7 of a block, value 8t + 2i in byte i's low four bits and 8t + 2i
 * + 1 in its high four, so `w & 0x0F0F0F0F` and `(w >> 4) & 0x0F0F0F0F` are four values each as
 * bytes: A's integers are packed to match, the even ones of each eight in one word, the odd ones
 * in another.
 *
 * @module
 */
import { type BlockProduct, storedA } from "../../jit/ir/kernel_ir.ts";
import type { KernelLowering } from "./expr.ts";

/** Values a vec4 of packed 4-bit words holds. */
const GROUP = 32;

/** Four bytes of 1: `dot4I8Packed(x, ONES)` sums x's four bytes. */
const ONES = "0x01010101u";

/** Low four bits of each byte. */
const NIBBLES = "0x0F0F0F0Fu";

/**
 * Whether `kernel`'s block product can sum in integers: A rounded to 8 bits a block, 4-bit weights
 * in blocks of whole groups of 32 that cover K (`k`) exactly.
 */
export function integerBlocks(tag: BlockProduct, k: number): boolean {
  return tag.int8 === true && (storedA(tag) || tag.roundsA === true) && tag.bits === 4 &&
    tag.block % GROUP === 0 && k % tag.block === 0;
}

/**
 * Whether a block product of A packed by its producer (`BlockProduct.packedA`) can sum in integers
 * here: 4-bit weights in blocks of whole groups of 32.
 */
export function packedBlocks(tag: BlockProduct): boolean {
  return tag.packedA !== undefined && tag.bits === 4 && tag.block % GROUP === 0;
}

/**
 * The loop over a row's blocks (a block a lane) of a product whose A its producer packed: each
 * lane reads its block of A's words as vec4s where they lie, and its scale, beside the weights;
 * no workgroup memory, no barrier. (A rounded as f32 and packed again by every workgroup, the
 * vocabulary's product took 40-42 µs on the H200, where a hand-written kernel over packed words
 * took 34: `bench/gemv_bytes.ts`.) Returns no workgroup arrays.
 */
export function packedLoop(
  l: KernelLowering,
  tag: BlockProduct,
  { threads, outputs }: { threads: number; outputs: number },
  { blocks, k }: IntegerSizes,
): string[] {
  const { e } = l, { words, scales } = tag.packedA!;
  const wq = wordQuads(tag);
  e.block(`for (var c: i32 = 0; c < ${blocks}; c += ${threads}) {`, () => {
    e.line("let b = c + i32(lane);");
    e.line(`let cell = min(b, ${blocks - 1});`);
    integerLoads(l, tag, { outputs, blocks });
    // Each group of 32 values: its even words' vec4, then its odd words'.
    e.line(`let at = u32(arow * ${k / 16} + cell * ${2 * wq});`);
    const packed = (g: number, odd: boolean) => `${l.inputs[words]}[at + ${2 * g + +odd}u]`;
    const scale = l.element(scales, `u32(arow * ${blocks} + cell)`);
    e.block(`if (b < ${blocks}) {`, () => integerSums(l, tag, outputs, packed, scale));
  });
  return [];
}

/** Workgroup bytes the integer staging adds for `threads` blocks of `block` values. */
export function integerStageBytes(threads: number, block: number): number {
  // Each block's even and odd words as vec4s (one vec4 more, for the banks), and its scale.
  return threads * ((2 * block / GROUP + 1) * 16 + 4);
}

/** vec4s of A's packed words (even or odd) a block: one per group of 32 values. */
function wordQuads(tag: BlockProduct): number {
  return tag.block / GROUP;
}

/** A block product's sizes the integer loop needs: blocks a row of the weight, A's K. */
export interface IntegerSizes {
  readonly blocks: number;
  readonly k: number;
}

/**
 * The loop over a row's blocks a chunk at a time (a block a lane) summing in integers. Each
 * chunk's weight words, scales and zero points are loaded first, so that they are in flight while
 * the workgroup packs the chunk of A (`packChunk`); the sums follow the packing's barrier.
 * `quad(at)` is A's vec4 at K index `at` (an i32 expression) of the group's row. Returns the
 * workgroup arrays.
 */
export function integerLoop(
  l: KernelLowering,
  tag: BlockProduct,
  { threads, all, outputs }: { threads: number; all: number; outputs: number },
  { blocks, k }: IntegerSizes,
  quad: (at: string) => string,
): string[] {
  const { e } = l;
  const wq = wordQuads(tag), qstride = 2 * wq + 1;
  e.block(`for (var c: i32 = 0; c < ${blocks}; c += ${threads}) {`, () => {
    e.line("let b = c + i32(lane);");
    // A lane past the row's last block loads that block's words, and sums nothing.
    e.line(`let cell = min(b, ${blocks - 1});`);
    integerLoads(l, tag, { outputs, blocks });
    // The chunk's earlier readers are done before it is overwritten.
    e.line("workgroupBarrier();");
    packChunk(l, tag, { threads, all, k }, quad);
    e.line("workgroupBarrier();");
    const staged = (g: number, odd: boolean) => `sh_q[lane * ${qstride}u + ${odd ? wq + g : g}u]`;
    e.block(`if (b < ${blocks}) {`, () => integerSums(l, tag, outputs, staged, "sh_s[lane]"));
  });
  return [
    `var<workgroup> sh_q: array<vec4<u32>, ${threads * qstride}>;`,
    `var<workgroup> sh_s: array<f32, ${threads}>;`,
  ];
}

/**
 * Packs the chunk `c` of A (`threads` blocks from block c) into `sh_q` (each block's even words,
 * then its odd words, as vec4<u32>s at a stride of one more) and `sh_s` (each block's scale),
 * eight values a thread, read from memory: every thread of a block finds the block's largest
 * magnitude itself, so no thread waits on another before the one barrier after. (Packed by one
 * thread a block from a staged copy, after two barriers, the vocabulary's product took 42 µs;
 * `bench/REPORT-generate.md`, session 80.) Past K, A is zero, read from a clamped address.
 */
function packChunk(
  l: KernelLowering,
  tag: BlockProduct,
  { threads, all, k }: { threads: number; all: number; k: number },
  quad: (at: string) => string,
): void {
  const { e } = l;
  const quads = tag.block / 4, per = tag.block / 8, wq = wordQuads(tag), qstride = 2 * wq + 1;
  const read = (q: string) =>
    `select(vec4<f32>(0.0), ${quad(`min(${q}, ${k / 4 - 1}) * 4`)}, ${q} < ${k / 4})`;
  e.block(`for (var i: u32 = lid.x; i < ${threads * per}u; i += ${all}u) {`, () => {
    e.line(`let blk = i / ${per}u;`);
    e.line(`let t = i % ${per}u;`);
    e.line(`let start = (c + i32(blk)) * ${quads};`);
    e.line("var largest = 0.0;");
    e.block(`for (var j: i32 = 0; j < ${quads}; j++) {`, () => {
      e.line(`let v = abs(${read("start + j")});`);
      e.line("largest = max(largest, max(max(v.x, v.y), max(v.z, v.w)));");
    });
    if (tag.roundsA) {
      // A as it is: rounded here as QuantizeRowBlocks rounds it, its divisions IEEE's.
      e.line("let scale = k_fdiv(largest, 127.0);");
      e.line("let inverse = select(k_fdiv(127.0, largest), 0.0, scale == 0.0);");
    } else {
      e.line("let scale = largest / 127.0;");
      e.line("let inverse = select(0.0, 1.0 / scale, scale != 0.0);");
    }
    // Values 8t … 8t + 7 of the block: word t % 4 of its group t / 4 of 32 (see the module doc).
    e.line(`let lo = vec4<i32>(round(${read("start + 2 * i32(t)")} * inverse));`);
    e.line(`let hi = vec4<i32>(round(${read("start + 2 * i32(t) + 1")} * inverse));`);
    e.line(`let at = blk * ${qstride}u + t / 4u;`);
    e.line("sh_q[at][t % 4u] = pack4xI8(vec4<i32>(lo.x, lo.z, hi.x, hi.z));");
    e.line(`sh_q[at + ${wq}u][t % 4u] = pack4xI8(vec4<i32>(lo.y, lo.w, hi.y, hi.w));`);
    e.block("if (t == 0u) {", () => e.line("sh_s[blk] = scale;"));
  });
}

/** Each output's words of block `cell` (`w${r}_${g}`), its scale and zero point, as lets. */
function integerLoads(
  l: KernelLowering,
  tag: BlockProduct,
  { outputs, blocks }: { outputs: number; blocks: number },
): void {
  const { e } = l;
  const wq = wordQuads(tag);
  for (let r = 0; r < outputs; r++) {
    e.line(`let cell${r} = col${r} * ${blocks}u + u32(cell);`);
    for (let g = 0; g < wq; g++) {
      e.line(`let w${r}_${g} = ${l.inputs[tag.words]}[cell${r} * ${wq}u + ${g}u];`);
    }
    e.line(`let scale${r} = ${l.element(tag.scales, `cell${r}`)};`);
    const cast = floatZeros(l, tag) ? "f32" : "i32";
    const zero = tag.zeros === undefined ? "8" : `${cast}(${l.element(tag.zeros, `cell${r}`)})`;
    e.line(`let zero${r} = ${zero};`);
  }
}

/**
 * Adds the lane's block's products (its packed block of A, each group of 32's even and odd
 * words as `words(g, odd)` reads them, and its `scale`; the weights from `integerLoads`) to each
 * output's `part${r}`: per packed word two byte dot products, per block
 * the zero point's share (zero · Σ q) taken off the integer sum (off its float where the zero
 * points are floats), which is then scaled once by the weight's and A's scales.
 */
function integerSums(
  l: KernelLowering,
  tag: BlockProduct,
  outputs: number,
  words: (g: number, odd: boolean) => string,
  scale: string,
): void {
  const { e } = l;
  const quads = [...Array(wordQuads(tag)).keys()];
  for (const g of quads) {
    e.line(`let e${g} = ${words(g, false)};`);
    e.line(`let o${g} = ${words(g, true)};`);
  }
  const lanes = quads.flatMap((g) => [..."xyzw"].map((c) => [g, c] as const));
  const qsum = lanes.flatMap(([g, c]) => [`e${g}.${c}`, `o${g}.${c}`])
    .map((w) => `dot4I8Packed(${w}, ${ONES})`);
  e.line(`let qsum = ${qsum.join(" + ")};`);
  e.line(`let ascale = ${scale};`);
  for (let r = 0; r < outputs; r++) {
    const terms = lanes.map(([g, c]) => {
      const w = `w${r}_${g}.${c}`;
      return `dot4I8Packed(${w} & ${NIBBLES}, e${g}.${c}) + ` +
        `dot4I8Packed((${w} >> 4u) & ${NIBBLES}, o${g}.${c})`;
    });
    if (floatZeros(l, tag)) {
      // A float zero point may be fractional: its share is taken off in floats.
      e.line(`let isum${r} = ${terms.join(" + ")};`);
      e.line(`part${r} += scale${r} * ascale * (f32(isum${r}) - zero${r} * f32(qsum));`);
    } else {
      e.line(`let isum${r} = ${terms.join(" + ")} - zero${r} * qsum;`);
      e.line(`part${r} += scale${r} * ascale * f32(isum${r});`);
    }
  }
}

/** Whether the product's zero points are floats (a model's own), not whole numbers of u8. */
function floatZeros(l: KernelLowering, tag: BlockProduct): boolean {
  return tag.zeros !== undefined && l.kernel.inputs[tag.zeros].dtype === "f32";
}
