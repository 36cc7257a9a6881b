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
 * A's row is staged as the f32 form stages it, then each block is quantized again from its
 * rounded values (its largest magnitude over 127, then round(a · 127 / largest)), which gives
 * back the same integers: they are at most 127 and the rounding moved each by far less than
 * half (the WebAssembly generator does the same, `shaders/wasm/block_product_int8.ts`). A packed
 * word holds values 8t … 8t + 7 of a block, value 8t + 2i in byte i's low four bits and 8t + 2i
 * + 1 in its high four, so `w & 0x0F0F0F0F` and `(w >> 4) & 0x0F0F0F0F` are four values each as
 * bytes: A's integers are packed to match, the even ones of each eight in one word, the odd ones
 * in another.
 *
 * @module
 */
import type { BlockProduct } from "../../jit/ir/kernel_ir.ts";
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
  return tag.int8 === true && tag.bits === 4 && tag.block % GROUP === 0 && k % tag.block === 0;
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

/**
 * Packs the staged chunk of A (`sh_a`: `threads` blocks of `block / 4` vec4s at a stride of one
 * more) into `sh_q` (each block's even words, then its odd words, as vec4<u32>s at a stride of
 * one more) and `sh_s` (each block's scale), one group of 32 values a thread. Returns the
 * workgroup arrays; the caller puts a barrier before the products read them.
 */
export function stageIntegers(
  l: KernelLowering,
  tag: BlockProduct,
  { threads, all }: { threads: number; all: number },
): string[] {
  const { e } = l;
  const quads = tag.block / 4, stride = quads + 1, wq = wordQuads(tag), qstride = 2 * wq + 1;
  e.block(`for (var i: u32 = lid.x; i < ${threads * wq}u; i += ${all}u) {`, () => {
    e.line(`let blk = i / ${wq}u;`);
    e.line(`let g = i % ${wq}u;`);
    e.line(`let at = blk * ${stride}u;`);
    e.line("var largest = 0.0;");
    e.block(`for (var j: u32 = 0u; j < ${quads}u; j++) {`, () => {
      e.line("let v = abs(sh_a[at + j]);");
      e.line("largest = max(largest, max(max(v.x, v.y), max(v.z, v.w)));");
    });
    e.line("let scale = largest / 127.0;");
    e.line("let inverse = select(0.0, 1.0 / scale, scale != 0.0);");
    e.line("var even: vec4<u32>;");
    e.line("var odd: vec4<u32>;");
    // Word t of the group holds values 8t … 8t + 7: A's vec4s 2t (8t … 8t + 3) and 2t + 1.
    for (let t = 0; t < 4; t++) {
      e.line(`let lo${t} = vec4<i32>(round(sh_a[at + g * 8u + ${2 * t}u] * inverse));`);
      e.line(`let hi${t} = vec4<i32>(round(sh_a[at + g * 8u + ${2 * t + 1}u] * inverse));`);
      const c = "xyzw"[t];
      e.line(`even.${c} = pack4xI8(vec4<i32>(lo${t}.x, lo${t}.z, hi${t}.x, hi${t}.z));`);
      e.line(`odd.${c} = pack4xI8(vec4<i32>(lo${t}.y, lo${t}.w, hi${t}.y, hi${t}.w));`);
    }
    e.line(`sh_q[blk * ${qstride}u + g] = even;`);
    e.line(`sh_q[blk * ${qstride}u + ${wq}u + g] = odd;`);
    e.block("if (g == 0u) {", () => e.line("sh_s[blk] = scale;"));
  });
  return [
    `var<workgroup> sh_q: array<vec4<u32>, ${threads * qstride}>;`,
    `var<workgroup> sh_s: array<f32, ${threads}>;`,
  ];
}

/**
 * Adds block `b`'s products (the lane's staged block) to each output's `part${r}`: per packed
 * word two byte dot products, per block the zero point's share (zero · Σ q) taken off the integer
 * sum, which is then scaled once by the weight's and A's scales.
 */
export function integerSums(
  l: KernelLowering,
  tag: BlockProduct,
  { outputs, blocks }: { outputs: number; blocks: number },
): void {
  const { e } = l;
  const wq = wordQuads(tag), qstride = 2 * wq + 1;
  const quads = [...Array(wq).keys()];
  for (const g of quads) {
    e.line(`let e${g} = sh_q[lane * ${qstride}u + ${g}u];`);
    e.line(`let o${g} = sh_q[lane * ${qstride}u + ${wq + g}u];`);
  }
  const lanes = quads.flatMap((g) => [..."xyzw"].map((c) => [g, c] as const));
  const qsum = lanes.flatMap(([g, c]) => [`e${g}.${c}`, `o${g}.${c}`])
    .map((w) => `dot4I8Packed(${w}, ${ONES})`);
  e.line(`let qsum = ${qsum.join(" + ")};`);
  e.line("let ascale = sh_s[lane];");
  for (let r = 0; r < outputs; r++) {
    e.line(`let cell${r} = col${r} * ${blocks} + b;`);
    for (const g of quads) {
      e.line(`let w${r}_${g} = ${l.inputs[tag.words]}[u32(cell${r} * ${wq} + ${g})];`);
    }
  }
  for (let r = 0; r < outputs; r++) {
    const terms = lanes.map(([g, c]) => {
      const w = `w${r}_${g}.${c}`;
      return `dot4I8Packed(${w} & ${NIBBLES}, e${g}.${c}) + ` +
        `dot4I8Packed((${w} >> 4u) & ${NIBBLES}, o${g}.${c})`;
    });
    const cell = `u32(cell${r})`;
    const zero = tag.zeros === undefined ? "8" : `i32(${l.element(tag.zeros, cell)})`;
    e.line(`let isum${r} = ${terms.join(" + ")} - ${zero} * qsum;`);
    e.line(`part${r} += ${l.element(tag.scales, cell)} * ascale * f32(isum${r});`);
  }
}
