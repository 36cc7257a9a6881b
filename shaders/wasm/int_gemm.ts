/**
 * Integer matmul tiles for the WebAssembly generator: fusion's IntegerMatMul kernels (an i32 sum
 * of products of i16 values: quantized products, zero points subtracted) on `i32x4.dot_i16x8_s`,
 * which multiplies eight pairs of i16 lanes and adds each pair into an i32 lane: two k of four
 * columns an instruction, where the f32 tiles take one k of four columns a multiply-add.
 *
 * The arena holds integers as 32-bit words, so both operands are packed as i16 pairs: B's panels
 * once per change of a weight (8 columns, each k pair one 32-byte row: `b[k][c], b[k+1][c]` for
 * every column c), A's rows per call into the scratch (`a[k], a[k+1]` in one 32-bit word, which
 * `v128.load32_splat` spreads over the lanes). The loops around the tiles, the threads' split and
 * the packing call are the f32 tiles' (see `matmul.ts`); each finished tile goes through the
 * scratch to the kernel's epilogue: the f32 tiles' vector epilogue where the outputs dequantize
 * the sums (converted to f32 first, see `integerView`), else point by point.
 *
 * @module
 */
import { originOf } from "./padded.ts";
import type { MatmulPlan } from "./matmul_plan.ts";
import { type Gemm, gemmState, type MatmulContext, prepacked, rowA, setRow } from "./gemm_state.ts";
import { panels, pointwise, tiledLoops, tileEpilogue, tileRows, tileSteps } from "./matmul.ts";

/**
 * The integer tiled product of `plan` (see `integerPlan`), or `undefined` where its shape does
 * not fit the tiles: A's row not contiguous along K, B running backwards along K (packing reads
 * it at positive offsets) or changing along a batch axis.
 */
export function integerGemm(e: MatmulContext, plan: MatmulPlan): number[] | undefined {
  const state = gemmState(e, plan);
  if (!state?.wa || state.wa.weights[state.kAxis] !== 1) return undefined;
  const wb = state.wb!;
  if (wb.weights[state.kAxis] <= 0 || wb.weights.slice(0, state.nb).some((w) => w !== 0)) {
    return undefined;
  }
  // A is always packed (as i16 pairs), 4 bytes a pair of k.
  const g: Gemm = { ...state, packed: true, strideA: 4 };
  return tiledLoops(g, panels(g, (width) => packPairs(g, width)), integerTile, packRowPairs);
}

/** Copies B's panel of `width` ≤ 8 columns at n0 as i16 pairs of k, zero-padded to 8 columns. */
function packPairs(g: Gemm, width: number): number[] {
  const { m, local, get, ic, loadAddress, i32, strideB, strideN, r, n0, bPtr, kLoop } = g;
  const st: number[] = [];
  setRow(g, get(r, i32), get(n0, i32), st);
  const dst = local(i32);
  const word = (c: number) => {
    const at = (k: number) => m.i32.load(k * strideB + c * strideN, 4, get(bPtr, i32));
    return m.i32.or(m.i32.and(at(0), ic(0xffff)), m.i32.shl(at(1), ic(16)));
  };
  st.push(
    m.local.set(bPtr, loadAddress(g.b, st).address),
    m.local.set(dst, prepacked(g)),
    ...kLoop([
      ...[...Array(8).keys()].map((c) =>
        m.i32.store(4 * c, 4, get(dst, i32), c < width ? word(c) : ic(0))
      ),
      m.local.set(bPtr, m.i32.add(get(bPtr, i32), ic(2 * strideB))),
      m.local.set(dst, m.i32.add(get(dst, i32), ic(32))),
    ]),
  );
  return st;
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
  row.push(
    m.local.set(src, originOf(e.fn, g.wa!, 4, g.a.input)),
    ...countedLoop(kk, eights, [m.v128.store(0, 4, get(dst, i32), narrow), ...step(16)]),
    ...countedLoop(kk, pairs - 4 * eights, [m.i32.store(0, 4, get(dst, i32), pair), ...step(4)]),
    m.local.set(r, m.i32.add(get(r, i32), ic(1))),
  );
  st.push(whileLoop(() => m.i32.lt_s(get(r, i32), get(hi, i32)), row));
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
  // Where the outputs dequantize the sums (see `integerView`), the tile converts them and the
  // f32 tiles' epilogue follows; else each output reads its i32 sum point by point.
  const viewed = g.kernel.reductions[0].dtype === "f32";
  const st: number[] = [];
  const lins = viewed ? tileRows(g, rows, st, () => {}) : [];
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
  if (viewed) return [...st, ...tileEpilogue(g, rows, width, lins)];
  for (let i = 0; i < rows; i++) st.push(...pointwise(g, i, width, true));
  return st;
}
