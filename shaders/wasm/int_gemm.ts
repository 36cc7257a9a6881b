/**
 * Integer matmul tiles for the WebAssembly generator: fusion's IntegerMatMul and IntegerConv
 * kernels (an i32 sum of products of i16 values: quantized products, zero points subtracted) on
 * `i32x4.dot_i16x8_s`, which multiplies eight pairs of i16 lanes and adds each pair into an i32
 * lane: two k of four columns an instruction, where the f32 tiles take one k of four columns a
 * multiply-add.
 *
 * The arena holds integers as 32-bit words, so both operands are packed as i16 pairs: B's panels
 * once per change of a weight (8 columns, each k pair one 32-byte row: `b[k][c], b[k+1][c]` for
 * every column c), A's rows per call into the scratch (`a[k], a[k+1]` in one 32-bit word, which
 * `v128.load32_splat` spreads over the lanes). A convolution's patches are gathered first as the
 * f32 tiles gather theirs (the same indirection table) and narrowed in place: against the float
 * convolutions of integers they replace (exact channel slices), ResNet-50's 3×3 convolutions went
 * from 1.0-1.1× their f32 form's time to 0.7-0.85× on one thread (`bench/int_convs.ts`, 2-core
 * VM). The loops around the tiles, the threads' split and the packing call are the f32 tiles'
 * (see `matmul.ts`); each finished tile goes through the scratch to the kernel's epilogue: the
 * f32 tiles' vector epilogue where the outputs dequantize the sums (converted to f32 first, see
 * `integerView`), else point by point.
 *
 * @module
 */
import { originOf } from "./padded.ts";
import type { MatmulPlan } from "./matmul_plan.ts";
import { type Gemm, gemmState, type MatmulContext, prepacked, rowA, setRow } from "./gemm_state.ts";
import { buildTable, packA } from "./gemm_pack.ts";
import { panels, tiledLoops, tileEpilogue, tileRows, tileSteps } from "./matmul.ts";

/**
 * The integer tiled product of `plan` (see `integerPlan`), or `undefined` where its shape does
 * not fit the tiles: A's row not contiguous along K, B running backwards along K (packing reads
 * it at positive offsets) or changing along a batch axis.
 */
export function integerGemm(e: MatmulContext, plan: MatmulPlan): number[] | undefined {
  const state = gemmState(e, plan);
  // A gathered (a convolution's patches), or read in place along K.
  if (!state || (state.wa ? state.wa.weights[state.kAxis] !== 1 : !state.packed)) {
    return undefined;
  }
  const wb = state.wb!;
  // A batch axis of extent 1 (an integer conv's one group) never moves B, whatever it weighs.
  const moves = (w: number, i: number) => w !== 0 && state.kernel.space[i] > 1;
  if (wb.weights[state.kAxis] <= 0 || wb.weights.slice(0, state.nb).some(moves)) {
    return undefined;
  }
  // A is always packed (as i16 pairs), 4 bytes a pair of k.
  const g: Gemm = { ...state, packed: true, strideA: 4 };
  // A gathered takes K words a row before they are narrowed to pairs (see `packGathered`).
  const words: Gemm = { ...g, k: 2 * g.k, kLoop: (body) => g.countedLoop(g.kk, 2 * g.k, body) };
  const packPanel = (width: number) => packPairs(g, width);
  return tiledLoops(g, {
    packB: panels(g, packPanel),
    packPanel,
    tile: integerTile,
    packRowsOfA: state.wa ? packRowPairs : () => packGathered(g, words),
    table: e.tableFill !== undefined ? buildTable(words) : [],
  });
}

/** Copies B's panel of `width` ≤ 8 columns at n0 as i16 pairs of k, zero-padded to 8 columns. */
function packPairs(g: Gemm, width: number): number[] {
  const { m, local, get, ic, loadAddress, i32, v128, strideB, strideN, r, n0, bPtr, kLoop } = g;
  const { b0, b1 } = g;
  const st: number[] = [];
  setRow(g, get(r, i32), get(n0, i32), st);
  const dst = local(i32);
  const word = (c: number) => {
    const at = (k: number) => m.i32.load(k * strideB + c * strideN, 4, get(bPtr, i32));
    return m.i32.or(m.i32.and(at(0), ic(0xffff)), m.i32.shl(at(1), ic(16)));
  };
  // Contiguous columns (a 1×1 convolution's pixels, packed each run): each k's eight narrowed
  // to i16 lanes, the two k's lanes interleaved into pairs; one at a time, 256 → 64 channels at
  // 56×56 took 1.6× its f32 form on one thread.
  const row = (k: number) =>
    m.i16x8.narrow_i32x4_s(
      m.v128.load(k * strideB, 4, get(bPtr, i32)),
      m.v128.load(k * strideB + 16, 4, get(bPtr, i32)),
    );
  // Columns 4·half to 4·half + 3 of both k: bytes 2c, 2c + 1 of each narrowed row.
  const pairs = (half: number) =>
    m.i8x16.shuffle(
      get(b0, v128),
      get(b1, v128),
      [...Array(4).keys()].flatMap((c) => {
        const lane = 2 * (4 * half + c);
        return [lane, lane + 1, 16 + lane, 17 + lane];
      }),
    );
  const vectors = strideN === 4 && width === 8;
  st.push(
    m.local.set(bPtr, loadAddress(g.b, st).address),
    m.local.set(dst, prepacked(g)),
    ...kLoop([
      ...(vectors
        ? [
          m.local.set(b0, row(0)),
          m.local.set(b1, row(1)),
          ...[0, 1].map((half) => m.v128.store(16 * half, 4, get(dst, i32), pairs(half))),
        ]
        : [...Array(8).keys()].map((c) =>
          m.i32.store(4 * c, 4, get(dst, i32), c < width ? word(c) : ic(0))
        )),
      m.local.set(bPtr, m.i32.add(get(bPtr, i32), ic(2 * strideB))),
      m.local.set(dst, m.i32.add(get(dst, i32), ic(32))),
    ]),
  );
  return st;
}

/**
 * Steps narrowing 32-bit words at local `src` to i16 pairs at local `dst`, both moved past them:
 * `eight` words to a vector, or `two` to one pair.
 */
function narrowing(g: Gemm, src: number, dst: number): { eight: number[]; two: number[] } {
  const { m, get, ic, i32 } = g;
  const step = (bytes: number) => [
    m.local.set(src, m.i32.add(get(src, i32), ic(2 * bytes))),
    m.local.set(dst, m.i32.add(get(dst, i32), ic(bytes))),
  ];
  const narrow = m.i16x8.narrow_i32x4_s(
    m.v128.load(0, 4, get(src, i32)),
    m.v128.load(16, 4, get(src, i32)),
  );
  const pair = m.i32.or(
    m.i32.and(m.i32.load(0, 4, get(src, i32)), ic(0xffff)),
    m.i32.shl(m.i32.load(4, 4, get(src, i32)), ic(16)),
  );
  return {
    eight: [m.v128.store(0, 4, get(dst, i32), narrow), ...step(16)],
    two: [m.i32.store(0, 4, get(dst, i32), pair), ...step(4)],
  };
}

/**
 * Packs rows [lo, hi) of A into the scratch as i16 pairs: eight words narrowed to eight i16
 * lanes a step, the last pairs one word each.
 */
function packRowPairs(g: Gemm): number[] {
  const { m, local, get, ic, whileLoop, countedLoop, i32, k, r, lo, hi, e } = g;
  const st: number[] = [], dst = local(i32), src = local(i32), kk = local(i32);
  st.push(m.local.set(dst, rowA(g, get(lo, i32), st)), m.local.set(r, get(lo, i32)));
  const row: number[] = [];
  setRow(g, get(r, i32), ic(0), row);
  const pairs = k, eights = pairs >> 2;
  const { eight, two } = narrowing(g, src, dst);
  row.push(
    m.local.set(src, originOf(e.fn, g.wa!, 4, g.a.input)),
    ...countedLoop(kk, eights, eight),
    ...countedLoop(kk, pairs - 4 * eights, two),
    m.local.set(r, m.i32.add(get(r, i32), ic(1))),
  );
  st.push(whileLoop(() => m.i32.lt_s(get(r, i32), get(hi, i32)), row));
  return st;
}

/**
 * Packs rows [lo, hi) of a gathered A (a convolution's patches) as i16 pairs: its 32-bit words
 * gathered as the f32 tiles gather theirs (`words`: K a row, through the indirection table or
 * A's index map), then narrowed in place, front to back, eight words a step (each pair lands at or
 * before the words it is made of, read first).
 */
function packGathered(g: Gemm, words: Gemm): number[] {
  const { m, local, get, ic, whileLoop, i32, k, lo, hi } = g;
  const src = local(i32), dst = local(i32), last = local(i32);
  const st = packA(words);
  const base = rowA(g, get(lo, i32), st);
  const { eight, two } = narrowing(g, src, dst);
  // The pairs end where the block's 2k words (k pairs a row) would end at 2 bytes each.
  const pairsEnd = m.i32.add(
    get(dst, i32),
    m.i32.mul(m.i32.sub(get(hi, i32), get(lo, i32)), ic(4 * k)),
  );
  st.push(
    m.local.set(src, base),
    m.local.set(dst, get(src, i32)),
    m.local.set(last, pairsEnd),
    whileLoop(() => m.i32.le_u(m.i32.add(get(dst, i32), ic(16)), get(last, i32)), eight),
    whileLoop(() => m.i32.lt_u(get(dst, i32), get(last, i32)), two),
  );
  return st;
}

/**
 * A tile of `rows` rows at r against the panel at n0: pairs of k into i32x4 accumulators. The
 * packed rows lie `4k` bytes apart, so one pointer walks all of them (memory offsets), two pairs
 * a pass.
 */
function integerTile(g: Gemm, rows: number, width: number): number[] {
  const { m, get, ic, countedLoop, scratch, f4, i32, v128, k, r, kk, bPtr, bPanel } = g;
  const { aPtr, acc } = g;
  // Where the outputs dequantize the sums (see `integerView`), the tile converts them to f32;
  // else the outputs read the i32 sums (a bias added in i32 first: QDQ's requantization). The
  // f32 tiles' epilogue follows either way: point by point, ResNet-50 QDQ's 1×1 convolutions
  // with a residual took twice their product's time in it.
  const viewed = g.kernel.reductions[0].dtype === "f32";
  const st: number[] = [];
  const lins = tileRows(g, rows, st, () => {});
  st.push(m.local.set(aPtr[0], rowA(g, get(r, i32), [])), m.local.set(bPtr, get(bPanel, i32)));
  for (let i = 0; i < 2 * rows; i++) st.push(m.local.set(acc[i], f4.splat(m.f32.const(0))));
  const dot = (a: number, b: number, sum: number) => m.i32x4.add(sum, m.i32x4.dot_i16x8_s(a, b));
  const pass = (steps: number) => {
    // Row i's packed pairs lie 4k bytes after row i − 1's.
    const splat = (u: number, i: number) =>
      m.v128.load32_splat(4 * (u + i * k), 4, get(aPtr[0], i32));
    const body = tileSteps(g, rows, steps, splat, dot);
    body.push(
      m.local.set(bPtr, m.i32.add(get(bPtr, i32), ic(32 * steps))),
      m.local.set(aPtr[0], m.i32.add(get(aPtr[0], i32), ic(4 * steps))),
    );
    return body;
  };
  st.push(...countedLoop(kk, k >> 1, pass(2)), ...(k % 2 ? pass(1) : []));
  for (let i = 0; i < 2 * rows; i++) {
    const sums = get(acc[i], v128);
    st.push(m.v128.store(16 * i, 4, get(scratch, i32), viewed ? f4.convert_i32x4_s(sums) : sums));
  }
  return [...st, ...tileEpilogue(g, rows, width, lins, !viewed)];
}
