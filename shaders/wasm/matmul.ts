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
import { affineOffset } from "../../jit/ir/access.ts";
import { gatherTaps } from "./conv_gather.ts";
import { originOf } from "./padded.ts";
import type { LinearLowering } from "./linear.ts";
import type { KernelFunction } from "./module.ts";
import {
  batchAxesOfB,
  batchesOfB,
  type MatmulPlan,
  packBlockRows,
  PACKS_SECTION,
  packsA,
  packsSection,
  panelsBytes,
  panelSplit,
  rowsOfA,
  type TableTaps,
  TILE_BYTES,
  TILE_ROWS,
} from "./matmul_plan.ts";
import type { Linear } from "./walk.ts";
import type { Memo } from "./alu.ts";

/** Rows of B a contiguous B's packing copies per pass over its panels. */
const KB = 8;

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

/**
 * Statements storing every output of a matmul kernel at column `n` of the current row, its sum
 * being `sum` (an f32 expression): the epilogue evaluated point by point, as the i-k-j loop does
 * and the tiled one where no pointer walks its epilogue along n.
 */
export function pointOutputs(fn: KernelFunction, nb: number, n: number, sum: number): number[] {
  const { m, coord, ic } = fn;
  const st = [
    m.local.set(coord[nb + 1], n),
    m.local.set(coord[nb + 2], ic(0)),
    m.local.set(fn.accs[0], sum),
  ];
  const memo: Memo = new Map();
  fn.kernel.outputs.forEach((o, j) => fn.store(o, j, memo, st));
  return st;
}

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
  const wb = affineOffset(b.steps, space, kernel.inputs[b.input].shape);
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
  /** Coordinates of flattened output row `row` (batch and m), column `col`, k = 0. */
  const setRow = (row: number, col: number, st: number[]) =>
    st.push(
      m.local.set(rowAt, row),
      ...unravel(kept.slice(0, -1), rowAt),
      m.local.set(coord[nAxis], col),
      m.local.set(coord[kAxis], ic(0)),
    );
  const kLoop = (body: number[]) => countedLoop(kk, k, body);
  // Packed A: row `row` of this block's rows starts at `TILE_BYTES + 4k·(row − lo)`. An affine
  // A's row starts where its offset puts the row's coordinates (its index steps, evaluated,
  // unravel a conv's pixel and patch indices by division: 6 rows a tile, a quarter of a 1×1
  // conv's time at K = 16).
  // This call's rows are [first, r1); a block of them, [lo, hi), is packed and multiplied at a
  // time (all of them unless A is packed past `packBlockRows`).
  const first = local(i32), lo = local(i32), hi = local(i32);
  const rowA = (row: number, st: number[]) =>
    packed
      ? m.i32.add(
        get(scratch, i32),
        m.i32.add(ic(TILE_BYTES), m.i32.mul(m.i32.sub(row, get(lo, i32)), ic(4 * k))),
      )
      : wa
      ? originOf(e.fn, wa, 4, a.input)
      : loadAddress(a, st).address;
  const tile = (rows: number, width: number): number[] => {
    const st: number[] = [];
    // Each row's coordinates once: its A pointer and its epilogue's walks (kept for after k).
    const lins: Linear[] = [];
    for (let i = 0; i < rows; i++) {
      setRow(m.i32.add(get(r, i32), ic(i)), get(n0, i32), st);
      st.push(m.local.set(aPtr[i], rowA(m.i32.add(get(r, i32), ic(i)), st)));
      if (walked) {
        lins.push({ ...walks(epilogue!, [nAxis], st), acc: { base: accAt[i], stride: 1 } });
      }
    }
    st.push(m.local.set(bPtr, get(bPanel, i32)));
    for (let i = 0; i < 2 * rows; i++) st.push(m.local.set(acc[i], f4.splat(m.f32.const(0))));
    const madd = (x: number, y: number, z: number) =>
      e.fn.fma ? f4.relaxed_madd(x, y, z) : f4.add(z, f4.mul(x, y));
    /** `steps` consecutive k, then the pointers past them. */
    const ks = (steps: number) => {
      const body: number[] = [];
      for (let u = 0; u < steps; u++) {
        body.push(
          m.local.set(b0, m.v128.load(32 * u, 4, get(bPtr, i32))),
          m.local.set(b1, m.v128.load(32 * u + 16, 4, get(bPtr, i32))),
        );
        for (let i = 0; i < rows; i++) {
          body.push(
            m.local.set(av, m.v128.load32_splat(u * strideA, 4, get(aPtr[i], i32))),
            m.local.set(acc[2 * i], madd(v(av), v(b0), v(acc[2 * i]))),
            m.local.set(acc[2 * i + 1], madd(v(av), v(b1), v(acc[2 * i + 1]))),
          );
        }
      }
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
    for (const lin of lins) {
      st.push(...linearStores(lin, () => ic(width), outs, width >= 4 && vectorEpilogue));
    }
    if (!walked) { for (let i = 0; i < rows; i++) st.push(...pointwise(i, width)); }
    return st;
  };
  /** Row `i` of the tile at r: its `width` outputs, each from its accumulator in the scratch. */
  const pointwise = (i: number, width: number): number[] => {
    const st: number[] = [];
    setRow(m.i32.add(get(r, i32), ic(i)), get(n0, i32), st);
    const sum = m.f32.load(
      32 * i,
      4,
      m.i32.add(get(scratch, i32), m.i32.shl(get(column, i32), ic(2))),
    );
    const point = pointOutputs(e.fn, nb, m.i32.add(get(n0, i32), get(column, i32)), sum);
    return [...st, ...countedLoop(column, width, point)];
  };
  /**
   * Copies B's panel of 8 columns at n0 to `into`, k-major: B's rows are often a page apart, and
   * streaming 32 bytes from each of k pages thrashes the caches' sets. B is the same for every
   * row of a batch, so the coordinates of row r (its batch's first) reach it.
   */
  const pack = (width: number, into: number) => {
    const st: number[] = [];
    setRow(get(r, i32), get(n0, i32), st);
    const dst = local(i32);
    st.push(
      m.local.set(bPtr, loadAddress(b, st).address),
      m.local.set(dst, into),
      ...kLoop([
        // Contiguous columns copy as two vectors; others (B transposed, as PyTorch's Linear
        // exports it) gather eight scalars, and a last panel of fewer columns pads with zeros.
        ...(strideN === 4 && width === 8
          ? [
            m.v128.store(0, 4, get(dst, i32), m.v128.load(0, 4, get(bPtr, i32))),
            m.v128.store(16, 4, get(dst, i32), m.v128.load(16, 4, get(bPtr, i32))),
          ]
          : [...Array(8).keys()].map((c) =>
            m.f32.store(
              4 * c,
              4,
              get(dst, i32),
              c < width ? m.f32.load(c * strideN, 4, get(bPtr, i32)) : m.f32.const(0),
            )
          )),
        m.local.set(bPtr, m.i32.add(get(bPtr, i32), ic(strideB))),
        m.local.set(dst, m.i32.add(get(dst, i32), ic(32))),
      ]),
    );
    return st;
  };
  /**
   * Gathers this block's rows of A, k-contiguous, into the scratch: through the indirection
   * table (beside B's panels), else through A's index map.
   */
  /**
   * Where row `row` of the indirection table starts: after every batch's panels of B, `bytes` a
   * row (4 an element; 8 a tap, factored).
   */
  const tableRow = (row: number, bytes: number) =>
    m.i32.add(get(packedB, i32), m.i32.add(ic(panelBytes * batches), m.i32.mul(row, ic(bytes))));
  const packA = () => {
    const st: number[] = [], dst = local(i32);
    st.push(m.local.set(dst, rowA(get(lo, i32), st)));
    if (e.taps) {
      const table = tableRow(get(lo, i32), 8 * e.taps.taps);
      return [...st, ...gatherTaps(e.fn, e.taps, { dst, row: r, lo, hi, table })];
    }
    if (e.tableFill !== undefined) {
      const at = local(i32), last = local(i32);
      // Each entry is the address to read (A's element, or the fill's cell): two loads and a
      // store an element, four at a time (conv stems' patches: 1.2 of shufflenet's 2.3 ms stem
      // went to a select-guarded gather).
      const bytes = m.i32.mul(m.i32.sub(get(hi, i32), get(lo, i32)), ic(4 * k));
      const copy = (j: number) =>
        m.f32.store(4 * j, 4, get(dst, i32), m.f32.load(0, 4, m.i32.load(4 * j, 4, get(at, i32))));
      const step = (count: number) => [
        m.local.set(dst, m.i32.add(get(dst, i32), ic(4 * count))),
        m.local.set(at, m.i32.add(get(at, i32), ic(4 * count))),
      ];
      st.push(
        m.local.set(last, m.i32.add(get(dst, i32), bytes)),
        m.local.set(at, tableRow(get(lo, i32), 4 * k)),
        whileLoop(
          () => m.i32.le_u(m.i32.add(get(dst, i32), ic(16)), get(last, i32)),
          [copy(0), copy(1), copy(2), copy(3), ...step(4)],
        ),
        whileLoop(() => m.i32.lt_u(get(dst, i32), get(last, i32)), [copy(0), ...step(1)]),
      );
      return st;
    }
    st.push(m.local.set(r, get(lo, i32)));
    const row: number[] = [];
    setRow(get(r, i32), ic(0), row);
    const gather: number[] = [m.local.set(coord[kAxis], get(kk, i32))];
    const value = e.fn.value(a, new Map(), gather);
    gather.push(
      m.f32.store(0, 4, get(dst, i32), value),
      m.local.set(dst, m.i32.add(get(dst, i32), ic(4))),
    );
    row.push(...kLoop(gather));
    st.push(
      whileLoop(() => m.i32.lt_s(get(r, i32), get(hi, i32)), [
        ...row,
        m.local.set(r, m.i32.add(get(r, i32), ic(1))),
      ]),
    );
    return st;
  };
  /** Where the packed panel at n0 lives (of the current batch's, where B is batched). */
  const prepacked = () =>
    m.i32.add(
      batches > 1 ? m.i32.add(get(packedB, i32), get(slot, i32)) : get(packedB, i32),
      m.i32.mul(m.i32.shr_u(get(n0, i32), ic(3)), ic(32 * k)),
    );
  /** Every row tile against the panel of `width` ≤ 8 columns at n0. */
  const panel = (width: number) => {
    /** A tile of `rows` rows at r, then r past it. */
    const step = (rows: number) => [
      ...tile(rows, width),
      m.local.set(r, m.i32.add(get(r, i32), ic(rows))),
    ];
    const fits = (rows: number) => m.i32.le_s(m.i32.add(get(r, i32), ic(rows)), get(to, i32));
    return [
      m.local.set(bPanel, prepacked()),
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
  };
  /**
   * Every row of the block [lo, hi) against every panel: where B is batched, a batch's rows at a
   * time against that batch's panels (a grouped conv's groups, attention's heads).
   */
  const rowsOfBlock = () =>
    batches > 1
      ? [
        m.local.set(from, get(lo, i32)),
        whileLoop(() => m.i32.lt_s(get(from, i32), get(hi, i32)), [
          m.local.set(r, get(from, i32)),
          ...slotOf(),
          m.local.set(
            to,
            m.i32.add(
              m.i32.sub(get(from, i32), m.i32.rem_u(get(from, i32), ic(perBatch))),
              ic(perBatch),
            ),
          ),
          m.if(m.i32.gt_s(get(to, i32), get(hi, i32)), m.local.set(to, get(hi, i32))),
          ...panels(panel, true),
          m.local.set(from, get(to, i32)),
        ]),
      ]
      : [m.local.set(from, get(lo, i32)), m.local.set(to, get(hi, i32)), ...panels(panel, true)];
  const wide = n - (n % 8);
  // Where this product's calls range over B's panels, not its rows (see `panelSplit`).
  const split = panelSplit(kernel);
  if (split) {
    m.addGlobal("panelSplit", i32, false, ic(split));
    m.addGlobalExport("panelSplit", "panelSplit");
  }
  /**
   * Statements for every panel of B, or (`ranged`, where the calls split the panels) the call's
   * panels [start, end): `each(width)` at n0 = 0, 8, …, the last one narrower.
   */
  const panels = (each: (width: number) => number[], ranged = false) => {
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
  };
  m.addCustomSection(PACKS_SECTION, packsSection(kernel));
  /**
   * The indirection table after B's panels (every batch's): the byte address of A's element for
   * every row and k (factored: every row and tap, with a mask), or of the cell after the table,
   * which holds the fill, out of bounds (one pass of A's index map, which the calls then walk
   * instead of evaluating it; the arena's places are fixed).
   */
  const buildTable = () => {
    const st: number[] = [], dst = local(i32), cell = local(i32), row: number[] = [];
    // A factored table holds a row's taps (k < taps), each an address and a mask (all ones, or
    // none where the tap reads the fill, whose cell the address is then).
    const entries = e.taps?.taps ?? k, width = e.taps ? 8 : 4;
    const entry: number[] = [m.local.set(coord[kAxis], get(kk, i32))];
    const { address, guards } = loadAddress(a, entry);
    const inBounds = guards.reduce((all, g) => m.i32.and(all, get(g.ok, i32)), ic(1));
    entry.push(
      m.i32.store(0, 4, get(dst, i32), m.select(inBounds, address, get(cell, i32))),
      ...(e.taps ? [m.i32.store(4, 4, get(dst, i32), m.i32.sub(ic(0), inBounds))] : []),
      m.local.set(dst, m.i32.add(get(dst, i32), ic(width))),
    );
    setRow(get(r, i32), ic(0), row);
    row.push(
      ...countedLoop(kk, entries, entry),
      m.local.set(r, m.i32.add(get(r, i32), ic(1))),
    );
    // Rows [−1 − start, end) of it, a call's share (see `tableRows`).
    st.push(
      m.local.set(cell, tableRow(ic(rowsOfA(kernel, n)), width * entries)),
      m.f32.store(0, 4, get(cell, i32), m.f32.const(e.tableFill!)),
      m.local.set(r, m.i32.sub(ic(-1), get(start, i32))),
      m.local.set(dst, tableRow(get(r, i32), width * entries)),
      whileLoop(() => m.i32.lt_s(get(r, i32), get(end, i32)), row),
    );
    return st;
  };
  /**
   * Packs a B whose columns are contiguous, `KB` rows of B at a time: for each panel, its
   * piece of each of those rows. Reads stay within `KB` streams and each
   * panel's writes are one contiguous run; walking B panel by panel instead reads 32 bytes a row
   * with rows a power of two apart (W2-1024: 4 KB), landing in one cache set, and walking it row
   * by row writes to every panel at once (W5's 64 panels).
   */
  const packRows = () => {
    const st: number[] = [];
    const src = local(i32), dst = local(i32), p = local(i32), kb = local(i32);
    setRow(get(r, i32), ic(0), st);
    /** Copies `count` rows from row kb (at bPtr) of every full panel. */
    const block = (count: number) => [
      m.local.set(p, ic(0)),
      m.local.set(src, get(bPtr, i32)),
      m.local.set(dst, m.i32.add(prepacked(), m.i32.shl(get(kb, i32), ic(5)))),
      whileLoop(() => m.i32.lt_s(get(p, i32), ic(wide / 8)), [
        ...[...Array(count).keys()].flatMap((j) => [
          m.v128.store(32 * j, 4, get(dst, i32), m.v128.load(j * strideB, 4, get(src, i32))),
          m.v128.store(
            32 * j + 16,
            4,
            get(dst, i32),
            m.v128.load(j * strideB + 16, 4, get(src, i32)),
          ),
        ]),
        m.local.set(src, m.i32.add(get(src, i32), ic(32))),
        m.local.set(dst, m.i32.add(get(dst, i32), ic(32 * k))),
        m.local.set(p, m.i32.add(get(p, i32), ic(1))),
      ]),
      m.local.set(kb, m.i32.add(get(kb, i32), ic(count))),
      m.local.set(bPtr, m.i32.add(get(bPtr, i32), ic(count * strideB))),
    ];
    st.push(
      m.local.set(bPtr, loadAddress(b, st).address),
      m.local.set(n0, ic(0)),
      m.local.set(kb, ic(0)),
      whileLoop(() => m.i32.lt_s(get(kb, i32), ic(k - (k % KB))), block(KB)),
      ...(k % KB ? block(k % KB) : []),
    );
    if (wide < n) st.push(m.local.set(n0, ic(wide)), ...pack(n - wide, prepacked()));
    return st;
  };
  const packB = strideN === 4 ? packRows() : panels((width) => pack(width, prepacked()));
  /** B's batch (a panel set each) of the row at r, into `slot`. */
  const slotOf = () => {
    const st: number[] = [];
    setRow(get(r, i32), ic(0), st);
    let at = ic(0);
    for (let i = 0, size = 1; i < nb; size *= bAxes(i) ? space[i] : 1, i++) {
      if (bAxes(i)) at = m.i32.add(at, m.i32.mul(get(coord[i], i32), ic(size)));
    }
    return [...st, m.local.set(slot, m.i32.mul(at, ic(panelBytes)))];
  };
  const stmts = [
    m.if(
      m.i32.lt_s(get(start, i32), ic(0)),
      m.block(null, [
        ...(e.tableFill !== undefined ? buildTable() : []),
        // B's panels with the table's first rows (a start of −1) only.
        m.if(m.i32.ne(get(start, i32), ic(-1)), m.return()),
        m.local.set(r, ic(0)),
        // A batched B packs each batch's panels from its first row's coordinates (batches of
        // rows that share B pack the same panels again: once per change of a weight).
        ...(batches > 1
          ? [
            whileLoop(() => m.i32.lt_s(get(r, i32), ic(rowsOfA(kernel, n))), [
              ...slotOf(),
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
    // Where each tile row's accumulators land in the scratch, for its epilogue to read.
    ...accAt.map((l, i) => m.local.set(l, m.i32.add(get(scratch, i32), ic(32 * i)))),
    m.local.set(lo, get(first, i32)),
    ...(packed
      ? [
        whileLoop(() => m.i32.lt_s(get(lo, i32), get(r1, i32)), [
          m.local.set(hi, m.i32.add(get(lo, i32), ic(packBlockRows(kernel)))),
          m.if(m.i32.gt_s(get(hi, i32), get(r1, i32)), m.local.set(hi, get(r1, i32))),
          ...packA(),
          ...rowsOfBlock(),
          m.local.set(lo, get(hi, i32)),
        ]),
      ]
      : [m.local.set(hi, get(r1, i32)), ...rowsOfBlock()]),
  ];
  return stmts;
}
