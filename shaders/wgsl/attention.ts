/**
 * Fused attention: the scores matmul, the softmax over them and the weighted sum of values of an
 * attention group (see `groupAttention` in fusion) as one WGSL kernel, a workgroup per query row.
 * The row's scores and then its weights live in workgroup memory, so neither intermediate goes
 * through device memory and the three dispatches become one. Each phase is the kernel's own
 * lowering in a scope of its own, reading and writing the intermediates through redirects.
 * It applies to moderate sizes: where neither matmul is large enough for the tiled kernel. On an
 * H200 (device time, 8 heads of 64) the fused kernel took 0.027 ms against 0.057 ms for the
 * three kernels at 64 tokens, but 0.20 against 0.061 ms at 256 tokens, where the tiles win.
 *
 * @module
 */
import type { Expr, KernelBuffer, KernelIR } from "../../jit/ir/kernel_ir.ts";
import { matmulOperands } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { KernelLowering } from "./expr.ts";
import { Emitter } from "./emit.ts";
import { combinedDecls, combinedDirectives, combinedFlush } from "./combined.ts";
import { entryPoint, NEVER, PRELUDE } from "./prelude.ts";
import { type KernelLayout, rowsLayout, tiledMatmul, type WgslOptions } from "./codegen.ts";
import { emitRows, streamedRows } from "./rows.ts";
import {
  type Attention,
  attentionGroup,
  groupPhase,
  groupRows,
  rowCoords,
  stagedQuery,
  stagedQueryBytes,
} from "./attention_group.ts";
import { queryInPlace } from "./query_in_place.ts";
import {
  type Flash,
  flashAttention,
  flashLayout,
  flashPays,
  groupBindings,
  groupInputNames,
  KEYS,
  raggedRows,
  summaryGeometry,
} from "./flash.ts";
import { keysInPlace } from "./flash_keys.ts";
import { flashWgsl } from "./flash_kernel.ts";
import { flashMask } from "./masks.ts";
import { keyMask, sharedMask, summaryKernel, summaryLayout, summaryWgsl } from "./tile_summary.ts";
import {
  combineWgsl,
  partialsKernel,
  partialsWgsl,
  SPLIT_ROWS,
  SPLIT_THREADS,
  type SplitAttention,
  splitAttention,
  splitLayout,
} from "./split_attention.ts";
import {
  type MatrixAttention,
  matrixAttention,
  matrixAttentionLayout,
  matrixAttentionWgsl,
} from "./matrix_attention.ts";

/**
 * Most keys for which the matrix attention kernel runs where the flash kernel pays too. On the H200
 * (f16, device time, `bench/gpu_kernels.ts`, session 77) B8 H16 D64 at 128 keys took 0.0416 ms on
 * the matrix kernel against 0.0463 flash, at 256 keys 0.199 against 0.125.
 */
export const MATRIX_KEYS = 128;

/** Longest key axis a fused attention kernel holds in workgroup memory. */
export const MAX_KEYS = 1024;

/**
 * The fused form of `scores → weights → values` in a workgroup per query row, if it applies: an
 * attention group (see {@linkcode attentionGroup}) whose matmuls are too small for tiles and whose
 * keys are at most `MAX_KEYS`.
 */
export function fusedAttention(
  kernels: readonly KernelIR[],
  external: ReadonlySet<number>,
): Attention | undefined {
  const group = attentionGroup(kernels, external);
  if (!group || tiledMatmul(group.scores) || tiledMatmul(group.values)) return undefined;
  return matmulOperands(group.scores)!.n <= MAX_KEYS ? group : undefined;
}

/** Threads of a fused attention workgroup (one query row). */
function attentionThreads(options: WgslOptions): number {
  return Math.max(
    32,
    Math.min(2 ** Math.floor(Math.log2(Math.min(256, options.maxInvocations))), 64),
  );
}

/** The fused attention kernel's layout: a workgroup per query row. */
export function attentionLayout(options: WgslOptions): KernelLayout {
  return rowsLayout(streamedRows(attentionThreads(options), 1));
}

/** The fused attention kernel's WGSL: bindings as `plan.inputs`, then `values`' outputs. */
export function attentionWgsl(plan: Attention, options: WgslOptions): string {
  const { scores, weights, values } = plan;
  const s = matmulOperands(scores)!, v = matmulOperands(values)!;
  const rowAxes = s.nb + 1;
  const rows = groupRows(plan);
  const size = attentionThreads(options);
  const names = (k: KernelIR) => groupInputNames(plan, k);
  const body = new Emitter();
  body.line(NEVER);
  body.line(`let row = i32(wid.x + wid.y * nwg.x);`);
  body.line(`if (row >= ${rows}) { return; }`);
  const phase = (l: KernelLowering, emit: () => void) => groupPhase(body, l, emit);
  const key = (l: KernelLowering, axis: number) => () => `att[u32(${l.coords[axis]})]`;

  /** A matmul phase: each thread takes columns lid, lid + size, …: its sum over k, its outputs. */
  const contract = (l: KernelLowering, { n, k }: { n: number; k: number }) => {
    rowCoords(l, rowAxes);
    l.e.block(`for (var j: i32 = i32(lid.x); j < ${n}; j += ${size}) {`, () => {
      l.e.line(`${l.coords[rowAxes]} = j;`);
      l.e.line("var acc0: f32 = 0.0;");
      l.e.block(`for (var t: i32 = 0; t < ${k}; t++) {`, () => {
        l.e.line(`${l.coords[rowAxes + 1]} = t;`);
        l.e.line(`acc0 = acc0 + ${l.value(l.kernel.reductions[0].expr, new Map())};`);
      });
      l.e.line(`${l.coords[rowAxes + 1]} = 0;`);
      const memo = new Map<Expr, string>();
      l.kernel.outputs.forEach((o, i) => l.store(o, i, memo));
    });
  };

  // Phase 1: the row's scores, a key per thread at a time, into `att` (a folded query first into
  // `qs`).
  const half = options.half;
  const ls = new KernelLowering(scores, { inputs: names(scores), half });
  ls.redirect.set("out0", key(ls, rowAxes));
  const staged = stagedQuery(body, plan, ls, { inputs: names(scores), half, threads: size });
  phase(ls, () => contract(ls, s));

  // Phase 2: the softmax, reading the scores from `att` and writing the weights back over them
  // (each thread rewrites only the keys it reads).
  const lw = new KernelLowering(weights, { inputs: names(weights), half });
  const scoresInput = weights.inputs.findIndex((b) => b.value === scores.outputs[0].value);
  lw.redirect.set(String(scoresInput), key(lw, rowAxes));
  lw.redirect.set("out0", key(lw, rowAxes));
  let shared: string[] = [];
  phase(lw, () => (shared = emitRows(lw, size, true)));

  // Phase 3: the weighted values, an output column per thread at a time.
  const lv = new KernelLowering(values, { inputs: names(values), half });
  lv.redirect.set(String(v.a.input), key(lv, rowAxes + 1));
  phase(lv, () => contract(lv, v));

  const subgroups = options.subgroupSize !== undefined;
  return [
    `// kiln fused attention: ${scores.name} → ${weights.name} → ${values.name}`,
    ...combinedDirectives(values, subgroups),
    ...groupBindings(plan, { half }),
    PRELUDE,
    `var<workgroup> att: array<f32, ${s.n}>;`,
    ...staged,
    ...shared,
    ...combinedDecls(lv),
    ...entryPoint(size, [...body.lines, ...combinedFlush(lv, subgroups)]),
  ].join("\n");
}

/**
 * `kernels` with each attention group that the matrix attention kernel (`matrix_attention.ts`,
 * unless `options.flash` is true), the flash kernel (where `options.flash` is true, where it is
 * not false and the flash kernel pays (`flashPays`), and where a buffer of the group is past
 * `options.bindingBytes`) or {@linkcode fusedAttention} accepts replaced by one kernel (two where
 * few rows take their keys in splits: partials, then their combination, `split_attention.ts`): its
 * buffers are the group's inputs and final outputs, its space the softmax's (a row per query, as
 * the dispatch counts them). `fused` maps those kernels to their groups and `from` gives each
 * kernel's index in the original list (the softmax's, for a fused one).
 */
export function withFusedAttention(
  kernels: readonly KernelIR[],
  external: ReadonlySet<number>,
  options: WgslOptions,
): { kernels: KernelIR[]; fused: Map<KernelIR, GroupKernel>; from: number[] } {
  const out: KernelIR[] = [], from: number[] = [];
  const fused = new Map<KernelIR, GroupKernel>();
  // Values of the tile summaries: negative, so that none is a value of the graph.
  let summaries = 0;
  const limit = options.bindingBytes ?? Infinity;
  const tooLarge = (k: KernelIR) =>
    [...k.inputs, ...k.outputs].some((b) => 4 * sizeOf(b.shape) > limit);
  for (let i = 0; i < kernels.length; i++) {
    const k = kernels[i];
    const members = k.group ? kernels.filter((x) => x.group === k.group) : [];
    const whole = members.length === 3 && members[0] === k &&
      members.every((x, j) => kernels[i + j] === x);
    const group = whole ? attentionGroup(members, external) : undefined;
    const needed = members.some(tooLarge);
    const plan = group && (options.flash !== false || needed)
      ? flashAttention(group, options)
      : undefined;
    const paid = plan && (options.flash === true || needed || flashPays(plan)) ? plan : undefined;
    // On the matrix units where they take the group, unless the flash kernel is asked for or
    // pays over more keys than `MATRIX_KEYS`.
    const units = group && options.flash !== true &&
        !(paid && matmulOperands(paid.scores)!.n > MATRIX_KEYS)
      ? matrixAttention(group, options)
      : undefined;
    const chosen = units ? undefined : paid;
    const places = { kernels, members, external, out, from };
    const matrix = units && keysReadInPlace(units, (g) => matrixAttention(g, options), places);
    const best = chosen && keysReadInPlace(chosen, (g) => flashAttention(g, options), places);
    const flash = best && withSkip(best, options, --summaries);
    const fusable = group && !matrix && !flash ? fusedAttention(members, external) : undefined;
    const plain = fusable && queryReadInPlace(fusable, options, places);
    // Few rows over many keys take their keys in splits, a workgroup each (`split_attention.ts`).
    const split = plain && splitAttention(plain, summaries - 1, options);
    if (split) summaries--;
    const att = group && (matrix ?? flash ?? split ?? plain);
    if (!att) {
      out.push(k);
      from.push(i);
      continue;
    }
    const extra = flash?.skip?.summary ?? split?.partials;
    const one: KernelIR = {
      name: k.group!,
      pattern: "softmax",
      ops: members.flatMap((x) => x.ops),
      space: att.weights.space,
      reduced: att.weights.reduced,
      inputs: extra ? [...att.inputs, extra] : att.inputs,
      reductions: att.weights.reductions,
      outputs: att.values.outputs,
      group: k.group,
    };
    if (flash?.skip?.summary) {
      const summary = summaryKernel(flash, flash.skip.summary);
      fused.set(summary, { summarizes: flash });
      out.push(summary);
      from.push(i + 1);
    }
    if (split) {
      const partials = partialsKernel(split);
      fused.set(partials, { split, stage: "partials" });
      out.push(partials);
      from.push(i + 1);
    }
    fused.set(one, split ? { split, stage: "combine" } : att);
    out.push(one);
    from.push(i + 1);
    i += 2;
  }
  return { kernels: out, fused, from };
}

/**
 * What a fold of a kernel into an attention group reads: all the kernels, the group's members, the
 * values needed past them; and what it changes: the kernels made so far and their places.
 */
interface Places {
  readonly kernels: readonly KernelIR[];
  readonly members: readonly KernelIR[];
  readonly external: ReadonlySet<number>;
  readonly out: KernelIR[];
  readonly from: number[];
}

/** Takes `kernel` out of the kernels made so far (and its place); false where it is not there. */
function takeOut({ out, from }: Places, kernel: KernelIR): boolean {
  const at = out.indexOf(kernel);
  if (at < 0) return false;
  out.splice(at, 1);
  from.splice(at, 1);
  return true;
}

/**
 * `chosen` with its keys read where a copy of them took them (see `flash_keys.ts`), that copy
 * then taken out of the kernels made so far; `chosen` itself where there is no copy or the kernel
 * (`again` makes its plan) does not take the keys in place.
 */
function keysReadInPlace<P extends Attention>(
  chosen: P,
  again: (group: Attention) => P | undefined,
  places: Places,
): P {
  const { kernels, members, external } = places;
  const direct = keysInPlace(kernels, members, external);
  const group = direct && attentionGroup(direct.members, external);
  const plan = group && again(group);
  return plan && takeOut(places, direct.copy) ? plan : chosen;
}

/**
 * `plain` with its query computed as its scores read it (see `query_in_place.ts`), the query's
 * producer then taken out of the kernels made so far; `plain` itself where it has more than
 * `SPLIT_ROWS` rows (each row's workgroups compute the query again), no such producer, too few
 * bindings for the producer's inputs and the split's partials, or too little workgroup memory for
 * the staged query row beside the row's scores and the softmax's lanes (two types a thread).
 */
function queryReadInPlace(plain: Attention, options: WgslOptions, places: Places): Attention {
  const { kernels, members, external } = places;
  const direct = groupRows(plain) <= SPLIT_ROWS
    ? queryInPlace(kernels, members, external)
    : undefined;
  const group = direct && attentionGroup(direct.members, external);
  if (!group) return plain;
  const bindings = group.inputs.length + group.values.outputs.length + 1;
  const lanes = 2 * 4 * Math.max(attentionThreads(options), SPLIT_THREADS);
  const bytes = 4 * matmulOperands(group.scores)!.n + lanes + stagedQueryBytes(group);
  if (
    bindings > (options.bindings ?? 8) || bytes > (options.workgroupBytes ?? 16384) ||
    !takeOut(places, direct.producer)
  ) return plain;
  return { ...group, query: direct.query };
}

/**
 * A kernel of an attention group: fused, on the matrix units, flash, or a flash kernel's tile
 * summary.
 */
export type GroupKernel =
  | Attention
  | MatrixAttention
  | Flash
  | { readonly summarizes: Flash }
  | { readonly split: SplitAttention; readonly stage: "partials" | "combine" };

/** The WGSL of a kernel standing for (part of) an attention group. */
export function groupWgsl(group: GroupKernel, options: WgslOptions): string {
  if ("summarizes" in group) return summaryWgsl(group.summarizes, options);
  if ("stage" in group) {
    return group.stage === "partials"
      ? partialsWgsl(group.split)
      : combineWgsl(group.split, options);
  }
  if ("units" in group) return matrixAttentionWgsl(group);
  return "rows" in group ? flashWgsl(group, options) : attentionWgsl(group, options);
}

/** The layout of a kernel standing for (part of) an attention group. */
export function groupLayout(group: GroupKernel, options: WgslOptions): KernelLayout {
  if ("summarizes" in group) return summaryLayout();
  if ("stage" in group) return splitLayout();
  if ("units" in group) return matrixAttentionLayout(group);
  return "rows" in group ? flashLayout(group) : attentionLayout(options);
}

/**
 * `plan` skipping the key tiles its mask hides (see `shaders/wgsl/masks.ts`) where a mask can
 * hide tiles and there is more than one: decided in the flash kernel where the mask is the same
 * for every query row (one kernel; B8 H16 T1024 D64 with a padding mask took 1.339 ms on the
 * H200 against 1.348-1.356 for the summary and the flash kernel), else by a summary, the value
 * `value`, where a batch axis (a run of fewer batch items sizes the summary's dispatch as the
 * flash kernel's) and a binding to spare for it, within the largest binding, allow one.
 */
function withSkip(plan: Flash, options: WgslOptions, value: number): Flash {
  // Ragged query tiles compute every key tile: the skips' words count whole query tiles.
  if (raggedRows(plan)) return plan;
  const mask = flashMask(plan);
  const s = matmulOperands(plan.scores)!;
  if (mask && s.n > KEYS && keyMask(plan)) return { ...plan, skip: { mask, shared: false } };
  const bindings = plan.inputs.length + plan.values.outputs.length + 1;
  const { items, words } = summaryGeometry(plan);
  if (
    !mask || s.n <= KEYS || s.nb === 0 || bindings > (options.bindings ?? 8) ||
    4 * items * words > (options.bindingBytes ?? Infinity)
  ) return plan;
  // The first batch axis by the rest of the words (see `summaryKernel`).
  const first = plan.scores.space[0];
  const summary: KernelBuffer = { value, shape: [first, items / first * words], dtype: "i32" };
  return { ...plan, skip: { mask, summary, shared: sharedMask(plan) } };
}
