/**
 * Attention of few query rows over many keys (a decode step: 14 heads' one row over a cache of
 * 256) with the keys split among workgroups. The fused kernel (`attention.ts`) runs a workgroup a
 * row: 14 workgroups on a GPU of 132 units, each through its keys' scores and then a column's sum
 * over every key in sequence. Here a first kernel takes `SPLIT_KEYS` keys of a row a workgroup
 * and stores the split's largest score, its sum of exp(score − largest) and its unnormalized
 * weighted values (flash decoding's partials, in a buffer of their own); a second kernel, a
 * workgroup a row, rescales them to the row's largest score and finishes the values' outputs. On
 * an H100 through Dawn (hand-written forms of both, 14 rows over 2 heads of keys, D 64, 400
 * dispatches back to back, `.device/scratch/attn92.ts`): 256 keys 22.3-23.4 µs a row's workgroup
 * against 10.4-11.2 µs for the two kernels; 160 keys 15.3-16.4 against 9.9-10.5. Inside a
 * generation, where the split adds a dispatch a layer to the host's share of a step, see
 * `bench/REPORT-generate.md` (sessions 92-93).
 *
 * It applies to the plain softmax over f32 tensors (none stored as f16), at most `SPLIT_ROWS`
 * rows and at least two splits; a guarded softmax (`Where(IsNaN(w), 0, w)`) keeps the fused
 * kernel.
 *
 * @module
 */
import type { KernelBuffer, KernelIR } from "../../jit/ir/kernel_ir.ts";
import { matmulOperands } from "../../jit/ir/kernel_ir.ts";
import { KernelLowering, NEG_INF } from "./expr.ts";
import { Emitter } from "./emit.ts";
import { combinedDecls, combinedDirectives, combinedFlush } from "./combined.ts";
import { entryPoint, NEVER, PRELUDE } from "./prelude.ts";
import { type KernelLayout, rowsLayout, type WgslOptions } from "./codegen.ts";
import { combineAcross, combiner, streamedRows } from "./rows.ts";
import {
  type Attention,
  everyInput,
  groupPhase,
  groupRows,
  rowCoords,
  stagedQuery,
  writtenByCode,
} from "./attention_group.ts";
import { groupBindings, groupInputNames, plainSoftmax } from "./flash.ts";

/** Keys a workgroup of the partials kernel takes. */
export const SPLIT_KEYS = 32;

/** Most query rows split: more rows fill the GPU a workgroup a row. */
export const SPLIT_ROWS = 64;

/** Threads of either kernel's workgroup. */
export const SPLIT_THREADS = 64;

/** An attention group run as partials over its keys' splits, then their combination. */
export interface SplitAttention extends Attention {
  /** Splits of each row's keys. */
  readonly splits: number;
  /** The partials: per row and split, the values' `n` sums, the largest score and the sum. */
  readonly partials: KernelBuffer;
}

/** The rows (batch and query axes) and the matmuls' operands of `group`. */
function geometry(group: Attention) {
  const s = matmulOperands(group.scores)!, v = matmulOperands(group.values)!;
  const rowAxes = s.nb + 1;
  return { s, v, rowAxes, rows: groupRows(group) };
}

/**
 * `group` split over its keys, its partials the value `value`, where it applies (see the module
 * note) and both kernels' bindings fit the device's.
 */
export function splitAttention(
  group: Attention,
  value: number,
  options: WgslOptions,
): SplitAttention | undefined {
  const { s, v, rowAxes, rows } = geometry(group);
  const splits = Math.ceil(s.n / SPLIT_KEYS);
  // f32 sums over f32 tensors: a device with `shader-f16` (`options.half`) stores only f16
  // tensors in 16 bits, so an f32 group splits there too.
  const kernels = [group.scores, group.weights, group.values];
  const f32 = kernels.every((k) => k.reductions.every((r) => r.dtype === "f32")) &&
    [...group.inputs, ...group.values.outputs].every((b) => b.dtype !== "f16");
  const bindings = group.inputs.length + 1 + group.values.outputs.length;
  if (
    !f32 || rows > SPLIT_ROWS || splits < 2 || !plainSoftmax(group.weights) ||
    bindings > (options.bindings ?? 8) || SPLIT_THREADS > options.maxInvocations
  ) return undefined;
  const shape = [...group.weights.space.slice(0, rowAxes), splits, v.n + 2];
  return { ...group, splits, partials: { value, shape, dtype: "f32" } };
}

/** The partials kernel of `plan`: a workgroup per row and split (its space's rows). */
export function partialsKernel(plan: SplitAttention): KernelIR {
  const { rowAxes } = geometry(plan);
  return {
    name: `${plan.scores.group}_partials`,
    pattern: "softmax",
    ops: [],
    space: [...plan.weights.space.slice(0, rowAxes), plan.splits, SPLIT_KEYS],
    reduced: [rowAxes + 1],
    inputs: plan.inputs,
    reductions: [],
    outputs: [writtenByCode(plan.partials)],
    group: plan.scores.group,
  };
}

/** Either kernel's layout: a workgroup of `SPLIT_THREADS` a row of its space. */
export function splitLayout(): KernelLayout {
  return rowsLayout(streamedRows(SPLIT_THREADS, 1));
}

/** The partials kernel's WGSL: bindings as `plan.inputs`, then the partials (`out0`). */
export function partialsWgsl(plan: SplitAttention): string {
  const { scores, weights, values, splits } = plan;
  const { s, v, rowAxes, rows } = geometry(plan);
  const width = v.n + 2;
  const names = (k: KernelIR) => groupInputNames(plan, k);
  const key = (l: KernelLowering, axis: number) => () => `att[u32(${l.coords[axis]} - kbase)]`;
  const body = new Emitter();
  body.line(NEVER);
  everyInput(body, plan.inputs.length);
  body.line(`let wg = i32(wid.x + wid.y * nwg.x);`);
  body.line(`if (wg >= ${rows * splits}) { return; }`);
  body.line(`let row = wg / ${splits};`);
  body.line(`let kbase = (wg % ${splits}) * ${SPLIT_KEYS};`);
  body.line(`let kend = min(kbase + ${SPLIT_KEYS}, ${s.n});`);
  body.line("let lane = lid.x;");
  body.line("var m_s: f32;");
  body.line("var l_s: f32;");
  const keys = `for (var i: i32 = kbase + i32(lid.x); i < kend; i += ${SPLIT_THREADS}) {`;

  // The split's scores, a key a thread, into `att`.
  const ls = new KernelLowering(scores, { inputs: names(scores) });
  ls.redirect.set("out0", key(ls, rowAxes));
  const staged = stagedQuery(body, plan, ls, { inputs: names(scores), threads: SPLIT_THREADS });
  groupPhase(body, ls, () => {
    rowCoords(ls, rowAxes);
    ls.e.block(keys, () => {
      ls.e.line(`${ls.coords[rowAxes]} = i;`);
      ls.e.line("var acc0: f32 = 0.0;");
      ls.e.block(`for (var t: i32 = 0; t < ${s.k}; t++) {`, () => {
        ls.e.line(`${ls.coords[rowAxes + 1]} = t;`);
        ls.e.line(`acc0 = acc0 + ${ls.value(scores.reductions[0].expr, new Map())};`);
      });
      ls.e.line(`${ls.coords[rowAxes + 1]} = 0;`);
      const memo = new Map();
      scores.outputs.forEach((o, i) => ls.store(o, i, memo));
    });
  });

  // The split's largest score, its sum of exp(score − largest), the weights unnormalized over the
  // scores in `att`. A split of −∞ scores alone (masked keys) weighs 0 everywhere.
  const lw = new KernelLowering(weights, { inputs: names(weights) });
  const scoresInput = weights.inputs.findIndex((b) => b.value === scores.outputs[0].value);
  lw.redirect.set(String(scoresInput), key(lw, rowAxes));
  const [max, sum] = weights.reductions;
  groupPhase(body, lw, () => {
    rowCoords(lw, rowAxes);
    const each = (line: (value: string) => string, expr = max.expr) =>
      lw.e.block(keys, () => {
        lw.e.line(`${lw.coords[rowAxes]} = i;`);
        lw.e.line(line(lw.value(expr, new Map())));
      });
    lw.e.line(`var acc0: f32 = ${combiner(max).init};`);
    each((x) => `acc0 = ${combiner(max).combine("acc0", x)};`);
    combineAcross(lw, max, 0, SPLIT_THREADS, SPLIT_KEYS, "0u");
    lw.e.line("m_s = acc0;");
    lw.e.line(`if (acc0 == ${NEG_INF}) { acc0 = 0.0; }`);
    lw.e.line("var acc1: f32 = 0.0;");
    each((p) => `acc1 = acc1 + ${p};`, sum.expr);
    combineAcross(lw, sum, 1, SPLIT_THREADS, SPLIT_KEYS, "0u");
    lw.e.line("l_s = acc1;");
    each((p) => `att[u32(i - kbase)] = ${p};`, sum.expr);
  });

  // The split's weighted values, a column a thread, then its largest score and sum.
  const lv = new KernelLowering(values, { inputs: names(values) });
  lv.redirect.set(String(v.a.input), key(lv, rowAxes + 1));
  groupPhase(body, lv, () => {
    rowCoords(lv, rowAxes);
    lv.e.block(`for (var j: i32 = i32(lid.x); j < ${v.n}; j += ${SPLIT_THREADS}) {`, () => {
      lv.e.line(`${lv.coords[rowAxes]} = j;`);
      lv.e.line("var acc0: f32 = 0.0;");
      lv.e.block("for (var t: i32 = kbase; t < kend; t++) {", () => {
        lv.e.line(`${lv.coords[rowAxes + 1]} = t;`);
        lv.e.line(`acc0 = acc0 + ${lv.value(values.reductions[0].expr, new Map())};`);
      });
      lv.e.line(`out0[u32(wg * ${width} + j)] = acc0;`);
    });
    lv.e.line(`if (lid.x == 0u) {`);
    lv.e.line(`  out0[u32(wg * ${width} + ${v.n})] = m_s;`);
    lv.e.line(`  out0[u32(wg * ${width} + ${v.n + 1})] = l_s;`);
    lv.e.line("}");
  });
  return [
    `// kiln split attention, partials: ${scores.name} → ${weights.name} → ${values.name}`,
    ...groupBindings(plan, { outputs: [plan.partials] }),
    PRELUDE,
    `var<workgroup> att: array<f32, ${SPLIT_KEYS}>;`,
    ...staged,
    `var<workgroup> sh_f32: array<f32, ${SPLIT_THREADS}>;`,
    ...entryPoint(SPLIT_THREADS, body.lines),
  ].join("\n");
}

/**
 * The combining kernel's WGSL: bindings as `plan.inputs` and the partials, then `values`'
 * outputs. Each row's partials rescaled to its largest score: a column's sum is Σ e^(m_s − m) o_s
 * over Σ e^(m_s − m) l_s, the values' output then stored as the values kernel writes it.
 */
export function combineWgsl(plan: SplitAttention, options: WgslOptions): string {
  const { values, splits } = plan;
  const { v, rowAxes, rows } = geometry(plan);
  const width = v.n + 2;
  const parts = `in${plan.inputs.length}`;
  const at = (split: string, column: number | string) =>
    `${parts}[u32((row * ${splits} + ${split}) * ${width} + ${column})]`;
  const lv = new KernelLowering(values, { inputs: groupInputNames(plan, values) });
  const e = lv.e = new Emitter();
  e.line(NEVER);
  everyInput(e, plan.inputs.length + 1);
  e.line(`let row = i32(wid.x + wid.y * nwg.x);`);
  e.line(`if (row >= ${rows}) { return; }`);
  const max = plan.weights.reductions[0];
  e.line(`var m: f32 = ${combiner(max).init};`);
  e.block(`for (var s: i32 = 0; s < ${splits}; s++) {`, () => {
    e.line(`m = ${combiner(max).combine("m", at("s", v.n))};`);
  });
  e.line("var total: f32 = 0.0;");
  e.block(`for (var s: i32 = 0; s < ${splits}; s++) {`, () => {
    e.line(`total = total + ${at("s", v.n + 1)} * exp(${at("s", v.n)} - m);`);
  });
  rowCoords(lv, rowAxes);
  e.block(`for (var j: i32 = i32(lid.x); j < ${v.n}; j += ${SPLIT_THREADS}) {`, () => {
    e.line(`${lv.coords[rowAxes]} = j;`);
    e.line("var acc0: f32 = 0.0;");
    e.block(`for (var s: i32 = 0; s < ${splits}; s++) {`, () => {
      e.line(`acc0 = acc0 + ${at("s", "j")} * exp(${at("s", v.n)} - m);`);
    });
    e.line("acc0 = acc0 / total;");
    const memo = new Map();
    values.outputs.forEach((o, i) => lv.store(o, i, memo));
  });
  const subgroups = options.subgroupSize !== undefined;
  return [
    `// kiln split attention, combined: ${plan.values.name}`,
    ...combinedDirectives(values, subgroups),
    ...groupBindings(plan, { extra: [plan.partials] }),
    PRELUDE,
    ...combinedDecls(lv),
    ...entryPoint(SPLIT_THREADS, [...e.lines, ...combinedFlush(lv, subgroups)]),
  ].join("\n");
}
