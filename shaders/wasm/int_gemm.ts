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
import type { IntegerPlan } from "./matmul_plan.ts";
import { type Gemm, gemmState, type MatmulContext, rowA } from "./gemm_state.ts";
import { buildTable } from "./gemm_pack.ts";
import { packGathered, type Packing, packPanel as packPanelOf, packRows } from "./int_pack.ts";
import { panels, tiledLoops, tileEpilogue, tileRows, tileSteps } from "./matmul.ts";

/**
 * The integer tiled product of `plan` (see `integerPlan`), or `undefined` where its shape does
 * not fit the tiles: A's row not contiguous along K, B running backwards along K (packing reads
 * it at positive offsets) or changing along a batch axis.
 */
export function integerGemm(e: MatmulContext, plan: IntegerPlan): number[] | undefined {
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
  const p: Packing = {
    lanes: plan.lanes,
    unsignedA: plan.a.dtype === "u8",
    unsignedB: plan.b.dtype === "u8",
  };
  // A is always packed, 4 bytes a word of k.
  const g: Gemm = { ...state, packed: true, strideA: 4 };
  // A gathered takes K words a row before they are narrowed (see `packGathered`).
  const k = p.lanes * g.k;
  const words: Gemm = { ...g, k, kLoop: (body) => g.countedLoop(g.kk, k, body) };
  const packPanel = (width: number) => packPanelOf(g, p, width);
  return tiledLoops(g, {
    packB: panels(g, packPanel),
    packPanel,
    tile: (g, rows, width) => integerTile(g, p, rows, width),
    packRowsOfA: state.wa ? (g) => packRows(g, p) : () => packGathered(g, words, p),
    table: e.tableFill !== undefined ? buildTable(words) : [],
  });
}

/**
 * A tile of `rows` rows at r against the panel at n0: words of k (pairs or quads) into i32x4
 * accumulators. The packed rows lie `4k` bytes apart, so one pointer walks all of them (memory
 * offsets), two words a pass.
 */
function integerTile(g: Gemm, p: Packing, rows: number, width: number): number[] {
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
  // Relaxed SIMD's byte dot takes the signed bytes first, the unsigned ones second.
  const dot = p.lanes === 2
    ? (a: number, b: number, sum: number) => m.i32x4.add(sum, m.i32x4.dot_i16x8_s(a, b))
    : p.unsignedA
    ? (a: number, b: number, sum: number) => m.i32x4.relaxed_dot_i8x16_i7x16_add_s(b, a, sum)
    : (a: number, b: number, sum: number) => m.i32x4.relaxed_dot_i8x16_i7x16_add_s(a, b, sum);
  const pass = (steps: number) => {
    // Row i's packed words lie 4k bytes after row i − 1's.
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
