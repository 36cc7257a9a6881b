/**
 * Ops without data inputs: `Constant` (primitive), and `ConstantOfShape` and `Range`, which
 * decompose into constants because their shapes are static.
 *
 * @module
 */
import { allocate, type DType, DTYPES } from "../dtype.ts";
import type { HostTensor } from "../host_tensor.ts";
import { defineOps, type InferContext, type OpDef } from "./registry.ts";

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
];

defineOps(sourceOps);
