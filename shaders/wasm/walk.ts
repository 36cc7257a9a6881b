/**
 * Linear walks: how a loop whose accesses are affine in its index reaches each buffer — a base
 * byte address in a local and a constant stride — shared by the linear, padded, windowed and
 * matmul paths of the WebAssembly generator.
 *
 * @module
 */
import type { AffineOffset, GuardedOffset } from "../../jit/ir/access.ts";
import type { Expr } from "../../jit/ir/kernel_ir.ts";
import type { Memo } from "./alu.ts";
import type { Load } from "../../jit/ir/kernel_ir.ts";
import type { Wasm, WasmModule } from "./encoder.ts";

/** A buffer walked by a linear loop: a base byte address (a local) and a stride in elements. */
export interface Walk {
  /** Local holding the base address. */
  readonly base: number;
  /** Elements per step of the loop index. */
  readonly stride: number;
}

/** The walks of one linear loop. */
export interface Linear {
  /** Local holding the loop index. */
  readonly j: number;
  /** Each load's walk. */
  readonly loads: Map<Expr, Walk>;
  /** Each stored output's walk. */
  readonly stores: Map<number, Walk>;
  /** Where a matmul epilogue reads its accumulators (instead of the reduction's local). */
  readonly acc?: Walk;
  /** Loop-invariant f32 subexpressions evaluated before the loop, by key. */
  readonly hoisted?: Memo;
  /**
   * Loads of a padded window (see `guardedOffset`): where local `ok` is 0 the load reads `fill`
   * (its walk then points at its buffer's start, so no address outside is formed).
   */
  readonly guards?: Map<Expr, { readonly ok: number; readonly fill: number }>;
  /**
   * Loads of four windows at a row's end (see `vectorWindows`): which of the four lanes read;
   * the others read `fill` and form no address.
   */
  readonly lanes?: Map<Expr, { readonly lanes: readonly boolean[]; readonly fill: number }>;
}

/** The affine accesses of some expressions and stores. */
export interface Accesses {
  /** Loads with their offsets (a guarded load's where its guards hold). */
  readonly loads: [Load, AffineOffset][];
  /** Loads with bounds that hold or fail alike along the walk, and their guards. */
  readonly guarded?: ReadonlyMap<Load, GuardedOffset>;
  /** Output indices with their offsets. */
  readonly stores: [number, AffineOffset][];
}

/** The byte address walk `w` reaches at the loop index in local `j` (plus `lane`). */
export function walkAt(
  { m, wasm }: { m: WasmModule; wasm: Wasm },
  w: Walk,
  j: number,
  lane = 0,
): number {
  const i32 = wasm.i32, get = (l: number) => m.local.get(l, i32);
  if (w.stride === 0) return get(w.base);
  const index = lane ? m.i32.add(get(j), m.i32.const(lane)) : get(j);
  return m.i32.add(get(w.base), m.i32.mul(index, m.i32.const(4 * w.stride)));
}

/**
 * Four 32-bit elements `stride` (2 or 3) apart from `address`, as two vector loads and a shuffle
 * rather than four scalar loads: the first load holds elements 0 and `stride`, the second (ending
 * at element 3·stride) the other two, so nothing past the last is read (a stride-2 pool's
 * windows: 12 loads a tap row become 3). The address goes to a local (a statement into `stmts`).
 */
export function spreadLoad(
  { m, wasm, local }: { m: WasmModule; wasm: Wasm; local: (type: number) => number },
  stride: number,
  address: number,
  stmts: number[],
): number {
  const i32 = wasm.i32, p = local(i32), at = () => m.local.get(p, i32);
  stmts.push(m.local.set(p, address));
  const lanes = [0, stride, 4 + 3 - stride, 7];
  const bytes = lanes.flatMap((l) => [4 * l, 4 * l + 1, 4 * l + 2, 4 * l + 3]);
  return m.i8x16.shuffle(
    m.v128.load(0, 4, at()),
    m.v128.load(4 * (3 * stride - 3), 4, at()),
    bytes,
  );
}
