/**
 * The index-map algebra of fusion: how each op that moves or contracts data maps an iteration
 * space's coordinates onto its operands' coordinates, as kernel-IR index steps. Everything here is
 * a pure function of shapes and attributes, tested alone (`index_maps_test.ts`); the fusion walk
 * (`fuse.ts`) decides where values are stored and which kernel they join.
 *
 * @module
 */
import {
  applyStep,
  broadcastStep,
  gathers,
  type IndexStep,
  type Load,
  reindex,
  reshapeStep,
} from "./kernel_ir.ts";
import { affineOffset } from "./access.ts";
import { resolvePads, resolvePerm, resolveSlice } from "../ops/movement.ts";
import type { InferContext } from "../ops/mod.ts";
import type { Window } from "../ops/nn.ts";
import { type DType, fromNumbers } from "./dtype.ts";
import type { HostTensor } from "./host_tensor.ts";
import { sameShape, type Shape, sizeOf } from "./shape.ts";

/** An affine step: `coeff[j]` · coordinates + `offset[j]` for each operand axis `j`. */
function affine(
  coeff: number[][],
  offset: number[],
  bounds?: { bounds: Shape; fill: number },
): IndexStep {
  return { kind: "affine", coeff, offset, ...bounds };
}

/** The row of an affine map from `space` with the given coefficients (others 0). */
const rowOf = (space: Shape) => (coef: Record<number, number>) => space.map((_, i) => coef[i] ?? 0);

/**
 * Steps from the output coordinates of movement op `op` (Transpose, Slice, Expand, Pad in
 * constant mode, or a reshape-like op: Reshape, Squeeze, Unsqueeze, Flatten, Identity) to its
 * input's coordinates. `ctx` resolves the op's attributes.
 */
export function movementSteps(ctx: InferContext, from: Shape, to: Shape): IndexStep[] {
  const diagonal = (scale: (j: number) => number) =>
    from.map((_, j) => to.map((_, d) => (d === j ? scale(j) : 0)));
  switch (ctx.op) {
    case "Transpose": {
      const perm = resolvePerm(ctx, from.length);
      const coeff = from.map((_, j) => to.map((_, d) => (perm[d] === j ? 1 : 0)));
      return [affine(coeff, from.map(() => 0))];
    }
    case "Slice": {
      const axes = resolveSlice(ctx, from);
      return [affine(diagonal((j) => axes[j].step), axes.map((a) => a.start))];
    }
    case "Expand":
      return broadcastStep(to, from);
    case "Pad": {
      const { before } = resolvePads(ctx, from.length);
      return [
        affine(diagonal(() => 1), before.map((b) => -b), {
          bounds: from,
          fill: ctx.float("value", 0),
        }),
      ];
    }
    default:
      return reshapeStep(to, from);
  }
}

/**
 * The step of a gather from `from` along `axis` into `to`: an affine step for a constant index
 * `constant` (negative counts from the end; out of range reads 0), else a data-dependent step
 * reading `index` — Gather reads its indices (of shape `indexShape`) at the output axes they
 * span (`drop` = their rank), GatherElements at every axis (`drop` = 1).
 */
export function gatherStep(options: {
  readonly from: Shape;
  readonly to: Shape;
  readonly axis: number;
  readonly elements: boolean;
  readonly indexShape: Shape;
  readonly index: Load;
  readonly constant?: number;
}): IndexStep {
  const { from, to, axis, elements, indexShape } = options;
  const dim = from[axis];
  const drop = elements ? 1 : indexShape.length;
  const outer = (j: number) => (j < axis ? j : j - 1 + drop);
  if (options.constant !== undefined) {
    const c = options.constant < 0 ? options.constant + dim : options.constant;
    return affine(
      from.map((_, j) => to.map((_, d) => (j !== axis && d === outer(j) ? 1 : 0))),
      from.map((_, j) => (j === axis ? c : 0)),
      { bounds: from, fill: 0 },
    );
  }
  const select: IndexStep[] = elements ? [] : [
    affine(
      indexShape.map((_, j) => to.map((_, d) => (d === axis + j ? 1 : 0))),
      indexShape.map(() => 0),
    ),
  ];
  return { kind: "gather", axis, drop, dim, index: reindex(options.index, select) as Load };
}

/** The iteration space of a contraction and each operand's steps into it. */
export interface Contraction {
  /** The space iterated: kept axes, then reduced ones. */
  readonly space: Shape;
  /** Reduced axes of `space`. */
  readonly reduced: number[];
  /** Order of the kept axes in the output, when not the space's own. */
  readonly keptOrder?: number[];
  /** Per operand: steps from the space to its coordinates. */
  readonly operands: readonly IndexStep[][];
  /** Whether the product's first factor is the second operand (a pointwise conv's filters). */
  readonly swapped?: boolean;
  /** A conv's rows of patches as a value of their own (see {@linkcode Patches}). */
  readonly patches?: Patches;
}

/**
 * A conv's patches (im2col) as a value of shape [N, G, OH·OW, Cg·KH·KW]: `steps` from its
 * coordinates to x's, and `read`, the product's step from its space to them. A backend that
 * stores them reads its operand as a plain matrix.
 */
export interface Patches {
  /** The patches' shape. */
  readonly shape: Shape;
  /** Steps from the patches' coordinates to the conv input's. */
  readonly steps: IndexStep[];
  /** The step from the conv's space [N, G, OH·OW, Mg, Cg·KH·KW] to the patches'. */
  readonly read: IndexStep;
}

/** Batch dimensions of two broadcast operands. */
export function broadcastBatch(a: Shape, b: Shape): number[] {
  const rank = Math.max(a.length, b.length);
  return [...Array(rank).keys()].map((i) =>
    Math.max(a[i - rank + a.length] ?? 1, b[i - rank + b.length] ?? 1)
  );
}

/** MatMul (NumPy semantics, 1-D operands promoted) as a contraction over K in [...batch, M, N, K]. */
export function matmulMap(aShape: Shape, bShape: Shape): Contraction {
  const as = aShape.length === 1 ? [1, aShape[0]] : aShape;
  const bs = bShape.length === 1 ? [bShape[0], 1] : bShape;
  const batch = broadcastBatch(as.slice(0, -2), bs.slice(0, -2));
  const m = as[as.length - 2], k = as[as.length - 1], n = bs[bs.length - 1];
  const space = [...batch, m, n, k];
  const nb = batch.length;
  const pick = (own: Shape, dims: (number | undefined)[]): IndexStep =>
    affine(
      own.map((d, j) => space.map((_, i) => (dims[j] === i && d !== 1 ? 1 : 0))),
      own.map(() => 0),
    );
  const batchDims = (own: Shape) => own.slice(0, -2).map((_, j) => j + nb - (own.length - 2));
  return {
    space,
    reduced: [nb + 2],
    operands: [
      [pick(as, [...batchDims(as), nb, nb + 2]), ...reshapeStep(as, aShape)],
      [pick(bs, [...batchDims(bs), nb + 2, nb + 1]), ...reshapeStep(bs, bShape)],
    ],
  };
}

/**
 * Largest window (input channels per group × kernel points) a depthwise conv keeps as a window:
 * 11×11 (ConvNeXt's are 7×7). As a GEMM (one column a group) its 96×32×32 conv took 116 ms on
 * one wasm thread, as a window 2.9 ms. Backends run windows this large unrolled.
 */
export const DEPTHWISE_WINDOW = 121;

/**
 * 2-D Conv of `x` [N, C, H, W] with `w` [M, C/group, KH, KW] as a contraction over [Cg, KH, KW]
 * in [N, G, Mg, OH, OW, Cg, KH, KW]; operands are x, w and the bias. With `plain` operands (loads)
 * other than a small depthwise window it is laid out as a matmul (implicit GEMM):
 * [N, G, OH·OW, Mg, Cg·KH·KW], rows of patches times the filters, reached from the 8-D
 * coordinates through a permutation and a reshape. `inPlace`: x is read as it lies in memory
 * (no view before the conv), which a 1×1 conv's filters × pixels layout needs (see below).
 */
export function convMap(
  xShape: Shape,
  wShape: Shape,
  group: number,
  win: Window,
  plain: boolean,
  inPlace = plain,
): Contraction {
  const [nImg, c, h, wd] = xShape;
  const [m, cg, kh, kw] = wShape;
  const mg = m / group;
  // Plain operands take the GEMM layout, so backends run the conv through their matmul kernels,
  // except a depthwise conv's small window: a matmul with one column per group (7 of a tile's 8
  // idle) over patches packed point by point. As a padded window it runs like a pool.
  const gemm = plain && !(mg === 1 && cg * kh * kw <= DEPTHWISE_WINDOW);
  const space = [nImg, group, mg, win.out[0], win.out[1], cg, kh, kw];
  const row = rowOf(space);
  // A window that stays inside the input reads it unbounded: nothing to fill, so that the fill
  // of a Pad before the conv is its reads' only one (integer products over bytes pad by the
  // zero point: two fills would take them off the indirection table).
  const last = (i: number) =>
    (win.out[i] - 1) * win.strides[i] + ([kh, kw][i] - 1) * win.dilations[i];
  const inside = win.padsBegin.every((p) => p === 0) && last(0) < h && last(1) < wd;
  const xStep = affine(
    [
      row({ 0: 1 }),
      row({ 1: cg, 5: 1 }),
      row({ 3: win.strides[0], 6: win.dilations[0] }),
      row({ 4: win.strides[1], 7: win.dilations[1] }),
    ],
    [0, 0, -win.padsBegin[0], -win.padsBegin[1]],
    inside ? undefined : { bounds: [nImg, c, h, wd], fill: 0 },
  );
  const wStep = affine(
    [row({ 1: mg, 2: 1 }), row({ 5: 1 }), row({ 6: 1 }), row({ 7: 1 })],
    [0, 0, 0, 0],
  );
  const bStep = affine([row({ 1: mg, 2: 1 })], [0]);
  if (!gemm) {
    return { space, reduced: [5, 6, 7], operands: [[xStep], [wStep], [bStep]] };
  }
  const [pixels, depth] = [win.out[0] * win.out[1], cg * kh * kw];
  // A 1×1 conv of stride 1 without padding is filters × pixels, per image: its output rows
  // (channels) are contiguous along the columns (pixels) as NCHW lays them out, and its pixels
  // are B's columns, contiguous in x. As rows of pixels, each output channel was a plane apart,
  // every epilogue store a scalar one (MobileNet's 16 -> 96 expansions: 21 GFLOP/s). Fewer
  // pixels than a tile's 8 columns keep rows of pixels: a squeeze-and-excitation's 1×1 image
  // would fill one column of 8. Pixels read through a view (a strided Slice before the conv)
  // are not columns in place: wasm packed them element by element, 30× the patches' time (a
  // 256 -> 512 conv of a 56×56 input sliced by 2: 150-172 ms against 4.5-6.3).
  const pointwise = inPlace && kh === 1 && kw === 1 && win.out[0] === h && win.out[1] === wd &&
    win.strides.every((s) => s === 1) && pixels >= 8;
  if (pointwise) {
    const view: IndexStep[] = [{
      kind: "reshape",
      from: [nImg, group, mg, pixels, depth],
      to: space,
    }];
    return {
      space: [nImg, group, mg, pixels, depth],
      reduced: [4],
      operands: [[...view, xStep], [...view, wStep], [...view, bStep]],
      swapped: true,
    };
  }
  const unfold: IndexStep = { kind: "reshape", from: [nImg, group, mg, pixels, depth], to: space };
  const view: IndexStep[] = [picked(5, [0, 1, 3, 2, 4]), unfold];
  return {
    space: [nImg, group, pixels, mg, depth],
    reduced: [4],
    keptOrder: [0, 1, 3, 2],
    operands: [[...view, xStep], [...view, wStep], [...view, bStep]],
    patches: {
      shape: [nImg, group, pixels, depth],
      steps: [picked(4, [0, 1, -1, 2, 3]), unfold, xStep],
      read: picked(5, [0, 1, 2, 4]),
    },
  };
}

/** Coordinates as rows of `ins` axes: `picks[j]` the axis the j-th takes (-1: none, 0). */
function picked(ins: number, picks: number[]): IndexStep {
  return affine(
    picks.map((p) => [...Array(ins).keys()].map((i) => (i === p ? 1 : 0))),
    picks.map(() => 0),
  );
}

/**
 * A conv's patches stored K-major, [N, G, Cg·KH·KW, OH·OW]: consecutive pixels of one tap and
 * channel side by side, as the conv's input lays them out, so the pass that stores them reads
 * and writes runs of consecutive elements, and the product reads its A along M.
 */
export function transposedPatches(p: Patches): Patches {
  const [n, g, pixels, depth] = p.shape;
  return {
    shape: [n, g, depth, pixels],
    steps: [picked(4, [0, 1, 3, 2]), ...p.steps],
    read: picked(5, [0, 1, 4, 2]),
  };
}

/**
 * An average pool's correction where its divisor changes along the edges: per output position
 * (a tensor of `dtype`, shape [1, 1, ...out]), the window's size over the elements it averages,
 * those inside the input (or inside the declared padding too, `inclusive`: ONNX's
 * count_include_pad). The pool reads zeros outside and divides by the window's size; times this
 * map it divides by the count. `undefined` where every window counts whole (no padding left
 * out, no ceil-mode overhang).
 */
export function poolDivisors(
  spatial: Shape,
  win: Window,
  inclusive: boolean,
  dtype: DType,
): HostTensor | undefined {
  const counts = spatial.map((d, axis) => {
    const lo = inclusive ? -win.padsBegin[axis] : 0;
    const hi = inclusive ? d + win.padsEnd[axis] : d;
    return Array.from({ length: win.out[axis] }, (_, o) => {
      let n = 0;
      for (let t = 0; t < win.kernel[axis]; t++) {
        const at = o * win.strides[axis] - win.padsBegin[axis] + t * win.dilations[axis];
        if (at >= lo && at < hi) n++;
      }
      return n;
    });
  });
  if (counts.every((c, axis) => c.every((n) => n === win.kernel[axis]))) return undefined;
  const area = win.kernel.reduce((p, q) => p * q, 1);
  const strides = win.out.map((_, i) => sizeOf(win.out.slice(i + 1)));
  const map = Array.from(
    { length: sizeOf(win.out) },
    (_, flat) =>
      area / counts.reduce((p, c, axis) => p * c[Math.floor(flat / strides[axis]) % c.length], 1),
  );
  return { data: fromNumbers(dtype, map), shape: [1, 1, ...win.out], dtype };
}

/**
 * Pooling of `shape` [N, C, ...spatial] as a reduction over the window in
 * [N, C, ...out, ...kernel]; padding reads `fill`.
 */
export function poolMap(shape: Shape, win: Window, fill: number): Contraction {
  const spatial = shape.slice(2);
  const r = spatial.length;
  const space = [shape[0], shape[1], ...win.out, ...win.kernel];
  const row = rowOf(space);
  const step = affine(
    [
      row({ 0: 1 }),
      row({ 1: 1 }),
      ...spatial.map((_, i) => row({ [2 + i]: win.strides[i], [2 + r + i]: win.dilations[i] })),
    ],
    [0, 0, ...win.padsBegin.map((p) => -p)],
    { bounds: shape, fill },
  );
  return { space, reduced: spatial.map((_, i) => 2 + r + i), operands: [[step]] };
}

/**
 * Steps from the coordinates of a space (`reduced` axes, kept axes in `keptOrder` when given) to
 * a value of `shape` that iterates with it: the space itself, or its kept axes reshaped.
 * `undefined` when the value does not iterate like the space.
 */
export function relation(
  space: Shape,
  reduced: readonly number[],
  shape: Shape,
  keptOrder?: readonly number[],
): IndexStep[] | undefined {
  if (sameShape(shape, space)) return [];
  const keptAxes = keptOrder ?? space.flatMap((_, i) => (reduced.includes(i) ? [] : [i]));
  const kept = keptAxes.map((i) => space[i]);
  if (reduced.length === 0 || sizeOf(shape) !== sizeOf(kept)) return undefined;
  const drop = affine(
    keptAxes.map((axis) => space.map((_, i) => (i === axis ? 1 : 0))),
    keptAxes.map(() => 0),
  );
  return [drop, ...reshapeStep(kept, shape)];
}

/**
 * The relations (see {@linkcode relation}) a value of `shape` may have with a space: its kept axes
 * in `keptOrder`, in space order, then in {@linkcode keptPermutations}' orders.
 */
export function keptRelations(
  space: Shape,
  reduced: readonly number[],
  shape: Shape,
  keptOrder?: readonly number[],
): IndexStep[][] {
  const orders = [
    ...(keptOrder ? [keptOrder] : []),
    undefined,
    ...keptPermutations(space, reduced),
  ];
  return orders.flatMap((order) => {
    const toOwn = relation(space, reduced, shape, order);
    return toOwn ? [toOwn] : [];
  });
}

/**
 * Other orders a space's kept axes may be laid out in, for a value that reads them transposed
 * (attention's context as [B, T, H, D] from its [B, H, T, D] product): every order of the kept
 * axes longer than one with the last of them still last, so that the group's stores stay
 * contiguous along its fastest axis. Axes of one element keep their places; past five axes to
 * permute, none (the orders grow factorially and no exporter's transposes need them).
 */
export function keptPermutations(space: Shape, reduced: readonly number[]): number[][] {
  const kept = space.flatMap((_, i) => (reduced.includes(i) ? [] : [i]));
  const long = kept.filter((i) => space[i] > 1);
  const free = long.slice(0, -1);
  if (reduced.length === 0 || free.length < 2 || free.length > 5) return [];
  const orders: number[][] = [];
  const permute = (done: number[], left: number[]) => {
    if (left.length === 0) {
      if (done.some((a, i) => a !== free[i])) {
        const next = [...done, long.at(-1)!];
        orders.push(kept.map((i) => (space[i] > 1 ? next.shift()! : i)));
      }
      return;
    }
    left.forEach((a, i) => permute([...done, a], left.filter((_, j) => j !== i)));
  };
  permute([], free);
  return orders;
}

/**
 * Whether two step chains from the coordinates of `space` into a buffer of `shape` agree. Where
 * both make the buffer's offset affine in the coordinates (`affineOffset`), exactly: two affine
 * functions agree on a box where their constants and the weights of its axes longer than one do.
 * Otherwise by evaluating both on every point of small spaces and on a fixed sample of large
 * ones (the chains are affine/reshape maps, so disagreement shows on generic points).
 * Data-dependent chains cannot be probed without data: only identical ones agree.
 */
export function sameMap(
  space: Shape,
  a: readonly IndexStep[],
  b: readonly IndexStep[],
  shape: Shape,
): boolean {
  // Identical chains agree without probing: the common case, which probing made 70% of fusion's
  // time (unet: 27 of 39 ms).
  const identical = JSON.stringify(a) === JSON.stringify(b);
  if (identical || gathers(a) || gathers(b)) return identical;
  const x = affineOffset(a, space, shape), y = affineOffset(b, space, shape);
  if (x && y) {
    return x.base === y.base && space.every((d, i) => d <= 1 || x.weights[i] === y.weights[i]);
  }
  const n = sizeOf(space);
  const probes = n <= 4096
    ? [...Array(n).keys()]
    : [...Array(512).keys()].map((i) =>
      Math.floor(((i * 2654435761) % 4294967296) / 4294967296 * n)
    );
  const run = (steps: readonly IndexStep[], coords: number[]) => {
    let c: number[] | undefined = coords;
    for (const s of steps) if (c) c = applyStep(s, c);
    return c;
  };
  for (const lin of probes) {
    const coords: number[] = new Array(space.length);
    let rest = lin;
    for (let i = space.length - 1; i >= 0; i--) {
      coords[i] = rest % space[i];
      rest = Math.floor(rest / space[i]);
    }
    const x = run(a, coords), y = run(b, coords);
    const differ = x === undefined || y === undefined
      ? x !== y
      : x.length !== y.length || x.some((v, i) => v !== y[i]);
    if (differ) return false;
  }
  return true;
}
