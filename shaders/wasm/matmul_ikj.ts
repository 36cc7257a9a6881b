/**
 * The i-k-j matmul loop for the WebAssembly generator: what the tiled path (`shaders/wasm/matmul.ts`)
 * does not take (a B no pointer walks, or walking backwards along n, or changing with the row).
 *
 * @module
 */
import type { MatmulContext } from "./gemm_state.ts";
import { type MatmulPlan, strideAlong } from "./matmul_plan.ts";

/**
 * The i-k-j loop of an f32 matmul kernel: a scratch row of N accumulators per output row, summed
 * a panel of columns at a time in registers where the strides allow (`panelSums`), else for each
 * k (`kOuterSums`). The epilogue then runs per n with the accumulator.
 */
export function gemmBody(e: MatmulContext, plan: MatmulPlan): number[] {
  const { m, wasm, local, get, ic, kept, unravel, whileLoop } = e.fn;
  const { start, end } = e.fn.params;
  const i32 = wasm.i32;
  const { nb, n } = plan;
  const outer = local(i32), nn = local(i32), lin = local(i32);
  const nLoop = (inner: (stmts: number[]) => void, step: number, limit: number) => {
    const stmts: number[] = [];
    inner(stmts);
    return whileLoop(() => m.i32.lt_s(get(nn, i32), ic(limit)), [
      ...stmts,
      m.local.set(nn, m.i32.add(get(nn, i32), ic(step))),
    ]);
  };
  const rowStmts: number[] = [m.local.set(lin, m.i32.div_u(get(outer, i32), ic(n)))];
  rowStmts.push(...unravel(kept.slice(0, -1), lin));
  rowStmts.push(...(panelSums(e, plan) ?? kOuterSums(e, plan, nn, nLoop)));
  rowStmts.push(m.local.set(nn, ic(0)));
  rowStmts.push(nLoop(
    (st) =>
      st.push(
        ...e.fn.pointOutputs(nb, get(nn, i32), m.f32.load(0, 4, scratchAt(e, get(nn, i32)))),
      ),
    1,
    n,
  ));
  return [
    m.local.set(outer, get(start, i32)),
    whileLoop(() => m.i32.lt_s(get(outer, i32), get(end, i32)), [
      ...rowStmts,
      m.local.set(outer, m.i32.add(get(outer, i32), ic(n))),
    ]),
  ];
}

/** The address of the scratch's float `i` (an i32 expression). */
function scratchAt(e: MatmulContext, i: number): number {
  const { m, get, ic, wasm } = e.fn;
  return m.i32.add(get(e.fn.params.scratch, wasm.i32), m.i32.shl(i, ic(2)));
}

/**
 * The current row's sums into the scratch (N floats) the general way: zeroed, then for each k,
 * A[m, k] broadcast and B's row streamed into them — four lanes at a time when B's index map is
 * contiguous in n. `nLoop` loops `nn` over the columns.
 */
function kOuterSums(
  e: MatmulContext,
  plan: MatmulPlan,
  nn: number,
  nLoop: (inner: (stmts: number[]) => void, step: number, limit: number) => number,
): number[] {
  const { m, wasm, local, get, ic, coord, countedLoop, value } = e.fn;
  const { loadAddress } = e.fn.index;
  const i32 = wasm.i32, f32 = wasm.f32, v128 = wasm.v128;
  const { nb, n, k, a, b } = plan;
  const nAxis = nb + 1, kAxis = nb + 2;
  const kk = local(i32), aval = local(f32), base = local(i32), acc = local(v128);
  const at = (i: number) => scratchAt(e, i);
  const kLoop: number[] = [
    m.local.set(coord[kAxis], get(kk, i32)),
    m.local.set(coord[nAxis], ic(0)),
  ];
  kLoop.push(m.local.set(aval, value(a, new Map(), kLoop)));
  kLoop.push(m.local.set(nn, ic(0)));
  if (plan.contiguous) {
    const { address } = loadAddress(b, kLoop);
    kLoop.push(m.local.set(base, address));
    kLoop.push(nLoop(
      (st) => {
        st.push(m.local.set(acc, m.v128.load(0, 16, at(get(nn, i32)))));
        st.push(
          m.local.set(
            acc,
            m.f32x4.add(
              get(acc, v128),
              m.f32x4.mul(
                m.f32x4.splat(get(aval, f32)),
                m.v128.load(0, 4, m.i32.add(get(base, i32), m.i32.shl(get(nn, i32), ic(2)))),
              ),
            ),
          ),
        );
        st.push(m.v128.store(0, 16, at(get(nn, i32)), get(acc, v128)));
      },
      4,
      n - (n % 4),
    ));
  }
  kLoop.push(nLoop(
    (st) => {
      st.push(m.local.set(coord[nAxis], get(nn, i32)));
      const bv = value(b, new Map(), st);
      st.push(
        m.f32.store(
          0,
          4,
          at(get(nn, i32)),
          m.f32.add(m.f32.load(0, 4, at(get(nn, i32))), m.f32.mul(get(aval, f32), bv)),
        ),
      );
    },
    1,
    n,
  ));
  return [
    m.local.set(nn, ic(0)),
    nLoop((st) => st.push(m.f32.store(0, 4, at(get(nn, i32)), m.f32.const(0))), 1, n),
    ...countedLoop(kk, k, kLoop),
  ];
}

/** Quads of columns one pass over K keeps in registers: eight f32x4 sums, A's splat, B's load. */
const PANEL_QUADS = 8;

/**
 * The current row's sums into the scratch (N floats), where B lies consecutive along N and a
 * fixed stride apart along K and A a fixed stride along K: for each panel of up to
 * {@linkcode PANEL_QUADS} quads of columns, one pass over K with the sums in registers, A's value
 * splatted and B's row read at constant offsets; `undefined` for any other product. The k-outer
 * loop kept its sums in the scratch, loaded and stored for every k, and found A's and B's
 * addresses through their views at every k (a decode layer's weighted values, one query row a
 * head against 256 cached values of 64: 48 µs on one thread of the 2-core VM). The sums keep the
 * order of K, each product rounded before its add as the k-outer loop did: the same bits (a fused
 * multiply-add moved a random-weight 0.5B decoder's greedy ids).
 */
function panelSums(e: MatmulContext, plan: MatmulPlan): number[] | undefined {
  const { fn } = e;
  const { nb, n, k, a, b } = plan;
  const nAxis = nb + 1, kAxis = nb + 2;
  if (!plan.contiguous || n % 4 || a.dtype !== "f32" || b.dtype !== "f32") return undefined;
  const strideA = strideAlong(fn.kernel, a, kAxis), strideB = strideAlong(fn.kernel, b, kAxis);
  if (strideA === undefined || strideB === undefined) return undefined;
  const { m, wasm, local, get, ic, coord, countedLoop } = fn;
  const i32 = wasm.i32, v128 = wasm.v128, f4 = m.f32x4;
  const [ak, pa, pb, p0] = [0, 0, 0, 0].map(() => local(i32));
  const av = local(v128);
  const accs = [...Array(Math.min(PANEL_QUADS, n / 4))].map(() => local(v128));
  const st: number[] = [m.local.set(coord[kAxis], ic(0)), m.local.set(coord[nAxis], ic(0))];
  const aAddress = fn.index.loadAddress(a, st).address;
  st.push(m.local.set(pa, aAddress));
  const bAddress = fn.index.loadAddress(b, st).address;
  st.push(m.local.set(p0, bAddress));
  const advance = (p: number, bytes: number) => m.local.set(p, m.i32.add(get(p, i32), ic(bytes)));
  for (let first = 0; first < n / 4; first += PANEL_QUADS) {
    const quads = Math.min(PANEL_QUADS, n / 4 - first);
    const sums = accs.slice(0, quads);
    st.push(m.local.set(pb, m.i32.add(get(p0, i32), ic(16 * first))));
    st.push(m.local.set(ak, get(pa, i32)));
    sums.forEach((acc) => st.push(m.local.set(acc, f4.splat(m.f32.const(0)))));
    st.push(...countedLoop(fn.local(i32), k, [
      m.local.set(av, m.v128.load32_splat(0, 4, get(ak, i32))),
      ...sums.map((acc, q) =>
        m.local.set(
          acc,
          f4.add(get(acc, v128), f4.mul(get(av, v128), m.v128.load(16 * q, 4, get(pb, i32)))),
        )
      ),
      advance(ak, 4 * strideA),
      advance(pb, 4 * strideB),
    ]));
    sums.forEach((acc, q) => {
      st.push(m.v128.store(0, 16, scratchAt(e, ic(4 * (first + q))), get(acc, v128)));
    });
  }
  return st;
}
