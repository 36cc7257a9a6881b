/**
 * Packing for a tiled matmul: B's panels (k-major, 8 columns, once per change of a fixed B), A's
 * rows into the scratch (through an indirection table or A's index map), and the indirection
 * table itself.
 *
 * @module
 */
import { isFloat } from "./alu.ts";
import { gatherTaps } from "./conv_gather.ts";
import { rowsOfA } from "./matmul_plan.ts";
import { type Gemm, prepacked, rowA, setRow, tableRow } from "./gemm_state.ts";

/** Rows of B a contiguous B's packing copies per pass over its panels. */
const KB = 8;

/**
 * Copies B's panel of 8 columns at n0 to `into`, k-major: B's rows are often a page apart, and
 * streaming 32 bytes from each of k pages thrashes the caches' sets. B is the same for every
 * row of a batch, so the coordinates of row r (its batch's first) reach it.
 */
export function pack(g: Gemm, width: number, into: number): number[] {
  const { m, local, get, ic, loadAddress, i32, b, strideB, strideN, r, n0, bPtr, kLoop } = g;
  const st: number[] = [];
  setRow(g, get(r, i32), get(n0, i32), st);
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
}

/**
 * Gathers this block's rows of A, k-contiguous, into the scratch: through the indirection
 * table (beside B's panels), else through A's index map.
 */
export function packA(g: Gemm): number[] {
  const { m, local, get, ic, coord, whileLoop, i32, k, a, kAxis, r, kk, kLoop, lo, hi, e } = g;
  const st: number[] = [], dst = local(i32);
  st.push(m.local.set(dst, rowA(g, get(lo, i32), st)));
  if (e.taps) {
    const table = tableRow(g, get(lo, i32), 8 * e.taps.taps);
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
      m.local.set(at, tableRow(g, get(lo, i32), 4 * k)),
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
  setRow(g, get(r, i32), ic(0), row);
  const gather: number[] = [m.local.set(coord[kAxis], get(kk, i32))];
  const value = e.fn.value(a, new Map(), gather);
  gather.push(
    // An integer product's A (i16, as an i32 word) is narrowed after (see `packGathered`).
    isFloat(a.dtype)
      ? m.f32.store(0, 4, get(dst, i32), value)
      : m.i32.store(0, 4, get(dst, i32), value),
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
}

/**
 * The indirection table after B's panels (every batch's): the byte address of A's element for
 * every row and k (factored: every row and tap, with a mask), or of the cell after the table,
 * which holds the fill, out of bounds (one pass of A's index map, which the calls then walk
 * instead of evaluating it; the arena's places are fixed).
 */
export function buildTable(g: Gemm): number[] {
  const {
    m,
    kernel,
    local,
    get,
    ic,
    coord,
    whileLoop,
    countedLoop,
    loadAddress,
    start,
    end,
    i32,
    n,
    k,
    a,
    kAxis,
    r,
    kk,
    e,
  } = g;
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
  setRow(g, get(r, i32), ic(0), row);
  row.push(
    ...countedLoop(kk, entries, entry),
    m.local.set(r, m.i32.add(get(r, i32), ic(1))),
  );
  // Rows [−1 − start, end) of it, a call's share (see `tableRows`).
  st.push(
    m.local.set(cell, tableRow(g, ic(rowsOfA(kernel, n)), width * entries)),
    // An integer A's fill is an integer word (see `packGathered`).
    isFloat(g.a.dtype)
      ? m.f32.store(0, 4, get(cell, i32), m.f32.const(e.tableFill!))
      : m.i32.store(0, 4, get(cell, i32), ic(e.tableFill!)),
    m.local.set(r, m.i32.sub(ic(-1), get(start, i32))),
    m.local.set(dst, tableRow(g, get(r, i32), width * entries)),
    whileLoop(() => m.i32.lt_s(get(r, i32), get(end, i32)), row),
  );
  return st;
}

/**
 * Packs a B whose columns are contiguous, `KB` rows of B at a time: for each panel, its
 * piece of each of those rows. Reads stay within `KB` streams and each
 * panel's writes are one contiguous run; walking B panel by panel instead reads 32 bytes a row
 * with rows a power of two apart (W2-1024: 4 KB), landing in one cache set, and walking it row
 * by row writes to every panel at once (W5's 64 panels).
 */
export function packRows(g: Gemm): number[] {
  const {
    m,
    local,
    get,
    ic,
    whileLoop,
    loadAddress,
    i32,
    n,
    k,
    b,
    strideB,
    r,
    n0,
    bPtr,
    wide,
  } = g;
  const st: number[] = [];
  const src = local(i32), dst = local(i32), p = local(i32), kb = local(i32);
  setRow(g, get(r, i32), ic(0), st);
  /** Copies `count` rows from row kb (at bPtr) of every full panel. */
  const block = (count: number) => [
    m.local.set(p, ic(0)),
    m.local.set(src, get(bPtr, i32)),
    m.local.set(dst, m.i32.add(prepacked(g), m.i32.shl(get(kb, i32), ic(5)))),
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
  if (wide < n) st.push(m.local.set(n0, ic(wide)), ...pack(g, n - wide, prepacked(g)));
  return st;
}
