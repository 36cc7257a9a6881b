/**
 * Products by block-quantized weights for the WebAssembly generator: fusion's `blockProduct`
 * kernels (a BlockMatMul of few rows, `jit/ops/block_matmul.ts`), where each output reads its
 * weight row's packed bytes once and unpacks them in registers. The dequantizing expression the
 * kernel also carries is what the other backends run; this computes the same sum regrouped:
 * Σ_b scale_b · (Σ_j v_j · a_j − zero_b · Σ_j a_j).
 *
 * The values are packed in u32 words (four bytes each), so one i32x4 load takes sixteen bytes,
 * and a mask per value slot of a word (eight for 4 bits; a shift a group of slots) gives four
 * values each, one word apart in K. A's row is regrouped into the thread's scratch once per row of
 * A the thread meets (rows split among threads with N innermost; the integer form regroups two
 * whole rows at once and sums them together): for each four words g of block b
 * and each slot s, the four values those words hold there sit together (`a[b·block + (4g + L)·per +
 * s]` at `b·block + (g·per + s)·4 + L`, scaled as the slot lies in its word), past K zero, and each
 * block's sum after all of them.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import type { BlockTables, KernelIR, StoredBlockProduct } from "../../jit/ir/kernel_ir.ts";
import type { KernelFunction } from "./module.ts";
import {
  columnRow,
  type ColumnSums,
  columnSums,
  element,
  sizes,
  zeroOf,
  zeroShares,
} from "./block_common.ts";
import {
  integerBlocks,
  integerRowBytes,
  integerRowDot,
  regroupIntegers,
} from "./block_product_int8.ts";

/**
 * Slot `s` of the four words in v128 local `w`, four values: shifted down and, but for the top
 * slot, masked by local `mask` (the value mask in every lane). The values are below 2^8, so their
 * callers convert them as signed: one `cvtdq2ps` on x64, where V8 lowers the unsigned conversion
 * to eight instructions (SSE and AVX2 have no unsigned one).
 */
function slotOf(fn: KernelFunction, tag: BlockTables, w: number, mask: number, s: number): number {
  const { m, ic } = fn, v128 = fn.wasm.v128, per = 32 / tag.bits;
  const shifted = s === 0 ? fn.get(w, v128) : m.i32x4.shr_u(fn.get(w, v128), ic(s * tag.bits));
  return s === per - 1 ? shifted : m.v128.and(shifted, fn.get(mask, v128));
}

/** The statement setting v128 local `mask` to the value mask in every lane. */
function setMask(fn: KernelFunction, tag: BlockTables, mask: number): number {
  return fn.m.local.set(mask, fn.m.i32x4.splat(fn.ic((1 << tag.bits) - 1)));
}

/**
 * Slots a product's kernel takes out of a word in place, with a mask each and no shift (see
 * {@linkcode rowDot}): as many as fit in 16 bits, at most four. In place, slot r of a group holds
 * its value times 2^(r·bits), below 2^16, so the signed conversion stays exact, and the scratch
 * holds A's values for that slot times 2^(−r·bits): the product of the two is the value's own.
 */
function inPlace(tag: BlockTables): number {
  return Math.min(4, 16 / tag.bits);
}

/** Scratch bytes of a block product's kernel: A's row regrouped and its blocks' sums. */
export function blockScratchBytes(kernel: KernelIR, tag: StoredBlockProduct): number {
  const { blocks } = sizes(kernel, tag);
  // The integer form's two rows at once (`rowPair`) fit in the f32 form's one: kept apart anyway.
  return Math.max(4 * blocks * (tag.block + 1), ROWS * integerRowBytes(kernel, tag));
}

/** Output columns a block product's kernel computes together, sharing each load of A. */
export const COLUMNS = 4;

/**
 * The body of `fn`, a block product's kernel: every output of the thread's range, row by row,
 * {@linkcode COLUMNS} columns at a time where they are in the range (each of A's vector loads then
 * feeds that many weight rows), one at a time at its ends. Both paths add in the same order, so
 * an output's value does not depend on how the rows were split among threads.
 */
export function blockProductBody(fn: KernelFunction, tag: StoredBlockProduct): number[] {
  const { m, wasm, local, get, ic, kept, unravel, whileLoop } = fn;
  const { start, end } = fn.params;
  const i32 = wasm.i32, { n } = sizes(fn.kernel, tag);
  const outer = local(i32), row = local(i32), last = local(i32), col = local(i32);
  // A rounded to 8 bits a block sums in integers (`block_product_int8.ts`).
  const integers = integerBlocks(fn, tag);
  if (tag.roundsA && !integers) {
    // Its expressions read A unrounded: only the integer kernel rounds it.
    throw new KilnError(`Kernel ${fn.kernel.name} rounds its A, which only relaxed SIMD's do`, {
      code: "internal",
      fix: "compile products that round A (packed_rows.ts) only where the engine has relaxed " +
        "SIMD, or report this",
    });
  }
  const step = (cols: number) => {
    const [dot, sums] = integers ? integerRowDot(fn, tag, col, cols) : rowDot(fn, tag, col, cols);
    return [
      ...dot,
      ...columnStores(fn, col, sums),
      m.local.set(outer, m.i32.add(get(outer, i32), ic(cols))),
    ];
  };
  const together = m.i32.and(
    m.i32.le_u(m.i32.add(get(col, i32), ic(COLUMNS)), ic(n)),
    m.i32.le_s(m.i32.add(get(outer, i32), ic(COLUMNS)), get(end, i32)),
  );
  const single = [
    m.if(
      m.i32.ne(get(row, i32), get(last, i32)),
      m.block(null, [
        ...(integers ? regroupIntegers(fn, tag, row) : regroup(fn, tag, row)),
        m.local.set(last, get(row, i32)),
      ]),
    ),
    ...unravel(kept.slice(0, -1), row),
    m.if(together, m.block(null, step(COLUMNS)), m.block(null, step(1))),
  ];
  const whole = integers && n % COLUMNS === 0;
  // Whole rows of the range, from the start of the first: summed {@linkcode ROWS} at a time.
  const paired = m.i32.and(
    m.i32.eqz(get(col, i32)),
    m.i32.le_s(m.i32.add(get(outer, i32), ic(ROWS * n)), get(end, i32)),
  );
  return [
    m.local.set(last, ic(-1)),
    m.local.set(outer, get(start, i32)),
    whileLoop(() => m.i32.lt_s(get(outer, i32), get(end, i32)), [
      m.local.set(row, m.i32.div_u(get(outer, i32), ic(n))),
      m.local.set(col, m.i32.rem_u(get(outer, i32), ic(n))),
      whole
        ? m.if(
          paired,
          m.block(null, rowPair(fn, tag, { row, col, last, outer })),
          m.block(null, single),
        )
        : m.block(null, single),
    ]),
  ];
}

/**
 * Statements storing the outputs of the current row's columns `col`, `col + 1`, … (a local), the
 * sum of each being `sums[c]`.
 */
function columnStores(fn: KernelFunction, col: number, sums: readonly number[]): number[] {
  const { m, get, ic } = fn, nb = fn.kernel.space.length - 3;
  return sums.flatMap((sum, c) =>
    fn.pointOutputs(nb, m.i32.add(get(col, fn.wasm.i32), ic(c)), sum)
  );
}

/** Rows of A an integer product's kernel sums at once where the range holds them whole. */
const ROWS = 2;

/**
 * The statements computing {@linkcode ROWS} rows from `row` whole (locals of
 * {@linkcode blockProductBody}, `col` at 0, the range holding them), {@linkcode COLUMNS} columns
 * at a time: each column's words are split into their values once for all the rows, where a row
 * at a time split them once a row (the 0.5B decoder's products of 128 rows took 5-15 % less
 * time on the 2-core VM, `bench/REPORT-generate.md`, session 89). The rows are quantized into the
 * scratch one after another, the first where a single row's goes (`last` says it is there), and
 * each output's value is the single row's, sum for sum.
 */
function rowPair(
  fn: KernelFunction,
  tag: StoredBlockProduct,
  { row, col, last, outer }: { row: number; col: number; last: number; outer: number },
): number[] {
  const { m, wasm, local, get, ic, kept, unravel, countedLoop } = fn;
  const i32 = wasm.i32, { n } = sizes(fn.kernel, tag);
  const next = local(i32), step = local(i32), rows = [...Array(ROWS).keys()];
  const [dot, sums] = integerRowDot(fn, tag, col, COLUMNS, ROWS);
  const at = (r: number) => m.local.set(next, m.i32.add(get(row, i32), ic(r)));
  const stores = (r: number) => [
    at(r),
    ...unravel(kept.slice(0, -1), next),
    ...columnStores(fn, col, sums.slice(r * COLUMNS, (r + 1) * COLUMNS)),
  ];
  const bytes = integerRowBytes(fn.kernel, tag);
  return [
    ...rows.flatMap((r) => [at(r), ...regroupIntegers(fn, tag, next, r * bytes)]),
    ...countedLoop(step, n / COLUMNS, [
      m.local.set(col, m.i32.mul(get(step, i32), ic(COLUMNS))),
      ...dot,
      ...rows.flatMap(stores),
    ]),
    m.local.set(last, get(row, i32)),
    m.local.set(outer, m.i32.add(get(outer, i32), ic(ROWS * n))),
  ];
}

/** Copies row `row` of A into the scratch regrouped by value slot, with its blocks' sums. */
function regroup(fn: KernelFunction, tag: StoredBlockProduct, row: number): number[] {
  const { m, wasm, local, get, ic, countedLoop } = fn;
  const { i32, f32 } = wasm, { per, words, k, blocks } = sizes(fn.kernel, tag);
  const b = local(i32), g = local(i32), t = local(i32), kk = local(i32);
  const sum = local(f32), src = local(i32), value = local(f32), group = inPlace(tag);
  const at = (base: number, offset: number) => element(fn, base, offset);
  const scratch = () => get(fn.params.scratch, i32);
  // Four words' slot s, lane L: A's value k = t + L·per + s goes to t + s·4 + L (t: the four
  // words' first value), scaled as the slot lies in place (see `inPlace`); past K (the last block
  // cut short) it is 0. The block's sum is of A's own values.
  const lanes = [...Array(per).keys()].flatMap((s) =>
    [0, 1, 2, 3].flatMap((lane) => {
      const scale = 2 ** (-(s % group) * tag.bits);
      const read = m.select(
        m.i32.lt_u(get(kk, i32), ic(k)),
        m.f32.load(0, 4, at(get(src, i32), get(kk, i32))),
        m.f32.const(0),
      );
      const scaled = scale === 1 ? get(value, f32) : m.f32.mul(get(value, f32), m.f32.const(scale));
      return [
        m.local.set(kk, m.i32.add(get(t, i32), ic(lane * per + s))),
        m.local.set(value, read),
        m.f32.store(0, 4, at(scratch(), m.i32.add(get(t, i32), ic(s * 4 + lane))), scaled),
        m.local.set(sum, m.f32.add(get(sum, f32), get(value, f32))),
      ];
    })
  );
  const first = () =>
    m.i32.add(m.i32.mul(get(b, i32), ic(tag.block)), m.i32.mul(get(g, i32), ic(4 * per)));
  return [
    m.local.set(src, at(get(tag.a, i32), m.i32.mul(get(row, i32), ic(k)))),
    ...countedLoop(b, blocks, [
      m.local.set(sum, m.f32.const(0)),
      ...countedLoop(g, words / 4, [m.local.set(t, first()), ...lanes]),
      m.f32.store(
        0,
        4,
        at(scratch(), m.i32.add(ic(blocks * tag.block), get(b, i32))),
        get(sum, f32),
      ),
    ]),
  ];
}

/**
 * The statements summing output columns `col` … `col + cols − 1` against the current row of A
 * (regrouped in the scratch), and their sums: per block, four words of each column's weight row
 * at a time, each value slot masked in place (a shift a group of slots, see {@linkcode inPlace}),
 * converted and multiplied by the four scratch floats loaded once for all columns, into a vector
 * sum per column scaled at the block's end; the zero points' share (zero · scale · the block's sum
 * of A, four blocks a vector: `zeroShares`) subtracted at the end. The columns' rows lie a fixed
 * stride apart, reached by constant load offsets.
 */
const rowDot: ColumnSums = (fn, tag, col, cols) => {
  const { m, wasm, local, get, ic, countedLoop } = fn;
  const { i32, v128 } = wasm, { per, words, blocks } = sizes(fn.kernel, tag);
  const f4 = m.f32x4, b = local(i32), g = local(i32), bp = local(i32), ap = local(i32);
  const sp = local(i32), a = local(v128), group = inPlace(tag);
  const masks = [...Array(group).keys()].map(() => local(v128));
  const columns = [...Array(cols).keys()];
  const w = columns.map(() => local(v128));
  const acc = columns.map(() => local(v128)), part = columns.map(() => local(v128));
  // Byte strides from one column's weight row, and its scales' row, to the next.
  const rowBytes = 4 * blocks * words, tableBytes = 4 * blocks;
  const scratch = () => get(fn.params.scratch, i32);
  const rowOf = (input: number, width: number) => columnRow(fn, input, col, 4 * width);
  const quad = columns.map((c) => m.local.set(w[c], m.v128.load(c * rowBytes, 4, get(bp, i32))));
  for (let s = 0; s < per; s++) {
    quad.push(m.local.set(a, m.v128.load(16 * s, 4, get(ap, i32))));
    // A group's slots lie in place; the next group's come down by one shift of the word.
    if (s > 0 && s % group === 0) {
      const down = (c: number) => m.i32x4.shr_u(get(w[c], v128), ic(group * tag.bits));
      quad.push(...columns.map((c) => m.local.set(w[c], down(c))));
    }
    for (const c of columns) {
      const q = f4.convert_i32x4_s(m.v128.and(get(w[c], v128), get(masks[s % group], v128)));
      // Relaxed SIMD's multiply-add where the engine has it: one operation fewer of the four
      // (mask, convert, multiply, add) that bound the kernel.
      quad.push(m.local.set(part[c], fn.madd(q, get(a, v128), get(part[c], v128))));
    }
  }
  quad.push(
    m.local.set(bp, m.i32.add(get(bp, i32), ic(16))),
    m.local.set(ap, m.i32.add(get(ap, i32), ic(16 * per))),
  );
  const scaled = (c: number) =>
    fn.madd(
      get(part[c], v128),
      f4.splat(m.f32.load(c * tableBytes, 4, get(sp, i32))),
      get(acc[c], v128),
    );
  const block = [
    ...part.map((p) => m.local.set(p, f4.splat(m.f32.const(0)))),
    m.local.set(ap, m.i32.add(scratch(), m.i32.mul(get(b, i32), ic(4 * tag.block)))),
    ...countedLoop(g, words / 4, quad),
    ...columns.map((c) => m.local.set(acc[c], scaled(c))),
    m.local.set(sp, m.i32.add(get(sp, i32), ic(4))),
  ];
  // The zero points' share, from the blocks' sums of A after A's values in the scratch.
  const [shares, corr] = zeroShares(fn, tag, col, cols, [4 * blocks * tag.block]);
  const stmts = [
    ...masks.map((x, r) =>
      m.local.set(x, m.i32x4.splat(ic(((1 << tag.bits) - 1) << (r * tag.bits))))
    ),
    ...acc.map((x) => m.local.set(x, f4.splat(m.f32.const(0)))),
    m.local.set(bp, rowOf(tag.words, blocks * words)),
    m.local.set(sp, rowOf(tag.scales, blocks)),
    ...countedLoop(b, blocks, block),
    ...shares,
  ];
  return [stmts, columnSums(fn, acc, corr)];
};

/**
 * The body of `fn`, a block-quantized weight's unpacking for a product of many rows: its output
 * [K, N] (the product's B), the thread's range whole blocks of K (rows of `block · N` points, see
 * the arena's split). Per block, per row n of the weight: four words a vector load, each value
 * slot shifted out, masked, converted, less the zero point, times the scale, each lane stored at
 * its k; the block K cuts short, value by value.
 */
export function blockUnpackBody(fn: KernelFunction, tag: BlockTables): number[] {
  const { m, wasm, local, get, ic, whileLoop, countedLoop } = fn;
  const { i32, v128 } = wasm, f4 = m.f32x4;
  const [k, n] = fn.kernel.space, per = 32 / tag.bits, words = tag.block / per;
  const blocks = Math.ceil(k / tag.block), whole = Math.floor(k / tag.block);
  const b = local(i32), col = local(i32), wp = local(i32), stop = local(i32), p = local(i32);
  const zero = local(v128), scale = local(v128), w = local(v128), mask = local(v128);
  const g = local(i32), j = local(i32), word = local(i32), value = local(i32);
  const at = (input: number, index: number) => element(fn, get(input, i32), index);
  const cell = () => m.i32.add(m.i32.mul(get(col, i32), ic(blocks)), get(b, i32));
  // Four words' slot s: lane L holds the value k = t + (L·per + s), stored at p + (L·per + s)·N.
  const quad: number[] = [m.local.set(w, m.v128.load(0, 4, get(wp, i32)))];
  for (let s = 0; s < per; s++) {
    const q = slotOf(fn, tag, w, mask, s);
    const v = local(v128);
    quad.push(
      m.local.set(v, f4.mul(f4.sub(f4.convert_i32x4_s(q), get(zero, v128)), get(scale, v128))),
    );
    for (let lane = 0; lane < 4; lane++) {
      quad.push(
        m.f32.store(4 * (lane * per + s) * n, 4, get(p, i32), f4.extract_lane(get(v, v128), lane)),
      );
    }
  }
  quad.push(
    m.local.set(wp, m.i32.add(get(wp, i32), ic(16))),
    m.local.set(p, m.i32.add(get(p, i32), ic(16 * per * n))),
  );
  // The block K cuts short: value j of the block from word j / per, slot j % per.
  const tail = countedLoop(j, k - whole * tag.block, [
    m.local.set(
      word,
      m.i32.load(
        0,
        4,
        m.i32.add(get(wp, i32), m.i32.shl(m.i32.shr_u(get(j, i32), ic(Math.log2(per))), ic(2))),
      ),
    ),
    m.local.set(
      value,
      m.i32.and(
        m.i32.shr_u(get(word, i32), m.i32.mul(m.i32.and(get(j, i32), ic(per - 1)), ic(tag.bits))),
        ic((1 << tag.bits) - 1),
      ),
    ),
    m.f32.store(
      0,
      4,
      m.i32.add(get(p, i32), m.i32.mul(get(j, i32), ic(4 * n))),
      f4.extract_lane(
        f4.mul(
          f4.sub(f4.splat(m.f32.convert_u.i32(get(value, i32))), get(zero, v128)),
          get(scale, v128),
        ),
        0,
      ),
    ),
  ]);
  const row = [
    m.local.set(wp, at(tag.words, m.i32.mul(cell(), ic(words)))),
    m.local.set(zero, f4.splat(zeroOf(fn, tag, () => get(tag.zeros!, i32), cell))),
    m.local.set(scale, f4.splat(m.f32.load(0, 4, at(tag.scales, cell())))),
    m.local.set(
      p,
      at(
        fn.kernel.inputs.length,
        m.i32.add(m.i32.mul(get(b, i32), ic(tag.block * n)), get(col, i32)),
      ),
    ),
    m.if(
      m.i32.lt_u(get(b, i32), ic(whole)),
      m.block(null, countedLoop(g, words / 4, quad)),
      m.block(null, tail),
    ),
  ];
  const { start, end } = fn.params;
  return [
    setMask(fn, tag, mask),
    m.local.set(b, m.i32.div_u(get(start, i32), ic(tag.block * n))),
    m.local.set(
      stop,
      m.i32.div_u(m.i32.add(get(end, i32), ic(tag.block * n - 1)), ic(tag.block * n)),
    ),
    whileLoop(() => m.i32.lt_u(get(b, i32), get(stop, i32)), [
      ...countedLoop(col, n, row),
      m.local.set(b, m.i32.add(get(b, i32), ic(1))),
    ]),
  ];
}
