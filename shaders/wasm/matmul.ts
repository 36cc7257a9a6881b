/**
 * Tiled matmul kernels for the WebAssembly generator: large f32 products with affine B run
 * register-blocked tiles over packed B panels (one set a batch where B is batched), A packed
 * where it is not affine (a convolution's patches, through an indirection table). Others take
 * the i-k-j loop (`shaders/wasm/matmul_ikj.ts`). Both finish each output row through the kernel's
 * epilogue. They emit into the function `generateWasm` is building, through a
 * {@linkcode MatmulContext}.
 *
 * @module
 */
import {
  type MatmulPlan,
  packBlockRows,
  PACKS_SECTION,
  packsSection,
  rowsOfA,
  TILE_ROWS,
} from "./matmul_plan.ts";
import type { Linear } from "./walk.ts";
import {
  type Gemm,
  gemmState,
  type MatmulContext,
  prepacked,
  rowA,
  setRow,
  slotOf,
} from "./gemm_state.ts";
import { buildTable, pack, packA, packRows } from "./gemm_pack.ts";

/**
 * Register-blocked f32 matmul. 6×8 output tiles live in twelve f32x4 accumulators while k runs;
 * the outer loop takes B in panels of 8 columns, so one panel stays in cache across all row
 * tiles. Rows left over run 1×8 tiles; columns left over form a last panel padded with zeros
 * (a convolution with 6 filters runs 6-of-8-wide tiles rather than scalar dot products). Each
 * finished tile goes through the scratch to the epilogue, a linear walk over its valid columns.
 * `undefined` when B is not affine (A may be packed), B's columns run backwards, or B changes
 * with the row (batched B): the i-k-j path below takes those.
 *
 * B's panels live at `packedB`, packed by a call with `rowStart` −1 (the module's custom section
 * {@linkcode PACKS_SECTION} says it takes one, and how large). The program packs a B it holds
 * fixed (a weight) once per change, as ONNX Runtime prepacks weights, and any other B once per
 * run before the kernel, not once per call and thread. A convolution's indirection table lies
 * after the panels, built there by the packing call.
 */
export function tiledGemm(e: MatmulContext, plan: MatmulPlan): number[] | undefined {
  const g = gemmState(e, plan);
  if (!g) return undefined;
  const packPanel = (width: number) => pack(g, width, prepacked(g));
  return tiledLoops(g, {
    packB: g.strideN === 4 ? packRows(g) : panels(g, packPanel),
    packPanel,
    tile,
    packRowsOfA: packA,
    table: e.tableFill !== undefined ? buildTable(g) : [],
  });
}

/** A tile kernel: `rows` rows at r against the panel of `width` columns at n0, through its epilogue. */
export type TileFn = (g: Gemm, rows: number, width: number) => number[];

/** What a kind of tiles (f32, integer) puts into the loops of {@linkcode tiledLoops}. */
export interface TileKind {
  /** The packing call's statements packing all of B's panels. */
  readonly packB: number[];
  /** Packs B's panel of `width` ≤ 8 columns at n0 into its place (a call packing its own). */
  readonly packPanel: (width: number) => number[];
  /** A tile of rows against a panel, through the epilogue. */
  readonly tile: TileFn;
  /** Packs the block [lo, hi) of A's rows into the scratch, where A is packed. */
  readonly packRowsOfA: (g: Gemm) => number[];
  /** The packing call's statements building a convolution's indirection table (or none). */
  readonly table: number[];
}

/**
 * The loops of a tiled product around `kind`'s tiles: the packing call (B's panels and a
 * convolution's indirection table), then this call's rows (or panels) in blocks (packed where
 * A is packed), every row tile against every panel.
 */
export function tiledLoops(g: Gemm, kind: TileKind): number[] {
  const { packB, packPanel, tile: tileFn, packRowsOfA, table } = kind;
  const {
    m,
    kernel,
    get,
    ic,
    whileLoop,
    scratch,
    start,
    end,
    i32,
    n,
    packed,
    batches,
    perBatch,
    r,
    r1,
    accAt,
    first,
    lo,
    hi,
    split,
    e,
    packedB,
  } = g;
  if (split) {
    m.addGlobal("panelSplit", i32, false, ic(split));
    m.addGlobalExport("panelSplit", "panelSplit");
  }
  // A panel split of one set of B's panels may pack its own panels in each call (see below).
  const inCalls = split > 0 && batches === 1 && e.tableFill === undefined;
  if (inCalls) {
    m.addGlobal("packsInCalls", i32, false, ic(1));
    m.addGlobalExport("packsInCalls", "packsInCalls");
  }
  m.addCustomSection(PACKS_SECTION, packsSection(kernel));
  const rows = () => rowsOfBlock(g, tileFn);
  const stmts = [
    m.if(
      m.i32.lt_s(get(start, i32), ic(0)),
      m.block(null, [
        ...table,
        // B's panels with the table's first rows (a start of −1) only.
        m.if(m.i32.ne(get(start, i32), ic(-1)), m.return()),
        m.local.set(r, ic(0)),
        // A batched B packs each batch's panels from its first row's coordinates (batches of
        // rows that share B pack the same panels again: once per change of a weight).
        ...(batches > 1
          ? [
            whileLoop(() => m.i32.lt_s(get(r, i32), ic(rowsOfA(kernel, n))), [
              ...slotOf(g),
              ...packB,
              m.local.set(r, m.i32.add(get(r, i32), ic(perBatch))),
            ]),
          ]
          : packB),
        m.return(),
      ]),
    ),
    // A call's range is of output points (whole rows), or of panels with every row.
    m.local.set(r1, split ? ic(rowsOfA(kernel, n)) : m.i32.div_u(get(end, i32), ic(n))),
    m.local.set(first, split ? ic(0) : m.i32.div_u(get(start, i32), ic(n))),
    // A B computed in the run (a 1×1 convolution's pixels) comes with its panels' place negated:
    // each call packs its own panels, so that the threads share the packing too (packed ahead
    // on the calling thread, 3.2 MB of ResNet-50's first pixels held 15 workers idle).
    ...(inCalls
      ? [m.if(
        m.i32.lt_s(get(packedB, i32), ic(0)),
        m.block(null, [
          m.local.set(packedB, m.i32.sub(ic(0), get(packedB, i32))),
          m.local.set(r, ic(0)),
          ...panels(g, packPanel, true),
        ]),
      )]
      : []),
    // Where each tile row's accumulators land in the scratch, for its epilogue to read.
    ...accAt.map((l, i) => m.local.set(l, m.i32.add(get(scratch, i32), ic(32 * i)))),
    m.local.set(lo, get(first, i32)),
    ...(packed
      ? [
        whileLoop(() => m.i32.lt_s(get(lo, i32), get(r1, i32)), [
          m.local.set(hi, m.i32.add(get(lo, i32), ic(packBlockRows(kernel)))),
          m.if(m.i32.gt_s(get(hi, i32), get(r1, i32)), m.local.set(hi, get(r1, i32))),
          ...packRowsOfA(g),
          ...rows(),
          m.local.set(lo, get(hi, i32)),
        ]),
      ]
      : [m.local.set(hi, get(r1, i32)), ...rows()]),
  ];
  return stmts;
}

/** The f32 tile: `rows` rows at r against the panel at n0, one k a multiply-add. */
function tile(g: Gemm, rows: number, width: number): number[] {
  const { m, get, ic, countedLoop, scratch, f4, i32, k, strideA, r, kk, bPtr, bPanel } = g;
  const { aPtr, acc, v, kLoop, e } = g;
  const st: number[] = [];
  const lins = tileRows(g, rows, st, (i) => {
    st.push(m.local.set(aPtr[i], rowA(g, m.i32.add(get(r, i32), ic(i)), st)));
  });
  st.push(m.local.set(bPtr, get(bPanel, i32)));
  for (let i = 0; i < 2 * rows; i++) st.push(m.local.set(acc[i], f4.splat(m.f32.const(0))));
  /** `steps` consecutive k, then the pointers past them. */
  const ks = (steps: number) => {
    const splat = (u: number, i: number) => m.v128.load32_splat(u * strideA, 4, get(aPtr[i], i32));
    const body = tileSteps(g, rows, steps, splat, e.fn.madd);
    body.push(m.local.set(bPtr, m.i32.add(get(bPtr, i32), ic(32 * steps))));
    for (let i = 0; i < rows; i++) {
      body.push(m.local.set(aPtr[i], m.i32.add(get(aPtr[i], i32), ic(steps * strideA))));
    }
    return body;
  };
  // Two k a pass: half the pointer and counter updates (memory offsets must be positive).
  if (strideA > 0 && k > 1) {
    st.push(...countedLoop(kk, k >> 1, ks(2)), ...(k % 2 ? ks(1) : []));
  } else st.push(...kLoop(ks(1)));
  for (let i = 0; i < 2 * rows; i++) {
    st.push(m.v128.store(16 * i, 4, get(scratch, i32), v(acc[i])));
  }
  return [...st, ...tileEpilogue(g, rows, width, lins)];
}

/**
 * One pass of `steps` k (pairs of k for the integer tiles) over a tile of `rows` rows: the
 * panel's two vectors of each k, then each row's A value (`splat(u, i)`) into its two
 * accumulators through `madd`. The pointers' steps are the caller's.
 */
export function tileSteps(
  g: Gemm,
  rows: number,
  steps: number,
  splat: (u: number, i: number) => number,
  madd: (a: number, b: number, acc: number) => number,
): number[] {
  const { m, get, i32, bPtr, av, b0, b1, acc, v } = g;
  const body: number[] = [];
  for (let u = 0; u < steps; u++) {
    body.push(
      m.local.set(b0, m.v128.load(32 * u, 4, get(bPtr, i32))),
      m.local.set(b1, m.v128.load(32 * u + 16, 4, get(bPtr, i32))),
    );
    for (let i = 0; i < rows; i++) {
      body.push(
        m.local.set(av, splat(u, i)),
        m.local.set(acc[2 * i], madd(v(av), v(b0), v(acc[2 * i]))),
        m.local.set(acc[2 * i + 1], madd(v(av), v(b1), v(acc[2 * i + 1]))),
      );
    }
  }
  return body;
}

/**
 * Each row's coordinates of the tile at r, once (`each(i)` adds what else a row needs before
 * the k loop), and its epilogue's walk where the epilogue walks (kept for after k).
 */
export function tileRows(g: Gemm, rows: number, st: number[], each: (i: number) => void) {
  const { m, get, ic, walks, i32, nAxis, epilogue, walked, r, n0, accAt } = g;
  const lins: Linear[] = [];
  for (let i = 0; i < rows; i++) {
    setRow(g, m.i32.add(get(r, i32), ic(i)), get(n0, i32), st);
    each(i);
    if (walked) {
      lins.push({ ...walks(epilogue!, [nAxis], st), acc: { base: accAt[i], stride: 1 } });
    }
  }
  return lins;
}

/**
 * The outputs of a finished tile, from its sums in the scratch (f32; i32 where `integer`): along
 * `lins`, or point by point.
 */
export function tileEpilogue(
  g: Gemm,
  rows: number,
  width: number,
  lins: Linear[],
  integer = false,
): number[] {
  const { ic, linearStores, outs, walked, vectorEpilogue } = g;
  const st: number[] = [];
  for (const lin of lins) {
    st.push(...linearStores(lin, () => ic(width), outs, width >= 4 && vectorEpilogue));
  }
  if (!walked) { for (let i = 0; i < rows; i++) st.push(...pointwise(g, i, width, integer)); }
  return st;
}

/**
 * Row `i` of the tile at r: its `width` outputs, each from its accumulator in the scratch (f32
 * sums; i32 where `integer`).
 */
function pointwise(g: Gemm, i: number, width: number, integer = false): number[] {
  const { m, get, ic, countedLoop, scratch, i32, nb, r, n0, column, e } = g;
  const st: number[] = [];
  setRow(g, m.i32.add(get(r, i32), ic(i)), get(n0, i32), st);
  const at = m.i32.add(get(scratch, i32), m.i32.shl(get(column, i32), ic(2)));
  const sum = integer ? m.i32.load(32 * i, 4, at) : m.f32.load(32 * i, 4, at);
  const point = e.fn.pointOutputs(nb, m.i32.add(get(n0, i32), get(column, i32)), sum);
  return [...st, ...countedLoop(column, width, point)];
}

/** Every row tile against the panel of `width` ≤ 8 columns at n0. */
function panel(g: Gemm, width: number, tileFn: TileFn) {
  const { m, get, ic, whileLoop, i32, r, from, to, bPanel } = g;
  /** A tile of `rows` rows at r, then r past it. */
  const step = (rows: number) => [
    ...tileFn(g, rows, width),
    m.local.set(r, m.i32.add(get(r, i32), ic(rows))),
  ];
  const fits = (rows: number) => m.i32.le_s(m.i32.add(get(r, i32), ic(rows)), get(to, i32));
  return [
    m.local.set(bPanel, prepacked(g)),
    m.local.set(r, get(from, i32)),
    // Eight rows left run as two tiles of 4, not 6 and 2; fewer than TILE_ROWS as one tile of 4,
    // 2 and 1 rows as needed (tiles of 2 and 1 rows have too few accumulator chains to hide the
    // FMA latency: half and a quarter of the rate).
    whileLoop(
      () => m.i32.and(fits(TILE_ROWS), m.i32.ne(m.i32.add(get(r, i32), ic(8)), get(to, i32))),
      step(TILE_ROWS),
    ),
    whileLoop(() => fits(4), step(4)),
    ...[2, 1].map((rows) => m.if(fits(rows), m.block(null, step(rows)))),
  ];
}

/**
 * Every row of the block [lo, hi) against every panel: where B is batched, a batch's rows at a
 * time against that batch's panels (a grouped conv's groups, attention's heads).
 */
function rowsOfBlock(g: Gemm, tileFn: TileFn) {
  const { m, get, ic, whileLoop, i32, batches, perBatch, r, from, to, lo, hi } = g;
  return batches > 1
    ? [
      m.local.set(from, get(lo, i32)),
      whileLoop(() => m.i32.lt_s(get(from, i32), get(hi, i32)), [
        m.local.set(r, get(from, i32)),
        ...slotOf(g),
        m.local.set(
          to,
          m.i32.add(
            m.i32.sub(get(from, i32), m.i32.rem_u(get(from, i32), ic(perBatch))),
            ic(perBatch),
          ),
        ),
        m.if(m.i32.gt_s(get(to, i32), get(hi, i32)), m.local.set(to, get(hi, i32))),
        ...panels(g, (width) => panel(g, width, tileFn), true),
        m.local.set(from, get(to, i32)),
      ]),
    ]
    : [
      m.local.set(from, get(lo, i32)),
      m.local.set(to, get(hi, i32)),
      ...panels(g, (width) => panel(g, width, tileFn), true),
    ];
}

/**
 * Statements for every panel of B, or (`ranged`, where the calls split the panels) the call's
 * panels [start, end): `each(width)` at n0 = 0, 8, …, the last one narrower.
 */
export function panels(g: Gemm, each: (width: number) => number[], ranged = false): number[] {
  const { m, local, get, ic, whileLoop, start, end, i32, n, n0, wide, split } = g;
  const range = ranged && split > 0;
  const stop = local(i32), past = m.i32.shl(get(end, i32), ic(3));
  return [
    m.local.set(n0, range ? m.i32.shl(get(start, i32), ic(3)) : ic(0)),
    m.local.set(stop, range ? m.select(m.i32.lt_s(past, ic(wide)), past, ic(wide)) : ic(wide)),
    whileLoop(() => m.i32.lt_s(get(n0, i32), get(stop, i32)), [
      ...each(8),
      m.local.set(n0, m.i32.add(get(n0, i32), ic(8))),
    ]),
    ...(wide < n
      ? range ? [m.if(m.i32.gt_s(past, ic(wide)), m.block(null, each(n - wide)))] : each(n - wide)
      : []),
  ];
}
