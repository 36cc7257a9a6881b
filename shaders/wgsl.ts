/**
 * WGSL generation from the kernel IR. Each kernel gets a layout (`kernelLayout`) that code
 * generation and dispatch share:
 * - `points` (elementwise): one invocation per point, or per 4 consecutive points of the last axis
 *   when every output (and the inputs that can) is read and written as aligned vec4s — GPUs move
 *   memory in 16-byte words, so this is what reaches full bandwidth;
 * - `rows` (reductions): one workgroup per row whose threads stride over the row's reduced
 *   coordinates and combine through workgroup memory, then store row outputs once and full
 *   outputs strided across the workgroup;
 * - `tiles`: large f32 matmuls in register-blocked tiles (`wgsl_matmul.ts`).
 * Index steps become integer arithmetic with constants baked in; every subexpression is a named
 * `let`, emitted once per point, so the generated source is readable and shared work is not
 * repeated.
 *
 * Storage is 32-bit words: f32/f16 as f32, i32/i8 as i32, u32/u8/bool as u32 (the backend widens
 * on upload and narrows on download). After every ALU op the value is re-rounded to its dtype
 * (f16 through pack2x16float, i8/u8 by wrapping, bool to 0/1), exactly the IR's semantics.
 *
 * @module
 */
import { KilnError } from "../jit/errors.ts";
import { affineOffset } from "../jit/access.ts";
import {
  type Expr,
  type IndexStep,
  type KernelIR,
  matmulOperands,
  walk,
} from "../jit/kernel_ir.ts";
import { type Shape, sizeOf } from "../jit/shape.ts";
import {
  INF,
  KernelLowering,
  literal,
  NAN,
  NEG_INF,
  PRELUDE,
  rounded,
  wgslType,
} from "./wgsl_expr.ts";
import {
  emitTiledMatmul,
  type MatmulTile,
  TILE_THREADS,
  tileSize,
  tileVectors,
} from "./wgsl_matmul.ts";

/** What the device allows generated kernels. */
export interface WgslOptions {
  /** The device's `maxComputeInvocationsPerWorkgroup`. */
  readonly maxInvocations: number;
}

/** How a kernel maps onto the GPU; code generation and dispatch both follow it. */
export interface KernelLayout {
  /** `points`: elementwise; `rows`: a workgroup per row; `tiles`: tiled matmul. */
  readonly kind: "points" | "rows" | "tiles";
  /** Invocations per workgroup. */
  readonly workgroup: number;
  /** Points per invocation of a `points` kernel: 4 when it moves vec4s along the last axis. */
  readonly width: 1 | 4;
  /** Inputs read as vec4 arrays (`points` of `width` 4, and tiles' contiguous B). */
  readonly vectors: ReadonlySet<number>;
  /** The tiling of a `tiles` kernel. */
  readonly tile?: MatmulTile;
}

/** Smallest batch·M·N·K that uses the tiled matmul kernel. */
export const TILE_THRESHOLD: number = 1 << 24;

/** Fewest 64×64 output tiles that use the tiled matmul kernel. */
export const MIN_TILES = 32;

/** Fewest 128×128 tiles that use them (rather than 64×64 ones): enough to fill a large GPU. */
const MIN_LARGE_TILES = 128;

/** The layout of `kernel` (not opaque) on a device with `options`. */
export function kernelLayout(kernel: KernelIR, options: WgslOptions): KernelLayout {
  const most = 2 ** Math.floor(Math.log2(Math.min(256, options.maxInvocations)));
  const none = new Set<number>();
  const tile = most >= TILE_THREADS ? tiledMatmul(kernel) : undefined;
  if (tile) {
    return {
      kind: "tiles",
      workgroup: TILE_THREADS,
      width: 1,
      vectors: tileVectors(kernel, tile),
      tile,
    };
  }
  if (kernel.reductions.length) {
    // Each thread takes at least 8 of a row's points, so short rows do not idle wide workgroups.
    const inner = sizeOf(kernel.reduced.map((i) => kernel.space[i]));
    const fit = 2 ** Math.floor(Math.log2(Math.max(1, inner / 8)));
    const workgroup = Math.min(most, Math.max(32, fit));
    return { kind: "rows", workgroup, width: 1, vectors: none };
  }
  const vectors = vectorInputs(kernel);
  return vectors
    ? { kind: "points", workgroup: most, width: 4, vectors }
    : { kind: "points", workgroup: most, width: 1, vectors: none };
}

/**
 * The inputs a `points` kernel can read as vec4s, when it can store every output as vec4s: the
 * last axis is a multiple of 4 and each such access is affine with unit stride along it and
 * 4-aligned elsewhere. `undefined` when some output cannot (the kernel stays scalar).
 */
function vectorInputs(kernel: KernelIR): Set<number> | undefined {
  const { space } = kernel;
  const last = space.length - 1;
  if (last < 0 || kernel.reduced.length || space[last] % 4 !== 0 || sizeOf(space) === 0) {
    return undefined;
  }
  const aligned = (steps: readonly IndexStep[], shape: Shape) => {
    const a = affineOffset(steps, space, shape);
    return a !== undefined && a.weights[last] === 1 && a.base % 4 === 0 &&
      a.weights.every((w, i) => i === last || space[i] === 1 || w % 4 === 0);
  };
  if (!kernel.outputs.every((o) => aligned(o.steps, o.shape))) return undefined;
  const loads = new Map<number, boolean>();
  for (const o of kernel.outputs) {
    walk(o.expr, (x) => {
      if (x.kind !== "load") return;
      const ok = aligned(x.steps, kernel.inputs[x.input].shape);
      loads.set(x.input, (loads.get(x.input) ?? true) && ok);
      // A gather's indices are read one at a time, wherever the gather reads them.
      for (const s of x.steps) if (s.kind === "gather") loads.set(s.index.input, false);
    });
  }
  return new Set([...loads].flatMap(([i, ok]) => (ok ? [i] : [])));
}

/**
 * The dispatch for `rows` rows of a kernel with `layout` (fewer than all under shape buckets):
 * tiles take (column tiles, row tiles, batch); others a count folded past 65535 per dimension —
 * one workgroup per row when the kernel reduces, one invocation per `width` points otherwise.
 */
export function dispatchSize(layout: KernelLayout, rows: number): [number, number, number] {
  const tile = layout.tile;
  if (tile) {
    const size = tileSize(tile);
    const batches = Math.ceil(rows / (tile.m * tile.n));
    const m = tile.nb > 0 ? tile.m : Math.ceil(rows / tile.n);
    return [Math.ceil(tile.n / size), Math.ceil(m / size), Math.max(1, batches)];
  }
  const groups = layout.kind === "rows" ? rows : Math.ceil(rows / layout.width / layout.workgroup);
  if (groups <= 65535) return [groups, 1, 1];
  // Folded so that fewer than `y` workgroups idle: 65536 groups as 65535 × 2 launched a second
  // row of 65534 empty ones and cost a quarter of a 64M-element copy's bandwidth on an H200.
  const y = Math.ceil(groups / 65535);
  return [Math.ceil(groups / y), y, 1];
}

/** The tiling of an f32 matmul kernel (plain-load operands, per-row outputs, large enough), if any. */
export function tiledMatmul(kernel: KernelIR): MatmulTile | undefined {
  const operands = matmulOperands(kernel);
  if (!operands) return undefined;
  const { nb, m, n, k } = operands;
  const batch = sizeOf(kernel.space.slice(0, nb));
  if (batch > 65535) return undefined;
  // Tiles pay off on large products only: on small ones most of a tile's threads idle, and the
  // more complex shader costs seconds to compile on software adapters. Too few tiles leave a
  // large GPU idle (64×784·784×512 made 8 and ran 1.4× slower than one workgroup per output).
  const tiles = (size: number) => batch * Math.ceil(m / size) * Math.ceil(n / size);
  if (batch * m * n * k < TILE_THRESHOLD || tiles(64) < MIN_TILES) return undefined;
  return { ...operands, per: tiles(128) >= MIN_LARGE_TILES ? 8 : 4 };
}

/** Generates the WGSL compute shader for `kernel` (not for opaque kernels). */
export function generateWgsl(kernel: KernelIR, options: WgslOptions): string {
  if (kernel.opaque) {
    throw new KilnError(`WGSL: opaque kernel ${kernel.name} has no generated form`, {
      code: "internal",
      fix: "run opaque kernels on a backend that supports their op (the scheduler does)",
    });
  }
  const layout = kernelLayout(kernel, options);
  const l = new KernelLowering(kernel);
  let decls: string[] = [], helpers: string[] = [];
  if (layout.tile) ({ decls, helpers } = emitTiledMatmul(l, layout.tile, layout.vectors));
  else if (layout.kind === "rows") decls = emitRows(l, layout);
  else if (layout.width === 4) emitVectorPoints(l, layout);
  else emitPoints(l, layout);
  const array = (t: string, i: number) => layout.vectors.has(i) ? `vec4<${t}>` : t;
  const outArray = (t: string) => layout.width === 4 ? `vec4<${t}>` : t;
  const bindings = [
    ...kernel.inputs.map((b, i) =>
      `@group(0) @binding(${i}) var<storage, read> in${i}: array<${array(wgslType(b.dtype), i)}>;`
    ),
    ...kernel.outputs.map((b, k) =>
      `@group(0) @binding(${kernel.inputs.length + k}) var<storage, read_write> out${k}: array<${
        outArray(wgslType(b.dtype))
      }>;`
    ),
  ];
  return [
    `// kiln kernel ${kernel.name}: ${kernel.ops.join(" | ")}`,
    ...bindings,
    PRELUDE,
    ...decls,
    ...helpers,
    layout.tile
      ? "@compute @workgroup_size(16, 16)"
      : `@compute @workgroup_size(${layout.workgroup})`,
    "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,",
    "        @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {",
    ...l.e.lines,
    "}",
    "",
  ].join("\n");
}

/** The linear invocation index of a `points` kernel (its grid may be folded into y). */
function invocation(l: KernelLowering, layout: KernelLayout, count: number): void {
  l.e.line(`let row = i32(gid.x + gid.y * nwg.x * ${layout.workgroup}u);`);
  l.e.line(`if (row >= ${count}) { return; }`);
  for (const c of l.coords) l.e.line(`var ${c}: i32 = 0;`);
}

/** Elementwise, one point per invocation. */
function emitPoints(l: KernelLowering, layout: KernelLayout): void {
  const { kernel } = l;
  const kept = kernel.space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
  invocation(l, layout, sizeOf(kept.map((i) => kernel.space[i])));
  l.unravel(kept, "row");
  const inner = sizeOf(kernel.reduced.map((i) => kernel.space[i]));
  const body = () => {
    l.unravel(kernel.reduced, "i");
    const memo = new Map<Expr, string>();
    kernel.outputs.forEach((o, k) => l.store(o, k, memo));
  };
  if (kernel.reduced.length) l.e.block(`for (var i: i32 = 0; i < ${inner}; i++) {`, body);
  else body();
}

/**
 * Elementwise over 4 consecutive points of the last axis: vec4 inputs are loaded once, the
 * expression is evaluated per lane (values that do not depend on the last axis once for all four),
 * and each output is stored as one vec4.
 */
function emitVectorPoints(l: KernelLowering, layout: KernelLayout): void {
  const { kernel } = l;
  const { space } = kernel;
  const last = space.length - 1;
  invocation(l, layout, sizeOf(space) / 4);
  l.unravel(space.map((_, i) => i), "row * 4");
  const base = [...l.coords];
  const uniform = new Set<Expr>();
  const isUniform = (x: Expr): boolean => {
    if (x.kind === "const") return true;
    if (x.kind === "load") {
      return affineOffset(x.steps, space, kernel.inputs[x.input].shape)?.weights[last] === 0;
    }
    return x.kind === "alu" && x.args.every((a) => uniform.has(a));
  };
  const loads = new Map<Expr, string>();
  for (const o of kernel.outputs) {
    walk(o.expr, (x) => {
      if (isUniform(x)) uniform.add(x);
      if (x.kind === "load" && layout.vectors.has(x.input) && !loads.has(x)) {
        const name = l.e.fresh("quad");
        const { index } = l.offset(x.steps, kernel.inputs[x.input].shape);
        l.e.line(`let ${name} = in${x.input}[u32(${index}) / 4u];`);
        loads.set(x, name);
      }
    });
  }
  const shared = new Map<Expr, string>();
  const lanes = [0, 1, 2, 3].map((j) => {
    l.coords = j === 0 ? base : base.map((c, i) => (i === last ? `(${c} + ${j})` : c));
    const memo = new Map(shared);
    for (const [x, name] of loads) memo.set(x, `${name}.${"xyzw"[j]}`);
    const values = kernel.outputs.map((o) => l.value(o.expr, memo));
    for (const [x, name] of memo) if (uniform.has(x)) shared.set(x, name);
    return values;
  });
  l.coords = base;
  kernel.outputs.forEach((o, k) => {
    const { index } = l.offset(o.steps, o.shape);
    const t = wgslType(o.dtype);
    l.e.line(`out${k}[u32(${index}) / 4u] = vec4<${t}>(${lanes.map((v) => v[k]).join(", ")});`);
  });
}

/**
 * A workgroup per row: its threads stride over the reduced coordinates and combine in workgroup
 * memory (long serial loops are slow on GPUs, and some drivers cap a loop's iterations).
 * Returns the workgroup arrays it needs. With `inside`, the row index `row` exists already (a
 * phase of a larger kernel) and loop counters take names of their own.
 */
export function emitRows(
  l: KernelLowering,
  layout: Pick<KernelLayout, "workgroup">,
  inside = false,
): string[] {
  const { kernel, e } = l;
  const { space } = kernel;
  const kept = space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
  const red = kernel.reduced;
  const inner = sizeOf(red.map((i) => space[i]));
  const size = layout.workgroup;
  const loop = `for (var i: i32 = i32(lid.x); i < ${inner}; i += ${size}) {`;
  if (!inside) {
    e.line(`let row = i32(wid.x + wid.y * nwg.x);`);
    e.line(`if (row >= ${sizeOf(kept.map((i) => space[i]))}) { return; }`);
  }
  for (const c of l.coords) e.line(`var ${c}: i32 = 0;`);
  l.unravel(kept, "row");
  const shared = new Set<string>();
  kernel.reductions.forEach((r, k) => {
    const t = wgslType(r.dtype);
    const init = r.op === "max"
      ? (t === "f32" ? NEG_INF : literal(t === "i32" ? -2147483648 : 0, r.dtype))
      : r.op === "min"
      ? (t === "f32" ? INF : literal(t === "i32" ? 2147483647 : 4294967295, r.dtype))
      : literal(0, r.dtype);
    const combine = (acc: string, v: string) => {
      if (r.op === "sum" || r.op === "mean") return `${acc} + ${v}`;
      const cmp = r.op === "max" ? ">=" : "<=";
      const nan = t === "f32" ? `k_isnan(${acc}) || ` : "";
      return `select(${v}, ${acc}, ${nan}${acc} ${cmp} ${v})`;
    };
    e.line(`var acc${k}: ${t} = ${init};`);
    e.block(loop, () => {
      l.unravel(red, "i");
      e.line(`acc${k} = ${combine(`acc${k}`, l.value(r.expr, new Map()))};`);
    });
    shared.add(t);
    e.line(`sh_${t}[lid.x] = acc${k};`);
    e.line("workgroupBarrier();");
    e.block(`for (var s = ${size / 2}u; s > 0u; s = s >> 1u) {`, () => {
      e.line(
        `if (lid.x < s) { sh_${t}[lid.x] = ${combine(`sh_${t}[lid.x]`, `sh_${t}[lid.x + s]`)}; }`,
      );
      e.line("workgroupBarrier();");
    });
    e.line(`acc${k} = sh_${t}[0];`);
    e.line("workgroupBarrier();");
    if (r.op === "mean") {
      e.line(
        inner === 0 && t === "f32"
          ? `acc${k} = ${NAN};`
          : `acc${k} = acc${k} / ${t}(${Math.max(inner, 1)});`,
      );
    }
    e.line(`acc${k} = ${rounded(`acc${k}`, r.dtype)};`);
  });
  const outs = (level: "row" | "full") =>
    kernel.outputs.map((o, k) => [o, k] as const).filter(([o]) => o.level === level);
  const store = (list: ReturnType<typeof outs>) => {
    const memo = new Map<Expr, string>();
    for (const [o, k] of list) l.store(o, k, memo);
  };
  if (outs("row").length) {
    e.block("if (lid.x == 0u) {", () => {
      for (const a of red) e.line(`${l.coords[a]} = 0;`);
      store(outs("row"));
    });
  }
  if (outs("full").length) {
    e.block(loop, () => {
      l.unravel(red, "i");
      store(outs("full"));
    });
  }
  return [...shared].map((t) => `var<workgroup> sh_${t}: array<${t}, ${size}>;`);
}
