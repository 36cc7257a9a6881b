/**
 * What the two forms of a block product's wasm kernel share (`block_product.ts` in f32,
 * `block_product_int8.ts` in integers): the product's sizes, byte addresses of 32-bit elements
 * and of a column's rows, its blocks' zero points, and each column's result from its vector sum
 * and its zero points' share.
 *
 * @module
 */
import type { BlockTables, KernelIR, StoredBlockProduct } from "../../jit/ir/kernel_ir.ts";
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
 * A block's zero point as f32: the element `offset` bytes past `address()` (an f32, or a u8 held
 * in a 32-bit word, converted), or the middle value where there are none.
 */
export function zeroOf(
  fn: KernelFunction,
  tag: BlockTables,
  address: () => number,
  offset = 0,
): number {
  const { m } = fn;
  if (tag.zeros === undefined) return m.f32.const(2 ** (tag.bits - 1));
  return wholeZeros(fn, tag)
    ? m.f32.convert_u.i32(m.i32.load(offset, 4, address()))
    : m.f32.load(offset, 4, address());
}

/** Whether `tag`'s zero points are whole values (u8, a 32-bit word each) rather than f32. */
export function wholeZeros(fn: KernelFunction, tag: BlockTables): boolean {
  return tag.zeros !== undefined && fn.kernel.inputs[tag.zeros].dtype !== "f32";
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
