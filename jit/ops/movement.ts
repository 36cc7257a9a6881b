/**
 * Movement and indexing ops: `Reshape`, `Transpose`, `Concat`, `Slice`, `Split`, `Squeeze`,
 * `Unsqueeze`, `Identity`, `Expand`, `Flatten`, `Pad`, `Gather`, `GatherElements`. Their static
 * configuration (target shapes, permutations, slice bounds, pads) is held in attributes: kiln
 * shapes are static, and the ONNX importer folds ONNX's constant shape inputs into attributes.
 * The parameter resolvers here are shared with the kernels so bounds are clamped in one place.
 *
 * @module
 */

import { formatShape, normalizeAxis, type Shape, sizeOf } from "../ir/shape.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
} from "./registry.ts";

/** Resolves `0` (copy) and `-1` (infer) in a Reshape target. */
export function resolveReshape(ctx: InferContext, from: Shape): number[] {
  const target = ctx.ints("shape");
  const allowZero = ctx.int("allowzero", 0) !== 0;
  const out = target.map((d, i) => (d === 0 && !allowZero ? from[i] : d));
  if (out.some((d) => d === undefined || d < -1)) {
    ctx.fail(
      `target shape [${target.join(", ")}] is invalid for ${formatShape(from)}`,
      "use sizes ≥ 0, one -1 at most, 0 only where the input has that axis",
      "shape-mismatch",
    );
  }
  const infer = out.indexOf(-1);
  if (infer !== out.lastIndexOf(-1)) {
    ctx.fail("target shape has more than one -1", "infer at most one dimension", "shape-mismatch");
  }
  const known = out.reduce((p, d) => (d === -1 ? p : p * d), 1);
  if (infer >= 0) {
    if (known === 0 || sizeOf(from) % known !== 0) {
      ctx.fail(
        `cannot infer -1 in [${target.join(", ")}] from ${sizeOf(from)} elements`,
        "make the known sizes divide the element count",
        "shape-mismatch",
      );
    }
    out[infer] = sizeOf(from) / known;
  }
  if (sizeOf(out) !== sizeOf(from)) {
    ctx.fail(
      `reshape to [${out.join(", ")}] changes the element count ${sizeOf(from)}`,
      `use a target shape with ${sizeOf(from)} elements`,
      "shape-mismatch",
    );
  }
  return out;
}

/** Per-axis slice: first index, step, and element count. */
export interface SliceAxis {
  /** First index taken. */
  start: number;
  /** Step between taken indices (non-zero; negative walks backwards). */
  step: number;
  /** Number of indices taken. */
  count: number;
}

/** Resolves ONNX Slice parameters (clamping as ONNX does) for every axis of `shape`. */
export function resolveSlice(ctx: InferContext, shape: Shape): SliceAxis[] {
  const starts = ctx.ints("starts");
  const ends = ctx.ints("ends");
  const axes = ctx.ints("axes", starts.map((_, i) => i));
  const steps = ctx.ints("steps", starts.map(() => 1));
  if (
    ends.length !== starts.length || axes.length !== starts.length || steps.length !== starts.length
  ) {
    ctx.fail(
      "starts, ends, axes and steps have different lengths",
      "give one entry per sliced axis in each",
      "bad-attribute",
    );
  }
  const out: SliceAxis[] = shape.map((d) => ({ start: 0, step: 1, count: d }));
  ctx.axes(axes, shape.length).forEach((axis, i) => {
    const d = shape[axis];
    const step = steps[i];
    if (step === 0) ctx.fail(`step for axis ${axis} is 0`, "use a non-zero step", "bad-attribute");
    let s = starts[i] < 0 ? starts[i] + d : starts[i];
    let e = ends[i] < 0 ? ends[i] + d : ends[i];
    if (step > 0) {
      s = Math.min(Math.max(s, 0), d);
      e = Math.min(Math.max(e, 0), d);
    } else {
      s = Math.min(Math.max(s, -1), d - 1);
      e = Math.min(Math.max(e, -1), d - 1);
    }
    const count = Math.max(0, Math.ceil((e - s) / step));
    out[axis] = { start: s, step, count };
  });
  return out;
}

/** Resolves Pad's `pads` into per-axis [before, after] amounts (negative crops). */
export function resolvePads(
  ctx: InferContext,
  rank: number,
): { before: number[]; after: number[] } {
  const pads = ctx.ints("pads");
  const axes = ctx.axes(ctx.ints("axes", [...Array(rank).keys()]), rank);
  if (pads.length !== 2 * axes.length) {
    ctx.fail(
      `pads has ${pads.length} entries for ${axes.length} axes`,
      "give a begin and an end pad per axis: [b0, b1, …, e0, e1, …]",
      "bad-attribute",
    );
  }
  const before = new Array<number>(rank).fill(0);
  const after = new Array<number>(rank).fill(0);
  axes.forEach((a, i) => {
    before[a] = pads[i];
    after[a] = pads[i + axes.length];
  });
  return { before, after };
}

/** Split sizes of an already validated Split node (see {@linkcode resolveSplit}). */
function splitSizes(attrs: Attrs, dim: number): number[] {
  if (attrs.split !== undefined) return [...attrs.split as readonly number[]];
  const n = attrs.num_outputs as number, chunk = Math.ceil(dim / n);
  return [...Array(n).keys()].map((i) => Math.max(0, Math.min(chunk, dim - i * chunk)));
}

/**
 * A per-axis constant: `values` laid along `axis` of a rank-`rank` tensor (every other axis 1),
 * so it broadcasts against any tensor of that rank. Decompositions use it for masks and iotas.
 */
export function axisConstant(
  e: Emitter,
  values: ArrayLike<number>,
  options: { dtype: "bool" | "f32" | "i32"; rank: number; axis: number },
): EmitRef {
  const shape = [...Array(options.rank).keys()].map((
    i,
  ) => (i === options.axis ? values.length : 1));
  const data = options.dtype === "bool"
    ? Uint8Array.from(values)
    : options.dtype === "i32"
    ? Int32Array.from(values)
    : Float32Array.from(values);
  return e.op("Constant", [], { value: { data, shape, dtype: options.dtype } });
}

/** Most inputs one Concat selects among; more are concatenated as a tree. */
const CONCAT_FANOUT = 16;
/** Most inputs of a Concat whose parts fusion may compute in place (see `concatAsSelect`). */
const MASKED_PARTS = 4;

/**
 * Concat as index arithmetic, so it fuses on every backend: each input is padded to the output's
 * extent along `axis` (a bounded load) and a per-axis mask selects, for every output index, the
 * input that covers it. Empty inputs drop out.
 */
function concatAsSelect(e: Emitter, xs: readonly EmitRef[], axisAttr: number): EmitRef {
  const rank = e.typeOf(xs[0]).shape.length;
  const axis = normalizeAxis(axisAttr, rank, "Concat");
  const parts = xs.filter((x) => e.typeOf(x).shape[axis] > 0);
  if (parts.length === 0) return e.op("Identity", [xs[0]]);
  if (parts.length > CONCAT_FANOUT) {
    // A tree of concats: one level of n inputs costs n masks of the whole extent (and n selects
    // an element), quadratic in n; a tree of fanout 16 keeps both near linear.
    const size = Math.ceil(parts.length / CONCAT_FANOUT);
    const groups = [...Array(Math.ceil(parts.length / size)).keys()].map((g) =>
      concatAsSelect(e, parts.slice(g * size, (g + 1) * size), axis)
    );
    return concatAsSelect(e, groups, axis);
  }
  const sizes = parts.map((x) => e.typeOf(x).shape[axis]);
  const total = sizes.reduce((a, b) => a + b, 0);
  const ends: number[] = [];
  sizes.reduce((at, n) => (ends.push(at + n), at + n), 0);
  const padded = parts.map((x, k) => {
    const before = ends[k] - sizes[k], after = total - ends[k];
    if (before === 0 && after === 0) return x;
    // `masked`: the select below never reads the padding, so fusion may pad an expression
    // (its value there is whatever the expression gives, not the fill). Every point evaluates
    // every part then: only for a few parts (rotary's two halves), not an RNN's steps.
    const masked = parts.length <= MASKED_PARTS ? { masked: 1 } : {};
    return e.op("Pad", [x], { pads: [before, after], axes: [axis], ...masked });
  });
  let out = padded[padded.length - 1];
  for (let k = padded.length - 2; k >= 0; k--) {
    const mask = [...Array(total).keys()].map((i) => (i < ends[k] ? 1 : 0));
    out = e.op("Where", [axisConstant(e, mask, { dtype: "bool", rank, axis }), padded[k], out]);
  }
  return out;
}

/**
 * Edge, reflect and wrap padding as slices and a concat per padded axis (the border is index
 * arithmetic: repeated, mirrored or the far side's slices), so every pad mode fuses. Negative
 * pads crop first.
 */
export function padByConcat(e: Emitter, [x]: readonly EmitRef[], attrs: Attrs): EmitRef[] {
  const shape = e.typeOf(x).shape;
  const rank = shape.length;
  const pads = attrs.pads as readonly number[];
  const axes = ((attrs.axes as readonly number[] | undefined) ?? [...Array(rank).keys()])
    .map((a) => normalizeAxis(a, rank, "Pad"));
  const reflect = attrs.mode === "reflect";
  let y = x;
  axes.forEach((axis, i) => {
    const before = pads[i], after = pads[i + axes.length];
    const d = e.typeOf(y).shape[axis];
    const cut = (start: number, end: number, step = 1) =>
      e.op("Slice", [y], { starts: [start], ends: [end], axes: [axis], steps: [step] });
    if (before < 0 || after < 0) {
      y = cut(Math.max(0, -before), d - Math.max(0, -after));
    }
    const n = e.typeOf(y).shape[axis];
    const parts: EmitRef[] = [];
    const edge = (at: number, count: number) => {
      const s = [...e.typeOf(y).shape];
      s[axis] = count;
      return e.op("Expand", [cut(at, at + 1)], { shape: s });
    };
    // A reversed slice ending before index 0 needs an end of -(n + 1): -1 would mean n - 1.
    const backTo = (end: number) => (end < 0 ? -(n + 1) : end);
    const wrap = attrs.mode === "wrap";
    if (before > 0) {
      parts.push(wrap ? cut(n - before, n) : reflect ? cut(before, 0, -1) : edge(0, before));
    }
    parts.push(y);
    if (after > 0) {
      parts.push(
        wrap ? cut(0, after) : reflect ? cut(n - 2, backTo(n - 2 - after), -1) : edge(n - 1, after),
      );
    }
    if (parts.length > 1) y = e.op("Concat", parts, { axis });
  });
  return [y];
}

/** Split sizes along the split axis. */
export function resolveSplit(ctx: InferContext, dim: number): number[] {
  if (ctx.has("split")) {
    const split = ctx.ints("split");
    if (split.reduce((a, b) => a + b, 0) !== dim || split.some((s) => s < 0)) {
      ctx.fail(
        `split sizes [${split.join(", ")}] do not add up to ${dim}`,
        `give non-negative sizes that add up to ${dim}`,
        "shape-mismatch",
      );
    }
    return [...split];
  }
  const n = ctx.int("num_outputs");
  if (n < 1) ctx.fail(`num_outputs is ${n}`, "split into at least one part", "bad-attribute");
  const chunk = Math.ceil(dim / n);
  return [...Array(n).keys()].map((i) => Math.max(0, Math.min(chunk, dim - i * chunk)));
}

/** Normalizes and validates a Transpose permutation. */
export function resolvePerm(ctx: InferContext, rank: number): number[] {
  const perm = ctx.has("perm") ? ctx.ints("perm") : [...Array(rank).keys()].reverse();
  const sorted = [...perm].sort((a, b) => a - b);
  if (perm.length !== rank || sorted.some((p, i) => p !== i)) {
    ctx.fail(
      `perm [${perm.join(", ")}] is not a permutation of ${rank} axes`,
      `list each of 0..${rank - 1} once`,
      "bad-axis",
    );
  }
  return [...perm];
}

const movementOps: OpDef[] = [
  {
    name: "Identity",
    category: "movement",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => [ctx.input(0)],
  },
  {
    name: "Reshape",
    category: "movement",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => [{ shape: resolveReshape(ctx, ctx.input(0).shape), dtype: ctx.input(0).dtype }],
  },
  {
    name: "Flatten",
    category: "movement",
    arity: [1, 1],
    primitive: false,
    infer: (ctx) => {
      const s = ctx.input(0).shape;
      const axis = ctx.int("axis", 1);
      const a = axis < 0 ? axis + s.length : axis;
      if (a < 0 || a > s.length) {
        ctx.fail(
          `axis ${axis} is out of range for rank ${s.length}`,
          `use an axis in [${-s.length}, ${s.length}]`,
          "bad-axis",
        );
      }
      return [{ shape: [sizeOf(s.slice(0, a)), sizeOf(s.slice(a))], dtype: ctx.input(0).dtype }];
    },
    decompose: (e, [x], attrs) => {
      const s = e.typeOf(x).shape;
      const axis = (attrs.axis as number | undefined) ?? 1;
      const a = axis < 0 ? axis + s.length : axis;
      return [e.op("Reshape", [x], { shape: [sizeOf(s.slice(0, a)), sizeOf(s.slice(a))] })];
    },
  },
  {
    name: "Squeeze",
    category: "movement",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => {
      const s = ctx.input(0).shape;
      const axes = ctx.has("axes")
        ? ctx.axes(ctx.ints("axes"), s.length)
        : s.flatMap((d, i) => (d === 1 ? [i] : []));
      for (const a of axes) {
        if (s[a] !== 1) {
          ctx.fail(
            `axis ${a} has size ${s[a]}, not 1`,
            "squeeze only axes of size 1",
            "shape-mismatch",
          );
        }
      }
      return [{ shape: s.filter((_, i) => !axes.includes(i)), dtype: ctx.input(0).dtype }];
    },
  },
  {
    name: "Unsqueeze",
    category: "movement",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => {
      const s = ctx.input(0).shape;
      const rank = s.length + ctx.ints("axes").length;
      const axes = ctx.axes(ctx.ints("axes"), rank);
      const out: number[] = [];
      let j = 0;
      for (let i = 0; i < rank; i++) out.push(axes.includes(i) ? 1 : s[j++]);
      return [{ shape: out, dtype: ctx.input(0).dtype }];
    },
  },
  {
    name: "Transpose",
    category: "movement",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => {
      const s = ctx.input(0).shape;
      return [{ shape: resolvePerm(ctx, s.length).map((p) => s[p]), dtype: ctx.input(0).dtype }];
    },
  },
  {
    name: "Expand",
    category: "movement",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => {
      const s = ctx.input(0).shape;
      const target = ctx.shape("shape");
      const rank = Math.max(s.length, target.length);
      const out: number[] = [];
      for (let i = 0; i < rank; i++) {
        const a = s[i - (rank - s.length)] ?? 1;
        const b = target[i - (rank - target.length)] ?? 1;
        if (a !== b && a !== 1 && b !== 1) {
          ctx.fail(
            `cannot expand ${formatShape(s)} to ${formatShape(target)}`,
            "each dimension must match or be 1",
            "shape-mismatch",
          );
        }
        out.push(a === 1 ? b : a);
      }
      return [{ shape: out, dtype: ctx.input(0).dtype }];
    },
  },
  {
    name: "Concat",
    category: "movement",
    arity: [1, Infinity],
    primitive: false,
    decompose: (e, xs, attrs) => [concatAsSelect(e, xs, attrs.axis as number)],
    infer: (ctx) => {
      const dtype = ctx.sameDType();
      const first = ctx.input(0).shape;
      const axis = ctx.axis(ctx.int("axis"), first.length);
      let total = 0;
      for (const t of ctx.inputs) {
        if (
          t.shape.length !== first.length || t.shape.some((d, i) => i !== axis && d !== first[i])
        ) {
          ctx.fail(
            `shapes differ outside axis ${axis}`,
            "make every input equal except along the concat axis",
            "shape-mismatch",
          );
        }
        total += t.shape[axis];
      }
      return [{ shape: first.map((d, i) => (i === axis ? total : d)), dtype }];
    },
  },
  {
    name: "Split",
    category: "movement",
    arity: [1, 1],
    primitive: false,
    decompose: (e, [x], attrs) => {
      const shape = e.typeOf(x).shape;
      const axis = normalizeAxis((attrs.axis as number | undefined) ?? 0, shape.length, "Split");
      let start = 0;
      return splitSizes(attrs, shape[axis]).map((n) =>
        e.op("Slice", [x], { starts: [start], ends: [start += n], axes: [axis] })
      );
    },
    infer: (ctx) => {
      const s = ctx.input(0).shape;
      const axis = ctx.axis(ctx.int("axis", 0), s.length);
      const sizes = resolveSplit(ctx, s[axis]);
      return sizes.map((n) => ({
        shape: s.map((d, i) => (i === axis ? n : d)),
        dtype: ctx.input(0).dtype,
      }));
    },
  },
  {
    name: "Slice",
    category: "movement",
    arity: [1, 1],
    primitive: true,
    infer: (
      ctx,
    ) => [{
      shape: resolveSlice(ctx, ctx.input(0).shape).map((a) => a.count),
      dtype: ctx.input(0).dtype,
    }],
  },
  {
    name: "Pad",
    category: "movement",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => {
      const s = ctx.input(0).shape;
      const mode = ctx.choice("mode", ["constant", "reflect", "edge", "wrap"]);
      ctx.float("value", 0);
      // A concat's pads (fusion's `masked`: never read outside the input).
      ctx.int("masked", 0);
      const { before, after } = resolvePads(ctx, s.length);
      const out = s.map((d, i) => d + before[i] + after[i]);
      if (out.some((d) => d < 0)) {
        ctx.fail(
          `pads crop ${formatShape(s)} below zero`,
          "use smaller negative pads",
          "shape-mismatch",
        );
      }
      // Negative pads crop first: reflect and edge read the cropped axis, not the input's.
      const kept = s.map((d, i) => d + Math.min(0, before[i]) + Math.min(0, after[i]));
      const grows = (i: number) => before[i] > 0 || after[i] > 0;
      if (
        mode === "reflect" &&
        kept.some((k, i) => grows(i) && (before[i] >= k || after[i] >= k))
      ) {
        ctx.fail(
          "reflect pads must be smaller than the padded axis",
          "use edge mode or smaller pads",
          "bad-attribute",
        );
      }
      if (mode === "edge" && kept.some((k, i) => k === 0 && grows(i))) {
        ctx.fail("edge padding of an empty axis", "use constant mode", "bad-attribute");
      }
      if (
        mode === "wrap" &&
        s.some((d, i) => Math.min(before[i], after[i]) < 0 || Math.max(before[i], after[i]) > d)
      ) {
        ctx.fail(
          `wrap pads [${before}], [${after}] of ${formatShape(s)}`,
          "kiln wraps by at most the axis's length, and does not crop with wrap",
          "unsupported",
        );
      }
      return [{ shape: out, dtype: ctx.input(0).dtype }];
    },
  },
  {
    name: "Gather",
    category: "index",
    arity: [2, 2],
    primitive: true,
    infer: (ctx) => {
      const s = ctx.input(0).shape;
      ctx.requireDType(1, ["i32"]);
      const axis = ctx.axis(ctx.int("axis", 0), s.length);
      return [{
        shape: [...s.slice(0, axis), ...ctx.input(1).shape, ...s.slice(axis + 1)],
        dtype: ctx.input(0).dtype,
      }];
    },
  },
  {
    name: "GatherElements",
    category: "index",
    arity: [2, 2],
    primitive: true,
    infer: (ctx) => {
      const s = ctx.input(0).shape;
      const idx = ctx.input(1).shape;
      ctx.requireDType(1, ["i32"]);
      const axis = ctx.axis(ctx.int("axis", 0), s.length);
      if (idx.length !== s.length || idx.some((d, i) => i !== axis && d > s[i])) {
        ctx.fail(
          "indices must have the data's rank and fit inside it off the gather axis",
          "reshape the indices to the data's rank",
          "shape-mismatch",
        );
      }
      return [{ shape: idx, dtype: ctx.input(0).dtype }];
    },
  },
];

/**
 * Placement ops: identities that say where their result must live. `ToDevice` runs only on a
 * backend with its own memory (a GPU), `ToHost` only on one that shares the host's, so the
 * scheduler has to move the data there — an explicit transfer.
 */
const placementOps: OpDef[] = ["ToDevice", "ToHost"].map((name) => ({
  name,
  category: "placement",
  arity: [1, 1],
  primitive: true,
  infer: (ctx) => [ctx.input(0)],
}));

defineOps([...movementOps, ...placementOps]);
