/**
 * The contractions of fusion: MatMul, Conv and pooling, each a reduction group over an index
 * map's space (`index_maps.ts`) whose product reads its operands through the map. The walk
 * (`fuse.ts`) hands them what they need of it as a {@linkcode Walk}. Where the device profile
 * asks, a conv stores its patches first, a product of few outputs sums a deep K in parts, and a
 * block product computes its A (a normalization's rows included) in its own kernel.
 *
 * @module
 */
import type { BlockTables, Expr, IndexStep, ReduceOp } from "../ir/kernel_ir.ts";
import { reindex } from "../ir/kernel_ir.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import {
  type Contraction,
  convMap,
  matmulMap,
  poolDivisors,
  poolMap,
  transposedPatches,
} from "../ir/index_maps.ts";
import { type Shape, sizeOf } from "../ir/shape.ts";
import { byteSize } from "../ir/dtype.ts";
import type { Group } from "./fuse_groups.ts";
import { isBare, own, type Sym, unique } from "./fuse_values.ts";
import { type Attrs, InferContext, type ValueType } from "../ops/mod.ts";
import { resolveWindow } from "../ops/nn.ts";
import type { KernelPattern } from "../ir/kernel_ir.ts";

/** What a contraction needs of the fusion walk. */
export interface Walk {
  /** An operand read many times by a contraction: bare loads stay inline, the rest is stored. */
  operand(s: Sym, label: string): Sym;
  /** Whether a product by `a` may read `b`'s elementwise expression inline (`inlineOperand`). */
  inline(a: Sym, b: Sym): boolean;
  /** `s` stored (where it is not yet), read back as a load. */
  stored(s: Sym, why: string): Sym;
  /** Whether a conv of `macs` multiply-adds stores its patches first (`FuseOptions.patchesFrom`). */
  storesPatches(macs: number): boolean;
  /** Whether products of few outputs sum a deep K in parts (`FuseOptions.splitSums`). */
  splitsSums(): boolean;
  /** Whether every f16 conv large enough stores its patches (`FuseOptions.halfPatches`). */
  halfPatches(): boolean;
  /**
   * `b`, a batched product's B, stored along its columns where it is a view read across them
   * of as many elements as the options ask (`FuseOptions.keysFrom`); else `b`.
   */
  keysAlong(b: Sym, label: string): Sym;
  /** A new group iterating `space`, `reduced` axes reduced. */
  group(space: Shape, reduced: number[], pattern: KernelPattern): Group;
  /** Reduction `op` of `expr` joining `group`: the value it gives. */
  reduction(
    group: Group,
    op: ReduceOp,
    expr: Expr,
    label: string,
    type: ValueType,
    labels: readonly string[],
  ): Sym;
}

/**
 * MatMul as a contraction over K in the space [...batch, M, N, K]; `widen`: an IntegerMatMul,
 * its i16 operands widened to the i32 sum's type; `inlineB`: B's expression read as it is (a
 * block product's unpacking), else inline only where the walk allows; `inlineA`: A's likewise (a
 * block product's prologue), else stored unless a bare load.
 */
export function matmulSym(
  walk: Walk,
  ins: readonly Sym[],
  label: string,
  type: ValueType,
  { widen, inlineB, inlineA }: { widen: boolean; inlineB: boolean; inlineA: boolean },
): Sym {
  const a = inlineA ? ins[0] : walk.operand(ins[0], label);
  const b = inlineB || walk.inline(a, ins[1])
    ? ins[1]
    : walk.keysAlong(walk.operand(ins[1], label), label);
  const map = matmulMap(a.type.shape, b.type.shape);
  const read = widened(widen, type);
  const factors = [a, b].map((s, i) => read(reindex(s.expr, map.operands[i])));
  const product = multiplied(factors[0], factors[1], type);
  const labels = [...own(a), ...own(b)];
  // Only products by a shared weight split: a batched B (attention's) stays one kernel, which
  // the attention groups recognise.
  const weighted = !widen && isBare(a) && isBare(b) && b.type.shape.length === 2;
  const parts = weighted ? sumParts(walk, map.space, type.dtype) : 1;
  if (parts > 1) return splitSum(walk, map, { product, parts, label, type, labels }).sum;
  const group = walk.group(map.space, map.reduced, "matmul");
  return walk.reduction(group, "sum", product, label, type, labels);
}

/**
 * A block product of few rows by `w` (its weight as the product reads it) whose A its kernel
 * computes as it reads it (`BlockProduct.prologue`): an elementwise expression (`prologueOperand`)
 * or a normalization's rows (`normedOperand`), whose reductions the kernel then takes first, over
 * the row it reads, the normalization's kernel not run.
 */
export function prologueProduct(
  walk: Walk,
  a: Sym,
  w: Sym,
  at: { label: string; type: ValueType; tables: BlockTables },
): Sym {
  const { label, type, tables } = at;
  const map = matmulMap(a.type.shape, w.type.shape);
  const group = walk.group(map.space, map.reduced, "matmul");
  // A's coordinates are the normalization's: its reductions keep their indices, first.
  const toA = map.operands[0];
  for (const r of a.group?.reductions ?? []) {
    group.reductions.push({ ...r, expr: reindex(r.expr, toA) });
  }
  const prologue = reindex(a.expr, toA);
  const product = multiplied(prologue, reindex(w.expr, map.operands[1]), type);
  const labels = [...(a.group ? a.group.labels : own(a)), ...own(w)];
  const sym = walk.reduction(group, "sum", product, label, type, labels);
  group.blockProduct = { ...tables, prologue };
  return sym;
}

/** How an integer product (`widen`) reads a factor: widened to its sum's type; others as it is. */
function widened(widen: boolean, type: ValueType): (e: Expr) => Expr {
  return (e) => widen ? { kind: "alu", op: "Cast", args: [e], dtype: type.dtype } : e;
}

/** The product of two factors at a contraction's point, in `type`'s dtype. */
function multiplied(x: Expr, y: Expr, type: ValueType): Expr {
  return { kind: "alu", op: "Mul", args: [x, y], dtype: type.dtype };
}

/**
 * 2-D Conv as a contraction over [Cg, KH, KW] in the space [N, G, Mg, OH, OW, Cg, KH, KW]. With
 * plain operands it is laid out as a matmul (implicit GEMM): [N, G, OH·OW, Mg, Cg·KH·KW], rows
 * of patches times the filters, so backends run it through their matmul kernels. `widen`: an
 * IntegerConv, its integer operands widened to the i32 sum's type (wasm's integer tiles gather
 * the patches through the float tiles' indirection table; a GPU stores byte patches).
 */
export function convSym(
  walk: Walk,
  ins: readonly Sym[],
  attrs: Attrs,
  label: string,
  type: ValueType,
  { widen = false }: { widen?: boolean } = {},
): Sym {
  const [x, w, bias] = ins.map((s) => walk.operand(s, label));
  const inputs = ins.map((s) => s.type);
  const ctx = new InferContext({ op: "Conv", where: label, inputs, attrs });
  const win = resolveWindow(ctx, x.type.shape.slice(2), w.type.shape.slice(2));
  const plain = x.expr.kind === "load" && w.expr.kind === "load";
  const inPlace = plain && x.expr.kind === "load" && x.expr.steps.length === 0;
  const map = convMap(x.type.shape, w.type.shape, ctx.int("group", 1), win, plain, inPlace);
  const stored = storedPatches(walk, map, x, label);
  const patches = stored?.patches;
  const rows = stored
    ? reindex(stored.patches.expr, [stored.read])
    : reindex(x.expr, map.operands[0]);
  const factors = [rows, reindex(w.expr, map.operands[1])].map(widened(widen, type));
  const product = multiplied(
    ...(map.swapped ? [factors[1], factors[0]] : factors) as [Expr, Expr],
    type,
  );
  const labels = [...own(patches ?? x), ...own(w)];
  const parts = patches || pointwiseSplits(map) ? sumParts(walk, map.space, type.dtype) : 1;
  let acc: Sym;
  // The bias at the sum's coordinates: a split product's adding kernel lays its axes out anew.
  let toSpace: IndexStep[] = [];
  if (parts > 1) {
    // Patches along M are per image (not folded into the tiles' rows): the product then stores
    // its partial sums down its rows, as the conv's outputs lie.
    const laid = stored?.alongM ? map.keptOrder : undefined;
    const at = { product, parts, label, type, labels };
    ({ sum: acc, toSpace } = splitSum(walk, map, at, laid));
  } else {
    const group = walk.group(map.space, map.reduced, "conv");
    group.keptOrder = map.keptOrder;
    acc = walk.reduction(group, "sum", product, label, type, labels);
  }
  if (!bias) return acc;
  const expr: Expr = {
    kind: "alu",
    op: "Add",
    args: [acc.expr, reindex(bias.expr, [...toSpace, ...map.operands[2]])],
    dtype: type.dtype,
  };
  return { ...acc, expr, labels: unique([...acc.labels, ...own(bias)]) };
}

/**
 * Parts to sum the K of a product over `space` ([...kept, K], reduced last) in (see
 * {@linkcode splitSum}): 1 unless the walk splits sums, the product is f32 or f16 and large
 * enough to tile, its rows fill a tile, its outputs are few and its K deep; then doubled while the
 * parts' outputs stay under `SPLIT_OUTPUTS` and each part keeps `SPLIT_DEPTH` of K.
 */
function sumParts(walk: Walk, space: Shape, dtype: string): number {
  const k = space[space.length - 1], outputs = sizeOf(space.slice(0, -1));
  const rows = outputs / space[space.length - 2];
  if (
    !walk.splitsSums() || (dtype !== "f32" && dtype !== "f16") || outputs * k < SPLIT_MACS ||
    rows < SPLIT_ROWS ||
    outputs >= SPLIT_OUTPUTS / 2 || k < 4 * SPLIT_DEPTH
  ) return 1;
  let parts = 1;
  while (
    parts < SPLIT_MOST && outputs * parts < SPLIT_OUTPUTS && k % (2 * parts) === 0 &&
    k / (2 * parts) >= SPLIT_DEPTH
  ) parts *= 2;
  return parts;
}

/**
 * Whether a 1×1 conv (`swapped`: filters × pixels already, a plain product as stored patches are)
 * may sum its K in parts: where its outputs are fewer than `POINTWISE_SPLIT`. On the H200 (device
 * time, batch 8) ResNet-50's stage-5 2048 → 512 (200K outputs, 49 pixels an image: 64 tiles of
 * 64×64) went from 0.170 to 0.095 ms in 8 parts, while 1024 → 256 at 14×14 (401K outputs) lost,
 * 0.056 to 0.060 ms in 2.
 */
function pointwiseSplits(map: Contraction): boolean {
  return map.swapped === true && sizeOf(map.space.slice(0, -1)) < POINTWISE_SPLIT;
}

const POINTWISE_SPLIT = 2 ** 18;

/**
 * Least multiply-adds, rows, K a part and most parts of a product summed in parts. Below 2^27
 * multiply-adds (ResNet-50's convolutions at batch 1) the H200 measured no gain, or a loss.
 */
const SPLIT_MACS = 2 ** 27, SPLIT_ROWS = 32, SPLIT_DEPTH = 256, SPLIT_MOST = 8;
/** Outputs a split product's parts make together (the tiles they give a GPU to fill). */
const SPLIT_OUTPUTS = 2 ** 20;

/**
 * A product over `map`'s space [...kept, K] summed in `parts` (K a multiple of them): a first
 * kernel sums each part of K into partial sums [parts, ...kept], parts leading as a batch axis
 * (so a GPU's tiles fold the batch behind them into rows and fill `parts` times the workgroups),
 * and a second adds the parts up, where the product's epilogue then joins. A product whose
 * outputs are few has few tiles; its K split inside each workgroup leaves most of a large GPU
 * idle still. An f16 product's partial sums are f32, added in f32 and rounded once, as an
 * unsplit f16 product's sum is (the precision policy's f32 accumulation).
 *
 * Both kernels lay the kept axes out in `laid` order (the product's own by default). A conv whose
 * rows are one image's pixels lays them out as its outputs lie (NCHW): the product stores its
 * partial sums down its rows, and the adding kernel's consecutive threads take consecutive pixels,
 * reading and storing runs of them, where in the product's order they stored the outputs a
 * channel plane apart (on the H200, ResNet-50 b8 in f16: 2.890-2.900 -> 2.850-2.863 ms of device
 * time, its six stage-4 3×3 convolutions). Rows folded across images (n·P + p) keep the
 * product's order: down them the partial sums would be stored a plane apart at every image's
 * edge. Returns the sum and `toSpace`, the step from the adding kernel's coordinates to the
 * product's (K at 0).
 */
function splitSum(
  walk: Walk,
  map: Pick<Contraction, "space" | "keptOrder">,
  at: { product: Expr; parts: number; label: string; type: ValueType; labels: readonly string[] },
  laidOut?: readonly number[],
): { sum: Sym; toSpace: IndexStep[] } {
  const { product, parts, label, type, labels } = at;
  const n = map.space.length, kept = map.space.slice(0, -1), depth = map.space[n - 1] / parts;
  const order = laidOut ?? kept.map((_, i) => i);
  const laid = order.map((i) => kept[i]);
  const moved = order.some((a, i) => a !== i);
  // The product's coordinates from the partial sums' [part, ...kept, k]: K at part·depth + k.
  const unit = (m: number, i: number) => [...Array(m).keys()].map((j) => (j === i ? 1 : 0));
  const toProduct: IndexStep = {
    kind: "affine",
    coeff: [
      ...kept.map((_, j) => unit(n + 1, j + 1)),
      unit(n + 1, n).map((v, j) => (j === 0 ? depth : v)),
    ],
    offset: map.space.map(() => 0),
  };
  const partial = walk.group([parts, ...kept, depth], [n], "matmul");
  if (moved) partial.keptOrder = [0, ...order.map((i) => i + 1)];
  const dtype = type.dtype === "f16" ? "f32" : type.dtype;
  const sums = walk.reduction(
    partial,
    "sum",
    reindex(product, [toProduct]),
    label,
    { shape: [parts, ...laid], dtype },
    labels,
  );
  const stored = walk.stored(sums, `partial sums of ${label}, its K in ${parts} parts`);
  // The partial sums [part, ...laid] from the adding kernel's [...laid, part].
  const fromSums: IndexStep = {
    kind: "affine",
    coeff: [unit(n, n - 1), ...laid.map((_, j) => unit(n, j))],
    offset: [0, ...laid.map(() => 0)],
  };
  const adding = walk.group([...laid, parts], [n - 1], "reduce");
  // The sum's value in the product's kept order, from the adding kernel's own.
  const ordered = map.keptOrder?.map((a) => order.indexOf(a));
  if (ordered?.some((a, i) => a !== i)) adding.keptOrder = ordered;
  const read = reindex(stored.expr, [fromSums]);
  const sum = walk.reduction(adding, "sum", read, label, { ...type, dtype }, []);
  const toSpace: IndexStep = {
    kind: "affine",
    coeff: map.space.map((_, j) => j < n - 1 ? unit(n, order.indexOf(j)) : unit(n, -1)),
    offset: map.space.map(() => 0),
  };
  const steps = moved ? [toSpace] : [];
  if (dtype === type.dtype) return { sum, toSpace: steps };
  const cast: Expr = { kind: "alu", op: "Cast", args: [sum.expr], dtype: type.dtype };
  return { sum: { ...sum, type, expr: cast }, toSpace: steps };
}

/**
 * Most bytes of patches a conv stores: a binding must hold them, and WebGPU's default binding
 * limit is 128 MiB. ResNet-50's stem at batch 8 would store 59 MB.
 */
const PATCH_BYTES = 2 ** 26;

/**
 * When stored patches pay, measured on the H200 through Dawn (`bench/gpu_kernels.ts --only conv`,
 * device time, 2026-11-29) on ResNet-50's convolutions at batch 1 and 8. Storing costs a pass
 * writing the patches and the product reading them back, bytes that weigh against its FLOPs as
 * one over its output channels: with 64 (the stem, stage 2) gathering stayed ahead at both
 * batches (stage 2 at batch 8: 0.089 ms gathered, 0.149 stored), with 512 or more storing won
 * at every size (the strided 1×1 into stage 5 at batch 8, 803K outputs: 0.323 -> 0.173 ms;
 * into stage 3, 3.2M outputs: 0.165 -> 0.095). Between, it pays where the outputs are few: the
 * tiles are then small and split K, and each gathered element costs the window's index
 * arithmetic for few multiply-adds (stage 4 at batch 8, 401K outputs: 0.368 -> 0.162 ms; stage 3
 * at batch 1, 100K: 0.054 -> 0.039), while stage 3 at batch 8 (803K outputs, 128 channels) took
 * tiles of 32×64 without split and gathered faster (0.184 against 0.213 ms).
 */
const PATCH_CHANNELS = 128, PATCH_OUTPUTS = 2 ** 19, PATCH_WIDE = 512;

/**
 * `x`'s patches under `map` stored as a value of their own (im2col), where the walk stores them
 * for a conv this large and they pay (`PATCH_CHANNELS`, `PATCH_OUTPUTS`, `PATCH_WIDE`) and fit
 * `PATCH_BYTES`;
 * else `undefined` (the product gathers them). Stored, they are a plain matrix the product's
 * tiles read as a matmul's, its batch folded into its rows.
 */
function storedPatches(
  walk: Walk,
  map: Contraction,
  x: Sym,
  label: string,
): { patches: Sym; read: IndexStep; alongM: boolean } | undefined {
  if (!map.patches) return undefined;
  const [images, groups, pixels, channels] = map.space;
  const outputs = images * groups * pixels * channels;
  // A GPU holds u8 values in 32-bit words.
  const u8 = x.type.dtype === "u8";
  const bytes = sizeOf(map.patches.shape) * (u8 ? 4 : byteSize(x.type.dtype));
  // f16 patches, stored, make a plain product the matrix units take (`FuseOptions.halfPatches`);
  // byte patches one whose tiles read four K values a vec4 (`shaders/wgsl/byte_tiles.ts`), where
  // gathered they cost the window's index arithmetic per byte of a packed word.
  const half = x.type.dtype === "f16" && walk.halfPatches();
  const pays = half || u8 || channels >= PATCH_WIDE ||
    (channels >= PATCH_CHANNELS && outputs < PATCH_OUTPUTS);
  if (!pays || !walk.storesPatches(sizeOf(map.space)) || bytes > PATCH_BYTES) return undefined;
  // The matrix units' f16 patches K-major: stored as rows of K, each thread of the pass read taps
  // of 4 channels a plane apart and the H200 stored ResNet-50 b8's at a tenth of its bandwidth
  // (0.54 ms of 3.7). Pixels in fours, so the product still reads its A four at a time; byte
  // tiles pack four K values a word from K-contiguous patches.
  const p = half && pixels % 4 === 0 ? transposedPatches(map.patches) : map.patches;
  const patches: Sym = {
    type: { shape: p.shape, dtype: x.type.dtype },
    expr: reindex(x.expr, p.steps),
    labels: own(x),
    uses: 1,
  };
  const sym = walk.stored(patches, `patches of ${label}, stored for its product (im2col)`);
  return { patches: sym, read: p.read, alongM: p !== map.patches };
}

/**
 * MaxPool / AveragePool as a reduction over the window in [N, C, ...out, ...kernel], with the
 * divisors an average takes at its edges where they change (padding left out of the count,
 * ONNX's default; a ceil-mode overhang): the mean of the zero-filled window times that map.
 */
export function poolSym(
  walk: Walk,
  op: string,
  s: Sym,
  attrs: Attrs,
  label: string,
  type: ValueType,
): { pooled: Sym; divisors?: HostTensor } {
  const x = walk.operand(s, label);
  const ctx = new InferContext({ op, where: label, inputs: [x.type], attrs });
  const win = resolveWindow(ctx, x.type.shape.slice(2), ctx.ints("kernel_shape"));
  const map = poolMap(x.type.shape, win, op === "MaxPool" ? -Infinity : 0);
  const group = walk.group(map.space, map.reduced, "pool");
  const reduce = op === "MaxPool" ? "max" : "mean", read = reindex(x.expr, map.operands[0]);
  const pooled = walk.reduction(group, reduce, read, label, type, x.labels);
  const inclusive = ctx.int("count_include_pad", 0) === 1;
  const divisors = op === "AveragePool"
    ? poolDivisors(x.type.shape.slice(2), win, inclusive, type.dtype)
    : undefined;
  return { pooled, divisors: divisors || undefined };
}
