/**
 * Packing for the integer tiles (`int_gemm.ts`): the arena holds integers as 32-bit words, the
 * tiles read `lanes` values a word, i16 pairs for `i32x4.dot_i16x8_s` or byte quads for relaxed
 * SIMD's byte dot product. B's panels hold, for each word of k, its 8 columns' words (32 bytes);
 * A's rows hold their words one after another, which `v128.load32_splat` spreads over the lanes.
 *
 * @module
 */
import { originOf } from "./padded.ts";
import { type Gemm, prepacked, rowA, setRow } from "./gemm_state.ts";
import { packA } from "./gemm_pack.ts";

/** How an integer product's values are packed. */
export interface Packing {
  /** Values a 32-bit word holds: 2 (i16 pairs) or 4 (bytes). */
  readonly lanes: 2 | 4;
  /** Whether A's bytes are unsigned (u8; else i8). Pairs are signed. */
  readonly unsignedA: boolean;
  /** Whether B's bytes are unsigned. */
  readonly unsignedB: boolean;
}

/** Eight i32 words at `at` narrowed to eight i16 lanes. */
function narrowed16(g: Gemm, at: number, offset = 0): number {
  const { m } = g;
  return m.i16x8.narrow_i32x4_s(m.v128.load(offset, 4, at), m.v128.load(offset + 16, 4, at));
}

/** Two i16x8 narrowed to sixteen bytes, signed or not. */
function narrowed8(g: Gemm, a: number, b: number, unsigned: boolean): number {
  return unsigned ? g.m.i8x16.narrow_i16x8_u(a, b) : g.m.i8x16.narrow_i16x8_s(a, b);
}

/** One packed word of `p.lanes` values, value j (a 32-bit word, `value(j)`) in bits j·32/lanes on. */
function packedWord(g: Gemm, p: Packing, value: (j: number) => number): number {
  const { m, ic } = g, bits = 32 / p.lanes;
  return [...Array(p.lanes).keys()].reduce(
    (w, j) => m.i32.or(w, m.i32.shl(m.i32.and(value(j), ic(2 ** bits - 1)), ic(j * bits))),
    ic(0),
  );
}

/**
 * Copies B's panel of `width` ≤ 8 columns at n0, each word of k one 32-byte row of the 8
 * columns' words (`b[k][c]`, `b[k+1][c]`, … in a column's word), zero-padded to 8 columns.
 */
export function packPanel(g: Gemm, p: Packing, width: number): number[] {
  const { m, local, get, ic, loadAddress, i32, v128, strideB, strideN, r, n0, bPtr, kLoop } = g;
  const { b0, b1 } = g;
  const st: number[] = [];
  setRow(g, get(r, i32), get(n0, i32), st);
  const dst = local(i32);
  const word = (c: number) =>
    packedWord(g, p, (k) => m.i32.load(k * strideB + c * strideN, 4, get(bPtr, i32)));
  // Contiguous columns (a 1×1 convolution's pixels, packed each run): each k's eight narrowed,
  // the k's lanes interleaved into words; one at a time, 256 → 64 channels at 56×56 took 1.6×
  // its f32 form on one thread.
  const row = (k: number) => narrowed16(g, get(bPtr, i32), k * strideB);
  const rows = p.lanes === 2 ? [row(0), row(1)] : [
    narrowed8(g, row(0), row(1), p.unsignedB),
    narrowed8(g, row(2), row(3), p.unsignedB),
  ];
  // Columns 4·half to 4·half + 3: a pair's bytes 2c, 2c + 1 of each k's i16 row; a quad's byte c
  // of each k (k and k + 1 in one vector's halves, k + 2 and k + 3 in the other's).
  const lanes = (half: number) =>
    [...Array(4).keys()].flatMap((c) => {
      const col = 4 * half + c;
      return p.lanes === 2
        ? [2 * col, 2 * col + 1, 16 + 2 * col, 17 + 2 * col]
        : [col, 8 + col, 16 + col, 24 + col];
    });
  const vectors = strideN === 4 && width === 8;
  st.push(
    m.local.set(bPtr, loadAddress(g.b, st).address),
    m.local.set(dst, prepacked(g)),
    ...kLoop([
      ...(vectors
        ? [
          m.local.set(b0, rows[0]),
          m.local.set(b1, rows[1]),
          ...[0, 1].map((half) =>
            m.v128.store(
              16 * half,
              4,
              get(dst, i32),
              m.i8x16.shuffle(get(b0, v128), get(b1, v128), lanes(half)),
            )
          ),
        ]
        : [...Array(8).keys()].map((c) =>
          m.i32.store(4 * c, 4, get(dst, i32), c < width ? word(c) : ic(0))
        )),
      m.local.set(bPtr, m.i32.add(get(bPtr, i32), ic(p.lanes * strideB))),
      m.local.set(dst, m.i32.add(get(dst, i32), ic(32))),
    ]),
  );
  return st;
}

/**
 * Steps narrowing 32-bit words at local `src` to packed words at local `dst`, both moved past
 * them: `wide` fills 16 bytes (8 words to pairs, 16 to bytes), `one` a word.
 */
function narrowing(g: Gemm, p: Packing, src: number, dst: number) {
  const { m, get, ic, i32 } = g;
  // Bytes read per byte written: 2 for pairs (4-byte words to 2), 4 for bytes.
  const ratio = p.lanes;
  const step = (bytes: number) => [
    m.local.set(src, m.i32.add(get(src, i32), ic(ratio * bytes))),
    m.local.set(dst, m.i32.add(get(dst, i32), ic(bytes))),
  ];
  const at = get(src, i32);
  const wide = p.lanes === 2
    ? narrowed16(g, at)
    : narrowed8(g, narrowed16(g, at), narrowed16(g, at, 32), p.unsignedA);
  const one = packedWord(g, p, (j) => m.i32.load(4 * j, 4, at));
  return {
    wide: [m.v128.store(0, 4, get(dst, i32), wide), ...step(16)],
    one: [m.i32.store(0, 4, get(dst, i32), one), ...step(4)],
  };
}

/** Packs rows [lo, hi) of A, read in place along K, into the scratch: 16 bytes a step. */
export function packRows(g: Gemm, p: Packing): number[] {
  const { m, local, get, ic, whileLoop, countedLoop, i32, k, r, lo, hi, e } = g;
  const st: number[] = [], dst = local(i32), src = local(i32), kk = local(i32);
  st.push(m.local.set(dst, rowA(g, get(lo, i32), st)), m.local.set(r, get(lo, i32)));
  const row: number[] = [];
  setRow(g, get(r, i32), ic(0), row);
  // k packed words a row: four a wide step.
  const wides = k >> 2;
  const { wide, one } = narrowing(g, p, src, dst);
  row.push(
    m.local.set(src, originOf(e.fn, g.wa!, 4, g.a.input)),
    ...countedLoop(kk, wides, wide),
    ...countedLoop(kk, k - 4 * wides, one),
    m.local.set(r, m.i32.add(get(r, i32), ic(1))),
  );
  st.push(whileLoop(() => m.i32.lt_s(get(r, i32), get(hi, i32)), row));
  return st;
}

/**
 * Packs rows [lo, hi) of a gathered A (a convolution's patches): its 32-bit words gathered as
 * the f32 tiles gather theirs (`words`: K a row, through the indirection table or A's index
 * map), then narrowed in place, front to back (each packed word lands at or before the words it
 * is made of, read first).
 */
export function packGathered(g: Gemm, words: Gemm, p: Packing): number[] {
  const { m, local, get, ic, whileLoop, i32, k, lo, hi } = g;
  const src = local(i32), dst = local(i32), last = local(i32);
  const st = packA(words);
  const base = rowA(g, get(lo, i32), st);
  const { wide, one } = narrowing(g, p, src, dst);
  // The packed rows end where the block's k words a row end.
  const end = m.i32.add(get(dst, i32), m.i32.mul(m.i32.sub(get(hi, i32), get(lo, i32)), ic(4 * k)));
  st.push(
    m.local.set(src, base),
    m.local.set(dst, get(src, i32)),
    m.local.set(last, end),
    whileLoop(() => m.i32.le_u(m.i32.add(get(dst, i32), ic(16)), get(last, i32)), wide),
    whileLoop(() => m.i32.lt_u(get(dst, i32), get(last, i32)), one),
  );
  return st;
}
