/**
 * Reductions (`ReduceSum/Mean/Max/Min`, `ArgMax`, `CumSum`) and the row-wise composites built on
 * them: `Softmax`, `LogSoftmax`, `LayerNormalization` and `GlobalAveragePool`
 * (BatchNormalization and MeanVarianceNormalization: `normalization.ts`). The composites decompose exactly as PyTorch exports them, which is the form
 * fusion later recognizes.
 *
 * @module
 */
import type { DType } from "../ir/dtype.ts";
import { normalizeAxis, type Shape, sizeOf } from "../ir/shape.ts";
import { NUMERIC } from "./elementwise.ts";
import { axisConstant } from "./movement.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** Normalized reduction axes of a Reduce* node (`axes` absent or empty: all axes). */
export function reduceAxes(attrs: Attrs, rank: number, ctx?: InferContext): number[] {
  const axes = (attrs.axes as readonly number[] | undefined) ?? [];
  if (axes.length === 0) return [...Array(rank).keys()];
  return ctx ? ctx.axes(axes, rank) : axes.map((a) => (a < 0 ? a + rank : a));
}

/** The shape left after reducing `axes` of `shape`. */
export function reducedShape(shape: Shape, axes: readonly number[], keepdims: boolean): number[] {
  const out: number[] = [];
  shape.forEach((d, i) => {
    if (!axes.includes(i)) out.push(d);
    else if (keepdims) out.push(1);
  });
  return out;
}

/**
 * Least elements of a reduction's input, most values it reduces to, and least extent of either
 * step, for a split: smaller reductions keep one kernel (a second costs a dispatch, and a tenth
 * of a small DynamicQuantizeLinear's run on wasm).
 */
const LIMITS = { elements: 1 << 16, outputs: 32, part: 16 };

/** How a reduction splits: a view of its input, the first step's axes, the second's. */
export interface Split {
  /** The input's shape for both steps (its one reduced axis cut in two), if it changes. */
  readonly view?: Shape;
  /** Axes of the view the first step reduces (kept as 1). */
  readonly first: readonly number[];
  /** Axes of the view the second step reduces. */
  readonly second: readonly number[];
}

/**
 * The split of a reduction of `shape` over `axes`, if it pays: a large input to few values. Of
 * several reduced axes, the second step takes the one whose extent and the rest's are most even;
 * a single reduced axis is cut at the largest divisor of its extent up to its square root.
 */
export function splitOf(shape: Shape, axes: readonly number[]): Split | undefined {
  const elements = sizeOf(shape), reduced = sizeOf(axes.map((a) => shape[a]));
  if (elements < LIMITS.elements || elements / reduced > LIMITS.outputs) return undefined;
  const long = axes.filter((a) => shape[a] > 1);
  const even = (a: number) => Math.min(shape[a], reduced / shape[a]);
  if (long.length > 1) {
    const axis = long.reduce((best, a) => (even(a) > even(best) ? a : best));
    if (even(axis) < LIMITS.part) return undefined;
    return { first: long.filter((a) => a !== axis), second: axes };
  }
  const [axis] = long, extent = shape[axis];
  let parts = Math.floor(Math.sqrt(extent));
  while (extent % parts !== 0) parts--;
  if (parts < LIMITS.part) return undefined;
  // The axis as [parts, extent / parts]: the first step reduces the inner part.
  const view = [...shape.slice(0, axis), parts, extent / parts, ...shape.slice(axis + 1)];
  const second = [...axes.map((a) => (a > axis ? a + 1 : a)), axis + 1];
  return { view, first: [axis + 1], second: second.sort((a, b) => a - b) };
}

function reduce(name: string, dtypes: readonly DType[]): OpDef {
  return {
    name,
    category: "reduce",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => {
      const dtype = ctx.requireDType(0, dtypes);
      if (ctx.has("axes")) ctx.ints("axes");
      const keep = ctx.int("keepdims", 1) !== 0;
      const shape = ctx.input(0).shape;
      return [{
        shape: reducedShape(shape, reduceAxes(ctx.attrs, shape.length, ctx), keep),
        dtype,
      }];
    },
  };
}

function composite(
  name: string,
  arity: readonly [number, number],
  infer: (ctx: InferContext) => ValueType[],
  decompose: (e: Emitter, x: readonly EmitRef[], attrs: Attrs) => EmitRef,
): OpDef {
  return {
    name,
    category: "composite",
    arity,
    primitive: false,
    infer,
    decompose: (e, x, attrs) => [decompose(e, x, attrs)],
  };
}

const floatRowInfer = (ctx: InferContext): ValueType[] => {
  const dtype = ctx.requireFloat(0);
  ctx.axis(ctx.int("axis", -1), ctx.input(0).shape.length);
  return [{ shape: ctx.input(0).shape, dtype }];
};

/** LayerNormalization's types: x's, and with `stats` its mean's and inverse deviation's. */
function layerNormInfer(ctx: InferContext): ValueType[] {
  const dtype = ctx.requireFloat(0);
  const shape = ctx.input(0).shape;
  const axis = ctx.axis(ctx.int("axis", -1), shape.length);
  ctx.float("epsilon", 1e-5);
  const norm = shape.slice(axis);
  for (let i = 1; i < ctx.inputs.length; i++) {
    const p = ctx.input(i);
    if (p.dtype !== dtype) {
      ctx.fail(`input ${i} has dtype ${p.dtype}`, `Cast it to ${dtype}`, "dtype-mismatch");
    }
    if (
      p.shape.length > norm.length ||
      p.shape.some((d, j) => d !== 1 && d !== norm[norm.length - p.shape.length + j])
    ) {
      ctx.fail(
        `input ${i} does not broadcast to the normalized shape [${norm.join(", ")}]`,
        "pass scale/bias shaped like the normalized axes",
        "shape-mismatch",
      );
    }
  }
  if (ctx.int("stats", 0) !== 1) return [{ shape, dtype }];
  const kept = { shape: shape.map((d, i) => (i < axis ? d : 1)), dtype };
  return [{ shape, dtype }, kept, kept];
}

const rowAxis = (e: Emitter, x: EmitRef, attrs: Attrs): number => {
  const rank = e.typeOf(x).shape.length;
  const axis = (attrs.axis as number | undefined) ?? -1;
  return axis < 0 ? axis + rank : axis;
};

/**
 * ArgMax/ArgMin as two reductions over the same rows, so they fuse like softmax: the extreme
 * value, then the least (or, with `select_last_index`, the greatest) position holding it. A NaN
 * makes the extreme NaN and only NaN positions match, so the first NaN wins, as in the reference.
 * Positions are f32 (exact up to 2^24); longer axes count in i32.
 */
function argReduce(name: "ArgMax" | "ArgMin"): OpDef {
  return {
    name,
    category: "reduce",
    arity: [1, 1],
    primitive: false,
    infer: (ctx) => {
      ctx.requireDType(0, NUMERIC);
      const shape = ctx.input(0).shape;
      const axis = ctx.axis(ctx.int("axis", 0), shape.length);
      ctx.int("select_last_index", 0);
      return [{ shape: reducedShape(shape, [axis], ctx.int("keepdims", 1) !== 0), dtype: "i32" }];
    },
    decompose: (e, [x], attrs) => {
      const { shape, dtype } = e.typeOf(x);
      const rank = shape.length;
      const axis = normalizeAxis((attrs.axis as number | undefined) ?? 0, rank, name);
      // Any non-zero value selects the last, as ONNX Runtime reads the flag.
      const last = (attrs.select_last_index ?? 0) !== 0;
      const n = shape[axis];
      if (splits(shape, dtype, axis, last)) return [inTwoSteps(e, name, x, attrs)];
      const extreme = e.op(name === "ArgMax" ? "ReduceMax" : "ReduceMin", [x], {
        axes: [axis],
        keepdims: 1,
      });
      let hit = e.op("Equal", [x, extreme]);
      if (dtype === "f32" || dtype === "f16") hit = e.op("Or", [hit, e.op("IsNaN", [x])]);
      const at = n <= 2 ** 24 ? "f32" : "i32";
      const iota = axisConstant(e, Int32Array.from({ length: n }, (_, i) => i), {
        dtype: at,
        rank,
        axis,
      });
      const position = e.op("Where", [hit, iota, e.scalar(last ? -1 : n, at)]);
      const found = e.op(last ? "ReduceMax" : "ReduceMin", [position], {
        axes: [axis],
        keepdims: (attrs.keepdims as number | undefined) ?? 1,
      });
      return [at === "i32" ? found : e.op("Cast", [found], { to: "i32" })];
    },
  };
}

/** Longest last axis an arg-reduction of few rows reduces in one step. */
const LONG_ROW = 1 << 14;

/**
 * Whether an arg-reduction over `axis` of `shape` takes two steps: a long last float axis over
 * few rows (a language model's argmax over its vocabulary), first index of ties.
 */
function splits(shape: Shape, dtype: DType, axis: number, last: boolean): boolean {
  const rows = sizeOf(shape) / Math.max(1, shape[axis]);
  const float = dtype === "f32" || dtype === "f16";
  return float && !last && axis === shape.length - 1 && shape[axis] > LONG_ROW && rows <= 64;
}

/**
 * The row width of a long axis of `n` in two steps: the divisor of `n` nearest 1024 between 512
 * and 2048 (vocabularies have one: 151936 = 128 × 1187, 50257 = 29 × 1733, 128256 = 128 × 1002),
 * else 1024 and padding. A padded read bounds each load, which takes the rows' reduction off its
 * vector loop (the wasm maximum of 151,936 logits: 0.26 ms padded, 0.022 unpadded).
 */
function stepWidth(n: number): number {
  for (let d = 0; d <= 1024; d++) {
    for (const w of [1024 - d, 1024 + d]) if (w >= 512 && w <= 2048 && n % w === 0) return w;
  }
  return 1024;
}

/**
 * ArgMax/ArgMin of a long last axis in two steps: the axis as rows of about 1024 (see
 * {@linkcode stepWidth}; padded where needed with the value that never wins a first-of-ties
 * search: −inf for a max, +inf for a min), each row's extreme, the row holding the first extreme,
 * then the position in that row alone (searching every row again took a 2-core decode step 0.5
 * ms). One row of 151,936 logits was one GPU workgroup (1.7–1.9 ms of a decode step on the H200)
 * and one wasm thread; as 128 rows it spreads. NaN wins as in one step: its row's extreme is NaN,
 * the first such row's first NaN.
 */
function inTwoSteps(e: Emitter, name: "ArgMax" | "ArgMin", x: EmitRef, attrs: Attrs): EmitRef {
  const { shape } = e.typeOf(x);
  const rank = shape.length, n = shape[rank - 1], width = stepWidth(n);
  const rows = Math.ceil(n / width), pad = rows * width - n;
  const fill = name === "ArgMax" ? -Infinity : Infinity;
  const padded = pad
    ? e.op("Pad", [x], { pads: [0, pad], axes: [rank - 1], mode: "constant", value: fill })
    : x;
  const grid = e.op("Reshape", [padded], { shape: [...shape.slice(0, -1), rows, width] });
  const inner = { axis: rank, keepdims: 0 };
  const extremes = e.op(name === "ArgMax" ? "ReduceMax" : "ReduceMin", [grid], {
    axes: [rank],
    keepdims: 0,
  });
  const row = e.op(name, [extremes], { axis: rank - 1, keepdims: 1 });
  // Only the winning row is searched for its position (1024 values, not every row again).
  const rowAt = e.op("Expand", [e.op("Unsqueeze", [row], { axes: [rank] })], {
    shape: [...shape.slice(0, -1), 1, width],
  });
  const winner = e.op("GatherElements", [grid, rowAt], { axis: rank - 1 });
  const column = e.op(name, [winner], inner);
  const index = e.op("Add", [e.op("Mul", [row, e.scalar(width, "i32")]), column]);
  return (attrs.keepdims as number | undefined) === 0
    ? e.op("Squeeze", [index], { axes: [rank - 1] })
    : index;
}

/**
 * CumSum as a masked reduction: output position i sums the inputs j with j ≤ i (j < i when
 * exclusive, reversed for `reverse`), the mask compared from two position vectors rather than
 * stored. It costs n² per row of length n, fused into one kernel; rows of cumulative sums in
 * models (position ids, masks) are short.
 */
function cumSumAsReduction(e: Emitter, x: EmitRef, attrs: Attrs): EmitRef {
  const { shape, dtype } = e.typeOf(x);
  const rank = shape.length;
  const axis = normalizeAxis(attrs.axis as number, rank, "CumSum");
  const n = shape[axis];
  // Space [..., i, j, ...]: i the output position (axis), j the summed one (axis + 1).
  const spread = [...shape.slice(0, axis), n, n, ...shape.slice(axis + 1)];
  const xj = e.op("Expand", [e.op("Unsqueeze", [x], { axes: [axis] })], { shape: spread });
  const positions = Int32Array.from({ length: n }, (_, i) => i);
  const i = axisConstant(e, positions, { dtype: "i32", rank: rank + 1, axis });
  const j = axisConstant(e, positions, { dtype: "i32", rank: rank + 1, axis: axis + 1 });
  const [a, b] = attrs.reverse === 1 ? [i, j] : [j, i];
  const keep = attrs.exclusive === 1
    ? e.op("Less", [a, b])
    : e.op("Not", [e.op("Greater", [a, b])]);
  const masked = e.op("Where", [keep, xj, e.scalar(0, dtype)]);
  return e.op("ReduceSum", [masked], { axes: [axis + 1], keepdims: 0 });
}

const reduceOps: OpDef[] = [
  reduce("ReduceSum", NUMERIC),
  reduce("ReduceMean", NUMERIC),
  reduce("ReduceMax", NUMERIC),
  reduce("ReduceMin", NUMERIC),
  argReduce("ArgMax"),
  argReduce("ArgMin"),
  {
    name: "CumSum",
    category: "reduce",
    arity: [1, 1],
    primitive: false,
    infer: (ctx) => {
      const dtype = ctx.requireDType(0, NUMERIC);
      ctx.axis(ctx.int("axis"), ctx.input(0).shape.length);
      ctx.int("exclusive", 0);
      ctx.int("reverse", 0);
      return [{ shape: ctx.input(0).shape, dtype }];
    },
    decompose: (e, [x], attrs) => [cumSumAsReduction(e, x, attrs)],
  },
  composite("Softmax", [1, 1], floatRowInfer, (e, [x], attrs) => {
    const axes = [rowAxis(e, x, attrs)];
    const ex = e.op("Exp", [e.op("Sub", [x, e.op("ReduceMax", [x], { axes, keepdims: 1 })])]);
    return e.op("Div", [ex, e.op("ReduceSum", [ex], { axes, keepdims: 1 })]);
  }),
  composite("LogSoftmax", [1, 1], floatRowInfer, (e, [x], attrs) => {
    const axes = [rowAxis(e, x, attrs)];
    const d = e.op("Sub", [x, e.op("ReduceMax", [x], { axes, keepdims: 1 })]);
    const lse = e.op("Log", [e.op("ReduceSum", [e.op("Exp", [d])], { axes, keepdims: 1 })]);
    return e.op("Sub", [d, lse]);
  }),
  // A one-hot of the first maximum along the axis (ONNX's Hardmax from opset 13: earlier opsets'
  // 2-D view is the importer's reshape).
  composite("Hardmax", [1, 1], floatRowInfer, (e, [x], attrs) => {
    const { shape, dtype } = e.typeOf(x), axis = rowAxis(e, x, attrs);
    const best = e.op("ArgMax", [x], { axis, keepdims: 1 });
    const positions = Int32Array.from({ length: shape[axis] }, (_, i) => i);
    const at = axisConstant(e, positions, { dtype: "i32", rank: shape.length, axis });
    return e.op("Cast", [e.op("Equal", [at, best])], { to: dtype });
  }),
  {
    // With `stats: 1` also the mean and the inverse standard deviation over the normalized axes
    // (kept as axes of 1), ONNX's optional outputs.
    name: "LayerNormalization",
    category: "composite",
    arity: [2, 3],
    primitive: false,
    infer: layerNormInfer,
    decompose: (e, [x, scale, bias], attrs) => {
      const rank = e.typeOf(x).shape.length, from = rowAxis(e, x, attrs);
      const axes = [...Array(rank - from).keys()].map((i) => i + from);
      const mean = e.op("ReduceMean", [x], { axes, keepdims: 1 });
      const d = e.op("Sub", [x, mean]);
      const variance = e.op("ReduceMean", [e.op("Mul", [d, d])], { axes, keepdims: 1 });
      const eps = e.scalar((attrs.epsilon as number | undefined) ?? 1e-5, e.typeOf(x).dtype);
      const root = e.op("Sqrt", [e.op("Add", [variance, eps])]);
      const inv = attrs.stats === 1 ? e.op("Reciprocal", [root]) : undefined;
      const normal = inv ? e.op("Mul", [d, inv]) : e.op("Div", [d, root]);
      const scaled = e.op("Mul", [normal, scale]);
      const y = bias ? e.op("Add", [scaled, bias]) : scaled;
      return inv ? [y, mean, inv] : [y];
    },
  },
  composite("GlobalAveragePool", [1, 1], (ctx) => {
    const dtype = ctx.requireFloat(0);
    const shape = ctx.input(0).shape;
    if (shape.length < 3) {
      ctx.fail(
        "input 0 must be N×C×spatial (rank ≥ 3)",
        "reshape the input to N×C×H×W",
        "shape-mismatch",
      );
    }
    return [{ shape: shape.map((d, i) => (i < 2 ? d : 1)), dtype }];
  }, (e, [x]) => {
    const rank = e.typeOf(x).shape.length;
    return e.op("ReduceMean", [x], {
      axes: [...Array(rank - 2).keys()].map((i) => i + 2),
      keepdims: 1,
    });
  }),
];

defineOps(reduceOps);
