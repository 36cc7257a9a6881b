/**
 * Products whose B walks along K, not along N, for the WebAssembly generator: each output a dot
 * product of two pointers walking K, four lanes at a time. A decode step's attention scores are
 * one: q·kᵀ of a query row against the cached keys, whose rows lie along the head's width. The
 * i-k-j loop (`matmul_ikj.ts`) streams B along N, which there steps a whole key row at a time,
 * so it evaluated each element's index (through the grouped heads' view, a division and a
 * remainder) on its own: 343 µs for a Qwen2.5-0.5B layer's 14 heads over 257 keys on the 2-core
 * VM, a quarter of a decode step.
 *
 * @module
 */
import type { MatmulContext } from "./gemm_state.ts";
import { gemmBody } from "./matmul_ikj.ts";
import { tiledGemm } from "./matmul.ts";
import { batchesOfB, consecutiveAlong, type MatmulPlan, strideAlong } from "./matmul_plan.ts";

/** Shortest K the dot form takes (shorter ones cost their setup more than they save). */
const MIN_K = 8;

/**
 * Most rows of A a batch that take the dot form before the tiles where B changes with the batch
 * (each head's own keys): the tiles compute six rows at a time and pack such a B on every run
 * (the scores of 14 heads' one query row against 257 keys of their own: 177 µs tiled, 133 µs as
 * dot products on the 2-core VM). One B for every batch, a weight, the tiles pack once and split
 * among threads by columns, which one row of A cannot be here.
 */
const DOT_ROWS = 4;

/**
 * The body of an f32 matmul kernel: the tiles (`matmul.ts`) where they apply, the dot products
 * where B walks along K (first, for few rows of A against a B of each batch), else the i-k-j
 * loop.
 */
export function matmulBody(e: MatmulContext, plan: MatmulPlan): number[] {
  const { kernel } = e.fn;
  // The dot products sum K in four lanes: not the exact precision's order (`KernelIR.exact`).
  if (kernel.exact) return tiledGemm(e, plan) ?? gemmBody(e, plan);
  const few = kernel.space[plan.nb] <= DOT_ROWS && batchesOfB(kernel) > 1;
  return (few ? dotBody(e, plan) : undefined) ?? tiledGemm(e, plan) ??
    (few ? undefined : dotBody(e, plan)) ?? gemmBody(e, plan);
}

/**
 * Columns the dot products take at once where B's columns lie a fixed stride apart: four
 * independent sums, A's quads loaded once for all four. One column at a time, each sum was a chain
 * of dependent additions and its B address a walk through the grouped heads' view: a decode
 * layer's scores (14 heads, 256 keys) took 48 µs on one thread of the 2-core VM.
 */
const GROUP = 4;

/**
 * The dot-product loops of an f32 matmul kernel whose A and B both lie consecutive along K and
 * whose B does not along N; `undefined` for any other. Each output row's A pointer is found once,
 * each column's (or group of columns', see {@linkcode GROUP}) B pointer once; the sum is taken in
 * four lanes, which then add pairwise, then the last K % 4 products in order — the same order and
 * the same unfused products whichever way the columns go, so the same bits: a fused multiply-add
 * rounds differently, and a random-weight 0.5B decoder's greedy ids moved with it.
 */
function dotBody(e: MatmulContext, plan: MatmulPlan): number[] | undefined {
  const { fn } = e;
  const { nb, n, k, a, b } = plan;
  const kAxis = nb + 2, nAxis = nb + 1;
  if (plan.contiguous || k < MIN_K || a.dtype !== "f32" || b.dtype !== "f32") return undefined;
  if (!consecutiveAlong(fn.kernel, a, kAxis) || !consecutiveAlong(fn.kernel, b, kAxis)) {
    return undefined;
  }
  const { m, wasm, local, get, ic, kept, coord, unravel, whileLoop } = fn;
  const { loadAddress } = fn.index;
  const { start, end } = fn.params;
  const i32 = wasm.i32;
  const [outer, lin, nn, pa] = [0, 0, 0, 0].map(() => local(i32));
  // B's columns a stride apart (bytes), reached by constant offsets from the group's first.
  const stride = strideAlong(fn.kernel, b, nAxis);
  const group = stride !== undefined && stride > 0 && n >= GROUP ? GROUP : 1;
  const columns = (count: number) =>
    dotColumns(fn, { nb, k, b, pa, nn }, { count, apart: 4 * (stride ?? 0) });
  const row: number[] = [m.local.set(lin, m.i32.div_u(get(outer, i32), ic(n)))];
  row.push(...unravel(kept.slice(0, -1), lin));
  row.push(m.local.set(coord[kAxis], ic(0)), m.local.set(coord[nAxis], ic(0)));
  const aAddress = loadAddress(a, row).address;
  row.push(m.local.set(pa, aAddress), m.local.set(nn, ic(0)));
  const step = (count: number) => m.local.set(nn, m.i32.add(get(nn, i32), ic(count)));
  if (group > 1) {
    const fits = () => m.i32.le_s(m.i32.add(get(nn, i32), ic(group)), ic(n));
    row.push(whileLoop(fits, [...columns(group), step(group)]));
  }
  row.push(whileLoop(() => m.i32.lt_s(get(nn, i32), ic(n)), [...columns(1), step(1)]));
  return [
    m.local.set(outer, get(start, i32)),
    whileLoop(() => m.i32.lt_s(get(outer, i32), get(end, i32)), [
      ...row,
      m.local.set(outer, m.i32.add(get(outer, i32), ic(n))),
    ]),
  ];
}

/**
 * The statements of `count` columns from column `nn` of the current row (A at `pa`): each
 * column's sum in four lanes over K's quads (its B `apart` bytes after the one before), the lanes
 * added pairwise, the last K % 4 products in order, then each column's outputs.
 */
function dotColumns(
  fn: MatmulContext["fn"],
  at: { nb: number; k: number; b: MatmulPlan["b"]; pa: number; nn: number },
  { count, apart }: { count: number; apart: number },
): number[] {
  const { m, wasm, local, get, ic, coord, countedLoop } = fn;
  const { nb, k, b, pa, nn } = at;
  const i32 = wasm.i32, f32 = wasm.f32, v128 = wasm.v128, f4 = m.f32x4;
  const [kk, pb] = [local(i32), local(i32)], av = local(v128);
  const accs = [...Array(count)].map(() => local(v128));
  const sums = [...Array(count)].map(() => local(f32));
  const quads = Math.floor(k / 4);
  const offset = (p: number) => m.i32.add(get(p, i32), m.i32.shl(get(kk, i32), ic(4)));
  const st: number[] = [m.local.set(coord[nb + 1], get(nn, i32))];
  const bAddress = fn.index.loadAddress(b, st).address;
  st.push(m.local.set(pb, bAddress));
  accs.forEach((acc) => st.push(m.local.set(acc, f4.splat(m.f32.const(0)))));
  st.push(...countedLoop(kk, quads, [
    m.local.set(av, m.v128.load(0, 4, offset(pa))),
    ...accs.map((acc, j) =>
      m.local.set(
        acc,
        f4.add(get(acc, v128), f4.mul(get(av, v128), m.v128.load(j * apart, 4, offset(pb)))),
      )
    ),
  ]));
  accs.forEach((acc, j) => {
    const lane = (i: number) => f4.extract_lane(get(acc, v128), i);
    st.push(
      m.local.set(sums[j], m.f32.add(m.f32.add(lane(0), lane(1)), m.f32.add(lane(2), lane(3)))),
    );
    for (let t = 4 * quads; t < k; t++) {
      const x = m.f32.mul(
        m.f32.load(4 * t, 4, get(pa, i32)),
        m.f32.load(j * apart + 4 * t, 4, get(pb, i32)),
      );
      st.push(m.local.set(sums[j], m.f32.add(get(sums[j], f32), x)));
    }
  });
  sums.forEach((sum, j) =>
    st.push(...fn.pointOutputs(nb, m.i32.add(get(nn, i32), ic(j)), get(sum, f32)))
  );
  return st;
}
