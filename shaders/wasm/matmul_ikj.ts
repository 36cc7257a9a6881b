/**
 * The i-k-j matmul loop for the WebAssembly generator: what the tiled path (`shaders/wasm/matmul.ts`)
 * does not take (a B no pointer walks, or walking backwards along n, or changing with the row).
 *
 * @module
 */
import type { MatmulContext } from "./gemm_state.ts";
import type { MatmulPlan } from "./matmul_plan.ts";

/**
 * The i-k-j loop of an f32 matmul kernel: a scratch row of N accumulators per output row; for
 * each k, A[m, k] is broadcast and B's row streamed — four lanes at a time when B's index map
 * is contiguous in n. The epilogue then runs per n with the accumulator.
 */
export function gemmBody(e: MatmulContext, plan: MatmulPlan): number[] {
  const { m, wasm, local, get, ic, kept, coord, unravel } = e.fn;
  const { whileLoop, countedLoop, value } = e.fn;
  const { loadAddress } = e.fn.index;
  const { scratch, start, end } = e.fn.params;
  const i32 = wasm.i32, f32 = wasm.f32, v128 = wasm.v128;
  const { nb, n, k, a, b } = plan;
  const nAxis = nb + 1, kAxis = nb + 2;
  const outer = local(i32),
    kk = local(i32),
    nn = local(i32),
    aval = local(f32),
    base = local(i32),
    lin = local(i32);
  const acc = local(v128);
  const scratchAt = (i: number) => m.i32.add(get(scratch, i32), m.i32.shl(i, ic(2)));
  const kLoop: number[] = [
    m.local.set(coord[kAxis], get(kk, i32)),
    m.local.set(coord[nAxis], ic(0)),
  ];
  kLoop.push(m.local.set(aval, value(a, new Map(), kLoop)));
  const nLoop = (inner: (stmts: number[]) => void, step: number, limit: number) => {
    const stmts: number[] = [];
    inner(stmts);
    return whileLoop(() => m.i32.lt_s(get(nn, i32), ic(limit)), [
      ...stmts,
      m.local.set(nn, m.i32.add(get(nn, i32), ic(step))),
    ]);
  };
  kLoop.push(m.local.set(nn, ic(0)));
  if (plan.contiguous) {
    const { address } = loadAddress(b, kLoop);
    kLoop.push(m.local.set(base, address));
    kLoop.push(nLoop(
      (st) => {
        st.push(m.local.set(acc, m.v128.load(0, 16, scratchAt(get(nn, i32)))));
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
        st.push(m.v128.store(0, 16, scratchAt(get(nn, i32)), get(acc, v128)));
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
          scratchAt(get(nn, i32)),
          m.f32.add(m.f32.load(0, 4, scratchAt(get(nn, i32))), m.f32.mul(get(aval, f32), bv)),
        ),
      );
    },
    1,
    n,
  ));
  const rowStmts: number[] = [m.local.set(lin, m.i32.div_u(get(outer, i32), ic(n)))];
  rowStmts.push(...unravel(kept.slice(0, -1), lin));
  rowStmts.push(m.local.set(nn, ic(0)));
  rowStmts.push(
    nLoop(
      (st) => st.push(m.f32.store(0, 4, scratchAt(get(nn, i32)), m.f32.const(0))),
      1,
      n,
    ),
  );
  rowStmts.push(...countedLoop(kk, k, kLoop));
  rowStmts.push(m.local.set(nn, ic(0)));
  rowStmts.push(nLoop(
    (st) =>
      st.push(
        ...e.fn.pointOutputs(nb, get(nn, i32), m.f32.load(0, 4, scratchAt(get(nn, i32)))),
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
