/**
 * Attention groups: the scores matmul, the softmax over them and the weighted sum of values that
 * fusion leaves as three kernels (see `groupAttention` in fusion), recognized as one computation
 * that the fused and flash attention kernels run in one dispatch.
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import type { Expr, KernelBuffer, KernelIR, KernelOutput } from "../../jit/ir/kernel_ir.ts";
import { f32SumView, matmulOperands } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { Emitter } from "./emit.ts";
import { KernelLowering } from "./expr.ts";
import type { InlinedQuery } from "./query_in_place.ts";

/** The three kernels of an attention group that one fused kernel can run. */
export interface Attention {
  /** `scores[row, j] = Σ_d q[row, d] · k[j, d]` (with its epilogue). */
  readonly scores: KernelIR;
  /** The softmax over each row of scores. */
  readonly weights: KernelIR;
  /** `out[row, e] = Σ_j weights[row, j] · v[j, e]` (with its epilogue). */
  readonly values: KernelIR;
  /** The fused kernel's buffers: every input of the three but the two intermediates. */
  readonly inputs: readonly KernelBuffer[];
  /** The scores' query computed as they read it (`query_in_place.ts`), where it is. */
  readonly query?: InlinedQuery;
}

/**
 * Buffers a group's kernels take: 32-bit words (a selection mask's bools among them) and f16 (an
 * f16 precision's group computes in f32 inside, its scores and weights never stored, so never
 * rounded to f16: within the rounding its kernels' outputs already carry).
 */
const GROUP_DTYPES: ReadonlySet<string> = new Set(["f32", "f16", "i32", "bool"]);

/**
 * `scores → weights → values` as one computation, if they are one: float matmuls whose batch and
 * query axes are the softmax's rows, intermediates read exactly where they were written and by no
 * one else (`external` holds the values the program must store).
 */
export function attentionGroup(
  kernels: readonly KernelIR[],
  external: ReadonlySet<number>,
): Attention | undefined {
  // f16 matmuls as the group computes them: exact products summed in f32, rounded once.
  const [scores, weights, values] = kernels.map(f32SumView);
  const s = matmulOperands(scores), v = matmulOperands(values);
  if (!s || !v || weights.pattern !== "softmax" || s.nb !== v.nb) return undefined;
  const rowAxes = s.nb + 1, keys = s.n;
  const same = (a: readonly number[], b: readonly number[]) =>
    a.length === b.length && a.every((x, i) => x === b[i]);
  if (
    scores.outputs.length !== 1 || weights.outputs.length !== 1 ||
    v.k !== keys || !same(weights.space, scores.space.slice(0, rowAxes + 1)) ||
    !same(weights.reduced, [rowAxes]) ||
    !same(values.space.slice(0, rowAxes), weights.space.slice(0, rowAxes)) ||
    weights.outputs[0].level !== "full" ||
    [scores, weights, values].some((k) =>
      [...k.inputs, ...k.outputs].some((b) => !GROUP_DTYPES.has(b.dtype))
    )
  ) return undefined;
  const [sOut, wOut] = [scores.outputs[0], weights.outputs[0]];
  if (external.has(sOut.value) || external.has(wOut.value)) return undefined;
  // Where each intermediate is written and read must be the same element of the same row.
  const offset = (
    steps: KernelIR["outputs"][number]["steps"],
    k: KernelIR,
    shape: readonly number[],
  ) => affineOffset(steps, k.space, shape);
  const written = offset(sOut.steps, scores, sOut.shape);
  const weighted = offset(wOut.steps, weights, wOut.shape);
  if (!written || !weighted) return undefined;
  // Row axes of extent 1 have coordinate 0 everywhere: their weights do not matter.
  const rowsMatch = (a: { weights: readonly number[]; base: number }, b: typeof a, key: number) =>
    a.base === b.base && a.weights[key] === 1 &&
    a.weights.slice(0, rowAxes).every((w, i) => weights.space[i] === 1 || w === b.weights[i]);
  let reads = true;
  const loads = (e: Expr, visit: (l: Extract<Expr, { kind: "load" }>) => void) => {
    if (e.kind === "load") visit(e);
    if (e.kind === "alu") e.args.forEach((a) => loads(a, visit));
  };
  for (const expr of [...weights.reductions.map((r) => r.expr), wOut.expr]) {
    loads(expr, (l) => {
      if (weights.inputs[l.input].value !== sOut.value) return;
      const at = offset(l.steps, weights, sOut.shape);
      reads &&= at !== undefined && rowsMatch(at, written, rowAxes) &&
        written.weights[rowAxes] === 1;
    });
  }
  const a = offset(v.a.steps, values, wOut.shape);
  if (
    !reads || values.inputs[v.a.input].value !== wOut.value || !a ||
    !rowsMatch(a, weighted, rowAxes + 1) || a.weights[rowAxes] !== 0 ||
    weighted.weights[rowAxes] !== 1 || values.inputs[v.b.input].value === wOut.value
  ) return undefined;
  const inputs: KernelBuffer[] = [];
  for (const k of [scores, weights, values]) {
    for (const b of k.inputs) {
      if (
        b.value !== sOut.value && b.value !== wOut.value && !inputs.some((x) => x.value === b.value)
      ) {
        inputs.push(b);
      }
    }
  }
  return { scores, weights, values, inputs };
}

/**
 * `buffer` as the output of a kernel whose own code writes it word by word (a group's scratch:
 * a flash kernel's tile summary, split attention's partials): the expression stands for nothing.
 */
export function writtenByCode(buffer: KernelBuffer): KernelOutput {
  return {
    ...buffer,
    expr: { kind: "const", value: 0, dtype: buffer.dtype },
    steps: [],
    level: "full",
  };
}

/**
 * Takes a group kernel's first `n` inputs into the shader's interface, read or not: the
 * pipeline's layout is the shader's, and every input of the group is bound.
 */
export function everyInput(e: Emitter, n: number): void {
  for (let i = 0; i < n; i++) e.line(`_ = &in${i};`);
}

/**
 * Emits one phase of a group kernel (a member kernel's lowering `l`, written by `emit`) as a
 * scope of `body`, then a barrier: each phase reads what the one before left in workgroup memory.
 */
export function groupPhase(body: Emitter, l: KernelLowering, emit: () => void): void {
  l.e = new Emitter();
  l.e.indent = "    ";
  emit();
  body.block("{", () => body.lines.push(...l.e.lines));
  body.line("workgroupBarrier();");
}

/** Query rows of `group`: its softmax's rows (batch and query axes). */
export function groupRows(group: Attention): number {
  return sizeOf(group.weights.space.slice(0, matmulOperands(group.scores)!.nb + 1));
}

/** Declares `l`'s coordinates in its scope, the row axes (the first `rowAxes`) from `row`. */
export function rowCoords(l: KernelLowering, rowAxes: number): void {
  for (const c of l.coords) l.e.line(`var ${c}: i32 = 0;`);
  l.unravel([...Array(rowAxes).keys()], "row");
}

/** Workgroup memory a kernel of `group` staging its query row takes beside its own (bytes). */
export function stagedQueryBytes(group: Attention): number {
  return 4 * matmulOperands(group.scores)!.k;
}

/**
 * Where `group`'s scores read their query through its producer's expression (`group.query`), a
 * phase of `body` computing the row's query once into workgroup memory `qs`, an element a thread
 * of `threads`, and `ls` (the scores' lowering) reading it there; the declarations it needs.
 * Read through the expression, every key recomputed the row's whole query (a decode step of the
 * 0.5B decoder: a layer's split partials 29 µs against 18 unfolded, `bench/REPORT-generate.md`).
 */
export function stagedQuery(
  body: Emitter,
  group: Attention,
  ls: KernelLowering,
  options: { inputs: readonly string[]; half?: boolean; threads: number },
): string[] {
  if (!group.query) return [];
  const s = matmulOperands(group.scores)!;
  const rowAxes = s.nb + 1;
  const { inputs, half, threads } = options;
  const inlined = new Map([[group.query.input, group.query.expr]]);
  const lq = new KernelLowering(group.scores, { inputs, half, inlined });
  groupPhase(body, lq, () => {
    rowCoords(lq, rowAxes);
    lq.e.block(`for (var t: i32 = i32(lid.x); t < ${s.k}; t += ${threads}) {`, () => {
      lq.e.line(`${lq.coords[rowAxes + 1]} = t;`);
      lq.e.line(`qs[u32(t)] = ${lq.value(s.a, new Map())};`);
    });
  });
  ls.redirect.set(String(s.a.input), () => `qs[u32(${ls.coords[rowAxes + 1]})]`);
  return [`var<workgroup> qs: array<f32, ${s.k}>;`];
}
