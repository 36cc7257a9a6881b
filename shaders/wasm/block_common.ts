/**
 * What the two forms of a block product's wasm kernel share (`block_product.ts` in f32,
 * `block_product_int8.ts` in integers): the product's sizes, byte addresses of 32-bit elements
 * and of a column's rows, its blocks' zero points, and each column's result from its vector sum
 * and its zero points' share.
 *
 * @module
 */
import {
  type BlockTables,
  type KernelIR,
  storedA,
  type StoredBlockProduct,
} from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { KernelFunction } from "./module.ts";

/** A block product's sizes: values a word, words a block, blocks a row, and N and K. */
export function sizes(
  kernel: KernelIR,
  tag: StoredBlockProduct,
): { per: number; words: number; k: number; blocks: number; n: number } {
  // The space is [..., M, N, K]; the buffers may lie in other shapes of the same layout.
  const per = 32 / tag.bits, words = tag.block / per, [n, k] = kernel.space.slice(-2);
  const blocks = sizeOf(kernel.inputs[tag.words].shape) / n / words;
  return { per, words, k, blocks, n };
}

/**
 * An emitter of a block product's columns `col` … `col + cols − 1` (locals of the kernel's row
 * loop): the statements that sum them, and an expression of each one's result.
 */
export type ColumnSums = (
  fn: KernelFunction,
  tag: StoredBlockProduct,
  col: number,
  cols: number,
) => [number[], number[]];

/** The byte address of column `col`'s row (a local) of input `input`, rows `bytes` apart. */
export function columnRow(fn: KernelFunction, input: number, col: number, bytes: number): number {
  const { m, get, ic } = fn, i32 = fn.wasm.i32;
  return m.i32.add(get(input, i32), m.i32.mul(get(col, i32), ic(bytes)));
}

/**
 * Whether `kernel`'s code reads its blocks' zero points as bytes, one a block: where the compile
 * marked them `packed` (`jit/passes/packed_constants.ts`, as the model holds them) and the kernel
 * is a block product or unpacking this generator computes from its buffers (`codegen.ts`); else
 * a word each. The arena holds them so only where every kernel reading them reads them so
 * (`backends/wasm/held_zeros.ts`). A 4-bit product read a word of zero points for each 16 bytes
 * of values and 4 of scales: as bytes, a decoder streams 12.5 % fewer bytes a token. (Eight to a
 * word, as marked for 4 bits, would save 2 % more, but their unpacking cost a vector operation
 * more: the 0.5B decoder's products that stay in cache ran 10-15 % slower on the 2-core VM.)
 */
export function zeroBytes(kernel: KernelIR): boolean {
  const product = kernel.blockProduct && storedA(kernel.blockProduct)
    ? kernel.blockProduct
    : undefined;
  const zeros = (product ?? kernel.blockUnpack)?.zeros;
  return zeros !== undefined && kernel.inputs[zeros].packed !== undefined;
}

/**
 * Zero point `index()` (an i32 expression, counted in the table from `table()`) as f32: an f32,
 * or a whole value, a byte or a word (see {@linkcode zeroBytes}), converted; the middle value
 * where there are none.
 */
export function zeroOf(
  fn: KernelFunction,
  tag: BlockTables,
  table: () => number,
  index: () => number,
): number {
  const { m } = fn;
  if (tag.zeros === undefined) return m.f32.const(2 ** (tag.bits - 1));
  if (!wholeZeros(fn, tag)) return m.f32.load(0, 4, element(fn, table(), index()));
  return m.f32.convert_u.i32(
    zeroBytes(fn.kernel)
      ? m.i32.load8_u(0, m.i32.add(table(), index()))
      : m.i32.load(0, 4, element(fn, table(), index())),
  );
}

/** Whether `tag`'s zero points are whole values (u8) rather than f32. */
export function wholeZeros(fn: KernelFunction, tag: BlockTables): boolean {
  return tag.zeros !== undefined && fn.kernel.inputs[tag.zeros].dtype !== "f32";
}

/**
 * Four blocks' whole zero points from byte `offset` past i32 local `zp`, as f32x4: words as they
 * lie, or four bytes spread one to a lane.
 */
function zeroQuad(fn: KernelFunction, zp: number, offset: number): number {
  const { m, get } = fn, f4 = m.f32x4, i32 = fn.wasm.i32;
  if (!zeroBytes(fn.kernel)) return f4.convert_i32x4_s(m.v128.load(offset, 4, get(zp, i32)));
  const spread = [0, 16, 16, 16, 1, 16, 16, 16, 2, 16, 16, 16, 3, 16, 16, 16];
  const four = m.v128.load32_splat(offset, 1, get(zp, i32));
  return f4.convert_i32x4_s(m.i8x16.shuffle(four, m.v128.const(Array(16).fill(0)), spread));
}

/** The byte address of 32-bit element `index` from address `base`. */
export function element(fn: KernelFunction, base: number, index: number): number {
  return fn.m.i32.add(base, fn.m.i32.shl(index, fn.ic(2)));
}

/** The four lanes of f32x4 local `x` summed pairwise, in a fixed order. */
export function laneSum(fn: KernelFunction, x: number): number {
  const { m, get, wasm } = fn, f4 = m.f32x4;
  const lane = (i: number) => f4.extract_lane(get(x, wasm.v128), i);
  return m.f32.add(m.f32.add(lane(0), lane(1)), m.f32.add(lane(2), lane(3)));
}

/**
 * Each column's result: its f32x4 local `acc` summed across lanes (see {@linkcode laneSum}), less
 * its f32 local `corr` (the zero points' share).
 */
export function columnSums(
  fn: KernelFunction,
  acc: readonly number[],
  corr: readonly number[],
): number[] {
  return acc.map((sum, c) => fn.m.f32.sub(laneSum(fn, sum), fn.get(corr[c], fn.wasm.f32)));
}

/**
 * The statements setting each column's zero points' share, Σ over blocks of zero · scale · t_b,
 * and its f32 locals, for columns `col` … `col + cols − 1` and each of `tables` (row-major: a
 * table's columns together): t is a table of the scratch with a value a block, that many bytes in
 * (A's block sums; for A in integers, A's scale times its integer sum), one per row of A the
 * kernel sums at once, each column's zero · scale taken once for all of them. Four blocks a
 * vector after the products' loop, where it took six scalar instructions a column and block: with
 * it (and its nibbles split by a 16-bit shift), the integer form's 896 → 9728 product of a 0.5B
 * decoder took 0.42-0.43 ms on one thread of the 2-core VM against 0.53-0.54; the f32 form's
 * level-0 decode 25.4-27.6 → 29.6-31.2 tokens/s there.
 */
export function zeroShares(
  fn: KernelFunction,
  tag: StoredBlockProduct,
  col: number,
  cols: number,
  tables: readonly number[],
): [number[], number[]] {
  const { m, wasm, local, get, ic, countedLoop } = fn;
  const { i32, f32, v128 } = wasm, { blocks } = sizes(fn.kernel, tag), f4 = m.f32x4;
  const q = local(i32), sp = local(i32), zp = local(i32), tp = local(i32), zs = local(v128);
  const columns = [...Array(cols).keys()], tableBytes = 4 * blocks, quads = Math.floor(blocks / 4);
  const cells = tables.flatMap((_, t) => columns.map((c) => [t, c] as const));
  const acc = cells.map(() => local(v128)), corr = cells.map(() => local(f32));
  const middle = m.f32.const(2 ** (tag.bits - 1));
  // A column's zero points a byte or a word a block (see `zeroBytes`).
  const width = zeroBytes(fn.kernel) ? 1 : 4, zeroRow = width * blocks;
  const zeros = (c: number) =>
    tag.zeros === undefined
      ? f4.splat(middle)
      : wholeZeros(fn, tag)
      ? zeroQuad(fn, zp, c * zeroRow)
      : m.v128.load(c * tableBytes, 4, get(zp, i32));
  const zero = (c: number, r: number) =>
    zeroOf(fn, tag, () => get(zp, i32), () => ic(c * blocks + r));
  // Table t's bytes from the first's, where `tp` walks.
  const from = (t: number) => tables[t] - tables[0];
  const quad = columns.flatMap((c) => [
    m.local.set(zs, f4.mul(zeros(c), m.v128.load(c * tableBytes, 4, get(sp, i32)))),
    ...tables.map((_, t) =>
      m.local.set(
        acc[t * cols + c],
        f4.add(
          get(acc[t * cols + c], v128),
          f4.mul(get(zs, v128), m.v128.load(from(t), 4, get(tp, i32))),
        ),
      )
    ),
  ]);
  const advance = (ptr: number, bytes = 16) =>
    m.local.set(ptr, m.i32.add(get(ptr, i32), ic(bytes)));
  // The blocks past the last whole four, one at a time.
  const rest = [...Array(blocks - 4 * quads).keys()].flatMap((r) =>
    cells.map(([t, c], i) =>
      m.local.set(
        corr[i],
        m.f32.add(
          get(corr[i], f32),
          m.f32.mul(
            m.f32.mul(zero(c, r), m.f32.load(c * tableBytes + 4 * r, 4, get(sp, i32))),
            m.f32.load(from(t) + 4 * r, 4, get(tp, i32)),
          ),
        ),
      )
    )
  );
  const scratch = get(fn.params.scratch, i32);
  return [[
    ...acc.map((x) => m.local.set(x, f4.splat(m.f32.const(0)))),
    m.local.set(sp, columnRow(fn, tag.scales, col, tableBytes)),
    m.local.set(zp, tag.zeros === undefined ? ic(0) : columnRow(fn, tag.zeros, col, zeroRow)),
    m.local.set(tp, m.i32.add(scratch, ic(tables[0]))),
    ...countedLoop(q, quads, [
      ...quad,
      advance(sp),
      advance(zp, 4 * width),
      advance(tp),
    ]),
    ...acc.map((x, i) => m.local.set(corr[i], laneSum(fn, x))),
    ...rest,
  ], corr];
}
