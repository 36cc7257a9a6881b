/**
 * Dot tiles for a tiled f32 matmul (`matmul.ts`): where A's rows lie consecutive along K, each
 * step loads four k of a few rows of A and of a few columns of B (packed column by column) and
 * multiplies every pair lane by lane; each output is a sum in four lanes, added up once its K
 * is done. The broadcast tile loads B along N and splats each row's A value: on one thread of
 * the 16-core Intel host of the H100 machines its 6 × 8 form ran at 16.5 GFLOP/s and a 4 × 2
 * dot tile at 19.5 (AMD EPYC VM: 36.6 and 40.8; `bench/wasm_tiles.ts`, `bench/REPORT-models.md`,
 * session 94). A splat is a load and a shuffle; the dot tile's loads are plain.
 *
 * A tile's rows run in blocks across its panel: 6 or 4 rows by 2 columns, 2 rows by 4, 1 row by
 * 8 (see `blocksOf`).
 *
 * @module
 */
import { type Gemm, gemmState, type MatmulContext, prepacked, rowA } from "./gemm_state.ts";
import { pack, packA } from "./gemm_pack.ts";
import { panels, tiledGemm, tiledLoops, tileEpilogue, tileRows } from "./matmul.ts";
import { batchesOfB, consecutiveAlong, type MatmulPlan, packsA } from "./matmul_plan.ts";
import { type KernelIR, matmulOperands } from "../../jit/ir/kernel_ir.ts";

/** Shortest K the dot tiles take. */
const MIN_K = 16;

/**
 * The tiled product of `plan` in dot tiles where the function asks for them (`dotTiles`) and its
 * kernel takes them (see {@linkcode takesDots}), else
 * in the broadcast tiles of `tiledGemm`; `undefined` where neither applies.
 */
export function dotGemm(e: MatmulContext, plan: MatmulPlan): number[] | undefined {
  const g = gemmState(e, plan);
  if (!g || !e.fn.dotTiles || !takesDots(g.kernel)) return tiledGemm(e, plan, g);
  const locals = dotLocals(g);
  const packPanel = (width: number) => pack(g, width, prepacked(g), true);
  return tiledLoops(g, {
    packB: panels(g, packPanel),
    packPanel,
    tile: (g, rows, width) => dotTile(g, locals, rows, width),
    packRowsOfA: packA,
    table: [],
  });
}

/**
 * Whether `kernel`'s f32 product takes the dot tiles: a matmul (not a convolution's implicit
 * product, whose B changes with the run and packs faster along N) of one B for every row, A read
 * in place with its rows consecutive along K, K a multiple of four, and the kernel free to sum
 * in lanes (not `exact`).
 */
export function takesDots(kernel: KernelIR): boolean {
  const operands = matmulOperands(kernel);
  if (!operands || kernel.pattern !== "matmul" || kernel.exact) return false;
  const { nb, k, a } = operands;
  return batchesOfB(kernel) === 1 && !packsA(kernel) && consecutiveAlong(kernel, a, nb + 2) &&
    k % 4 === 0 && k >= MIN_K;
}

/** The vector locals of the dot tiles: what a block holds across its steps, and one to stream. */
export interface DotLocals {
  /** Four k of each of the block's shorter side (its columns of B, or its rows of A). */
  readonly held: readonly number[];
  /** Four k of one row of A (or column of B), loaded as its multiply-adds need it. */
  readonly streamed: number;
}

/** Allocates {@linkcode DotLocals} in `g`'s function. */
export function dotLocals(g: Gemm): DotLocals {
  const { local, v128 } = g;
  return { held: [local(v128), local(v128)], streamed: local(v128) };
}

/**
 * The blocks of a tile of `rows` rows: [first row, rows, columns] each. Each block holds its
 * shorter side's vectors and streams the other's, so it takes its sums, two held vectors and
 * one streamed: 6 × 2 is 15 vector registers, what V8 leaves a function on x64 (4 × 3 took 16
 * and ran at half the rate on the 2-core VM; 6 × 2 there at the multiply-add peak, as the
 * broadcast tile, in `bench/wasm_tiles.ts`).
 */
function blocksOf(rows: number): [number, number, number][] {
  if (rows === 6 || rows === 4) return [[0, rows, 2]];
  if (rows === 2) return [[0, 2, 4]];
  if (rows === 1) return [[0, 1, 8]];
  throw new Error(`dot tiles take 6, 4, 2 or 1 rows, not ${rows}`);
}

/** The dot tile: `rows` rows at r against the panel of `width` columns at n0, then its epilogue. */
export function dotTile(g: Gemm, locals: DotLocals, rows: number, width: number): number[] {
  const { m, get, ic, i32, r, aPtr } = g;
  const st: number[] = [];
  const lins = tileRows(g, rows, st, (i) => {
    st.push(m.local.set(aPtr[i], rowA(g, m.i32.add(get(r, i32), ic(i)), st)));
  });
  for (const [first, count, columns] of blocksOf(rows)) {
    for (let c = 0; c < width; c += columns) {
      st.push(...dotBlock(g, locals, { first, rows: count, column: c, columns }));
    }
  }
  return [...st, ...tileEpilogue(g, rows, width, lins)];
}

/** A block of a dot tile: rows [first, first + rows) by columns [column, column + columns). */
interface Block {
  readonly first: number;
  readonly rows: number;
  readonly column: number;
  readonly columns: number;
}

/**
 * One block's sums over K into the scratch (row i's at `32i`, as the broadcast tile leaves its
 * accumulators): two steps of four k a pass, A's row pointers and B's column pointer moving
 * with them (A's back to their rows' starts after). Each sum's lanes add as (0 + 1) + (2 + 3),
 * so an output's bits do not depend on which block or thread took it.
 */
function dotBlock(g: Gemm, locals: DotLocals, block: Block): number[] {
  const { m, get, ic, countedLoop, scratch, f4, i32, k, kk, aPtr, bPtr, bPanel, acc, v, e } = g;
  const { first, rows, column, columns } = block;
  const rowPtr = (i: number) => aPtr[first + i];
  const sum = (i: number, j: number) => acc[columns * i + j];
  const st: number[] = [m.local.set(bPtr, m.i32.add(get(bPanel, i32), ic(4 * k * column)))];
  for (let i = 0; i < rows * columns; i++) st.push(m.local.set(acc[i], f4.splat(m.f32.const(0))));
  const rowsHeld = rows < columns;
  const pass = (steps: number) => {
    const body: number[] = [];
    const load = (u: number, row: boolean, at: number) =>
      row
        ? m.v128.load(16 * u, 4, get(rowPtr(at), i32))
        : m.v128.load(4 * k * at + 16 * u, 4, get(bPtr, i32));
    for (let u = 0; u < steps; u++) {
      const [held, streamed] = rowsHeld ? [rows, columns] : [columns, rows];
      for (let h = 0; h < held; h++) body.push(m.local.set(locals.held[h], load(u, rowsHeld, h)));
      for (let t = 0; t < streamed; t++) {
        body.push(m.local.set(locals.streamed, load(u, !rowsHeld, t)));
        for (let h = 0; h < held; h++) {
          const [i, j] = rowsHeld ? [h, t] : [t, h];
          const a = v(rowsHeld ? locals.held[h] : locals.streamed);
          const b = v(rowsHeld ? locals.streamed : locals.held[h]);
          body.push(m.local.set(sum(i, j), e.fn.madd(a, b, v(sum(i, j)))));
        }
      }
    }
    for (let i = 0; i < rows; i++) {
      body.push(m.local.set(rowPtr(i), m.i32.add(get(rowPtr(i), i32), ic(16 * steps))));
    }
    body.push(m.local.set(bPtr, m.i32.add(get(bPtr, i32), ic(16 * steps))));
    return body;
  };
  const quads = k / 4;
  st.push(...countedLoop(kk, quads >> 1, pass(2)), ...(quads % 2 ? pass(1) : []));
  for (let i = 0; i < rows; i++) {
    st.push(m.local.set(rowPtr(i), m.i32.sub(get(rowPtr(i), i32), ic(4 * k))));
    for (let j = 0; j < columns; j++) {
      const lane = (l: number) => f4.extract_lane(v(sum(i, j)), l);
      const total = m.f32.add(m.f32.add(lane(0), lane(1)), m.f32.add(lane(2), lane(3)));
      st.push(m.f32.store(32 * (first + i) + 4 * (column + j), 4, get(scratch, i32), total));
    }
  }
  return st;
}
