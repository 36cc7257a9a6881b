/**
 * Index steps (`jit/ir/kernel_ir.ts`: affine maps with bounds, reshapes, gathers) lowered to
 * WebAssembly on the per-element path: each step's coordinates into fresh locals, the guards
 * that say whether a point is in bounds, and the byte address a load reads (element 0 where a
 * guard fails, so no address outside a buffer is ever formed). A gather's index is itself a load,
 * read only where the steps before it are in bounds; an index out of range records the arena's
 * fault word (`FAULT_BYTES`) for the run to raise.
 *
 * @module
 */
import { reshapeCoord } from "../../jit/ir/access.ts";
import type { IndexStep, KernelBuffer } from "../../jit/ir/kernel_ir.ts";
import { type Shape, stridesOf } from "../../jit/ir/shape.ts";
import type { Load } from "../../jit/ir/kernel_ir.ts";
import { elementShift } from "./alu.ts";
import type { Wasm, WasmModule } from "./encoder.ts";

/** What the index lowering uses of the function being generated (a `KernelFunction` is one). */
export interface IndexContext {
  /** The module being built, and the encoder's value types. */
  readonly m: WasmModule;
  readonly wasm: Wasm;
  /** A new local of value type `type`: its index. */
  readonly local: (type: number) => number;
  /** Local `local`'s value, of type `type`. */
  readonly get: (local: number, type: number) => number;
  /** An i32 constant. */
  readonly ic: (n: number) => number;
  /** Coordinate locals, one per axis of the space. */
  readonly coord: readonly number[];
  /** Buffer `i` of the kernel (inputs, then outputs). */
  readonly bufferOf: (i: number) => KernelBuffer;
}

/** A guard: local `ok` is 1 where the point is in bounds; elsewhere the load reads `fill`. */
export interface Guard {
  /** The i32 local. */
  readonly ok: number;
  /** The value read out of bounds. */
  readonly fill: number;
}

/** The index lowering's emitters. */
export interface IndexLowering {
  /** Steps as statements into fresh locals: the final coordinate locals and the guards. */
  steps(
    list: readonly IndexStep[],
    stmts: number[],
    from?: readonly number[],
  ): { coords: number[]; guards: Guard[] };
  /** The element offset of coordinate locals `coords` in `shape`. */
  linear(coords: number[], shape: Shape): number;
  /** A load's byte address at the coordinates `from` and its guards (see the module doc). */
  loadAddress(
    expr: Load,
    stmts: number[],
    from?: readonly number[],
    prior?: number,
  ): { address: number; guards: Guard[] };
}

/** The index lowering for one function. */
export function indexLowering(c: IndexContext): IndexLowering {
  const { m, wasm, get, ic, coord, bufferOf } = c;
  const i32 = wasm.i32;
  const lowering: IndexLowering = {
    steps(list, stmts, from = coord) {
      let cur = [...from];
      const guards: Guard[] = [];
      for (const s of list) {
        if (s.kind === "gather") cur = gatherStep(c, lowering, s, { cur, guards, stmts });
        else if (s.kind === "reshape") cur = reshapeStep(c, s, cur, stmts);
        else cur = affineStep(c, s, { cur, guards, stmts });
      }
      return { coords: cur, guards };
    },
    linear: (coords, shape) => linearOffset(c, coords, shape),
    /** The byte address a load reads (out-of-bounds reads are redirected to element 0), guards. */
    loadAddress(expr, stmts, from = coord, prior) {
      const buf = bufferOf(expr.input);
      const { coords, guards } = lowering.steps(expr.steps, stmts, from);
      const all = guards.reduce(
        (acc, g) => m.i32.and(acc, get(g.ok, i32)),
        prior === undefined ? ic(1) : get(prior, i32),
      );
      const address = m.i32.add(
        get(expr.input, i32),
        m.i32.shl(
          m.select(all, linearOffset(c, coords, buf.shape), ic(0)),
          ic(elementShift(buf.dtype)),
        ),
      );
      return { address, guards };
    },
  };
  return lowering;
}

/** The coordinates being stepped, the guards so far, and where statements go. */
interface Stepping {
  readonly cur: number[];
  readonly guards: Guard[];
  readonly stmts: number[];
}

/**
 * A gather step: the index is read at the current coordinates, made non-negative, and checked
 * against the gathered extent; it replaces the gathered axes.
 */
function gatherStep(
  c: IndexContext,
  lowering: IndexLowering,
  s: Extract<IndexStep, { kind: "gather" }>,
  { cur, guards, stmts }: Stepping,
): number[] {
  const { m, wasm, local, get, ic } = c;
  const i32 = wasm.i32;
  // The index is read at these coordinates, made non-negative, and checked against the
  // gathered extent.
  // Only where the earlier steps are in bounds is the index read at all (a padded
  // gather's border would read the index at coordinates outside its buffer).
  const prior = local(i32);
  stmts.push(
    m.local.set(prior, guards.reduce((acc, g) => m.i32.and(acc, get(g.ok, i32)), ic(1))),
  );
  const { address, guards: inner } = lowering.loadAddress(s.index, stmts, cur, prior);
  const raw = local(i32), idx = local(i32), ok = local(i32);
  let read = m.i32.load(0, 4, address);
  for (const g of [...inner].reverse()) read = m.select(get(g.ok, i32), read, ic(g.fill));
  stmts.push(
    m.local.set(raw, read),
    m.local.set(
      idx,
      m.select(
        m.i32.lt_s(get(raw, i32), ic(0)),
        m.i32.add(get(raw, i32), ic(s.dim)),
        get(raw, i32),
      ),
    ),
  );
  stmts.push(
    m.local.set(
      ok,
      m.i32.and(m.i32.ge_s(get(idx, i32), ic(0)), m.i32.lt_s(get(idx, i32), ic(s.dim))),
    ),
  );
  // Out of range: record the fault (the run raises it) and read element 0 meanwhile.
  stmts.push(
    m.if(
      m.i32.and(get(prior, i32), m.i32.eqz(get(ok, i32))),
      m.block(null, [
        m.i32.store(0, 4, ic(0), ic(1)),
        m.i32.store(4, 4, ic(0), get(raw, i32)),
        m.i32.store(8, 4, ic(0), ic(s.dim)),
      ]),
    ),
  );
  guards.push({ ok, fill: 0 });
  return [...cur.slice(0, s.axis), idx, ...cur.slice(s.axis + s.drop)];
}

/** A reshape step: each new coordinate from the old ones (the flat index where it needs it). */
function reshapeStep(
  c: IndexContext,
  s: Extract<IndexStep, { kind: "reshape" }>,
  cur: readonly number[],
  stmts: number[],
): number[] {
  const { m, wasm, local, get, ic } = c;
  const i32 = wasm.i32;
  // The whole flat index, computed once where a coordinate needs all of it.
  let lin: number | undefined;
  const from = stridesOf(s.from);
  const whole = () => {
    if (lin === undefined) {
      lin = local(i32);
      const sum = cur.reduce(
        (acc, x, i) => s.from[i] === 1 ? acc : m.i32.add(acc, m.i32.mul(get(x, i32), ic(from[i]))),
        ic(0),
      );
      stmts.push(m.local.set(lin, sum));
    }
    return get(lin, i32);
  };
  const to = stridesOf(s.to);
  return s.to.map((d, i) => {
    const l = local(i32);
    if (d === 1) {
      stmts.push(m.local.set(l, ic(0)));
      return l;
    }
    const { terms, whole: all, div, mod } = reshapeCoord(s.from, to[i], d);
    let q = all ? whole() : terms.reduce(
      (acc, { axis, mul }) =>
        m.i32.add(acc, mul === 1 ? get(cur[axis], i32) : m.i32.mul(get(cur[axis], i32), ic(mul))),
      ic(0),
    );
    if (div !== 1) q = m.i32.div_s(q, ic(div));
    stmts.push(m.local.set(l, mod ? m.i32.rem_s(q, ic(mod)) : q));
    return l;
  });
}

/** An affine step: new coordinates as affine maps of the current ones, bounds-guarded. */
function affineStep(
  c: IndexContext,
  s: Extract<IndexStep, { kind: "affine" }>,
  { cur, guards, stmts }: Stepping,
): number[] {
  const { m, wasm, local, get, ic } = c;
  const i32 = wasm.i32;
  const out = s.coeff.map((rowCoeff, j) => {
    const l = local(i32);
    const expr = rowCoeff.reduce(
      (
        acc,
        w,
        d,
      ) => (w === 0
        ? acc
        : m.i32.add(acc, w === 1 ? get(cur[d], i32) : m.i32.mul(get(cur[d], i32), ic(w)))),
      ic(s.offset[j]),
    );
    stmts.push(m.local.set(l, expr));
    return l;
  });
  if (s.bounds) {
    const ok = local(i32);
    stmts.push(
      m.local.set(
        ok,
        out.reduce((acc, l, j) =>
          m.i32.and(
            acc,
            m.i32.and(
              m.i32.ge_s(get(l, i32), ic(0)),
              m.i32.lt_s(get(l, i32), ic(s.bounds![j])),
            ),
          ), ic(1)),
      ),
    );
    guards.push({ ok, fill: s.fill ?? 0 });
  }
  return out;
}

/** The element offset of coordinate locals `coords` in `shape`. */
function linearOffset(c: IndexContext, coords: readonly number[], shape: Shape): number {
  const { m, wasm, get, ic } = c;
  const i32 = wasm.i32;
  const strides = stridesOf(shape);
  return coords.reduce(
    (
      acc,
      l,
      i,
    ) => (shape[i] === 1 ? acc : m.i32.add(acc, m.i32.mul(get(l, i32), ic(strides[i])))),
    ic(0),
  );
}
