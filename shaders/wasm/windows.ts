/**
 * Pools and depthwise convolutions four windows at a time on the WebAssembly generator's row
 * path: along a run of windows, every tap's address is a constant offset from the run's start
 * plus the window's index, so the guards, the base addresses and the output's address are worked
 * out once per run, not once per window; the row outputs (a bias, an activation) are evaluated
 * and stored as f32x4 where they have that lowering. A run is a whole row where the padding
 * allows (its first and last four windows read the fill lane by lane), or else the windows
 * wholly inside the padding, with the one-window path at the row's ends. With f32 sums
 * (`KernelFunction.narrowSums`), a 3×3 depthwise conv + bias + Clip on one thread of the 2-core
 * machine went from 2.1 to 4.4 GMAC/s over 16 channels of 128×128, 0.8 to 2.2 over 232 of 7×7
 * and 1.3 to 2.0 over 2×64 of 16×16.
 *
 * @module
 */
import { type AffineOffset, type GuardedOffset, strideOver } from "../../jit/ir/access.ts";
import { type Expr, type KernelIR, type Reduction, walk } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { LinearLowering } from "./linear.ts";
import type { KernelFunction } from "./module.ts";
import type { Linear } from "./walk.ts";
import { GUARDED_UNROLLED, originOf, windowAccesses, windowPoints } from "./padded.ts";

/** Runs of four neighbouring windows of a row kernel (see {@linkcode vectorWindows}). */
export interface VectorWindows {
  /**
   * Whether a run starts at the current coordinates (a fresh expression per call): a whole row
   * of windows in the row range, or four windows in the range, on their axis and wholly inside
   * the padding.
   */
  enter(): number;
  /**
   * Statements for when `enter()` holds: windows four at a time, their row outputs stored; the
   * coordinates and the row are left at the last window computed, for the row loop to step past.
   */
  readonly run: number[];
}

/** What {@linkcode vectorWindows} uses of the linear path. */
export type VectorHelpers = Pick<
  LinearLowering,
  "hoist" | "vvalue" | "laneFold" | "accessesOf" | "walks" | "vectorizable" | "storeFour"
>;

/** What {@linkcode vectorWindows} uses of the row loop it runs in. */
export interface WindowRows {
  /** Local holding the current row. */
  readonly row: number;
  /** The row outputs at the current coordinates, from the reduction's local (one window's). */
  rowStores(): number[];
}

/**
 * A pool's or depthwise conv's reduction for windows that follow each other along the last kept
 * axis, four at a time as f32x4: each tap's loads are four elements a constant stride apart (one
 * vector load where the stride is 1), sums accumulate per lane (in f32 or f64, as the kernel
 * sums) and extremes by pmax/pmin with a NaN mask — the same per-lane operations in the same
 * order as the one-window path, so the same results. Whole rows where the padding allows (see
 * `wholeRow`), else runs of windows wholly inside, the row loop taking the one-window path
 * elsewhere. `undefined` when the kernel does not have this shape.
 */
export function vectorWindows(
  fn: KernelFunction,
  h: VectorHelpers,
  rows: WindowRows,
): VectorWindows | undefined {
  const w = windowsOf(fn, h, rows);
  if (!w) return undefined;
  const laneReads = laneReadsOf(w);
  const b: Builders = {
    prologue: prologueOf(w),
    step: stepOf(w, laneReads),
    laneReads,
    advance: advanceOf(w),
  };
  return wholeRow(w, b) ?? windowRun(w, b, enterTest(w));
}

/** A guard of a load's offset. */
type GuardAt = GuardedOffset["guards"][number];

/** A tap of the windows: its walk, its point in the window and its splatted loads. */
interface Tap {
  readonly lin: Linear;
  readonly point: readonly number[];
  readonly splats: Map<number, number>;
}

/** What a run's prologue sets up: the taps, and the row outputs' walk where they walk the axis. */
interface Setup {
  readonly taps: Tap[];
  readonly epilogue: Linear | undefined;
}

type Prologue = (stmts: number[], j: number) => Setup;
type LaneReads = (
  at: number,
  point: readonly number[],
) => Map<Expr, { lanes: boolean[]; fill: number }> | undefined;
type Step = (setup: Setup, j: number, first: () => number, edge?: number) => number[];
type Advance = (j: number, last: () => number, done: string) => number[];

/** The step builders of one kernel's windows. */
interface Builders {
  readonly prologue: Prologue;
  readonly step: Step;
  readonly laneReads: LaneReads;
  readonly advance: Advance;
}

/** Everything the four-window lowering of one kernel works from (see {@linkcode vectorWindows}). */
interface Windows {
  readonly fn: KernelFunction;
  readonly h: VectorHelpers;
  readonly rows: WindowRows;
  readonly m: KernelFunction["m"];
  readonly wasm: KernelFunction["wasm"];
  readonly kernel: KernelIR;
  readonly coord: readonly number[];
  readonly local: (type: number) => number;
  readonly get: (local: number, type: number) => number;
  readonly ic: (n: number) => number;
  readonly i32: number;
  readonly v128: number;
  readonly f4: KernelFunction["m"]["f32x4"];
  readonly f2: KernelFunction["m"]["f64x2"];
  readonly space: readonly number[];
  readonly red: readonly number[];
  /** The row local, and the end of the row range. */
  readonly row: number;
  readonly end: number;
  readonly kept: number[];
  /** The kept axis the four windows lie along. */
  readonly axis: number;
  /** Elements a window sums. */
  readonly inner: number;
  /** The kernel's one reduction. */
  readonly r: Reduction;
  readonly access: NonNullable<ReturnType<typeof windowAccesses>>;
  readonly guards: GuardAt[];
  /** Guards that move along the axis (they decide where a run may go). */
  readonly moving: GuardAt[];
  readonly points: ReturnType<typeof windowPoints>["points"];
  readonly shift: ReturnType<typeof windowPoints>["shift"];
  readonly span: ReturnType<typeof windowPoints>["span"];
  /** The row outputs, their expressions and their accesses. */
  readonly outs: number[];
  readonly exprs: Expr[];
  readonly accesses: ReturnType<VectorHelpers["accessesOf"]>;
}

/** The kernel's windows, where four of them can run as one f32x4 step. */
function windowsOf(fn: KernelFunction, h: VectorHelpers, rows: WindowRows): Windows | undefined {
  const { m, wasm, kernel, coord, local, get, ic } = fn;
  const i32 = wasm.i32, v128 = wasm.v128, f4 = m.f32x4, f2 = m.f64x2;
  const space = kernel.space, red = kernel.reduced, { row } = rows, { end } = fn.params;
  const kept = space.map((_, i) => i).filter((i) => !red.includes(i));
  const axis = kept.at(-1);
  const inner = sizeOf(red.map((i) => space[i]));
  const [r] = kernel.reductions;
  if (
    kernel.reductions.length !== 1 || axis === undefined || space[axis] < 4 || red.length === 0 ||
    inner === 0 || inner > GUARDED_UNROLLED || r.dtype !== "f32" ||
    !["sum", "mean", "max", "min"].includes(r.op) || fn.ops.vectorKind(r.expr) !== "f32" ||
    kernel.outputs.some((o) => o.level === "full")
  ) return undefined;
  const access = windowAccesses(fn, r.expr);
  if (!access || access.some(([l]) => l.dtype !== "f32")) return undefined;
  // Where one stride walks every window, the one-window path sums in vector partial sums (another
  // order): these four lanes would not round as its rows do.
  if (access.every(([, g]) => !g.guards.length && strideOver(g.offset, red, space) !== undefined)) {
    return undefined;
  }
  // Guards that move along the axis decide where a run may go; the others (a window's rows at
  // the top and bottom border, for a run along its columns) hold or fail for a tap the whole run
  // long: such a tap reads its fill in every window of the run (`vvalue`'s guarded loads).
  const guards = access.flatMap(([, g]) => g.guards);
  const moving = guards.filter((x) => x.at.weights[axis] !== 0);
  if (moving.some((x) => x.at.weights[axis] < 0)) return undefined;
  const { points, shift, span } = windowPoints(kernel);
  // The row outputs as one f32x4 store each where their accesses walk the axis.
  const outs = kernel.outputs.flatMap((o, k) => (o.level === "row" ? [k] : []));
  const exprs = outs.map((k) => kernel.outputs[k].expr);
  const accesses = h.accessesOf(exprs, outs);
  if (axis === undefined) return undefined;
  return {
    fn,
    h,
    rows,
    m,
    wasm,
    kernel,
    coord,
    local,
    get,
    ic,
    i32,
    v128,
    f4,
    f2,
    space,
    red,
    row,
    end,
    kept,
    axis,
    inner,
    r,
    access,
    guards,
    moving,
    points,
    shift,
    span,
    outs,
    exprs,
    accesses,
  };
}

/** The entry test: the coordinates read before `run` does, its guard values its own. */
function enterTest(w: Windows): () => number {
  const { fn, m, coord, get, ic, i32, space, row, end, axis, moving, span } = w;
  return () => {
    const tests = [
      m.i32.le_s(m.i32.add(get(coord[axis], i32), ic(4)), ic(space[axis])),
      m.i32.le_s(m.i32.add(get(row, i32), ic(4)), get(end, i32)),
    ];
    for (const x of moving) {
      for (const d of span(x.at)) {
        for (const lane of [0, 3 * x.at.weights[axis]]) {
          tests.push(m.i32.lt_u(m.i32.add(originOf(fn, x.at), ic(d + lane)), ic(x.bound)));
        }
      }
    }
    return tests.reduce((a, b) => m.i32.and(a, b));
  };
}

/**
 * The statements before a run's steps (into `stmts`): each tap's loads get a base at the
 * current coordinates (and where padded across the run, whether they read), a tap's loads that
 * stay put along the run (a depthwise conv's weight) are splatted once per run, not once per
 * four windows, and the row outputs get their walks.
 */
function prologueOf(w: Windows): Prologue {
  const {
    fn,
    h,
    m,
    coord,
    local,
    get,
    ic,
    i32,
    v128,
    axis,
    r,
    access,
    points,
    shift,
    outs,
    exprs,
    accesses,
    red,
  } = w;
  return (stmts: number[], j: number) => {
    stmts.push(...red.map((a) => m.local.set(coord[a], ic(0))));
    const atOrigin = (a: AffineOffset, scale = 1, plus?: number) => {
      const l = local(i32);
      stmts.push(m.local.set(l, originOf(fn, a, scale, plus)));
      return l;
    };
    const origins = access.map(([l, g]) => atOrigin(g.offset, 4, l.input));
    const fixed = access.map(([, g]) => g.guards.filter((x) => x.at.weights[axis] === 0));
    const fixedAt = fixed.map((list) => list.map((x) => atOrigin(x.at)));
    const { hoisted } = h.hoist({ j: -1, loads: new Map(), stores: new Map() }, [r.expr], stmts);
    const taps = points.map((point) => {
      const lin: Linear = { j, loads: new Map(), stores: new Map(), hoisted, guards: new Map() };
      const splats = new Map<number, number>();
      access.forEach(([l, g], i) => {
        const base = local(i32), stride = g.offset.weights[axis];
        stmts.push(
          m.local.set(base, m.i32.add(get(origins[i], i32), ic(4 * shift(g.offset, point)))),
        );
        lin.loads.set(l, { base, stride });
        if (fixed[i].length) {
          const ok = local(i32);
          const each = fixed[i].map((x, k) =>
            m.i32.lt_u(m.i32.add(get(fixedAt[i][k], i32), ic(shift(x.at, point))), ic(x.bound))
          );
          stmts.push(m.local.set(ok, each.reduce((a, b) => m.i32.and(a, b))));
          lin.guards!.set(l, { ok, fill: g.fill });
        } else if (stride === 0 && !g.guards.length) {
          const splat = local(v128);
          stmts.push(m.local.set(splat, m.v128.load32_splat(0, 4, get(base, i32))));
          splats.set(fn.keyOf(l), splat);
        }
      });
      return { lin, point, splats };
    });
    const epilogue = accesses && h.vectorizable(exprs, outs)
      ? { ...h.walks(accesses, [axis], stmts), j }
      : undefined;
    return { taps, epilogue };
  };
}

/**
 * Which of the four windows from static index `at` read tap `point` of each moving-guarded
 * load (the rest read its fill); `undefined` where all four read every load.
 */
function laneReadsOf(w: Windows): LaneReads {
  const { axis, access, shift } = w;
  return (at: number, point: readonly number[]) => {
    const reads = new Map<Expr, { lanes: boolean[]; fill: number }>();
    for (const [l, g] of access) {
      const lanes = [0, 1, 2, 3].map((lane) =>
        g.guards.every((x) => {
          if (x.at.weights[axis] === 0) return true;
          const v = x.at.base + x.at.weights[axis] * (at + lane) + shift(x.at, point);
          return v >= 0 && v < x.bound;
        })
      );
      if (!lanes.every(Boolean)) reads.set(l, { lanes, fill: g.fill });
    }
    return reads.size ? reads : undefined;
  };
}

/**
 * Four windows from `first() + j`, their row outputs stored. `edge`: the static window index
 * the step starts at, for a step at a row's end: taps whose moving guards fail for some of its
 * windows read those lanes' fill (see `laneReads`).
 */
function stepOf(w: Windows, laneReads: LaneReads): Step {
  const {
    fn,
    h,
    m,
    coord,
    local,
    get,
    ic,
    i32,
    v128,
    f4,
    f2,
    axis,
    inner,
    r,
    outs,
    exprs,
    rows,
  } = w;
  return (
    { taps, epilogue }: Setup,
    j: number,
    first: () => number,
    edge?: number,
  ): number[] => {
    const { wide, lo, hi, init, fold } = h.laneFold(r);
    const body: number[] = [...init];
    for (const { lin, point, splats } of taps) {
      const reads = edge === undefined ? undefined : laneReads(edge, point);
      const v = local(v128);
      body.push(
        m.local.set(
          v,
          h.vvalue(r.expr, reads ? { ...lin, lanes: reads } : lin, new Map(splats), body),
        ),
        ...fold(() => get(v, v128)),
      );
    }
    // The four results as f32x4, each rounded as the one-window path rounds it.
    const result = local(v128);
    if (!wide && (r.op === "sum" || r.op === "mean")) {
      const sums = get(lo, v128);
      body.push(
        m.local.set(result, r.op === "mean" ? f4.div(sums, f4.splat(m.f32.const(inner))) : sums),
      );
    } else if (wide) {
      const count = f2.splat(m.f64.const(inner));
      const half = (x: number) =>
        f4.demote_f64x2_zero(r.op === "mean" ? f2.div(get(x, v128), count) : get(x, v128));
      // Lanes 0-1 of the low half, then 0-1 of the high half.
      const join = [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23];
      body.push(m.local.set(result, m.i8x16.shuffle(half(lo), half(hi), join)));
    } else {
      body.push(
        m.local.set(
          result,
          m.v128.bitselect(f4.splat(m.f32.const(NaN)), get(lo, v128), get(hi, v128)),
        ),
      );
    }
    if (epilogue) {
      const memo = new Map<number, number>();
      for (const e of exprs) {
        walk(e, (x: Expr) => x.kind === "acc" && memo.set(fn.keyOf(x), result));
      }
      outs.forEach((k, i) => h.storeFour(k, epilogue, memo, body, exprs[i]));
    } else {
      for (let lane = 0; lane < 4; lane++) {
        body.push(
          m.local.set(coord[axis], m.i32.add(first(), m.i32.add(get(j, i32), ic(lane)))),
          m.local.set(fn.accs[0], f4.extract_lane(get(result, v128), lane)),
          ...rows.rowStores(),
        );
      }
    }
    return body;
  };
}

/**
 * Steps `j` on by four to `last()` at most, leaving block `done` once `j` has reached it:
 * where fewer than four windows are left, the last four are computed (recomputing some: the
 * same values, stored again) rather than one window at a time.
 */
function advanceOf(w: Windows): Advance {
  const { m, get, ic, i32 } = w;
  return (j: number, last: () => number, done: string): number[] => [
    m.br(done, m.i32.ge_s(get(j, i32), last())),
    m.local.set(j, m.i32.add(get(j, i32), ic(4))),
    m.local.set(j, m.select(m.i32.lt_s(get(j, i32), last()), get(j, i32), last())),
  ];
}

/**
 * A whole row of windows as f32x4 steps, where the moving guards' values at a row's start are
 * static (they weigh no kept axis but this one): the first four windows and the last four as
 * edge steps whose taps read the fill in the lanes outside, and between them steps of four
 * wholly inside. This replaces the one-window path at a row's ends, which for 16 windows a
 * row cost as much as the run between them. `undefined` where the windows between the edge
 * steps are not all inside (wide padding).
 */
function wholeRow(w: Windows, b: Builders): VectorWindows | undefined {
  const {
    m,
    coord,
    local,
    get,
    ic,
    i32,
    space,
    red,
    row,
    end,
    axis,
    moving,
    points,
  } = w;
  const { prologue, step, laneReads, advance } = b;

  const width = space[axis];
  if (
    moving.some((x) => x.at.weights.some((w, d) => w !== 0 && d !== axis && !red.includes(d)))
  ) {
    return undefined;
  }
  const inside = (at: number) => points.every((p) => laneReads(at, p) === undefined);
  // The windows between the edge steps, [4, width - 5], in steps from the first to the last;
  // the guards are affine in the window, so the two end steps decide whether all are inside.
  const stops = width >= 9 ? [Math.min(4, width - 8), width - 8] : [];
  if (stops.length && !(inside(stops[0]) && inside(stops[1]))) return undefined;
  const stmts: number[] = [];
  const wj = local(i32), rowStart = () => ic(0);
  const setup = prologue(stmts, wj);
  stmts.push(m.local.set(wj, ic(0)), ...step(setup, wj, rowStart, 0));
  if (stops.length) {
    const interior = step(setup, wj, rowStart);
    interior.push(...advance(wj, () => ic(stops[1]), "edge"));
    stmts.push(
      m.local.set(wj, ic(stops[0])),
      m.block("edge", [m.loop("inner", m.block(null, [...interior, m.br("inner")]))]),
    );
  }
  stmts.push(m.local.set(wj, ic(width - 4)), ...step(setup, wj, rowStart, width - 4));
  stmts.push(
    m.local.set(coord[axis], ic(width - 1)),
    m.local.set(row, m.i32.add(get(row, i32), ic(width - 1))),
  );
  const enterWhole = () =>
    m.i32.and(
      m.i32.eqz(get(coord[axis], i32)),
      m.i32.le_s(m.i32.add(get(row, i32), ic(width)), get(end, i32)),
    );
  return { enter: enterWhole, run: stmts };
}

/** Four windows a step from the current one, to the run's end; one window at a time past it. */
function windowRun(w: Windows, b: Builders, enter: () => number): VectorWindows {
  const { fn, m, coord, local, get, ic, i32, space, row, end, axis, moving, span } = w;
  const { prologue, step, advance } = b;
  const run: number[] = [];
  const j = local(i32), first = local(i32), n = local(i32), most = local(i32);
  const least = (into: number, value: number) =>
    run.push(
      m.local.set(most, value),
      m.local.set(
        into,
        m.select(m.i32.lt_s(get(most, i32), get(into, i32)), get(most, i32), get(into, i32)),
      ),
    );
  // `n`: the windows of the run — to the axis' end, the row range's end, and the last window
  // each moving guard holds for at its greatest tap.
  run.push(
    m.local.set(first, get(coord[axis], i32)),
    m.local.set(n, m.i32.sub(ic(space[axis]), get(first, i32))),
  );
  least(n, m.i32.sub(get(end, i32), get(row, i32)));
  for (const x of moving) {
    const w = x.at.weights[axis], at = local(i32);
    run.push(m.local.set(at, originOf(fn, x.at)));
    least(n, m.i32.div_s(m.i32.sub(ic(x.bound - 1 - span(x.at)[1] + w), get(at, i32)), ic(w)));
  }
  const body = step(prologue(run, j), j, () => get(first, i32));
  body.push(...advance(j, () => m.i32.sub(get(n, i32), ic(4)), "done"));
  run.push(
    m.local.set(j, ic(0)),
    m.block("done", [m.loop("windows", m.block(null, [...body, m.br("windows")]))]),
    m.local.set(coord[axis], m.i32.add(get(first, i32), m.i32.sub(get(n, i32), ic(1)))),
    m.local.set(row, m.i32.add(get(row, i32), m.i32.sub(get(n, i32), ic(1)))),
  );
  return { enter, run };
}
