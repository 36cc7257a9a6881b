/**
 * The summary a flash kernel reads to skip the key tiles a mask hides (see `shaders/wgsl/masks.ts`),
 * computed once a run by a kernel of its own before the flash kernel.
 *
 * Deciding inside the flash kernel cost more than skipping saved (H200, B8 H16 T1024 D64 causal,
 * `bench/REPORT-gpu.md`): every workgroup evaluated its 64 rows' mask entries, 64 × T of them,
 * beside its two matmuls at the flash kernel's low occupancy. Here a workgroup of 64 threads
 * decides one query tile × key tile (a row a thread, 32 keys each), or one key tile's keys and
 * values, at full occupancy; the flash kernel reads T/32 words of it a tile row. Same device and
 * shapes, the two kernels against the flash kernel computing every tile: 1.116 against 1.755 ms
 * at T1024, 1.983 against 3.681 at B1 H16 T4096 (about half the tiles computed). A mask the same
 * for every query row (padding over the keys) has only T entries, and the flash kernel decides its
 * tiles itself (`keyRange` in `masks.ts`): no summary runs for it.
 *
 * Words per batch item, `(query tiles + 1) · key tiles` of them: for each query tile, a word per
 * key tile, nonzero where some score of the tile is not masked (the first item's alone where the
 * mask is the same for every item, as a causal mask is); then for each key tile the keys' largest
 * magnitude as f32 bits (read only where an added mask needs the dot bounded, else 0), or
 * {@linkcode NOT_FINITE} where a key or value of the tile is infinite or NaN.
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import type { Expr, KernelBuffer, KernelIR, Load } from "../../jit/ir/kernel_ir.ts";
import { matmulOperands } from "../../jit/ir/kernel_ir.ts";
import { KernelLowering } from "./expr.ts";
import { everyInput, writtenByCode } from "./attention_group.ts";
import { Emitter } from "./emit.ts";
import { allOf, anyOf, entryPoint, NEVER, PRELUDE } from "./prelude.ts";
import { type KernelLayout, rowsLayout } from "./codegen.ts";
import { streamedRows } from "./rows.ts";
import { type Flash, groupBindings, groupInputNames, KEYS, summaryGeometry } from "./flash.ts";
import { NOT_FINITE } from "./masks.ts";

/** Threads of a summary workgroup: the query rows of a tile (at most 64), or a key tile's share. */
const THREADS = 64;

/**
 * The summary kernel of `plan` (which skips tiles), writing `summary`: its space is the
 * summary's shape, the first batch axis by the rest of its words, so that a run of fewer batch
 * items (shape buckets) decides the words of those.
 */
export function summaryKernel(plan: Flash, summary: KernelBuffer): KernelIR {
  return {
    name: `${plan.scores.group}_tiles`,
    pattern: "elementwise",
    ops: [],
    space: summary.shape,
    reduced: [],
    inputs: plan.inputs,
    reductions: [],
    outputs: [writtenByCode(summary)],
    group: plan.scores.group,
  };
}

/** The summary kernel's layout: a workgroup of {@linkcode THREADS} threads a word. */
export function summaryLayout(): KernelLayout {
  return rowsLayout(streamedRows(THREADS, 1));
}

/**
 * The helper functions a tile's decision calls: `masked(…, row, key)` (whether the mask hides
 * that score whatever its dot), `key_at(…, key, d)` and `value_at(…, key, col)`, each taking
 * the batch coordinates first, through lowerings of `plan`'s scores and values of their own.
 */
export function maskHelpers(plan: Flash, half: boolean): string[] {
  const { scores, values, skip } = plan;
  const mask = skip!.mask;
  const s = matmulOperands(scores)!, v = matmulOperands(values)!;
  const batch = [...Array(s.nb).keys()].map((i) => `b${i}`);
  const lowering = (k: KernelIR, prefix: string) =>
    new KernelLowering(k, { prefix, inputs: groupInputNames(plan, k), half });
  const ls = lowering(scores, "s"), lv = lowering(values, "o");
  // A helper function of lowering `l` at coordinates `at` (WGSL i32s, one per axis).
  const helper = (l: KernelLowering, head: string, at: string[], result: () => string) => {
    l.e = new Emitter();
    l.coords.forEach((c, i) => l.e.line(`var ${c}: i32 = ${at[i]};`));
    const r = result();
    return [`fn ${head} {`, ...l.e.lines, `  return ${r};`, "}"];
  };
  const params = (...rest: string[]) => [...batch, ...rest].map((p) => `${p}: i32`).join(", ");
  const memo = new Map<Expr, string>();
  return [
    ...helper(
      ls,
      `masked(${params("row", "key")}) -> bool`,
      [...batch, "row", "key", "0"],
      () => mask.masked((x) => ls.value(x, memo)),
    ),
    ...helper(
      ls,
      `key_at(${params("key", "d")}) -> f32`,
      [...batch, "0", "key", "d"],
      () => ls.value(s.b, new Map()),
    ),
    ...helper(
      lv,
      `value_at(${params("key", "col")}) -> f32`,
      [...batch, "0", "col", "key"],
      () => lv.value(v.b, new Map()),
    ),
  ];
}

/** The summary kernel's WGSL (see the module documentation): bindings as `plan.inputs`, then it. */
export function summaryWgsl(plan: Flash, options: { half?: boolean } = {}): string {
  const half = options.half ?? false;
  const { scores, values, rows: R, skip } = plan;
  const mask = skip!.mask;
  const s = matmulOperands(scores)!, v = matmulOperands(values)!;
  const nb = s.nb, D = s.k, E = v.n, T = s.n;
  const { queryTiles: QT, keyTiles: NT, words: W, items } = summaryGeometry(plan);
  const batch = [...Array(nb).keys()].map((i) => `b${i}`);
  const args = (...rest: string[]) => [...batch, ...rest].join(", ");

  const e = new Emitter();
  e.line(NEVER);
  // Every input is part of the interface (the pipeline's layout is the shader's), read or not.
  everyInput(e, plan.inputs.length);
  e.line("let t = i32(lid.x);");
  e.line("let g = i32(wid.x + wid.y * nwg.x);");
  e.block(`if (g >= ${items * W}) {`, () => e.line("return;"));
  e.line(`let w = g % ${W};`);
  e.line(`var rest = g / ${W};`);
  for (let i = nb - 1; i >= 0; i--) {
    const d = scores.space[i];
    e.line(`let ${batch[i]} = rest % ${d};`);
    if (i) e.line(`rest = rest / ${d};`);
  }
  e.block(`if (w < ${QT * NT}) {`, () => {
    // A query tile × key tile: a row a thread, its 32 keys (those past the end are masked); a
    // mask the same for every batch item, in the first item's words only.
    e.block(`if (${allOf(`t < ${R}`, ...skip!.shared ? [`g < ${W}`] : [])}) {`, () => {
      e.line(`let row = w / ${NT} * ${R} + t;`);
      e.line(`let first = w % ${NT} * ${KEYS};`);
      e.line("var open = false;");
      e.block(`for (var c = 0; c < ${KEYS}; c++) {`, () => {
        e.line("let key = first + c;");
        e.line(`open = ${anyOf("open", allOf(`key < ${T}`, `!masked(${args("row", "key")})`))};`);
      });
      e.block("if (open) {", () => e.line("atomicMax(&word, 1u);"));
    });
  });
  e.block("else {", () => {
    // A key tile: its keys' largest magnitude, where a bound needs it, and its values' finiteness.
    e.line(`let first = (w - ${QT * NT}) * ${KEYS};`);
    e.line("var worst = 0u;");
    const walk = (width: number, body: string) =>
      e.block(`for (var i = t; i < ${KEYS * width}; i += ${THREADS}) {`, () => {
        e.line(`let key = first + i / ${width};`);
        e.block(`if (key < ${T}) {`, () => e.line(body));
      });
    const magnitude = (x: string) => `(bitcast<u32>(${x}) & 0x7fffffffu)`;
    if (mask.factor !== undefined) {
      walk(D, `worst = max(worst, ${magnitude(`key_at(${args("key", `i % ${D}`)})`)});`);
    }
    walk(
      E,
      `worst = select(worst, ${NOT_FINITE}u, ${
        magnitude(`value_at(${args("key", `i % ${E}`)})`)
      } >= 0x7f800000u);`,
    );
    e.line("atomicMax(&word, worst);");
  });
  e.line("workgroupBarrier();");
  e.block("if (t == 0) {", () => e.line("out0[g] = bitcast<i32>(atomicLoad(&word));"));
  return [
    `// kiln flash attention's tile summary: ${scores.name} → ${values.name}`,
    ...groupBindings(plan, { half, outputs: [skip!.summary!] }),
    PRELUDE,
    "var<workgroup> word: atomic<u32>;",
    ...maskHelpers(plan, half),
    ...entryPoint(THREADS, e.lines),
  ].join("\n");
}

/**
 * Whether the scores' epilogue of `plan` reads nothing along `axes` of its space: every load
 * affine with no weight on them.
 */
function maskFree(plan: Flash, axes: readonly number[]): boolean {
  const { scores } = plan;
  const loads: Load[] = [];
  const walk = (x: Expr): void => {
    if (x.kind === "load") loads.push(x);
    else if (x.kind === "alu") x.args.forEach(walk);
  };
  walk(scores.outputs[0].expr);
  return loads.every((l) => {
    const access = affineOffset(l.steps, scores.space, scores.inputs[l.input].shape);
    return access !== undefined && axes.every((a) => access.weights[a] === 0);
  });
}

/**
 * Whether the scores' mask of `plan` is the same for every batch item (a causal mask over
 * [T, T] broadcast).
 */
export function sharedMask(plan: Flash): boolean {
  return maskFree(plan, [...Array(matmulOperands(plan.scores)!.nb).keys()]);
}

/**
 * Whether the scores' mask of `plan` is the same for every query row: a padding mask over the
 * keys ([B, 1, 1, T] added, as BERT's exports add it). The flash kernel then decides its range
 * of key tiles itself from T entries, with no summary kernel (see `keyRange` in `masks.ts`).
 */
export function keyMask(plan: Flash): boolean {
  return maskFree(plan, [matmulOperands(plan.scores)!.nb]);
}
