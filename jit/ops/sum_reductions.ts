/**
 * The reductions ONNX defines as functions of a sum (ReduceL1, ReduceL2, ReduceSumSquare,
 * ReduceLogSum) and ReduceLogSumExp (shifted by the maximum, so large inputs do not overflow),
 * each a kiln op with its one decomposition, LpNormalization (x over such a norm) and GlobalLpPool
 * (the norm of each channel over its spatial axes). Their attributes are ReduceSum's (`axes`, empty for
 * every axis, and `keepdims`), and `noop: 1` for ONNX's `noop_with_empty_axes` with no axes: then
 * nothing is reduced and only the elementwise part applies.
 *
 * @module
 */
import { type DType, isFloat } from "../ir/dtype.ts";
import { FLOATS, NUMERIC } from "./elementwise.ts";
import { reduceAxes, reducedShape } from "./reduce.ts";
import { normalizeAxis } from "../ir/shape.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** ReduceSum's type rule over `dtypes`, or the input's own type where `noop` reduces nothing. */
function reduceRule(dtypes: readonly DType[]) {
  return (ctx: InferContext): ValueType[] => {
    const dtype = ctx.requireDType(0, dtypes);
    if (ctx.has("axes")) ctx.ints("axes");
    const keep = ctx.int("keepdims", 1) !== 0;
    const shape = ctx.input(0).shape;
    if (ctx.int("noop", 0) === 1) return [{ shape, dtype }];
    return [{ shape: reducedShape(shape, reduceAxes(ctx.attrs, shape.length, ctx), keep), dtype }];
  };
}

/** `ReduceSum`'s attributes of a node of these ops. */
const sumAttrs = (a: Attrs): Attrs => ({ axes: a.axes ?? [], keepdims: a.keepdims ?? 1 });

/** `post(Σ pre(x))` over the axes (`pre` then `post` alone with `noop`). */
function sumReduction(
  name: string,
  dtypes: readonly DType[],
  pre: (e: Emitter, x: EmitRef) => EmitRef,
  post?: (e: Emitter, s: EmitRef) => EmitRef,
): OpDef {
  return {
    name,
    category: "composite",
    arity: [1, 1],
    primitive: false,
    infer: reduceRule(dtypes),
    decompose: (e, [x], a) => {
      const v = pre(e, x);
      const s = a.noop === 1 ? v : e.op("ReduceSum", [v], sumAttrs(a));
      return [post ? post(e, s) : s];
    },
  };
}

/**
 * ReduceProd as a sum: sign × exp Σ log|x|, the sign from the count of negatives (exact for
 * zeros: log 0 is −∞); integers through f32, rounded back.
 */
const reduceProd: OpDef = {
  name: "ReduceProd",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: reduceRule(NUMERIC),
  decompose: (e, [x], a) => {
    if (a.noop === 1) return [x];
    const { dtype } = e.typeOf(x), float = isFloat(dtype), ft = float ? dtype : "f32";
    const xf = float ? x : e.op("Cast", [x], { to: ft });
    const r = sumAttrs(a);
    const magnitude = e.op("Exp", [e.op("ReduceSum", [e.op("Log", [e.op("Abs", [xf])])], r)]);
    const negative = e.op("Cast", [e.op("Less", [xf, e.scalar(0, ft)])], { to: ft });
    const negatives = e.op("ReduceSum", [negative], r);
    // (−1)^negatives as 1 − 2·(negatives mod 2).
    const odd = e.op("Mod", [negatives, e.scalar(2, ft)], { fmod: 1 });
    const sign = e.op("Sub", [e.scalar(1, ft), e.op("Mul", [odd, e.scalar(2, ft)])]);
    const p = e.op("Mul", [magnitude, sign]);
    return [float ? p : e.op("Cast", [e.op("Round", [p])], { to: dtype })];
  },
};

const sumReductionOps: readonly OpDef[] = [
  reduceProd,
  sumReduction("ReduceL1", NUMERIC, (e, x) => e.op("Abs", [x])),
  sumReduction("ReduceL2", FLOATS, (e, x) => e.op("Mul", [x, x]), (e, s) => e.op("Sqrt", [s])),
  sumReduction("ReduceSumSquare", NUMERIC, (e, x) => e.op("Mul", [x, x])),
  sumReduction("ReduceLogSum", FLOATS, (_, x) => x, (e, s) => e.op("Log", [s])),
  {
    name: "ReduceLogSumExp",
    category: "composite",
    arity: [1, 1],
    primitive: false,
    infer: reduceRule(FLOATS),
    // log Σ exp(x) = m + log Σ exp(x − m), m the maximum: no overflow for large x.
    decompose: (e, [x], a) => {
      if (a.noop === 1) return [x];
      const { axes, keepdims } = sumAttrs(a);
      const m = e.op("ReduceMax", [x], { axes, keepdims: 1 });
      const sum = e.op("ReduceSum", [e.op("Exp", [e.op("Sub", [x, m])])], { axes, keepdims });
      const mk = keepdims ? m : e.op("ReduceMax", [x], { axes, keepdims });
      return [e.op("Add", [e.op("Log", [sum]), mk])];
    },
  },
];

/**
 * LpNormalization: x over its p-norm along `axis` (p 1 or 2, ONNX's), a zero norm giving 0 as
 * ONNX's reference has it (not 0 / 0).
 */
const lpNormalization: OpDef = {
  name: "LpNormalization",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape;
    ctx.axis(ctx.int("axis", -1), shape.length);
    const p = ctx.int("p", 2);
    if (p !== 1 && p !== 2) ctx.fail(`p is ${p}`, "give p 1 or 2", "bad-attribute");
    return [{ shape, dtype }];
  },
  decompose: (e, [x], a) => {
    const { shape, dtype } = e.typeOf(x);
    const axis = normalizeAxis(
      (a.axis as number | undefined) ?? -1,
      shape.length,
      "LpNormalization",
    );
    const keep = { axes: [axis], keepdims: 1 };
    const norm = (a.p ?? 2) === 1
      ? e.op("ReduceSum", [e.op("Abs", [x])], keep)
      : e.op("Sqrt", [e.op("ReduceSum", [e.op("Mul", [x, x])], keep)]);
    const zero = e.scalar(0, dtype);
    return [e.op("Where", [e.op("Equal", [norm, zero]), zero, e.op("Div", [x, norm])])];
  },
};

/** GlobalLpPool: each channel's (Σ |x|^p)^(1/p) over its spatial axes, kept as axes of 1. */
const globalLpPool: OpDef = {
  name: "GlobalLpPool",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape, p = ctx.int("p", 2);
    if (shape.length < 3 || !(p >= 1)) {
      ctx.fail(
        `GlobalLpPool of ${shape.length}-D data with p ${p}`,
        "pool N×C×spatial data with p ≥ 1",
        "bad-attribute",
      );
    }
    return [{ shape: shape.map((d, i) => (i < 2 ? d : 1)), dtype }];
  },
  decompose: (e, [x], a) => {
    const { shape, dtype } = e.typeOf(x), p = (a.p as number | undefined) ?? 2;
    const keep = { axes: shape.slice(2).map((_, i) => 2 + i), keepdims: 1 };
    if (p === 1) return [e.op("ReduceSum", [e.op("Abs", [x])], keep)];
    if (p === 2) return [e.op("Sqrt", [e.op("ReduceSum", [e.op("Mul", [x, x])], keep)])];
    const sum = e.op("ReduceSum", [e.op("Pow", [e.op("Abs", [x]), e.scalar(p, dtype)])], keep);
    return [e.op("Pow", [sum, e.scalar(1 / p, dtype)])];
  },
};

defineOps([...sumReductionOps, lpNormalization, globalLpPool]);
