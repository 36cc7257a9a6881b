/**
 * Ops without data inputs: `Constant` (primitive), and `ConstantOfShape` and `Range`, which
 * decompose into constants because their shapes are static; `RandomUniform`, which `compile`
 * turns into an input drawn on every run (`random_inputs.ts`), and `RandomNormal`, two of those
 * through the Box–Muller transform.
 *
 * @module
 */
import { allocate, type DType, DTYPES } from "../ir/dtype.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { defineOps, type InferContext, type OpDef, type ValueType } from "./registry.ts";

/** The `value` tensor of a Constant node, validated. */
export function constantValue(ctx: InferContext): HostTensor {
  const v = ctx.attrs.value as HostTensor | undefined;
  if (
    typeof v !== "object" || v === null || !ArrayBuffer.isView(v.data) ||
    !DTYPES.includes(v.dtype as DType)
  ) {
    ctx.fail(
      "attribute value must be a HostTensor of an internal dtype",
      "use GraphBuilder.constant(), which narrows i64 and checks the data",
      "bad-attribute",
    );
  }
  return v;
}

/** Range parameters and element count (ONNX: max(ceil((limit - start) / delta), 0)). */
export function rangeParams(
  ctx: InferContext,
): { start: number; delta: number; count: number; dtype: DType } {
  const start = ctx.float("start");
  const limit = ctx.float("limit");
  const delta = ctx.float("delta", 1);
  const dtype = ctx.dtype("dtype", "f32");
  if (delta === 0 || !Number.isFinite(start + limit + delta)) {
    ctx.fail(
      "Range needs finite start/limit and a non-zero delta",
      "fix start, limit or delta",
      "bad-attribute",
    );
  }
  return { start, delta, count: Math.max(Math.ceil((limit - start) / delta), 0), dtype };
}

/** The type of a random draw: its `shape`, in f32 (the converters cast to others); checks `seed`. */
function drawnType(ctx: InferContext): ValueType {
  if (ctx.has("seed")) ctx.float("seed");
  if (ctx.dtype("dtype", "f32") !== "f32") {
    ctx.fail("random ops draw f32 here", "draw f32 and Cast the result", "bad-attribute");
  }
  return { shape: ctx.shape("shape"), dtype: "f32" };
}

const sourceOps: OpDef[] = [
  {
    name: "Constant",
    category: "source",
    arity: [0, 0],
    primitive: true,
    infer: (ctx) => {
      const v = constantValue(ctx);
      return [{ shape: v.shape, dtype: v.dtype as DType }];
    },
  },
  {
    name: "ConstantOfShape",
    category: "source",
    arity: [0, 0],
    primitive: false,
    infer: (ctx) => {
      ctx.float("value", 0);
      return [{ shape: ctx.shape("shape"), dtype: ctx.dtype("dtype", "f32") }];
    },
    decompose: (e, _x, attrs) => [
      e.op("Expand", [
        e.scalar(
          (attrs.value as number | undefined) ?? 0,
          (attrs.dtype as DType | undefined) ?? "f32",
        ),
      ], { shape: attrs.shape }),
    ],
  },
  {
    name: "Range",
    category: "source",
    arity: [0, 0],
    primitive: false,
    infer: (ctx) => {
      const { count, dtype } = rangeParams(ctx);
      return [{ shape: [count], dtype }];
    },
    decompose: (e, _x, attrs) => {
      const start = attrs.start as number;
      const delta = (attrs.delta as number | undefined) ?? 1;
      const dtype = (attrs.dtype as DType | undefined) ?? "f32";
      const count = Math.max(Math.ceil(((attrs.limit as number) - start) / delta), 0);
      const data = allocate(dtype === "f16" ? "f32" : dtype, count);
      for (let i = 0; i < count; i++) data[i] = start + i * delta;
      const value = e.op("Constant", [], {
        value: { data, shape: [count], dtype: dtype === "f16" ? "f32" : dtype },
      });
      return [dtype === "f16" ? e.op("Cast", [value], { to: "f16" }) : value];
    },
  },
  {
    name: "RandomUniform",
    category: "source",
    arity: [0, 0],
    primitive: true,
    infer: (ctx) => {
      const low = ctx.float("low", 0), high = ctx.float("high", 1);
      ctx.int("stream", 0);
      if (!(low <= high) || !Number.isFinite(high - low)) {
        ctx.fail(`needs finite low ≤ high, got [${low}, ${high})`, "fix low/high", "bad-attribute");
      }
      return [drawnType(ctx)];
    },
  },
  {
    name: "RandomNormal",
    category: "source",
    arity: [0, 0],
    primitive: false,
    infer: (ctx) => {
      ctx.float("mean", 0);
      ctx.float("scale", 1);
      return [drawnType(ctx)];
    },
    // Box–Muller: √(−2 ln(1 − u)) · cos(2πv) is standard normal for independent uniform u, v in
    // [0, 1) (1 − u keeps the logarithm finite).
    decompose: (e, _x, attrs) => {
      const draw = (stream: number) =>
        e.op("RandomUniform", [], {
          shape: attrs.shape,
          stream,
          ...(attrs.seed === undefined ? {} : { seed: attrs.seed }),
        });
      const [u, v] = [draw(0), draw(1)];
      const f = (x: number) => e.scalar(x, "f32");
      const radius = e.op("Sqrt", [
        e.op("Mul", [f(-2), e.op("Log", [e.op("Sub", [f(1), u])])]),
      ]);
      const z = e.op("Mul", [radius, e.op("Cos", [e.op("Mul", [v, f(2 * Math.PI)])])]);
      const mean = (attrs.mean as number | undefined) ?? 0;
      const scale = (attrs.scale as number | undefined) ?? 1;
      return [e.op("Add", [e.op("Mul", [z, f(scale)]), f(mean)])];
    },
  },
];

defineOps(sourceOps);
