/**
 * What the pieces of a tiled matmul share (see `matmul.ts`): the product's shape and walks where
 * the tiles apply, the function's locals in one allocation order, and the small helpers every
 * piece uses (a row's coordinates, A's row address, B's packed panel, the indirection table).
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import { originOf } from "./padded.ts";
import type { LinearLowering } from "./linear.ts";
import type { KernelFunction } from "./module.ts";
import {
  bAccess,
  batchAxesOfB,
  batchesOfB,
  type MatmulPlan,
  packsA,
  panelsBytes,
  panelSplit,
  type TableTaps,
  TILE_BYTES,
  TILE_ROWS,
} from "./matmul_plan.ts";

/**
 * What the matmul emitters use: the function being generated, the linear path's emitters for
 * the epilogue, and how a packed A is gathered.
 */
export interface MatmulContext
  extends
    Pick<LinearLowering, "accessesOf" | "linearOver" | "walks" | "vectorizable" | "linearStores"> {
  /** The function being built. */
  readonly fn: KernelFunction;
  /** The fill of a packed A's indirection table, when it takes one (see `indirectionFill`). */
  readonly tableFill?: number;
  /** How that table factors into taps, where it does (see `tableTaps`). */
  readonly taps?: TableTaps;
}

/** The product's shape and walks, where the tiles apply: what every piece of it reads. */
function gemmShape(e: MatmulContext, plan: MatmulPlan) {
  const { m, wasm, kernel, local, get, ic, kept, coord, unravel } = e.fn;
  const { whileLoop, countedLoop } = e.fn;
  const { loadAddress } = e.fn.index;
  const { accessesOf, linearOver, walks, vectorizable, linearStores } = e;
  const { scratch, start, end, packedB } = e.fn.params;
  const space = kernel.space, f4 = m.f32x4;
  const i32 = wasm.i32, v128 = wasm.v128;
  const { nb, n, k, a, b } = plan;
  const nAxis = nb + 1, kAxis = nb + 2;
  const panelBytes = panelsBytes(n, k);
  const wa = affineOffset(a.steps, space, kernel.inputs[a.input].shape);
  const wb = bAccess(kernel, plan);
  const outs = kernel.outputs.map((_, j) => j), exprs = kernel.outputs.map((o) => o.expr);
  const epilogue = accessesOf(exprs, outs, [nAxis]);
  const packed = packsA(kernel);
  if (
    !(wa || packed) || !wb || (wa && wa.weights[nAxis] !== 0) || wb.weights[nAxis] <= 0 ||
    wb.weights[nb] !== 0
  ) return undefined;
  // An epilogue no pointer walks along n (a mask read through a split batch axis: Swin's
  // shifted windows) is evaluated point by point from the tile's accumulators; it took the i-k-j
  // loop, which evaluates a strided B's index map at every multiply-add (0.35 GFLOP/s).
  const walked = epilogue !== undefined && linearOver(epilogue, [nAxis]);
  const axesOfB = batchAxesOfB(kernel), bAxes = (i: number) => axesOfB.includes(i);
  const batches = batchesOfB(kernel), perBatch = space[nb];
  const vectorEpilogue = vectorizable(exprs, outs);
  const strideA = wa ? 4 * wa.weights[kAxis] : 4, strideB = 4 * wb.weights[kAxis];
  const strideN = 4 * wb.weights[nAxis];
  return {
    m,
    wasm,
    kernel,
    local,
    get,
    ic,
    kept,
    coord,
    unravel,
    whileLoop,
    countedLoop,
    loadAddress,
    accessesOf,
    linearOver,
    walks,
    vectorizable,
    linearStores,
    scratch,
    start,
    end,
    packedB,
    space,
    f4,
    i32,
    v128,
    nb,
    n,
    k,
    a,
    b,
    nAxis,
    kAxis,
    panelBytes,
    wa,
    wb,
    outs,
    exprs,
    epilogue,
    packed,
    walked,
    axesOfB,
    bAxes,
    batches,
    perBatch,
    vectorEpilogue,
    strideA,
    strideB,
    strideN,
    e,
  };
}

/** The tiles' locals (pointers, accumulators, counters), allocated in one order. */
function gemmLocals(shape: GemmShape) {
  const { local, get, i32, v128, countedLoop, k, n, kernel } = shape;
  const r = local(i32), r1 = local(i32), n0 = local(i32), kk = local(i32), rowAt = local(i32);
  const column = local(i32);
  // B's panels for the batch of rows [from, to), at `slot` bytes past the first batch's.
  const from = local(i32), to = local(i32), slot = local(i32);
  const bPtr = local(i32), bPanel = local(i32), av = local(v128), b0 = local(v128);
  const b1 = local(v128);
  const aPtr = [...Array(TILE_ROWS).keys()].map(() => local(i32));
  const accAt = [...Array(TILE_ROWS).keys()].map(() => local(i32));
  const acc = [...Array(2 * TILE_ROWS).keys()].map(() => local(v128));
  const v = (l: number) => get(l, v128);
  const kLoop = (body: number[]) => countedLoop(kk, k, body);
  // Packed A: row `row` of this block's rows starts at `TILE_BYTES + 4k·(row − lo)`. An affine
  // A's row starts where its offset puts the row's coordinates (its index steps, evaluated,
  // unravel a conv's pixel and patch indices by division: 6 rows a tile, a quarter of a 1×1
  // conv's time at K = 16).
  // This call's rows are [first, r1); a block of them, [lo, hi), is packed and multiplied at a
  // time (all of them unless A is packed past `packBlockRows`).
  const first = local(i32), lo = local(i32), hi = local(i32);
  const wide = n - (n % 8);
  // Where this product's calls range over B's panels, not its rows (see `panelSplit`).
  const split = panelSplit(kernel);
  return {
    r,
    r1,
    n0,
    kk,
    rowAt,
    column,
    to,
    slot,
    bPtr,
    bPanel,
    av,
    b0,
    b1,
    aPtr,
    accAt,
    acc,
    v,
    kLoop,
    first,
    lo,
    hi,
    wide,
    from,
    split,
  };
}

/** Everything a tiled product's pieces share: the plan, the walks and the function's locals. */
export function gemmState(e: MatmulContext, plan: MatmulPlan): Gemm | undefined {
  const shape = gemmShape(e, plan);
  return shape && { ...shape, ...gemmLocals(shape) };
}

/** The shared state of one tiled product (see {@linkcode tiledGemm}). */
export type Gemm = GemmShape & ReturnType<typeof gemmLocals>;

/** The shape part of {@linkcode Gemm}. */
type GemmShape = NonNullable<ReturnType<typeof gemmShape>>;

/** Coordinates of flattened output row `row` (batch and m), column `col`, k = 0. */
export function setRow(g: Gemm, row: number, col: number, st: number[]): number {
  const { m, ic, kept, coord, unravel, nAxis, kAxis, rowAt } = g;
  return st.push(
    m.local.set(rowAt, row),
    ...unravel(kept.slice(0, -1), rowAt),
    m.local.set(coord[nAxis], col),
    m.local.set(coord[kAxis], ic(0)),
  );
}

export function rowA(g: Gemm, row: number, st: number[]): number {
  const { m, get, ic, loadAddress, scratch, i32, k, a, wa, packed, lo, e } = g;
  return packed
    ? m.i32.add(
      get(scratch, i32),
      m.i32.add(ic(TILE_BYTES), m.i32.mul(m.i32.sub(row, get(lo, i32)), ic(4 * k))),
    )
    : wa
    ? originOf(e.fn, wa, 4, a.input)
    : loadAddress(a, st).address;
}

/**
 * Where row `row` of the indirection table starts: after every batch's panels of B, `bytes` a
 * row (4 an element; 8 a tap, factored).
 */
export function tableRow(g: Gemm, row: number, bytes: number): number {
  const { m, get, ic, packedB, i32, panelBytes, batches } = g;
  return m.i32.add(
    get(packedB, i32),
    m.i32.add(ic(panelBytes * batches), m.i32.mul(row, ic(bytes))),
  );
}

/** Where the packed panel at n0 lives (of the current batch's, where B is batched). */
export function prepacked(g: Gemm): number {
  const { m, get, ic, packedB, i32, k, batches, n0, slot } = g;
  return m.i32.add(
    batches > 1 ? m.i32.add(get(packedB, i32), get(slot, i32)) : get(packedB, i32),
    m.i32.mul(m.i32.shr_u(get(n0, i32), ic(3)), ic(32 * k)),
  );
}

/** B's batch (a panel set each) of the row at r, into `slot`. */
export function slotOf(g: Gemm): number[] {
  const { m, get, ic, coord, space, i32, nb, panelBytes, bAxes, r, slot } = g;
  const st: number[] = [];
  setRow(g, get(r, i32), ic(0), st);
  let at = ic(0);
  for (let i = 0, size = 1; i < nb; size *= bAxes(i) ? space[i] : 1, i++) {
    if (bAxes(i)) at = m.i32.add(at, m.i32.mul(get(coord[i], i32), ic(size)));
  }
  return [...st, m.local.set(slot, m.i32.mul(at, ic(panelBytes)))];
}
