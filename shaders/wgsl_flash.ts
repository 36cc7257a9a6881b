/**
 * Flash attention: an attention group of any length (`scores → softmax → values`, see
 * `attentionGroup`) as one WGSL kernel that never stores the scores. A workgroup takes `rows`
 * query rows of one batch item, a thread a row, its query and output rows in registers; keys and
 * values stream through workgroup memory `keys` at a time. Each thread keeps the softmax online: the
 * running maximum and sum of its row, rescaling its output row when the maximum grows. The scores'
 * epilogue (scale, masks) and the softmax's own prologue are the group's kernels' lowerings at
 * each (row, key); the values' epilogue runs once per output at the end.
 *
 * It applies where the softmax is the plain one (max, then the sum of exp(x − max), then
 * exp(x − max) / sum over the same x), heads are at most `MAX_HEAD` wide and the query axis is a
 * multiple of the rows a workgroup takes (a workgroup's rows share their keys). Only with
 * `new WebGpuBackend({ flashAttention: true })`: measured on the H200 (`bench/gpu_kernels.ts`,
 * 2026-11-24) it was 17× slower than the three kernels it replaces (B8 H16 T1024 D64: 41.9 against
 * 2.4 ms; T256: 3.5 against 0.20 ms): one thread a query row walks every key in sequence, where
 * the three kernels spread scores and values over tiles of threads.
 *
 * @module
 */
import type { DType } from "../jit/dtype.ts";
import type { Expr, KernelIR } from "../jit/kernel_ir.ts";
import { matmulOperands } from "../jit/kernel_ir.ts";
import { sizeOf } from "../jit/shape.ts";
import type { Attention } from "./wgsl_attention.ts";
import {
  Emitter,
  KernelLowering,
  NEG_INF,
  NEVER,
  PRELUDE,
  storageBindings,
  wgslType,
} from "./wgsl_expr.ts";
import { Structure } from "./wgsl_cancel.ts";
import { type KernelLayout, rowsLayout } from "./wgsl.ts";
import { streamedRows } from "./wgsl_rows.ts";

/** Widest head (query, key and value rows) held in registers. */
export const MAX_HEAD = 128;

/** Keys (and values) a tile streams through workgroup memory. */
const KEYS = 32;

/** An attention group that runs as one flash kernel. */
export interface Flash extends Attention {
  /** Query rows of a workgroup (a thread each). */
  readonly rows: number;
}

/** The flash form of an attention `group`, if it applies (see the module doc). */
export function flashAttention(group: Attention): Flash | undefined {
  const { scores, weights, values } = group;
  const s = matmulOperands(scores)!, v = matmulOperands(values)!;
  if (s.k > MAX_HEAD || v.n > MAX_HEAD || weights.reductions.length !== 2) return undefined;
  const rows = [64, 32, 16].find((r) => s.m % r === 0);
  if (!rows) return undefined;
  // The softmax must be max(x), Σ exp(x − max), exp(x − max) / Σ over one x.
  const [max, sum] = weights.reductions;
  const x = max.expr;
  const acc = (index: number): Expr => ({ kind: "acc", index, dtype: "f32" });
  const alu = (op: "Exp" | "Sub" | "Div", args: Expr[]): Expr => ({
    kind: "alu",
    op,
    args,
    dtype: "f32",
  });
  const p = alu("Exp", [alu("Sub", [x, acc(0)])]);
  const structure = new Structure();
  const is = (a: Expr, b: Expr) => structure.of(a) === structure.of(b);
  if (
    max.op !== "max" || sum.op !== "sum" || !is(sum.expr, p) ||
    !is(weights.outputs[0].expr, alu("Div", [p, acc(1)]))
  ) return undefined;
  return { ...group, rows };
}

/**
 * The binding names of kernel `k`'s inputs in a kernel for its whole group (`in…` by position in
 * `plan.inputs`; the group's intermediates, which are not bound, get "").
 */
export function groupInputNames({ inputs }: Attention, k: KernelIR): string[] {
  return k.inputs.map((b) => {
    const i = inputs.findIndex((x) => x.value === b.value);
    return i < 0 ? "" : `in${i}`;
  });
}

/** The bindings of a kernel for a whole group: `plan.inputs`, then the values' outputs. */
export function groupBindings({ inputs, values }: Attention): string[] {
  const type = (b: { dtype: DType }) => wgslType(b.dtype);
  return storageBindings(inputs.map(type), values.outputs.map(type));
}

/** The flash kernel's layout: `rows` query rows a workgroup. */
export function flashLayout(plan: Flash): KernelLayout {
  return rowsLayout(streamedRows(1, plan.rows));
}

/** The flash kernel's WGSL: bindings as `plan.inputs`, then `values`' outputs. */
export function flashWgsl(plan: Flash): string {
  const { scores, weights, values, rows } = plan;
  const s = matmulOperands(scores)!, v = matmulOperands(values)!;
  const nb = s.nb, D = s.k, E = v.n, T = s.n;
  const total = sizeOf(weights.space.slice(0, nb + 1));
  const names = (k: KernelIR) => groupInputNames(plan, k);
  const e = new Emitter();
  const lowering = (k: KernelIR, prefix: string) => {
    const l = new KernelLowering(k, { prefix, inputs: names(k) });
    l.e = e;
    for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
    return l;
  };
  e.line(NEVER);
  e.line(`let raw = i32(wid.x + wid.y * nwg.x) * ${rows} + i32(lid.x);`);
  e.line(`let row = min(raw, ${total - 1});`);
  const ls = lowering(scores, "s"), lw = lowering(weights, "w"), lv = lowering(values, "o");
  // Batch and query coordinates of this thread's row, in each kernel's space.
  for (const l of [ls, lw, lv]) l.unravel([...Array(nb + 1).keys()], "row");

  // The query row in registers.
  e.line(`var q: array<f32, ${D}>;`);
  e.block(`for (var d = 0; d < ${D}; d++) {`, () => {
    e.line(`${ls.coords[nb + 2]} = d;`);
    e.line(`q[d] = ${ls.value(s.a, new Map())};`);
  });
  e.line(`var acc: array<f32, ${E}>;`);
  e.line(`var m = ${NEG_INF};`);
  e.line("var total = 0.0;");
  e.line(`var sc: array<f32, ${KEYS}>;`);
  e.block(`for (var t0 = 0; t0 < ${T}; t0 += ${KEYS}) {`, () => {
    // The tile's keys and values, loaded by all the workgroup's threads (the workgroup's rows
    // share their batch coordinates: the first row's are this one's).
    e.line("workgroupBarrier();");
    const tile = (l: KernelLowering, name: string, width: number, key: number, col: number) => {
      const op = l === ls ? s.b : v.b;
      e.block(`for (var p = i32(lid.x); p < ${KEYS * width}; p += ${rows}) {`, () => {
        e.line(`let j = t0 + p / ${width};`);
        e.line(`${l.coords[key]} = min(j, ${T - 1});`);
        e.line(`${l.coords[col]} = p % ${width};`);
        e.line(`${name}[p] = select(0.0, ${l.value(op, new Map())}, j < ${T});`);
      });
    };
    tile(ls, "tk", D, nb + 1, nb + 2);
    tile(lv, "tv", E, nb + 2, nb + 1);
    e.line("workgroupBarrier();");
    // Scores of this tile (after the scores' epilogue and the softmax's prologue) and their max.
    e.line("var mt = m;");
    e.block(`for (var jj = 0; jj < ${KEYS}; jj++) {`, () => {
      e.line("let j = t0 + jj;");
      e.line("var dot = 0.0;");
      e.block(`for (var d = 0; d < ${D}; d++) {`, () => {
        e.line(`dot = fma(q[d], tk[jj * ${D} + d], dot);`);
      });
      e.block("{", () => {
        e.line("let acc0 = dot;");
        e.line(`${ls.coords[nb + 1]} = min(j, ${T - 1});`);
        e.line(`${ls.coords[nb + 2]} = 0;`);
        const score = ls.value(scores.outputs[0].expr, new Map());
        const scoresInput = weights.inputs.findIndex((b) => b.value === scores.outputs[0].value);
        lw.redirect.set(String(scoresInput), () => score);
        e.line(`${lw.coords[nb + 1]} = min(j, ${T - 1});`);
        const x = lw.value(weights.reductions[0].expr, new Map());
        e.line(`sc[jj] = select(${NEG_INF}, ${x}, j < ${T});`);
      });
      // NaN wins, as in the row kernel's max.
      e.line("mt = select(sc[jj], mt, k_isnan(mt) || (!k_isnan(sc[jj]) && mt >= sc[jj]));");
    });
    // Rescale what the row has so far to the new maximum, then add this tile's weighted values.
    e.line("let scale = select(exp(m - mt), 1.0, m == mt);");
    e.line("total = total * scale;");
    e.block(`for (var c = 0; c < ${E}; c++) {`, () => e.line("acc[c] = acc[c] * scale;"));
    e.block(`for (var jj = 0; jj < ${KEYS}; jj++) {`, () => {
      // Keys at −∞ (masked) weigh 0 while the row has seen nothing else; a row that never does
      // sums to 0, and 0 / 0 makes it NaN, as the softmax of all −∞ is.
      e.line("let p = select(exp(sc[jj] - mt), 0.0, sc[jj] == mt && mt < 0.0 && k_isinf(mt));");
      e.line("total = total + p;");
      e.block(`for (var c = 0; c < ${E}; c++) {`, () => {
        e.line(`acc[c] = fma(p, tv[jj * ${E} + c], acc[c]);`);
      });
    });
    e.line("m = mt;");
  });
  // The values' epilogue per output of the row.
  e.block(`if (raw < ${total}) {`, () => {
    e.block(`for (var c = 0; c < ${E}; c++) {`, () => {
      e.line(`${lv.coords[nb + 1]} = c;`);
      e.line(`${lv.coords[nb + 2]} = 0;`);
      e.block("{", () => {
        e.line("let acc0 = k_fdiv(acc[c], total);");
        const memo = new Map<Expr, string>();
        values.outputs.forEach((o, k) => lv.store(o, k, memo));
      });
    });
  });
  return [
    `// kiln flash attention: ${scores.name} → ${weights.name} → ${values.name}`,
    ...groupBindings(plan),
    PRELUDE,
    `var<workgroup> tk: array<f32, ${KEYS * D}>;`,
    `var<workgroup> tv: array<f32, ${KEYS * E}>;`,
    `@compute @workgroup_size(${rows})`,
    "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,",
    "        @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {",
    ...e.lines,
    "}",
    "",
  ].join("\n");
}
