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
import { batchesOfB, consecutiveAlong, type MatmulPlan } from "./matmul_plan.ts";

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
 * The dot-product loops of an f32 matmul kernel whose A and B both lie consecutive along K and
 * whose B does not along N; `undefined` for any other. Each output row's A pointer is found once,
 * each column's B pointer once; the sum is taken in four lanes, which then add pairwise, then the
 * last K % 4 products in order.
 */
function dotBody(e: MatmulContext, plan: MatmulPlan): number[] | undefined {
  const { fn } = e;
  const { nb, n, k, a, b } = plan;
  const kAxis = nb + 2, nAxis = nb + 1;
  if (plan.contiguous || k < MIN_K || a.dtype !== "f32" || b.dtype !== "f32") return undefined;
  if (!consecutiveAlong(fn.kernel, a, kAxis) || !consecutiveAlong(fn.kernel, b, kAxis)) {
    return undefined;
  }
  const { m, wasm, local, get, ic, kept, coord, unravel, whileLoop, countedLoop } = fn;
  const { loadAddress } = fn.index;
  const { start, end } = fn.params;
  const i32 = wasm.i32, f32 = wasm.f32, v128 = wasm.v128, f4 = m.f32x4;
  const [outer, lin, nn, kk, pa, pb] = [0, 0, 0, 0, 0, 0].map(() => local(i32));
  const acc = local(v128), sum = local(f32);
  const quads = Math.floor(k / 4);
  const quad = (p: number) =>
    m.v128.load(0, 4, m.i32.add(get(p, i32), m.i32.shl(get(kk, i32), ic(4))));
  const column: number[] = [m.local.set(coord[nAxis], get(nn, i32))];
  const bAddress = loadAddress(b, column).address;
  column.push(m.local.set(pb, bAddress), m.local.set(acc, f4.splat(m.f32.const(0))));
  column.push(...countedLoop(kk, quads, [
    m.local.set(acc, f4.add(get(acc, v128), f4.mul(quad(pa), quad(pb)))),
  ]));
  const lane = (i: number) => f4.extract_lane(get(acc, v128), i);
  column.push(
    m.local.set(sum, m.f32.add(m.f32.add(lane(0), lane(1)), m.f32.add(lane(2), lane(3)))),
  );
  for (let t = 4 * quads; t < k; t++) {
    const at = (p: number) => m.f32.load(4 * t, 4, get(p, i32));
    column.push(m.local.set(sum, m.f32.add(get(sum, f32), m.f32.mul(at(pa), at(pb)))));
  }
  column.push(...fn.pointOutputs(nb, get(nn, i32), get(sum, f32)));
  const row: number[] = [m.local.set(lin, m.i32.div_u(get(outer, i32), ic(n)))];
  row.push(...unravel(kept.slice(0, -1), lin));
  row.push(m.local.set(coord[kAxis], ic(0)), m.local.set(coord[nAxis], ic(0)));
  const aAddress = loadAddress(a, row).address;
  row.push(m.local.set(pa, aAddress));
  row.push(...countedLoop(nn, n, column));
  return [
    m.local.set(outer, get(start, i32)),
    whileLoop(() => m.i32.lt_s(get(outer, i32), get(end, i32)), [
      ...row,
      m.local.set(outer, m.i32.add(get(outer, i32), ic(n))),
    ]),
  ];
}
