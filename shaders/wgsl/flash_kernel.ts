/**
 * The flash attention kernel's WGSL (see `flash.ts` for when it runs and its plan): a workgroup
 * takes a tile of query rows, streams key and value tiles through workgroup memory, and keeps
 * an online softmax per row; each phase of the kernel is a function of the plan's state.
 *
 * @module
 */
import type { Expr, KernelIR } from "../../jit/ir/kernel_ir.ts";
import { matmulOperands } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { Attention } from "./attention_group.ts";
import { KernelLowering, NEG_INF } from "./expr.ts";
import { Emitter } from "./emit.ts";
import { combinedDecls, combinedFlush } from "./combined.ts";
import { entryPoint, NEVER, PRELUDE } from "./prelude.ts";
import { combiner } from "./rows.ts";
import { boundQueries, keptRange, keyRange, rangeMemory } from "./masks.ts";
import { maskHelpers } from "./tile_summary.ts";
import { type Filler, filler } from "./flash_fills.ts";
import {
  CHUNK,
  type Flash,
  groupBindings,
  groupInputNames,
  KEYS,
  LAZY_BITS,
  paddedWidth,
  raggedRows,
  summaryGeometry,
  THREADS_A_ROW,
  TX,
  weightRow,
} from "./flash.ts";

/** The flash kernel's WGSL: bindings as `plan.inputs`, then `values`' outputs. */
export function flashWgsl(plan: Flash, options: { half?: boolean } = {}): string {
  const f = flashState(plan, options.half ?? false);
  const { scoreFn, emitFn } = helperFunctions(f);
  const args = workgroupStart(f);
  const tiles = tileFills(f);
  const rows = rowHelpers(f);
  f.e.block(`for (var t0 = ${tiles.from}; t0 < ${tiles.end}; t0 += ${KEYS}) {`, () => {
    tileScores(f, tiles, rows, args);
    tileWeights(f, rows);
    tileValues(f, tiles, rows);
  });
  finalRows(f, rows, args);
  const { scores, weights, values, skip, D, RQ, R, mask, threads, e } = f;
  const { fillK, fillV } = tiles;
  return [
    `// kiln flash attention: ${scores.name} → ${weights.name} → ${values.name}`,
    ...groupBindings(plan, { half: f.half, extra: skip?.summary ? [skip.summary] : [] }),
    PRELUDE,
    `var<workgroup> qt: array<vec4<f32>, ${D * RQ}>;`,
    `var<workgroup> kt: array<vec4<f32>, ${D * fillK.stride}>;`,
    `var<workgroup> pt: array<vec4<f32>, ${weightRow(KEYS, RQ)}>;`,
    `var<workgroup> vt: array<vec4<f32>, ${KEYS * fillV.stride}>;`,
    `var<workgroup> red: array<f32, ${R * TX}>;`,
    "var<workgroup> flag: atomic<i32>;",
    ...(mask ? rangeMemory(mask) : []),
    ...scoreFn,
    ...emitFn,
    ...(skip && !skip.summary ? maskHelpers(plan, f.half) : []),
    ...combinedDecls(f.lv),
    ...entryPoint(threads, [...e.lines, ...combinedFlush(f.lv, false)]),
  ].join("\n");
}

/** The lowerings of a group's three kernels and the values' epilogue as a helper function. */
export interface GroupLowerings {
  /** The scores' lowering (coordinates `s…`). */
  readonly ls: KernelLowering;
  /** The softmax's lowering (coordinates `w…`). */
  readonly lw: KernelLowering;
  /** The values' lowering (coordinates `o…`). */
  readonly lv: KernelLowering;
  /** `fn emit(b0…, row, col, acc0)`: the values' epilogue and stores at (row, col). */
  readonly emitFn: readonly string[];
}

/**
 * The lowerings and the `emit` helper that another kernel for a whole group (the matrix attention
 * kernel, `matrix_attention.ts`) shares with the flash kernel; its own helpers enter the
 * lowerings through {@linkcode helperBody}.
 */
export function groupLowerings(plan: Attention, half: boolean): GroupLowerings {
  // The lowerings and `emit` do not depend on the query rows a flash workgroup would take.
  const f = flashState({ ...plan, rows: 16 }, half);
  return { ls: f.ls, lw: f.lw, lv: f.lv, emitFn: emitHelper(f) };
}

/**
 * A helper function's body for lowering `l` of a group with `nb` batch axes (into `body`, or a
 * new one): its coordinates the parameters `b0…`, then `row` and `col` (K's 0).
 */
export function helperBody(l: KernelLowering, nb: number, body = new Emitter()): Emitter {
  body.indent = "  ";
  l.e = body;
  const rest = ["row", "col", "0"];
  l.coords.forEach((c, i) => body.line(`var ${c}: i32 = ${i < nb ? `b${i}` : rest[i - nb]};`));
  return body;
}

/** The plan's operands and sizes, its three lowerings, and the kernel's emitter. */
function flashState(plan: Flash, half: boolean) {
  const { scores, weights, values, rows: R, skip } = plan;
  const mask = skip?.mask, geometry = skip?.summary && summaryGeometry(plan);
  const s = matmulOperands(scores)!, v = matmulOperands(values)!;
  const nb = s.nb, D = s.k, E = v.n, T = s.n;
  const EP = paddedWidth(E), G = EP / 32, RQ = R / 4, threads = R * THREADS_A_ROW;
  const [mAx, nAx, kAx] = [nb, nb + 1, nb + 2];
  const names = (k: KernelIR) => groupInputNames(plan, k);
  const lowering = (k: KernelIR, prefix: string) =>
    new KernelLowering(k, { prefix, inputs: names(k), half });
  const ls = lowering(scores, "s"), lw = lowering(weights, "w"), lv = lowering(values, "o");
  const batch = [...Array(nb).keys()].map((i) => `b${i}`);
  const params = [...batch.map((b) => `${b}: i32`), "row: i32", "col: i32", "acc0: f32"].join(", ");
  const e = new Emitter();
  return {
    plan,
    half,
    scores,
    weights,
    values,
    R,
    skip,
    mask,
    geometry,
    s,
    v,
    nb,
    D,
    E,
    T,
    EP,
    G,
    RQ,
    threads,
    mAx,
    nAx,
    kAx,
    names,
    lowering,
    ls,
    lw,
    lv,
    params,
    e,
  };
}

/** What every phase of the flash kernel reads (see {@linkcode flashState}). */
type FlashState = ReturnType<typeof flashState>;

/**
 * The kernel's two helper functions: `score(…, row, key, dot)`, the scores' epilogue and then
 * the softmax's prologue at (row, key), and `emit(…, row, col, out)`, the values' epilogue.
 */
function helperFunctions(f: FlashState): { scoreFn: string[]; emitFn: string[] } {
  const { scores, weights, nb, ls, lw, params } = f;
  // score(…, row, key, dot): the scores' epilogue, then the softmax's prologue x at (row, key).
  const body = helperBody(ls, nb);
  const score = ls.value(scores.outputs[0].expr, new Map());
  helperBody(lw, nb, body);
  lw.redirect.set(
    String(weights.inputs.findIndex((b) => b.value === scores.outputs[0].value)),
    () => score,
  );
  const x = lw.value(weights.reductions[0].expr, new Map());
  const scoreFn = [`fn score(${params}) -> f32 {`, ...body.lines, `  return ${x};`, "}"];
  return { scoreFn, emitFn: emitHelper(f) };
}

/** `emit(…, row, col, out)`: the values' epilogue and stores at (row, col). */
function emitHelper(f: FlashState): string[] {
  const { values, nb, E, lv, params } = f;
  const body = helperBody(lv, nb);
  body.block(`if (col < ${E}) {`, () => {
    const memo = new Map<Expr, string>();
    values.outputs.forEach((o, k) => lv.store(o, k, memo));
  });
  return [`fn emit(${params}) {`, ...body.lines, "}"];
}

/**
 * The workgroup's start: its thread coordinates and first query row (heavy query tiles first
 * where tiles are skipped), each lowering's coordinates there; the `score`/`emit` arguments.
 */
function workgroupStart(f: FlashState): (row: string, col: string, value: string) => string {
  const { R, geometry, nb, mAx, ls, lv, e } = f;
  e.line(NEVER);
  e.line("let t = i32(lid.x);");
  e.line(`let tx = t % ${TX};`);
  e.line(`let ty = t / ${TX};`);
  if (geometry) {
    // Skipping tiles, work grows with the query tile (causal: the last computes every key tile):
    // each item's last query tile goes first, the light ones fill the tail (H200, B1 H16 T4096
    // causal: 2.23 -> 1.99 ms). An unfolded dispatch only: its count gives the active items.
    const QT = geometry.queryTiles;
    e.line("var g = i32(wid.x + wid.y * nwg.x);");
    e.block("if (nwg.y == 1u) {", () => {
      e.line(`let items = i32(nwg.x) / ${QT};`);
      e.line(`g = g % items * ${QT} + ${QT - 1} - g / items;`);
    });
    e.line(`let row0 = g * ${R};`);
  } else if (raggedRows(f.plan)) {
    // Whole query tiles an item: its rows from item · m, the last tile's past them idle.
    const tiles = Math.ceil(f.s.m / R);
    e.line("let g = i32(wid.x + wid.y * nwg.x);");
    e.line(`if (g >= ${sizeOf(f.scores.space.slice(0, nb)) * tiles}) { return; }`);
    e.line(`let row0 = g / ${tiles} * ${f.s.m} + g % ${tiles} * ${R};`);
  } else e.line(`let row0 = i32(wid.x + wid.y * nwg.x) * ${R};`);
  for (const l of [ls, lv]) {
    l.e = e;
    for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
    l.unravel([...Array(nb + 1).keys()], "row0");
  }
  e.line(`let first = ${ls.coords[mAx]};`);
  const args = (row: string, col: string, value: string) =>
    [...ls.coords.slice(0, nb), row, col, value].join(", ");
  return args;
}

/**
 * The query tile, and the first key and value tiles in workgroup memory; with a mask, the range
 * of key tiles to compute.
 */
function tileFills(f: FlashState): { fillK: Filler; fillV: Filler; from: string; end: string } {
  const {
    plan,
    skip,
    mask,
    geometry,
    s,
    v,
    D,
    E,
    T,
    EP,
    RQ,
    threads,
    mAx,
    nAx,
    kAx,
    ls,
    lv,
    e,
  } = f;
  // The query tile, once (unpadded: stored once, its conflicts cost nothing a tile):
  // qt[d · R/4 + r/4] holds rows r..r+3 at d.
  const zero = () => "0", key = (t: string) => t;
  const fillQ = filler(
    f,
    "qt",
    ls,
    s.a,
    { axis: mAx, base: () => "first", bound: s.m, groups: RQ },
    {
      axis: kAx,
      base: zero,
      bound: D,
      extent: D,
    },
    false,
  );
  fillQ.load("0");
  if (mask) boundQueries(e, mask, fillQ.count);
  fillQ.store();
  // kt[d · sk + j/4] holds keys j..j+3 at d; vt[j · sv + c/4] columns c..c+3 of key j (sk, sv:
  // the tiles' row strides, 8 and EP/4 vec4s or one more).
  const fillK = filler(f, "kt", ls, s.b, { axis: nAx, base: key, bound: T, groups: TX }, {
    axis: kAx,
    base: zero,
    bound: D,
    extent: D,
  });
  const fillV = filler(f, "vt", lv, v.b, { axis: nAx, base: zero, bound: E, groups: EP / 4 }, {
    axis: kAx,
    base: key,
    bound: T,
    extent: KEYS,
  });
  // With a mask, the range of key tiles to compute, `lo` to `hi` (one past the last): from this
  // workgroup's words of the summary, or decided here where the mask is over the keys alone.
  let start = "0", from = "0", end = `${T}`;
  if (mask && geometry) {
    const { queryTiles: QT, keyTiles: NT, words: W } = geometry;
    const summary = `in${plan.inputs.length}`;
    e.line(`let item = g / ${QT} * ${W};`);
    keptRange(e, mask, {
      summary,
      at: `${skip!.shared ? "" : "item + "}g % ${QT} * ${NT}`,
      keysAt: `item + ${QT * NT}`,
      nt: NT,
      threads,
      d: D,
    });
  } else if (mask) {
    keyRange(e, mask, {
      batch: ls.coords.slice(0, f.nb),
      T,
      keys: KEYS,
      threads,
      d: D,
      width: f.E,
    });
  }
  if (mask) {
    const NT = Math.ceil(T / KEYS);
    start = `min(lo, ${NT - 1}) * ${KEYS}`;
    from = `lo * ${KEYS}`;
    end = `hi * ${KEYS}`;
  }
  // The first tile's keys and values go straight to workgroup memory.
  fillK.load(start);
  fillV.load(start);
  fillK.store();
  fillV.store();
  e.line("workgroupBarrier();");
  return { fillK, fillV, from, end };
}

/** A thread's rows and the helpers the key loop emits with; each row's accumulators declared. */
function rowHelpers(f: FlashState) {
  const { weights, G, RQ, e } = f;
  // A thread's rows: vec4 ty of the query tile; its output columns 4·(tx + 8g).
  const rowOf = (r: number) => `ty * 4 + ${r}`;
  const lane = (i: number) => "xyzw"[i];
  const unrolled = (n: number, body: (i: number) => void) => {
    for (let i = 0; i < n; i++) e.block("{", () => body(i));
  };
  // `n` steps in loops of `CHUNK` unrolled ones (see `CHUNK`), the rest unrolled after them:
  // `body(i, base)` emits step i of a chunk, `base(scale)` being the chunk's first step times
  // `scale` (a WGSL i32 expression).
  const chunked = (n: number, body: (i: number, base: (scale: number) => string) => void) => {
    const whole = n - n % CHUNK;
    const at = (first: number) => (scale: number) => `${first * scale}`;
    if (whole > CHUNK) {
      e.block(`for (var c0 = 0; c0 < ${whole}; c0 += ${CHUNK}) {`, () => {
        unrolled(CHUNK, (i) => body(i, (scale) => `c0 * ${scale}`));
      });
    } else if (whole) unrolled(CHUNK, (i) => body(i, at(0)));
    unrolled(n % CHUNK, (i) => body(i, at(whole)));
  };
  for (let r = 0; r < 4; r++) {
    for (let g = 0; g < G; g++) e.line(`var o_${r}_${g} = vec4<f32>(0.0);`);
    e.line(`var m_${r} = ${NEG_INF};`);
    e.line(`var l_${r} = 0.0;`);
  }
  const { combine } = combiner(weights.reductions[0]);
  // This thread's weights `p_r` of the tile into pt[weightRow(j) + r/4] (rows r..r+3 of key j),
  // a pad vec4 after every 4 keys: the 8 threads of a row group, 4 keys apart, store to 8
  // different banks (without the pad, all to one).
  const storeWeights = () => {
    for (let c = 0; c < 4; c++) {
      const rows = [0, 1, 2, 3].map((r) => `p_${r}.${lane(c)}`).join(", ");
      e.line(`pt[(4 * tx + ${c}) * ${RQ} + tx + ty] = vec4<f32>(${rows});`);
    }
  };
  return { rowOf, lane, unrolled, chunked, combine, storeWeights };
}

/** The row helpers (see {@linkcode rowHelpers}). */
type Rows = ReturnType<typeof rowHelpers>;

/** A key tile's scores: rows × 4 keys a thread, through `score`, keys past the end at −∞. */
function tileScores(
  f: FlashState,
  tiles: { fillK: Filler; end: string },
  rows: Rows,
  args: (row: string, col: string, value: string) => string,
): void {
  const { D, T, RQ, e } = f;
  const { fillK, end } = tiles;
  const { rowOf, lane, chunked } = rows;
  e.line(`let tile = t0 / ${KEYS} + 1;`);
  e.line(`let more = t0 + ${KEYS} < ${end};`);
  // Scores: rows × 4 keys a thread.
  for (let r = 0; r < 4; r++) e.line(`var s_${r} = vec4<f32>(0.0);`);
  chunked(D, (d, base) => {
    e.line(`let kk = kt[${base(fillK.stride)} + ${d * fillK.stride} + tx];`);
    e.line(`let qq = qt[${base(RQ)} + ${d * RQ} + ty];`);
    for (let r = 0; r < 4; r++) e.line(`s_${r} = fma(vec4<f32>(qq.${lane(r)}), kk, s_${r});`);
  });
  // The epilogue and prologue per score, keys past the end at −∞; a row past a ragged item's
  // queries scores as its last (its outputs are not stored) so that its mask reads stay inside.
  const m = f.s.m;
  const row = (r: number) =>
    raggedRows(f.plan) ? `min(first + ${rowOf(r)}, ${m - 1})` : `first + ${rowOf(r)}`;
  for (let r = 0; r < 4; r++) {
    for (let c = 0; c < 4; c++) {
      const held = `s_${r}.${lane(c)}`;
      e.block("{", () => {
        e.line(`let key = t0 + 4 * tx + ${c};`);
        if (T % KEYS === 0) {
          e.line(`${held} = score(${args(row(r), "key", held)});`);
          return;
        }
        e.line(
          `${held} = select(${NEG_INF}, score(${
            args(row(r), `min(key, ${T - 1})`, held)
          }), key < ${T});`,
        );
      });
    }
  }
}

/** The tile's weights against the rows' running maxima, rescaled where one passes e^8. */
function tileWeights(f: FlashState, rows: Rows): void {
  const { G, e } = f;
  const { rowOf, unrolled, combine, storeWeights } = rows;
  // Weights against the rows' running maxima as they stand, with no exchange between threads.
  // They are exact (the softmax's quotient is the same for any subtrahend) while none passes
  // e^8: the sum of a row's weights then stays finite. A weight past that, a NaN or an
  // infinite score (and the first tile, whose maxima are −∞) make the sum of this thread's
  // weights, decided on its bits, pass e^8; then the tile retakes the exchange below.
  for (let r = 0; r < 4; r++) e.line(`var p_${r} = exp(s_${r} - vec4<f32>(m_${r}));`);
  e.line(
    `let tileSum = ${
      [0, 1, 2, 3].map((r) => `(p_${r}.x + p_${r}.y) + (p_${r}.z + p_${r}.w)`).join(" + ")
    };`,
  );
  e.block(`if ((bitcast<u32>(tileSum) & 0x7fffffffu) > ${LAZY_BITS}u) {`, () => {
    e.line("atomicMax(&flag, tile);");
  });
  storeWeights();
  e.block("if (workgroupUniformLoad(&flag) == tile) {", () => {
    // Each row's share of the tile's maximum (NaN wins, as in the row kernel's max).
    for (let r = 0; r < 4; r++) {
      e.block("{", () => {
        e.line(`let low = ${combine(`s_${r}.x`, `s_${r}.y`)};`);
        e.line(`let high = ${combine(`s_${r}.z`, `s_${r}.w`)};`);
        e.line(`red[(${rowOf(r)}) * ${TX} + tx] = ${combine("low", "high")};`);
      });
    }
    e.line("workgroupBarrier();");
    // The rows' new maxima; what the rows hold so far rescales to them. A row whose maximum
    // is still −∞ (every key so far masked) weighs its keys 0: a row that never sees another
    // sums to 0, and 0 / 0 makes it NaN, as the softmax of all −∞ is.
    for (let r = 0; r < 4; r++) {
      e.block("{", () => {
        e.line(`var mt = m_${r};`);
        unrolled(TX, (u) => {
          e.line(`let y = red[(${rowOf(r)}) * ${TX} + ${u}];`);
          e.line(`mt = ${combine("mt", "y")};`);
        });
        e.line(`let scale = select(exp(m_${r} - mt), 1.0, m_${r} == mt);`);
        e.line(`l_${r} = l_${r} * scale;`);
        for (let g = 0; g < G; g++) e.line(`o_${r}_${g} = o_${r}_${g} * scale;`);
        e.line(
          `p_${r} = select(exp(s_${r} - vec4<f32>(mt)), vec4<f32>(0.0), (mt < 0.0) & k_isinf(mt));`,
        );
        e.line(`m_${r} = mt;`);
      });
    }
    storeWeights();
    e.line("workgroupBarrier();");
  });
  for (let r = 0; r < 4; r++) {
    e.line(`l_${r} = l_${r} + (p_${r}.x + p_${r}.y) + (p_${r}.z + p_${r}.w);`);
  }
}

/** out += P · V for the tile, while the next tile's keys and values travel. */
function tileValues(f: FlashState, tiles: { fillK: Filler; fillV: Filler }, rows: Rows): void {
  const { G, RQ, e } = f;
  const { fillK, fillV } = tiles;
  const { lane, chunked } = rows;
  // The next tile's keys and values travel from memory while this one's products compute.
  // Read before the scores instead, they held 32 registers through them (1.645 -> 1.590 ms at
  // B8 H16 T1024 D64 in chunks of 16; unchunked, the same 2.13 either way).
  e.block("if (more) {", () => {
    fillK.load(`t0 + ${KEYS}`);
    fillV.load(`t0 + ${KEYS}`);
  });
  // out += P · V: rows × 4·G columns a thread. weightRow(c0 + j) is c0 · (4·RQ + 1) / 4 +
  // weightRow(j), chunks starting at multiples of 4.
  chunked(KEYS, (j, base) => {
    e.line(`let pp = pt[${base(4 * RQ + 1)} / 4 + ${weightRow(j, RQ)} + ty];`);
    for (let g = 0; g < G; g++) {
      e.line(`let vv${g} = vt[${base(fillV.stride)} + ${j * fillV.stride + g * TX} + tx];`);
    }
    for (let r = 0; r < 4; r++) {
      for (let g = 0; g < G; g++) {
        e.line(`o_${r}_${g} = fma(vec4<f32>(pp.${lane(r)}), vv${g}, o_${r}_${g});`);
      }
    }
  });
  // Every thread is past its scores: the next keys may replace these; the values, once every
  // thread is past its products.
  e.block("if (more) {", () => fillK.store());
  e.line("workgroupBarrier();");
  e.block("if (more) {", () => fillV.store());
}

/** Each row's sum from the threads' shares, then the values' epilogue per output. */
function finalRows(
  f: FlashState,
  rows: Rows,
  args: (row: string, col: string, value: string) => string,
): void {
  const { G, e } = f;
  const { rowOf, lane } = rows;
  // Each row's sum from the threads' shares, then the values' epilogue per output.
  e.line("workgroupBarrier();");
  for (let r = 0; r < 4; r++) e.line(`red[(${rowOf(r)}) * ${TX} + tx] = l_${r};`);
  e.line("workgroupBarrier();");
  for (let r = 0; r < 4; r++) {
    e.block("{", () => {
      e.line("var total = 0.0;");
      e.block(`for (var u = 0; u < ${TX}; u++) {`, () => {
        e.line(`total = total + red[(${rowOf(r)}) * ${TX} + u];`);
      });
      for (let g = 0; g < G; g++) {
        for (let c = 0; c < 4; c++) {
          const col = `${4 * g * TX} + 4 * tx + ${c}`;
          const o = `o_${r}_${g}.${lane(c)}`;
          const out = f.plan.guarded
            ? `select(select(0.0, ${o}, total == 0.0), k_fdiv(${o}, total), (total > 0.0) & !k_isinf(total))`
            : `k_fdiv(${o}, total)`;
          const call = `emit(${args(`first + ${rowOf(r)}`, col, out)});`;
          if (!raggedRows(f.plan)) e.line(call);
          else e.block(`if (first + ${rowOf(r)} < ${f.s.m}) {`, () => e.line(call));
        }
      }
    });
  }
}
