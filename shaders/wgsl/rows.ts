/**
 * Row kernels (softmax, layer norm, reductions with their fused prologues and epilogues): each
 * row's reduced points are combined by a group of threads through workgroup memory.
 *
 * Rows up to `MAX_HELD` points are held in registers (`emitHeldRows`): a row's group of threads
 * (a power of two from 1 to 256, several rows to a workgroup when rows are short) splits it into
 * `slots` per thread, consecutive threads on consecutive points (vec4s of the last axis where the
 * accesses allow), so the row is read from memory once; every reduction and output reuses the
 * values already loaded and computed (one memo per point across all phases: softmax's exp is
 * computed once). Points past the row's end are clamped onto it and masked out of the reductions,
 * and the rows past the last repeat it without storing, so every thread reaches every barrier.
 * Longer rows stream through the workgroup once per reduction (`emitRows`).
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import type { Expr, KernelIR, Reduction } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { quadAligned, quadInputs } from "./quads.ts";
import { allOf, anyOf } from "./prelude.ts";
import { INF, type KernelLowering, literal, NAN, NEG_INF, rounded, wgslType } from "./expr.ts";

/** Most points of a row one thread holds in registers. */
const MAX_HELD = 32;

/** How a row kernel splits rows among threads. */
export interface RowTiling {
  /** Threads per row: a power of two. */
  readonly threads: number;
  /** Rows per workgroup. */
  readonly rows: number;
  /** Units per thread, or 0 when rows stream through the workgroup instead of being held. */
  readonly slots: number;
  /** Points per unit: 4 when units are aligned vec4s of the last axis. */
  readonly width: 1 | 4;
  /** Inputs read as vec4 arrays. */
  readonly vectors: ReadonlySet<number>;
  /** Whether every output is stored as vec4s (all are full-row outputs, aligned). */
  readonly vectorStores: boolean;
  /**
   * Whether each thread takes a whole row of its own, term after term (the exact precision's
   * order, `KernelIR.exact`); `threads` is then 1.
   */
  readonly serial?: boolean;
  /** Where a row's threads take whole blocks of a block product (`block_product.ts`): how. */
  readonly blocks?: BlockRows;
  /**
   * Rows of one batch item, where a workgroup's rows stay within one (the matrix attention
   * kernel's query tiles): each item's rows are dispatched as whole workgroups, the last one
   * partly past them.
   */
  readonly segment?: number;
}

/** How a block product's thread groups share A (`block_product.ts`). */
export interface BlockRows {
  /** Outputs a row's group of threads computes together. */
  readonly outputs: number;
  /** Whether A passes through workgroup memory (the workgroup's outputs share its row). */
  readonly staged: boolean;
  /** Whether the staged A's blocks are packed to bytes and summed in integers (`block_product_int8.ts`). */
  readonly integers?: boolean;
}

/** A tiling of `threads` threads a row and `rows` rows a workgroup, rows not held (scalar). */
export function streamedRows(threads: number, rows: number): RowTiling {
  return { threads, rows, slots: 0, width: 1, vectors: new Set(), vectorStores: false };
}

/**
 * Longest row a thread reduces alone. A 3×3 max pool's rows of 9 took four threads each, combined
 * through workgroup memory in three barriers: ResNet-50's (batch 8, f16) ran 38 µs so and 14 µs a
 * thread a row (H200, device time).
 */
const SERIAL_MOST = 16;

/**
 * Fewest short rows (of at most `SERIAL_MOST` points) of a maximum or minimum taken a thread a
 * row (sums keep that order however few the rows). Fewer leave the GPU idle, and a row's loop is
 * then the kernel's time: a decode step's packing of A (`PackRowBlocks`, 28 blocks of 8 words)
 * took a thread a block; a thread a word, each of the H200's int8 decode products with its
 * packing ran 3.3-4.8 µs faster (`bench/gpu_kernels.ts`).
 */
const SERIAL_ROWS = 4096;

/** The row tiling of a reducing kernel whose workgroups hold at most `most` threads. */
export function rowTiling(kernel: KernelIR, most: number): RowTiling {
  const inner = sizeOf(kernel.reduced.map((i) => kernel.space[i]));
  const total = sizeOf(kernel.space.filter((_, i) => !kernel.reduced.includes(i)));
  const short = inner > 0 && inner <= SERIAL_MOST;
  // Sums keep a thread's order over a short row (ONNX Runtime's and the CPU's): summed as a tree,
  // a quantized CNN's average pool rounded a mean lying halfway between two steps the other way.
  const orderFree = kernel.reductions.every((r) => r.op === "max" || r.op === "min");
  if (short && (total >= SERIAL_ROWS || !orderFree)) return serialRows(most);
  // A short row takes a thread a point: its latency one load and a few shuffles.
  const vectors = short ? undefined : rowVectors(kernel);
  const width = vectors ? 4 : 1;
  const units = inner / width;
  const perThread = short ? 1 : 4;
  const threads = Math.min(
    most,
    2 ** Math.ceil(Math.log2(Math.max(1, Math.ceil(units / perThread)))),
  );
  const slots = Math.ceil(units / threads);
  if (inner === 0 || slots * width > MAX_HELD) {
    // Streamed: each thread takes at least 8 of a row's points, so short rows do not idle wide
    // workgroups.
    const fit = 2 ** Math.floor(Math.log2(Math.max(1, inner / 8)));
    return streamedRows(Math.min(most, Math.max(32, fit)), 1);
  }
  const rows = Math.max(1, Math.min(most / threads, 2 ** Math.ceil(Math.log2(total))));
  const vectorStores = !!vectors &&
    kernel.outputs.every((o) =>
      o.level === "full" &&
      (o.combine || quadAligned(o.steps, kernel.space, o.shape, kernel.space.length - 1))
    );
  return { threads, rows, slots, width, vectors: vectors ?? new Set(), vectorStores };
}

/**
 * The inputs a row kernel reads as vec4s when its last axis is reduced and a multiple of 4 long:
 * those whose every load is aligned along it. `undefined` when the last axis does not qualify.
 */
function rowVectors(kernel: KernelIR): Set<number> | undefined {
  const { space } = kernel;
  const last = space.length - 1;
  if (!kernel.reduced.includes(last) || space[last] % 4 !== 0) return undefined;
  return quadInputs(kernel, [...kernel.reductions, ...kernel.outputs].map((x) => x.expr), last);
}

/** A reduction's starting value and its combining step, as WGSL. */
export function combiner(
  r: Reduction,
): { init: string; combine: (acc: string, v: string) => string } {
  const t = wgslType(r.dtype);
  const init = r.op === "max"
    ? (t === "f32" ? NEG_INF : literal(t === "i32" ? -2147483648 : 0, r.dtype))
    : r.op === "min"
    ? (t === "f32" ? INF : literal(t === "i32" ? 2147483647 : 4294967295, r.dtype))
    : literal(0, r.dtype);
  const combine = (acc: string, v: string) => {
    if (r.op === "sum" || r.op === "mean") return `${acc} + ${v}`;
    const cmp = r.op === "max" ? ">=" : "<=";
    // NaN wins, decided on the bits of both sides: a compiler assuming no NaNs may turn the
    // comparison into max/min (llvmpipe did, once the held rows' combines were straight-line).
    if (t !== "f32") return `select(${v}, ${acc}, ${acc} ${cmp} ${v})`;
    return `select(${v}, ${acc}, ${
      anyOf(`k_isnan(${acc})`, allOf(`!k_isnan(${v})`, `${acc} ${cmp} ${v}`))
    })`;
  };
  return { init, combine };
}

/**
 * Combines each thread's `acc${k}` over its row's `threads` threads (a segment of workgroup
 * memory starting at `base`), leaving the row's value in `acc${k}` of every thread, then divides
 * a mean and re-rounds to the dtype. Returns the WGSL type of the workgroup array it uses.
 *
 * The halving steps below the device's subgroup size (where `l.subgroup` gives one) shuffle
 * registers instead: no barrier and no workgroup memory for a row of 32 threads, which a decode
 * step's products and norms have. A shuffle down by `s` gives lane i what lane i + s held, so
 * lane 0 combines the same values in the same order as the steps through memory and every lane
 * then takes lane 0's bits: the result is the same to the bit. This relies on a row's threads,
 * consecutive invocations starting at a multiple of their power-of-two count, lying in one
 * subgroup at lanes `lid.x % size` (how implementations number a one-dimensional workgroup).
 */
export function combineAcross(
  l: KernelLowering,
  r: Reduction,
  k: number,
  threads: number,
  inner: number,
  base: string,
): string {
  const { e } = l;
  const t = wgslType(r.dtype);
  const { combine } = combiner(r);
  const size = l.subgroup ?? 1;
  // Steps through workgroup memory down to the subgroup's size (all of them without subgroups).
  const memory = size === 1 || threads > size;
  if (memory) {
    e.line(`sh_${t}[lid.x] = acc${k};`);
    e.line("workgroupBarrier();");
    // The halving steps unrolled: each reads at a constant distance.
    for (let s = threads >> 1; s >= size; s >>= 1) {
      e.line(
        `if (lane < ${s}u) { sh_${t}[lid.x] = ${
          combine(`sh_${t}[lid.x]`, `sh_${t}[lid.x + ${s}u]`)
        }; }`,
      );
      e.line("workgroupBarrier();");
    }
  }
  const shuffled = Math.min(threads, size);
  if (shuffled > 1) {
    l.usesSubgroups = true;
    if (memory) e.line(`acc${k} = sh_${t}[lid.x];`);
    for (let s = shuffled >> 1; s >= 1; s >>= 1) {
      e.line(
        `{ let down = subgroupShuffleDown(acc${k}, ${s}u); acc${k} = ${
          combine(`acc${k}`, "down")
        }; }`,
      );
    }
    if (memory) e.line(`if (lane == 0u) { sh_${t}[lid.x] = acc${k}; }`);
    else e.line(`acc${k} = subgroupShuffle(acc${k}, lid.x % ${size}u - lane);`);
    if (memory) e.line("workgroupBarrier();");
  }
  if (memory) {
    e.line(`acc${k} = sh_${t}[${base}];`);
    e.line("workgroupBarrier();");
  }
  finishReduction(l, r, k, inner);
  return t;
}

/**
 * Divides reduction `k`'s row value by the row's `inner` terms where it is a mean (NaN for none,
 * in floats; a float division through `k_fdiv`, as IEEE divides, where `ieee`), then re-rounds it
 * to its dtype.
 */
function finishReduction(l: KernelLowering, r: Reduction, k: number, inner: number, ieee = false) {
  const t = wgslType(r.dtype), n = Math.max(inner, 1);
  if (r.op === "mean") {
    const mean = ieee && t === "f32" ? `k_fdiv(acc${k}, ${n}.0)` : `acc${k} / ${t}(${n})`;
    l.e.line(`acc${k} = ${inner === 0 && t === "f32" ? NAN : mean};`);
  }
  l.e.line(`acc${k} = ${rounded(`acc${k}`, r.dtype)};`);
}

/** Stores the kernel's row-level outputs once per row (reduced coordinates at 0). */
export function storeRowOutputs(l: KernelLowering, when: string): void {
  const row = l.kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) => o.level === "row");
  if (!row.length) return;
  const coords = l.coords;
  l.coords = coords.map((c, a) => (l.kernel.reduced.includes(a) ? "0" : c));
  l.e.block(`if (${when}) {`, () => {
    const memo = new Map<Expr, string>();
    for (const [o, k] of row) l.store(o, k, memo);
  });
  l.coords = coords;
}

/** Stores the kernel's full outputs in `loop` over the row's reduced coordinates (`i`). */
function storeFullOutputs(l: KernelLowering, loop: string): void {
  const { kernel, e } = l;
  const full = kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) => o.level === "full");
  if (!full.length) return;
  e.block(loop, () => {
    l.unravel(kernel.reduced, "i");
    const memo = new Map<Expr, string>();
    for (const [o, k] of full) l.store(o, k, memo);
  });
}

/** Workgroup arrays for the reductions' combining, one per WGSL type. */
function sharedArrays(types: Set<string>, size: number): string[] {
  return [...types].map((t) => `var<workgroup> sh_${t}: array<${t}, ${size}>;`);
}

/**
 * Rows held in registers (see the module doc); `tiling.slots` > 0. Returns the workgroup arrays.
 */
export function emitHeldRows(l: KernelLowering, tiling: RowTiling): string[] {
  const { kernel, e } = l;
  const { space, reduced } = kernel;
  const { threads, rows, slots, width, vectors } = tiling;
  const kept = space.flatMap((_, i) => (reduced.includes(i) ? [] : [i]));
  const total = sizeOf(kept.map((i) => space[i]));
  const inner = sizeOf(reduced.map((i) => space[i]));
  const units = inner / width;
  const last = space.length - 1;
  e.line(rows > 1 ? `let lane = lid.x % ${threads}u;` : "let lane = lid.x;");
  const first = rows > 1 ? "lid.x - lane" : "0u";
  e.line(
    `let raw = i32(wid.x + wid.y * nwg.x) * ${rows}${
      rows > 1 ? ` + i32(lid.x / ${threads}u)` : ""
    };`,
  );
  e.line(`let row = min(raw, ${total - 1});`);
  e.line(`let live = raw < ${total};`);
  const base = [...l.coords];
  for (const a of kept) e.line(`var ${base[a]}: i32 = 0;`);
  l.unravel(kept, "row");

  // Each slot's coordinates (lane 0 of a vec4), from its unit index clamped onto the row.
  const ragged = slots * threads > units;
  const slotCoords = [...Array(slots).keys()].map((s) => {
    const coords = base.map((c, a) => (reduced.includes(a) ? `${c}_${s}` : c));
    for (const a of reduced) e.line(`var ${coords[a]}: i32 = 0;`);
    l.coords = coords;
    const unit = `i32(lane) + ${s * threads}`;
    l.unravel(reduced, `${ragged ? `min(${unit}, ${units - 1})` : `(${unit})`} * ${width}`);
    if (ragged) e.line(`let in_${s} = ${unit} < ${units};`);
    return coords;
  });
  const pointCoords = (s: number, j: number) =>
    j === 0 ? slotCoords[s] : slotCoords[s].map((c, a) => (a === last ? `(${c} + ${j})` : c));
  // One memo per point, kept across every phase; vec4 loads seed the memos of their lanes.
  const memos = slotCoords.map(() => [...Array(width)].map(() => new Map<Expr, string>()));
  // Values the same at every point of the row are computed once, at the first point, and shared:
  // a quantizing epilogue's scale, (max − min) / 255, was otherwise divided out at each of a
  // thread's 32 points (97 exact divisions in one shader took NVIDIA's compiler 2.7 s).
  const rowwise = rowInvariant(kernel);
  const shared = new Map<Expr, string>();
  const valueAt = (expr: Expr, memo: Map<Expr, string>): string => {
    for (const [x, name] of shared) if (!memo.has(x)) memo.set(x, name);
    const v = l.value(expr, memo);
    for (const [x, name] of memo) if (rowwise(x)) shared.set(x, name);
    return v;
  };
  if (width === 4) {
    const loaded = new Map<string, string>();
    const seed = (x: Expr) => {
      if (x.kind === "alu") x.args.forEach(seed);
      if (x.kind !== "load" || !vectors.has(x.input)) return;
      for (let s = 0; s < slots; s++) {
        l.coords = slotCoords[s];
        const { index } = l.offset(x.steps, kernel.inputs[x.input].shape);
        const key = `${x.input}:${index}`;
        let name = loaded.get(key);
        if (!name) {
          name = e.fresh("quad");
          e.line(`let ${name} = ${l.quad(x.input, index)};`);
          loaded.set(key, name);
        }
        for (let j = 0; j < 4; j++) memos[s][j].set(x, `${name}.${"xyzw"[j]}`);
      }
    };
    for (const x of [...kernel.reductions, ...kernel.outputs]) seed(x.expr);
  }
  const types = new Set<string>();
  kernel.reductions.forEach((r, k) => {
    const { init, combine } = combiner(r);
    e.line(`var acc${k}: ${wgslType(r.dtype)} = ${init};`);
    for (let s = 0; s < slots; s++) {
      for (let j = 0; j < width; j++) {
        l.coords = pointCoords(s, j);
        const v = valueAt(r.expr, memos[s][j]);
        const next = combine(`acc${k}`, v);
        e.line(`acc${k} = ${ragged ? `select(acc${k}, ${next}, in_${s})` : next};`);
      }
    }
    types.add(combineAcross(l, r, k, threads, inner, first));
  });
  l.coords = base;
  storeRowOutputs(l, allOf("lane == 0u", "live"));
  const full = kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) => o.level === "full");
  for (let s = 0; s < slots; s++) {
    const when = ragged ? allOf("live", `in_${s}`) : "live";
    if (tiling.vectorStores) {
      const lanes = [0, 1, 2, 3].map((j) => {
        l.coords = pointCoords(s, j);
        return full.map(([o]) => valueAt(o.expr, memos[s][j]));
      });
      l.coords = slotCoords[s];
      e.block(`if (${when}) {`, () => {
        full.forEach(([o, k], i) => {
          if (o.combine) return lanes.forEach((v) => l.combine(k, v[i]));
          const { index } = l.offset(o.steps, o.shape);
          const value = l.toStored(lanes.map((v) => v[i]).join(", "), o.dtype, true);
          e.line(`${l.outputs[k]}[u32(${index}) / 4u] = ${value};`);
        });
      });
      continue;
    }
    for (let j = 0; j < width; j++) {
      l.coords = pointCoords(s, j);
      const values = full.map(([o]) => valueAt(o.expr, memos[s][j]));
      e.block(`if (${when}) {`, () => {
        full.forEach(([o, k], i) => {
          if (o.combine) return l.combine(k, values[i]);
          const at = `${l.outputs[k]}[u32(${l.offset(o.steps, o.shape).index})]`;
          e.line(`${at} = ${l.toStored(values[i], o.dtype)};`);
        });
      });
    }
  }
  l.coords = base;
  return sharedArrays(types, threads * rows);
}

/**
 * Whether an expression of `kernel` has one value along each row: constants, the row's
 * reductions, loads that do not move along the reduced axes, and operations of those only.
 */
function rowInvariant(kernel: KernelIR): (x: Expr) => boolean {
  const known = new Map<Expr, boolean>();
  const invariant = (x: Expr): boolean => {
    let is = known.get(x);
    if (is !== undefined) return is;
    if (x.kind === "load") {
      const at = affineOffset(x.steps, kernel.space, kernel.inputs[x.input].shape);
      is = at !== undefined && kernel.reduced.every((a) => at.weights[a] === 0);
    } else is = x.kind !== "alu" || x.args.every(invariant);
    known.set(x, is);
    return is;
  };
  return invariant;
}

/**
 * A workgroup per row, streaming it once per reduction: its threads stride over the reduced
 * coordinates and combine in workgroup memory (long serial loops are slow on GPUs, and some
 * drivers cap a loop's iterations). Returns the workgroup arrays it needs. With `inside`, the row
 * index `row` exists already (a phase of a larger kernel) and loop counters take names of their
 * own.
 */
export function emitRows(l: KernelLowering, size: number, inside = false): string[] {
  const { kernel, e } = l;
  const { space } = kernel;
  const kept = space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
  const red = kernel.reduced;
  const inner = sizeOf(red.map((i) => space[i]));
  const loop = `for (var i: i32 = i32(lid.x); i < ${inner}; i += ${size}) {`;
  if (!inside) {
    e.line(`let row = i32(wid.x + wid.y * nwg.x);`);
    e.line(`if (row >= ${sizeOf(kept.map((i) => space[i]))}) { return; }`);
  }
  e.line("let lane = lid.x;");
  for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
  l.unravel(kept, "row");
  const types = new Set<string>();
  kernel.reductions.forEach((r, k) => {
    const { init, combine } = combiner(r);
    e.line(`var acc${k}: ${wgslType(r.dtype)} = ${init};`);
    e.block(loop, () => {
      l.unravel(red, "i");
      e.line(`acc${k} = ${combine(`acc${k}`, l.value(r.expr, new Map()))};`);
    });
    types.add(combineAcross(l, r, k, size, inner, "0u"));
  });
  storeRowOutputs(l, "lid.x == 0u");
  storeFullOutputs(l, loop);
  return sharedArrays(types, size);
}

/** The row tiling of an exact kernel (`KernelIR.exact`): a row a thread, `most` to a workgroup. */
export function serialRows(most: number): RowTiling {
  return { ...streamedRows(1, most), serial: true };
}

/**
 * A thread per row, `rows` rows a workgroup, each reduction summed term after term in the order
 * of the reduced coordinates and a mean divided as IEEE divides: the reference's order and
 * rounding, which the exact precision asks of every backend.
 */
export function emitSerialRows(l: KernelLowering, rows: number): void {
  const { kernel, e } = l;
  const { space } = kernel;
  const kept = space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
  const red = kernel.reduced;
  const inner = sizeOf(red.map((i) => space[i]));
  const loop = `for (var i: i32 = 0; i < ${inner}; i++) {`;
  e.line(`let row = i32((wid.x + wid.y * nwg.x) * ${rows}u + lid.x);`);
  e.line(`if (row >= ${sizeOf(kept.map((i) => space[i]))}) { return; }`);
  for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
  l.unravel(kept, "row");
  kernel.reductions.forEach((r, k) => {
    const { init, combine } = combiner(r);
    const t = wgslType(r.dtype);
    e.line(`var acc${k}: ${t} = ${init};`);
    // A float sum through k_add, which no compiler reassociates (llvmpipe does a plain + chain).
    const sum = t === "f32" && (r.op === "sum" || r.op === "mean");
    const step = (v: string) => sum ? `k_add(acc${k}, ${v})` : combine(`acc${k}`, v);
    e.block(loop, () => {
      l.unravel(red, "i");
      e.line(`acc${k} = ${step(l.value(r.expr, new Map()))};`);
    });
    finishReduction(l, r, k, inner, true);
  });
  storeRowOutputs(l, "true");
  storeFullOutputs(l, loop);
}
