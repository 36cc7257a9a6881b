/**
 * WGSL generation from the kernel IR. Each kernel gets a layout (`kernelLayout`) that code
 * generation and dispatch share:
 * - `points` (elementwise): one invocation per point, or per 4 consecutive points of the last axis
 *   when every output (and the inputs that can) is read and written as aligned vec4s — GPUs move
 *   memory in 16-byte words, so this is what reaches full bandwidth;
 * - `rows` (reductions): a group of threads per row, combining through workgroup memory; rows
 *   that fit are held in registers, several to a workgroup when short (`shaders/wgsl/rows.ts`);
 * - `tiles`: large f32 matmuls in register-blocked tiles (`shaders/wgsl/matmul.ts`).
 * Index steps become integer arithmetic with constants baked in; every subexpression is a named
 * `let`, emitted once per point, so the generated source is readable and shared work is not
 * repeated.
 *
 * Storage is 32-bit words: f32/f16 as f32, i32/i8 as i32, u32/u8/bool as u32 (the backend widens
 * on upload and narrows on download), but for 8-bit constants marked `packed`, four bytes to a word
 * as they lie in memory, read through `extractBits` (a quantized model's weights: a quarter of the
 * memory, and a byte tile's word is one load). After every ALU op the value is re-rounded to its dtype
 * (f16 through pack2x16float, i8/u8 by wrapping, bool to 0/1), exactly the IR's semantics.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import {
  type Expr,
  f32SumView,
  type KernelIR,
  type KernelOutput,
  matmulOperands,
} from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { KernelLowering, storageBindings } from "./expr.ts";
import { combinedDecls, combinedDirectives, combinedFlush, outputType } from "./combined.ts";
import { Uniforms } from "./uniforms.ts";
import { entryPoint, NEVER, PRELUDE } from "./prelude.ts";
import {
  emitHeldRows,
  emitRows,
  emitSerialRows,
  type RowTiling,
  rowTiling,
  serialRows,
} from "./rows.ts";
import { blockTiling, emitBlockProduct } from "./block_product.ts";
import { quadAligned, quadInputs, storeLanes, vectorLanes } from "./quads.ts";
import { byteContraction, byteVectors } from "./byte_tiles.ts";
import {
  emitMatrixMatmul,
  MATRIX_BUILTINS,
  MATRIX_ENABLES,
  matrixTile,
  matrixVectors,
} from "./matrix_matmul.ts";
import { emitTiledMatmul, foldedRows, tileVectors } from "./matmul.ts";
import { quadEpilogue } from "./matrix_epilogue.ts";
import { aliasedInputs, storeOver, storesSome } from "./in_place.ts";
import { type MatmulTile, sliceCount, tileOf, tileShape } from "./tile_shapes.ts";

/** What the device allows generated kernels. */
export interface WgslOptions {
  /** The device's `maxComputeInvocationsPerWorkgroup`. */
  readonly maxInvocations: number;
  /**
   * Whether f16 tensors are stored as 16 bits (`enable f16`, the device has `shader-f16`); they
   * are computed in f32 either way, rounded to f16 after every op. Default false: 32-bit words.
   */
  readonly half?: boolean;
  /** The device's `maxComputeWorkgroupStorageSize` in bytes. Default 16384 (WebGPU's minimum). */
  readonly workgroupBytes?: number;
  /**
   * The device's largest storage binding in bytes: an attention group with a buffer past it
   * runs as a flash kernel where one applies (it could not run otherwise). Default: no limit.
   */
  readonly bindingBytes?: number;
  /**
   * Whether a matmul whose tiles are too few to fill the GPU splits its K among slices of a
   * workgroup (`MatmulTile.slices`). Default true. llvmpipe's shader compiler takes 7-50 s for
   * such a kernel, so the backend turns it off on software adapters unless asked.
   */
  readonly splitK?: boolean;
  /**
   * Attention groups as one flash kernel (`shaders/wgsl/flash.ts`): true wherever one applies; false only
   * where the group's buffers are past `bindingBytes`; by default also where it was measured
   * faster than the three kernels it replaces (`flashPays`).
   */
  readonly flash?: boolean;
  /** The device's `maxStorageBuffersPerShaderStage`. Default 8 (WebGPU's minimum). */
  readonly bindings?: number;
  /**
   * Whether f16 matmuls run on the matrix units (`shaders/wgsl/matrix_matmul.ts`): the device
   * has subgroup matrices of 16×16×16 f16 → f32 and subgroups of 32, and `half`. Default false.
   */
  readonly matrix?: boolean;
  /**
   * Whether quantized products over bytes (`packedDots`' tiles) run on the matrix units: the
   * device has subgroup matrices of 16×16×32 i8 → i32 and subgroups of 32. Default false.
   */
  readonly byteMatrix?: boolean;
  /**
   * The device's subgroup size where it has `subgroups` of one size (its least and largest
   * agree): row kernels combine their last steps by shuffles (`combineAcross`). Default: none.
   */
  readonly subgroupSize?: number;
  /**
   * Whether WGSL has `dot4I8Packed` and `pack4xI8` (the language feature
   * `packed_4x8_integer_dot_product`): block products of A rounded to 8 bits then sum in
   * integers (`shaders/wgsl/block_product_int8.ts`). Default false.
   */
  readonly packedDots?: boolean;
}

/** How a kernel maps onto the GPU; code generation and dispatch both follow it. */
export interface KernelLayout {
  /** `points`: elementwise; `rows`: a workgroup per row; `tiles`: tiled matmul. */
  readonly kind: "points" | "rows" | "tiles";
  /** Invocations per workgroup. */
  readonly workgroup: number;
  /**
   * Points per invocation of a `points` kernel: 4 when it moves vec4s along the last axis; 4 for
   * `rows` and `tiles` kernels that store their outputs as vec4s.
   */
  readonly width: 1 | 4;
  /** Inputs read as vec4 arrays (`points` of `width` 4, tiles' contiguous operands, epilogues). */
  readonly vectors: ReadonlySet<number>;
  /** The tiling of a `tiles` kernel. */
  readonly tile?: MatmulTile;
  /** How a `rows` kernel splits its rows among threads. */
  readonly rows?: RowTiling;
}

/** Smallest batch·M·N·K that uses the tiled matmul kernel. */
export const TILE_THRESHOLD: number = 1 << 24;

/** Fewest 32×32 output tiles that use the tiled matmul kernel. */
export const MIN_TILES = 16;

/** The layout of `kernel` (not opaque) on a device with `options`. */
export function kernelLayout(kernel: KernelIR, options: WgslOptions): KernelLayout {
  const most = 2 ** Math.floor(Math.log2(Math.min(256, options.maxInvocations)));
  const none = new Set<number>();
  // The exact precision's kernels: a row a thread, or a point a thread (`KernelIR.exact`).
  if (kernel.exact && kernel.reductions.length) return rowsLayout(serialRows(most));
  const bytes = options.workgroupBytes ?? 16384;
  const sliceBytes = options.splitK === false ? undefined : bytes;
  const block = blockTiling(kernel, most, bytes, options.packedDots);
  if (block) return rowsLayout(block);
  if (kernel.blockProduct?.roundsA) {
    // Its expressions read A unrounded: only the integer block kernel rounds it.
    throw new KilnError(`Kernel ${kernel.name} rounds its A, which only packed byte dots do`, {
      code: "internal",
      fix: "compile products that round A (packed_rows.ts) only for a device with " +
        "packed_4x8_integer_dot_product, or report this",
    });
  }
  const folded = foldedRows(kernel);
  // The product's whole tile, where the device runs its kind on the matrix units.
  const halves = options.matrix && options.half,
    integers = options.byteMatrix && options.packedDots;
  const whole = halves || integers
    ? tiledMatmul(folded, most, undefined, options.packedDots)
    : undefined;
  const units = whole && (whole.bytes ? integers : halves);
  // Matrix tiles may take the device's largest workgroup (a tile whose subgroups split K).
  const tile = (units && matrixTile(folded, whole, options.maxInvocations, bytes)) ??
    tiledMatmul(folded, most, sliceBytes, options.packedDots);
  if (tile) {
    const vectors = tile.matrix
      ? matrixVectors(folded, tile)
      : tile.bytes
      ? byteVectors(folded, tile)
      : tileVectors(folded, tile);
    // A matrix tile whose epilogue takes fours stores its outputs as vec4s (`width` 4).
    const quads = tile.matrix ? quadEpilogue(folded, tile) : undefined;
    return {
      kind: "tiles",
      workgroup: tile.threads[0] * tile.threads[1] * tile.slices,
      width: quads ? 4 : 1,
      vectors: new Set([...vectors, ...(quads ?? [])]),
      tile,
    };
  }
  if (kernel.reductions.length) return rowsLayout(rowTiling(kernel, most));
  // Stores that skip the points where an input stays are made a point at a time (`in_place.ts`).
  const vectors = storesSome(kernel) ? undefined : vectorInputs(kernel);
  return vectors
    ? { kind: "points", workgroup: most, width: 4, vectors }
    : { kind: "points", workgroup: most, width: 1, vectors: none };
}

/** The layout of a `rows` kernel whose rows split among threads as `rows` says. */
export function rowsLayout(rows: RowTiling): KernelLayout {
  const width = rows.vectorStores ? 4 : 1;
  return { kind: "rows", workgroup: rows.threads * rows.rows, width, vectors: rows.vectors, rows };
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
  const aligned = (o: KernelOutput) => o.combine || quadAligned(o.steps, space, o.shape, last);
  if (!kernel.outputs.every(aligned)) return undefined;
  return quadInputs(kernel, kernel.outputs.map((o) => o.expr), last);
}

/** Workgroups of a rows kernel over `rows` rows: each segment's (batch item's) rounded up. */
function rowGroups(tiling: RowTiling, rows: number): number {
  const per = tiling.rows * (tiling.blocks?.outputs ?? 1);
  const segment = tiling.segment;
  return segment ? Math.ceil(rows / segment) * Math.ceil(segment / per) : Math.ceil(rows / per);
}

/**
 * The dispatch for `rows` rows of a kernel with `layout` (fewer than all under shape buckets):
 * tiles take (column tiles, row tiles, batch); others a count folded past 65535 per dimension —
 * one workgroup per row when the kernel reduces, one invocation per `width` points otherwise.
 */
export function dispatchSize(layout: KernelLayout, rows: number): [number, number, number] {
  const tile = layout.tile;
  if (tile) {
    const [tm, tn] = tileOf(tile);
    const batches = Math.ceil(rows / (tile.m * tile.n));
    const m = tile.nb > 0 ? tile.m : Math.ceil(rows / tile.n);
    return [Math.ceil(tile.n / tn), Math.ceil(m / tm), Math.max(1, batches)];
  }
  const groups = layout.rows
    ? rowGroups(layout.rows, rows)
    : Math.ceil(rows / layout.width / layout.workgroup);
  if (groups <= 65535) return [groups, 1, 1];
  // Folded so that fewer than `y` workgroups idle: 65536 groups as 65535 × 2 launched a second
  // row of 65534 empty ones and cost a quarter of a 64M-element copy's bandwidth on an H200.
  const y = Math.ceil(groups / 65535);
  return [Math.ceil(groups / y), y, 1];
}

/**
 * The tiling of an f32 matmul kernel (plain-load operands, per-row outputs, large enough), if any,
 * in workgroups of at most `most` threads, its K split into slices where its tiles are too few
 * and `sliceBytes` of workgroup memory hold them (none without). With `packedDots`, a quantized
 * product over bytes tiles too, four K values a tile word (`byte_tiles.ts`).
 */
export function tiledMatmul(
  kernel: KernelIR,
  most = 256,
  sliceBytes?: number,
  packedDots = false,
): MatmulTile | undefined {
  const bytes = packedDots ? byteContraction(kernel) : undefined;
  const operands = matmulOperands(f32SumView(kernel)) ?? bytes?.operands;
  if (!operands) return undefined;
  const { nb, m, n, k } = operands;
  const batch = sizeOf(kernel.space.slice(0, nb));
  if (batch > 65535) return undefined;
  // Tiles pay off on large products only: on small ones most of a tile's threads idle, and the
  // more complex shader costs seconds to compile on software adapters. Too few tiles leave a
  // large GPU idle (64×784·784×512 made 8 and ran 1.4× slower than one workgroup per output).
  const tiles = (rows: number, cols: number) => batch * Math.ceil(m / rows) * Math.ceil(n / cols);
  if (batch * m * n * k < TILE_THRESHOLD || tiles(32, 32) < MIN_TILES) return undefined;
  const shape = tileShape(m, n, tiles, most);
  if (!shape) return undefined;
  const slices = sliceBytes === undefined
    ? 1
    : sliceCount(shape, tiles(...tileOf(shape)), k, most, sliceBytes, bytes ? 4 : 1);
  return { ...operands, ...shape, slices, ...(bytes && { bytes: bytes.unsigned }) };
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
  // A tiled kernel is generated as the tiler saw it (its batch folded into rows, if it was).
  if (layout.kind === "tiles") kernel = foldedRows(kernel);
  const uniforms = new Uniforms(kernel);
  // An input stored over is read from its output's binding (`in_place.ts`).
  const aliases = aliasedInputs(kernel, layout);
  const l = new KernelLowering(kernel, {
    inputs: kernel.inputs.map((_, i) => aliases.has(i) ? `out${aliases.get(i)}` : `in${i}`),
    half: options.half,
    subgroup: options.subgroupSize,
    uniforms,
  });
  let decls: string[] = [], helpers: string[] = [];
  if (layout.tile?.matrix) {
    // A matrix tile of `width` 4 takes its epilogue in fours (`quadEpilogue`, in the layout).
    const quads = layout.width === 4;
    ({ decls, helpers } = emitMatrixMatmul(l, layout.tile, layout.vectors, quads));
  } else if (layout.tile) ({ decls, helpers } = emitTiledMatmul(l, layout.tile, layout.vectors));
  else if (layout.rows?.blocks && kernel.blockProduct) {
    decls = emitBlockProduct(l, layout.rows, kernel.blockProduct);
  } else if (layout.rows?.serial) emitSerialRows(l, layout.rows.rows);
  else if (layout.rows) {
    decls = layout.rows.slots ? emitHeldRows(l, layout.rows) : emitRows(l, layout.rows.threads);
  } else if (layout.width === 4) emitVectorPoints(l, layout);
  else emitPoints(l, layout);
  // A packed input (an 8-bit constant) is words of four bytes, read through `element`/`quad`.
  const array = (t: string, i: number) =>
    kernel.inputs[i].packed ? "u32" : layout.vectors.has(i) ? `vec4<${t}>` : t;
  const outArray = (t: string) => layout.width === 4 ? `vec4<${t}>` : t;
  const bindings = storageBindings(
    kernel.inputs.map((b, i) => aliases.has(i) ? undefined : array(l.stored(b.dtype), i)),
    kernel.outputs.map((b) => outputType(b, b.packed ? "u32" : outArray(l.stored(b.dtype)))),
  );
  // Combined outputs fold by subgroups where the device has them (`combined.ts`).
  const subgroups = l.subgroup !== undefined;
  const flush = combinedFlush(l, subgroups);
  const half = [...kernel.inputs, ...kernel.outputs].some((b) => l.stored(b.dtype) === "f16");
  const matrix = layout.tile?.matrix !== undefined;
  return [
    ...(half || (matrix && !layout.tile?.bytes) ? ["enable f16;"] : []),
    ...(matrix ? MATRIX_ENABLES : []),
    ...(l.usesSubgroups && !matrix ? ["enable subgroups;"] : []),
    ...combinedDirectives(kernel, subgroups, l.usesSubgroups || matrix),
    `// kiln kernel ${kernel.name}: ${kernel.ops.join(" | ")}`,
    ...bindings,
    PRELUDE,
    ...combinedDecls(l),
    ...uniforms.decls,
    ...decls,
    ...helpers,
    ...entryPoint(
      layout.tile
        ? `${layout.tile.threads[0]}, ${layout.tile.threads[1] * layout.tile.slices}`
        : layout.workgroup,
      [`  ${NEVER}`, ...uniforms.e.lines, ...l.e.lines, ...flush],
      matrix ? MATRIX_BUILTINS : undefined,
    ),
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
    kernel.outputs.forEach((_, k) => storeOver(l, k, memo));
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
  const { space } = l.kernel;
  invocation(l, layout, sizeOf(space) / 4);
  l.unravel(space.map((_, i) => i), "row * 4");
  storeLanes(l, vectorLanes(l, space.length - 1, layout.vectors));
}
