/**
 * Block products in integers for the WebAssembly generator: a `blockProduct` kernel whose A was
 * rounded to 8 bits a block before it (`QuantizeRowBlocks`, MatMulNBits of `accuracy_level` 4)
 * and whose weight is 4-bit sums each block's products with relaxed SIMD's byte dot product,
 * sixteen multiply-adds an instruction, where the f32 form (`block_product.ts`) masks, converts
 * and multiplies four values at a time. The result is the f32 form's within rounding:
 * the block's integer sum, exact, is scaled once.
 *
 * A's row is quantized again from its rounded values (each block's largest magnitude over 127,
 * then round(a · 127 / largest)), which gives back the same integers: they are at most 127 and
 * the rounding moved each by far less than half. The factor is QuantizeRowBlocks' own (127 /
 * largest), so a product that rounds A itself (`BlockProduct.roundsA`) reads it as it is and
 * rounds it exactly so. Sixteen bytes of a block's packed words hold 32 values, value 2j in byte
 * j's low four bits and 2j + 1 in its high four, so the scratch holds each 32 of A's integers as
 * the 16 of even index, then the 16 of odd index, beside the block's scale and that scale times
 * its integer sum (for the zero point's share).
 *
 * @module
 */
import type { KernelIR, StoredBlockProduct } from "../../jit/ir/kernel_ir.ts";
import type { KernelFunction } from "./module.ts";
import { columnRow, columnSums, element, sizes, zeroShares } from "./block_common.ts";

/** Values 16 bytes of packed 4-bit words hold. */
const GROUP = 32;

/**
 * Whether `fn`'s block product sums in integers: A rounded to 8 bits a block, 4-bit weights in
 * blocks of whole groups of 32 that cover K exactly, and the engine has relaxed SIMD.
 */
export function integerBlocks(fn: KernelFunction, tag: StoredBlockProduct): boolean {
  const { k } = sizes(fn.kernel, tag);
  return tag.int8 === true && fn.fma && tag.bits === 4 && tag.block % GROUP === 0 &&
    k % tag.block === 0;
}

/** Bytes 0, 2, … 30 of two vectors (the even values of 32), then 1, 3, … 31 (the odd ones). */
const EVEN = [...Array(16).keys()].map((i) => 2 * i), ODD = EVEN.map((i) => i + 1);

/**
 * Quantizes row `row` of A into the scratch: per block its integers (even, then odd index, per
 * 32), then all blocks' scales (f32), then each scale times its block's integer sum (f32, what the
 * zero points' share multiplies; see {@linkcode zeroShares}). Four values a vector: each
 * call of the kernel (a piece of its columns) quantizes the row again, and value by value that
 * took half of a 4864 → 896 product's time on 16 threads (H200 host: 0.22-0.27 ms against
 * 0.15-0.19 for 896 → 9728, twice its weights). The lanes round, truncate and narrow exactly as
 * the scalar instructions do, so the integers are the same.
 */
export function regroupIntegers(
  fn: KernelFunction,
  tag: StoredBlockProduct,
  row: number,
  base = 0,
): number[] {
  const { m, wasm, local, get, ic, countedLoop } = fn;
  const { i32, f32, v128 } = wasm, { k, blocks } = sizes(fn.kernel, tag), f4 = m.f32x4;
  const b = local(i32), g = local(i32), src = local(i32), dst = local(i32);
  const largest = local(v128), inverse = local(v128), sum = local(v128), scale = local(f32);
  const most = local(f32);
  const q = [...Array(8).keys()].map(() => local(v128));
  const quad = (j: number) => m.v128.load(16 * j, 4, get(src, i32));
  const advance = (ptr: number, bytes: number) =>
    m.local.set(ptr, m.i32.add(get(ptr, i32), ic(bytes)));
  const lane = (x: number, l: number) => f4.extract_lane(get(x, v128), l);
  const groups = tag.block / GROUP, tables = blocks * tag.block;
  const at = (offset: number) =>
    element(fn, m.i32.add(get(fn.params.scratch, i32), ic(base + offset)), get(b, i32));
  const narrow = (from: number) =>
    m.i8x16.narrow_i16x8_s(
      m.i16x8.narrow_i32x4_s(get(q[from], v128), get(q[from + 1], v128)),
      m.i16x8.narrow_i32x4_s(get(q[from + 2], v128), get(q[from + 3], v128)),
    );
  // 32 values: their integers, summed, stored as the even ones' bytes then the odd ones'.
  const pack = [
    ...q.map((x, j) =>
      m.local.set(
        x,
        m.i32x4.trunc_sat_f32x4_s(f4.nearest(f4.mul(quad(j), get(inverse, v128)))),
      )
    ),
    ...q.map((x) => m.local.set(sum, m.i32x4.add(get(sum, v128), get(x, v128)))),
    m.v128.store(0, 4, get(dst, i32), m.i8x16.shuffle(narrow(0), narrow(4), EVEN)),
    m.v128.store(16, 4, get(dst, i32), m.i8x16.shuffle(narrow(0), narrow(4), ODD)),
    advance(src, 4 * GROUP),
    advance(dst, GROUP),
  ];
  const block = [
    m.local.set(largest, f4.splat(m.f32.const(0))),
    ...countedLoop(g, tag.block / 4, [
      m.local.set(largest, f4.max(get(largest, v128), f4.abs(quad(0)))),
      advance(src, 16),
    ]),
    m.local.set(
      most,
      m.f32.max(
        m.f32.max(lane(largest, 0), lane(largest, 1)),
        m.f32.max(lane(largest, 2), lane(largest, 3)),
      ),
    ),
    m.local.set(scale, m.f32.div(get(most, f32), m.f32.const(127))),
    // QuantizeRowBlocks' inverse, 127 / largest: A the product rounds itself (`roundsA`) needs
    // it, and A rounded before gives back its integers by it as by any close factor.
    m.local.set(
      inverse,
      f4.splat(
        m.select(
          m.f32.ne(get(scale, f32), m.f32.const(0)),
          m.f32.div(m.f32.const(127), get(most, f32)),
          m.f32.const(0),
        ),
      ),
    ),
    advance(src, -4 * tag.block),
    m.local.set(sum, m.i32x4.splat(ic(0))),
    ...countedLoop(g, groups, pack),
    m.f32.store(0, 4, at(tables), get(scale, f32)),
    m.f32.store(
      0,
      4,
      at(tables + 4 * blocks),
      m.f32.mul(
        get(scale, f32),
        m.f32.convert_s.i32(
          m.i32.add(
            m.i32.add(
              m.i32x4.extract_lane(get(sum, v128), 0),
              m.i32x4.extract_lane(get(sum, v128), 1),
            ),
            m.i32.add(
              m.i32x4.extract_lane(get(sum, v128), 2),
              m.i32x4.extract_lane(get(sum, v128), 3),
            ),
          ),
        ),
      ),
    ),
  ];
  return [
    m.local.set(src, element(fn, get(tag.a, i32), m.i32.mul(get(row, i32), ic(k)))),
    m.local.set(dst, m.i32.add(get(fn.params.scratch, i32), ic(base))),
    ...countedLoop(b, blocks, block),
  ];
}

/** Scratch bytes of one row of A as {@linkcode regroupIntegers} leaves it, to 16 bytes. */
export function integerRowBytes(kernel: KernelIR, tag: StoredBlockProduct): number {
  const { blocks } = sizes(kernel, tag);
  return Math.ceil((blocks * tag.block + 8 * blocks) / 16) * 16;
}

/**
 * The statements summing output columns `col` … `col + cols − 1` against `rows` quantized rows in
 * the scratch ({@linkcode integerRowBytes} apart), and their sums (row-major): per block, per 32
 * values, each column's 16 bytes of words split into low and high four bits once and dotted with
 * each row's even and odd integers into an i32x4; at the block's end that sum, converted, times
 * the weight's scale and A's, into an f32x4 per row and column; the zero points' share (see
 * {@linkcode zeroShares}) subtracted at the end.
 */
export function integerRowDot(
  fn: KernelFunction,
  tag: StoredBlockProduct,
  col: number,
  cols: number,
  rows = 1,
): [number[], number[]] {
  const { m, wasm, local, get, ic, countedLoop } = fn;
  const { i32, v128 } = wasm, { blocks } = sizes(fn.kernel, tag), f4 = m.f32x4;
  const b = local(i32), bp = local(i32), sp = local(i32), qp = local(i32);
  const mask = local(v128), lo = local(v128), hi = local(v128);
  const columns = [...Array(cols).keys()], rowList = [...Array(rows).keys()];
  const cells = rowList.flatMap((r) => columns.map((c) => [r, c] as const));
  const even = rowList.map(() => local(v128)), odd = rowList.map(() => local(v128));
  const both = rowList.map(() => local(v128));
  const dot = cells.map(() => local(v128)), acc = cells.map(() => local(v128));
  const groups = tag.block / GROUP, rowBytes = blocks * tag.block / 2, tableBytes = 4 * blocks;
  const tables = blocks * tag.block, stride = integerRowBytes(fn.kernel, tag);
  const scratch = () => get(fn.params.scratch, i32);
  const rowOf = (input: number, bytes: number) => columnRow(fn, input, col, bytes);
  const add = (i: number, a: number, w: number) =>
    m.local.set(
      dot[i],
      m.i32x4.relaxed_dot_i8x16_i7x16_add_s(get(a, v128), get(w, v128), get(dot[i], v128)),
    );
  const dots = [...Array(groups).keys()].flatMap((g) => [
    ...rowList.flatMap((r) => [
      m.local.set(even[r], m.v128.load(r * stride + GROUP * g, 4, get(qp, i32))),
      m.local.set(odd[r], m.v128.load(r * stride + GROUP * g + 16, 4, get(qp, i32))),
    ]),
    ...columns.flatMap((c) => [
      m.local.set(hi, m.v128.load(c * rowBytes + 16 * g, 4, get(bp, i32))),
      m.local.set(lo, m.v128.and(get(hi, v128), get(mask, v128))),
      m.local.set(hi, m.v128.and(m.i16x8.shr_u(get(hi, v128), ic(4)), get(mask, v128))),
      ...rowList.flatMap((r) => [add(r * cols + c, even[r], lo), add(r * cols + c, odd[r], hi)]),
    ]),
  ]);
  const at = (offset: number) => element(fn, m.i32.add(scratch(), ic(offset)), get(b, i32));
  const block = [
    ...dot.map((d) => m.local.set(d, m.i32x4.splat(ic(0)))),
    m.local.set(qp, m.i32.add(scratch(), m.i32.mul(get(b, i32), ic(tag.block)))),
    ...dots,
    ...rowList.map((r) =>
      m.local.set(both[r], f4.splat(m.f32.load(0, 4, at(r * stride + tables))))
    ),
    ...cells.map(([r, c], i) =>
      m.local.set(
        acc[i],
        f4.relaxed_madd(
          f4.mul(f4.convert_i32x4_s(get(dot[i], v128)), get(both[r], v128)),
          f4.splat(m.f32.load(c * tableBytes, 4, get(sp, i32))),
          get(acc[i], v128),
        ),
      )
    ),
    m.local.set(bp, m.i32.add(get(bp, i32), ic(tag.block / 2))),
    m.local.set(sp, m.i32.add(get(sp, i32), ic(4))),
  ];
  const shareTables = rowList.map((r) => r * stride + tables + 4 * blocks);
  const [shares, corr] = zeroShares(fn, tag, col, cols, shareTables);
  const stmts = [
    m.local.set(mask, m.i8x16.splat(ic(15))),
    ...acc.map((x) => m.local.set(x, f4.splat(m.f32.const(0)))),
    m.local.set(bp, rowOf(tag.words, rowBytes)),
    m.local.set(sp, rowOf(tag.scales, tableBytes)),
    ...countedLoop(b, blocks, block),
    ...shares,
  ];
  return [stmts, columnSums(fn, acc, corr)];
}
