/**
 * OneHot as a kiln op: `values` [off, on] placed by `indices` along a new axis of `depth` at
 * `axis`: on where the position equals the index (negative indices count from the end; float
 * indices are floored), off elsewhere, an index outside [−depth, depth) matching no position.
 *
 * It decomposes into an equality of the (wrapped) indices with a constant range, and a select.
 *
 * @module
 */
import { isFloat } from "../ir/dtype.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** OneHot's output: the indices' shape with `depth` at `axis`, the values' dtype. */
function oneHotType(ctx: InferContext): ValueType {
  const indices = ctx.input(0), values = ctx.input(1), depth = ctx.int("depth");
  const rank = indices.shape.length + 1, axis = ctx.int("axis");
  if (!(Number.isInteger(depth) && depth > 0) || !(axis >= 0 && axis < rank)) {
    ctx.fail(
      `a depth of ${depth} at axis ${axis} of rank ${rank}`,
      "give OneHot a positive integer depth and an axis of the output",
      "bad-attribute",
    );
  }
  if (values.shape.join() !== "2") {
    ctx.fail(`values [${values.shape}]`, "give values [off, on]", "shape-mismatch");
  }
  const shape = [...indices.shape];
  shape.splice(axis, 0, depth);
  return { shape, dtype: values.dtype };
}

/** OneHot's decomposition. */
function oneHot(e: Emitter, [indices, values]: readonly EmitRef[], a: Attrs): EmitRef {
  const depth = a.depth as number, axis = a.axis as number;
  const rank = e.typeOf(indices).shape.length + 1;
  const given = e.typeOf(indices).dtype;
  const idx = isFloat(given) ? e.op("Cast", [e.op("Floor", [indices])], { to: "i32" }) : indices;
  const t = e.typeOf(idx).dtype;
  // Negative indices count from the end; others outside [0, depth) match no position.
  const wrapped = e.op("Where", [
    e.op("Less", [idx, e.scalar(0, t)]),
    e.op("Add", [idx, e.scalar(depth, t)]),
    idx,
  ]);
  const shape = Array.from({ length: rank }, (_, i) => (i === axis ? depth : 1));
  const range = e.op("Cast", [
    e.op("Constant", [], {
      value: { data: Int32Array.from({ length: depth }, (_, i) => i), shape, dtype: "i32" },
    }),
  ], { to: t });
  const hit = e.op("Equal", [e.op("Unsqueeze", [wrapped], { axes: [axis] }), range]);
  const pick = (i: number) =>
    e.op("Gather", [
      values,
      e.op("Constant", [], { value: { data: Int32Array.of(i), shape: [], dtype: "i32" } }),
    ], {
      axis: 0,
    });
  return e.op("Where", [hit, pick(1), pick(0)]);
}

const oneHotOps: OpDef[] = [{
  name: "OneHot",
  category: "composite",
  arity: [2, 2],
  primitive: false,
  infer: (ctx) => [oneHotType(ctx)],
  decompose: (e, ins, a) => [oneHot(e, ins, a)],
}];

defineOps(oneHotOps);
