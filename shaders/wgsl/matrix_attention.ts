/**
 * Attention on the matrix units: an f16 attention group (`scores → softmax → values`, see
 * `attentionGroup`) of a short key axis as one kernel whose two products run on subgroup matrices
 * (Dawn's `chromium-experimental-subgroup-matrix`, 16×16×16 f16 → f32, as `matrix_matmul.ts`
 * uses them). A workgroup of four subgroups takes 16 query rows of one batch item: their queries
 * stay as left matrices while the keys stream through workgroup memory 64 at a time, a subgroup
 * 16 keys of each chunk, the dots stored whole (16 × T in f32); then eight threads a row apply the
 * scores' epilogue, take the row's maximum and sum by shuffles and store the weights as f16 (as
 * the three kernels of an f16 program store them), each through the group's own lowerings (so a
 * softmax whose output the exporter guards, `Where(IsNaN(w), 0, w)` after PyTorch's SDPA, is
 * computed as written); then the values stream through as the keys did (the first chunk's loads
 * issued before the softmax), a subgroup 16 output columns, and each result matrix goes through
 * workgroup memory to the values' epilogue (`emit`). Operands are filled as the matrix tiles fill
 * theirs (`matrix_fills.ts`), from any affine view: keys read in place through a transposing view
 * (their copy by head, made for the one-row kernel, goes).
 *
 * Why: the one-row kernel that runs such groups otherwise (`attention.ts`, a workgroup a query
 * row, a key or an output column a thread) is bound by the latency of its dependent loads and
 * wants the keys' copy; the flash kernel's 64-row tiles leave the GPU idle at so few rows. On the
 * H200 (Dawn, device time, session 77) BERT-base's heads at 128 tokens took 0.0173 ms here against
 * 0.029 on the flash kernel (`bench/gpu_kernels.ts --only attention-B1H12T128D64-f16`, error
 * 4e-5 of float64's), and BERT-base in f16 1.485-1.493 ms in 99 kernels against 1.592-1.600 in
 * 111 (`bench/profile_model.ts`).
 *
 * It applies where the device runs f16 matmuls on its matrix units (`WgslOptions.matrix`), both
 * products sum f16 products of affine loads, the softmax reduces as the plain one and the tiles
 * fit the device's workgroup memory (up to 256 keys at heads of 64 in 48 KB). A query axis of no
 * multiple of 16 (ViT-B/16's 197 tokens) takes whole workgroups an item, its last one's rows past
 * the queries reading zeros, computing no softmax and storing nothing: on the H200 ViT's heads
 * took 0.0432-0.0436 ms so against 0.0471-0.0491 as the three kernels they were (device time,
 * session 78), though ViT-B/16 in f16 as a whole measured 2.320-2.339 ms against 2.302-2.317
 * (`bench/profile_model.ts`, processes alternating). CI's software adapter has no matrix units:
 * the kernel is checked there as text, and run against float64 on the H200 by
 * `bench/gpu_kernels.ts --only attention` (its `-f16` rows).
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import { matmulOperands, sumsHalfProducts } from "../../jit/ir/kernel_ir.ts";
import type { KernelIR, Load } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { NEG_INF } from "./expr.ts";
import { Emitter } from "./emit.ts";
import { combinedDecls, combinedDirectives, combinedFlush } from "./combined.ts";
import { entryPoint, NEVER, PRELUDE } from "./prelude.ts";
import { type KernelLayout, rowsLayout, type WgslOptions } from "./codegen.ts";
import { combiner, streamedRows } from "./rows.ts";
import type { Attention } from "./attention_group.ts";
import { groupBindings, softmaxReductions } from "./flash.ts";
import { type GroupLowerings, groupLowerings, helperBody } from "./flash_kernel.ts";
import { type Fill, HALVES, PAD_BYTES, tileFill } from "./matrix_fills.ts";
import { MATRIX_BUILTINS, MATRIX_ENABLES } from "./matrix_matmul.ts";

/** A result matrix's rows and columns, and the query rows of a workgroup. */
const MK = 16;

/** Subgroups of a workgroup (of 32 threads each, as the matrix units' kernels count them). */
const SUBGROUPS = 4;

/** Threads of a workgroup. */
const THREADS = 32 * SUBGROUPS;

/** Keys (and values) a chunk streams through workgroup memory: 16 a subgroup. */
const CHUNK = MK * SUBGROUPS;

/** Threads of a query row in the softmax (combined by shuffles, within one subgroup). */
const ROW_THREADS = THREADS / MK;

/** An attention group that runs on the matrix units as one kernel. */
export interface MatrixAttention extends Attention {
  /** Marks the plan as this kernel's (the flash kernel's has `rows`). */
  readonly units: true;
}

/** `n` rounded up to a multiple of `m`. */
function roundUp(n: number, m: number): number {
  return Math.ceil(n / m) * m;
}

/** Halves of an operand tile of `rows` by `tk`, in either layout (rows of K, or of the rows). */
function tileHalves(rows: number, tk: number): number {
  const pad = PAD_BYTES / HALVES.size;
  return Math.max(rows * (tk + pad), tk * (rows + pad));
}

/** The sizes of a group's kernel: head width D, value width E and keys T, each padded. */
function geometry(plan: Attention) {
  const s = matmulOperands(plan.scores)!, v = matmulOperands(plan.values)!;
  const DP = roundUp(s.k, MK), EP = roundUp(v.n, MK), TP = roundUp(s.n, CHUNK);
  // The weights' rows: padded by 16 bytes, as the tiles' rows are.
  const PW = TP + PAD_BYTES / HALVES.size;
  return { s, v, DP, EP, TP, PW };
}

/**
 * Workgroup memory of the kernel: the query tile, a chunk of keys and one of values, the scores
 * in f32 and the weights in f16.
 */
function matrixAttentionBytes(plan: Attention): number {
  const { DP, EP, TP, PW } = geometry(plan);
  const tiles = tileHalves(MK, DP) + tileHalves(CHUNK, DP) + tileHalves(EP, CHUNK);
  return 2 * (tiles + MK * PW) + 4 * MK * TP;
}

/** The matrix form of an attention `group` on a device with `options`, if it applies. */
export function matrixAttention(
  group: Attention,
  options: WgslOptions,
): MatrixAttention | undefined {
  const { scores, weights, values } = group;
  if (!options.matrix || !options.half || THREADS > options.maxInvocations) return undefined;
  if (!sumsHalfProducts(scores) || !sumsHalfProducts(values) || !softmaxReductions(weights)) {
    return undefined;
  }
  const s = matmulOperands(scores)!, v = matmulOperands(values)!;
  const affine = (k: KernelIR, input: number, steps: Parameters<typeof affineOffset>[0]) =>
    affineOffset(steps, k.space, k.inputs[input].shape) !== undefined;
  if (
    !affine(scores, s.a.input, s.a.steps) ||
    !affine(scores, s.b.input, s.b.steps) || !affine(values, v.b.input, v.b.steps) ||
    matrixAttentionBytes(group) > (options.workgroupBytes ?? 16384)
  ) return undefined;
  return { ...group, units: true };
}

/**
 * The kernel's layout: 16 query rows of one batch item a workgroup of 128 threads (8 a row in the
 * softmax), an item's last workgroup partly past its rows where they are no multiple of 16.
 */
export function matrixAttentionLayout(plan: MatrixAttention): KernelLayout {
  const segment = matmulOperands(plan.scores)!.m;
  return rowsLayout({ ...streamedRows(ROW_THREADS, MK), segment });
}

/** The kernel's WGSL: bindings as `plan.inputs`, then `values`' outputs. */
export function matrixAttentionWgsl(plan: MatrixAttention): string {
  const lowerings = groupLowerings(plan, true);
  const helpers = softmaxHelpers(plan, lowerings);
  const { TP, PW } = geometry(plan);
  const e = new Emitter();
  const batch = workgroupStart(e, plan, lowerings);
  const queries = queryMatrices(e, plan, lowerings.ls);
  const keys = keyScores(e, plan, lowerings.ls);
  // The first chunk of values travels while the softmax computes.
  const values = valueFill(plan, lowerings.lv);
  values.load("0");
  softmaxRows(e, plan, batch);
  weightedValues(e, plan, values, batch);
  return [
    `// kiln matrix attention: ${plan.scores.name} → ${plan.weights.name} → ${plan.values.name}`,
    "enable f16;",
    ...MATRIX_ENABLES,
    ...combinedDirectives(plan.values, true, true),
    ...groupBindings(plan, { half: true }).filter((x) => x !== "enable f16;"),
    PRELUDE,
    `var<workgroup> tileA: array<f16, ${queries}>;`,
    `var<workgroup> tileB: array<f16, ${keys}>;`,
    `var<workgroup> tileV: array<f16, ${values.size}>;`,
    `var<workgroup> sc: array<f32, ${MK * TP}>;`,
    `var<workgroup> pw: array<f16, ${MK * PW}>;`,
    ...helpers,
    ...lowerings.emitFn,
    ...combinedDecls(lowerings.lv),
    ...entryPoint(THREADS, [...e.lines, ...combinedFlush(lowerings.lv, true)], MATRIX_BUILTINS),
  ].join("\n");
}

/** The subgroup matrix types of the kernel, and its multiply-accumulate statement. */
const LEFT = `subgroup_matrix_left<f16, ${MK}, ${MK}>`;
const RIGHT = `subgroup_matrix_right<f16, ${MK}, ${MK}>`;
const RESULT = `subgroup_matrix_result<f32, ${MK}, ${MK}>`;
const mac = (acc: string, a: string, b: string) =>
  `${acc} = subgroupMatrixMultiplyAccumulate(${a}, ${b}, ${acc});`;

/**
 * The workgroup's batch item and first query row, each lowering's batch coordinates there (the
 * returned names, the helpers' batch arguments).
 */
function workgroupStart(e: Emitter, plan: Attention, { ls, lv }: GroupLowerings): string[] {
  const s = matmulOperands(plan.scores)!;
  const nb = s.nb;
  e.line(NEVER);
  e.line("let t = i32(lid.x);");
  const tiles = Math.ceil(s.m / MK);
  e.line(`let g = i32(wid.x + wid.y * nwg.x);`);
  e.line(`if (g >= ${sizeOf(plan.scores.space.slice(0, nb)) * tiles}) { return; }`);
  e.line(`let row0 = g % ${tiles} * ${MK};`);
  e.line(`let item = g / ${tiles};`);
  for (const l of [ls, lv]) {
    l.e = e;
    for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
    if (nb) l.unravel([...Array(nb).keys()], "item");
  }
  return ls.coords.slice(0, nb);
}

/** A fill of `op` (see `tileFill`) by the workgroup's threads, an element a load. */
function fill(
  l: GroupLowerings["ls"],
  name: string,
  op: Load,
  at: { ax: number; o0: string; bound: number; rows: number; tk: number },
): Fill {
  return tileFill(l, { name, op, ...at, threads: THREADS, vector: false, element: HALVES });
}

/** The 16 rows of queries by the head, once, held as left matrices `qm…`; the tile's halves. */
function queryMatrices(e: Emitter, plan: Attention, ls: GroupLowerings["ls"]): number {
  const { s, DP } = geometry(plan);
  const fillQ = fill(ls, "tileA", s.a, { ax: s.nb, o0: "row0", bound: s.m, rows: MK, tk: DP });
  fillQ.load("0");
  fillQ.store();
  e.line("workgroupBarrier();");
  for (let d = 0; d < DP; d += MK) e.line(`let qm${d} = ${fillQ.matrix(LEFT, "0", d)};`);
  return fillQ.size;
}

/**
 * The scores' dots into `sc` (16 rows of TP), {@linkcode CHUNK} keys a fill, 16 a subgroup (all
 * 128 of BERT-base's keys in one fill measured no faster: 0.0185 ms against 0.0173 on the H200).
 * Each chunk's keys are loaded, stored and multiplied in turn. Session 78 issued the next chunk's
 * loads before this one's multiplies (ViT's heads 0.0432-0.0434 ms against 0.0435-0.0438); with
 * them B8 H16 T128 ran at 0.0700 ms in session 79 (`s79d.sh`) against session 77's 0.0416, its
 * WGSL otherwise the same, so whole query tiles are generated as in session 77 again (untimed).
 * Returns the key tile's halves.
 */
function keyScores(e: Emitter, plan: Attention, ls: GroupLowerings["ls"]): number {
  const { s, DP, TP } = geometry(plan);
  let size = 0;
  e.block(`for (var c0 = 0; c0 < ${TP}; c0 += ${CHUNK}) {`, () => {
    // Made here: a fill's origin is fixed where it is made, and keys move along its rows.
    const at = { ax: s.nb + 1, o0: "c0", bound: s.n, rows: CHUNK, tk: DP };
    const fillK = fill(ls, "tileB", s.b, at);
    size = fillK.size;
    fillK.load("0");
    fillK.store();
    e.line("workgroupBarrier();");
    e.line(`var acc = ${RESULT}();`);
    for (let d = 0; d < DP; d += MK) {
      e.line(mac("acc", `qm${d}`, fillK.matrix(RIGHT, `i32(sg) * ${MK}`, d)));
    }
    e.line(`subgroupMatrixStore<row_major>(&sc, u32(c0) + sg * ${MK}u, acc, ${TP}u);`);
    e.line("workgroupBarrier();");
  });
  return size;
}

/** The values' fill: a chunk of {@linkcode CHUNK} keys by the padded value width. */
function valueFill(plan: Attention, lv: GroupLowerings["lv"]): Fill {
  const { v, EP } = geometry(plan);
  return fill(lv, "tileV", v.b, { ax: v.nb + 1, o0: "0", bound: v.n, rows: EP, tk: CHUNK });
}

/**
 * out = weights · values, a chunk of keys at a time (the next one travelling while this one
 * multiplies), subgroup sg taking output columns 16·(sg + 4·b); each result matrix through the
 * subgroup's slice of `sc` to the values' epilogue (`emit`).
 */
function weightedValues(e: Emitter, plan: Attention, fillV: Fill, batch: readonly string[]): void {
  const { s, EP, TP, PW } = geometry(plan);
  const blocks = EP / MK, held = Math.ceil(blocks / SUBGROUPS);
  for (let b = 0; b < held; b++) {
    // A subgroup past the last block repeats it (matrix calls stay in uniform control flow).
    e.line(`let cb${b} = min(i32(sg) + ${SUBGROUPS * b}, ${blocks - 1}) * ${MK};`);
    e.line(`var ov${b} = ${RESULT}();`);
  }
  e.block(`for (var c0 = 0; c0 < ${TP}; c0 += ${CHUNK}) {`, () => {
    fillV.store();
    e.line("workgroupBarrier();");
    e.block(`if (c0 + ${CHUNK} < ${TP}) {`, () => fillV.load(`c0 + ${CHUNK}`));
    for (let kk = 0; kk < CHUNK; kk += MK) {
      e.line(`let p${kk} = subgroupMatrixLoad<${LEFT}, row_major>(&pw, u32(c0 + ${kk}), ${PW}u);`);
      for (let b = 0; b < held; b++) {
        e.line(mac(`ov${b}`, `p${kk}`, fillV.matrix(RIGHT, `cb${b}`, kk)));
      }
    }
    e.line("workgroupBarrier();");
  });
  for (let b = 0; b < held; b++) {
    e.line(`subgroupMatrixStore<row_major>(&sc, sg * ${MK * MK}u, ov${b}, ${MK}u);`);
    e.line("workgroupBarrier();");
    e.block(`if (i32(sg) + ${SUBGROUPS * b} < ${blocks}) {`, () => {
      e.block(`for (var q = lane; q < ${MK * MK}u; q += 32u) {`, () => {
        const row = `row0 + i32(q / ${MK}u)`, col = `cb${b} + i32(q % ${MK}u)`;
        const call = `emit(${[...batch, row, col, `sc[sg * ${MK * MK}u + q]`].join(", ")});`;
        if (s.m % MK === 0) e.line(call);
        else e.block(`if (${row} < ${s.m}) {`, () => e.line(call));
      });
    });
    e.line("workgroupBarrier();");
  }
}

/**
 * The helpers of the scores and the softmax at (row, col) of batch item `b0…`: `score(…, dot)`,
 * the scores' epilogue y; `prologue(…, y)`, the softmax's x; `weight(…, y, acc0, acc1)`, the
 * softmax's output as the kernel computes it from y, the row's maximum and sum.
 */
function softmaxHelpers(plan: Attention, { ls, lw }: GroupLowerings): string[] {
  const { scores, weights } = plan;
  const nb = matmulOperands(scores)!.nb;
  const at = [...Array(nb).keys()].map((i) => `b${i}: i32`).concat("row: i32", "col: i32");
  const fn = (head: string, params: string[], body: Emitter, value: string) => [
    `fn ${head}(${[...at, ...params].join(", ")}) -> f32 {`,
    ...body.lines,
    `  return ${value};`,
    "}",
  ];
  const scoreBody = helperBody(ls, nb);
  const y = ls.value(scores.outputs[0].expr, new Map());
  // The softmax reads the scores as y.
  const input = weights.inputs.findIndex((b) => b.value === scores.outputs[0].value);
  lw.redirect.set(String(input), () => "y");
  const prologueBody = helperBody(lw, nb);
  const x = lw.value(weights.reductions[0].expr, new Map());
  const prologue = fn("prologue", ["y: f32"], prologueBody, x);
  const weightBody = helperBody(lw, nb);
  const w = lw.value(weights.outputs[0].expr, new Map());
  const weight = fn("weight", ["y: f32", "acc0: f32", "acc1: f32"], weightBody, w);
  return [...fn("score", ["acc0: f32"], scoreBody, y), ...prologue, ...weight];
}

/**
 * The softmax of the 16 rows in `sc`, eight threads a row (neighbouring lanes of one subgroup,
 * combined by shuffles): each dot through `score` to y (kept in `sc`), the row's maximum of x and
 * sum of exp(x − max), then each key's weight through `weight` into `pw` as f16, keys past the
 * end 0.
 */
function softmaxRows(e: Emitter, plan: Attention, batch: readonly string[]): void {
  const { s, TP, PW } = geometry(plan);
  const T = s.n;
  // The maximum in f32 whatever the softmax's type: NaN wins, as in the row kernels.
  const { combine } = combiner({ ...plan.weights.reductions[0], dtype: "f32" });
  const across = (name: string, join: (a: string, b: string) => string) => {
    for (let d = 1; d < ROW_THREADS; d *= 2) {
      e.block("{", () => {
        e.line(`let y = subgroupShuffleXor(${name}, ${d}u);`);
        e.line(`${name} = ${join(name, "y")};`);
      });
    }
  };
  const call = (name: string, ...rest: string[]) =>
    `${name}(${[...batch, "row0 + r", "j", ...rest].join(", ")})`;
  // Each pass over the row's keys below T (the padded keys' weights are 0), none for a row past
  // the queries (its weights 0; the shuffles stay outside the loops, in uniform control flow).
  // Whole query tiles keep T as the loops' constant bound: with a bound computed at run time B8
  // H16 T128 took 0.070 ms on the H200, where session 77's constant one had taken 0.042.
  const ragged = s.m % MK !== 0;
  const live = ragged ? "live" : `${T}`;
  const keys = (body: () => void) =>
    e.block(`for (var j = t % ${ROW_THREADS}; j < ${live}; j += ${ROW_THREADS}) {`, body);
  e.block("{", () => {
    e.line(`let r = t / ${ROW_THREADS};`);
    if (ragged) e.line(`let live = select(0, ${T}, row0 + r < ${s.m});`);
    e.line(`let at = r * ${TP};`);
    e.line(`var mx = ${NEG_INF};`);
    keys(() => {
      e.line(`let y = ${call("score", "sc[at + j]")};`);
      e.line("sc[at + j] = y;");
      e.line(`let x = ${call("prologue", "y")};`);
      e.line(`mx = ${combine("mx", "x")};`);
    });
    across("mx", combine);
    e.line("var sum = 0.0;");
    keys(() => e.line(`sum = sum + exp(${call("prologue", "sc[at + j]")} - mx);`));
    across("sum", (a, b) => `${a} + ${b}`);
    keys(() => e.line(`pw[r * ${PW} + j] = f16(${call("weight", "sc[at + j]", "mx", "sum")});`));
    if (T < TP || ragged) {
      e.block(
        `for (var j = ${live} + t % ${ROW_THREADS}; j < ${TP}; j += ${ROW_THREADS}) {`,
        () => {
          e.line(`pw[r * ${PW} + j] = 0.0;`);
        },
      );
    }
  });
  e.line("workgroupBarrier();");
}
