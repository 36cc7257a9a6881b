/**
 * `GatherND`: slices of data picked by index tuples over its first axes after `batch_dims`. The
 * decomposition is one Gather of data's flattened rows: by a precomputed row list where the
 * indices are constant, else by each tuple's row computed from its coordinates (each passed
 * through a Gather of 0..n−1, `tupleOffsets`, which resolves negative ones and raises
 * out-of-range ones).
 *
 * @module
 */
import { formatShape, type Shape, sizeOf, stridesOf } from "../ir/shape.ts";
import { KilnError } from "../support/errors.ts";
import { INTEGERS } from "./elementwise.ts";
import { tupleOffsets } from "./scatter.ts";
import { constantTensor, defineOps, type EmitRef, type Emitter, type OpDef } from "./registry.ts";

/** The flat row (of data's `[batches · rows, …rest]` view) each index tuple of `known` picks. */
function rowsOf(known: ArrayLike<number>, k: number, shape: Shape, batch: number): number[] {
  const rows = sizeOf(shape.slice(batch, batch + k)), batches = sizeOf(shape.slice(0, batch));
  const tuples = known.length / k, perBatch = tuples / batches;
  const rs = stridesOf(shape.slice(batch, batch + k));
  return Array.from({ length: tuples }, (_, t) => {
    let r = Math.floor(t / perBatch) * rows;
    for (let d = 0; d < k; d++) {
      const i = known[t * k + d], dim = shape[batch + d], j = i < 0 ? i + dim : i;
      if (!(j >= 0 && j < dim)) {
        throw new KilnError(`GatherND: index ${i} is out of range for an axis of ${dim}`, {
          code: "out-of-range",
          fix: `use indices in [${-dim}, ${dim - 1}]`,
        });
      }
      r += j * rs[d];
    }
    return r;
  });
}

/** Each tuple's row computed at run time, as a [tuples] i32 value. */
function rowsAtRunTime(e: Emitter, indices: EmitRef, shape: Shape, batch: number): EmitRef {
  const ishape = e.typeOf(indices).shape, k = ishape.at(-1)!;
  const tuples = sizeOf(ishape.slice(0, -1)), batches = sizeOf(shape.slice(0, batch));
  const rows = sizeOf(shape.slice(batch, batch + k));
  // The batch each tuple belongs to, as its first row, then the tuple's row within it.
  const perBatch = tuples / batches;
  const first = Array.from({ length: tuples }, (_, t) => Math.floor(t / perBatch) * rows);
  const within = tupleOffsets(e, indices, shape.slice(batch, batch + k));
  const at = e.op("Add", [constantTensor(e, first, [tuples, 1], "i32"), within]);
  return e.op("Reshape", [at], { shape: [tuples] });
}

const gatherND: OpDef = {
  name: "GatherND",
  category: "composite",
  arity: [2, 2],
  primitive: false,
  infer: (ctx) => {
    const { shape, dtype } = ctx.input(0), ishape = ctx.input(1).shape;
    ctx.requireDType(1, INTEGERS);
    const batch = ctx.int("batch_dims", 0), k = ishape.at(-1) ?? 0;
    const sameBatch = ishape.slice(0, batch).every((d, i) => d === shape[i]);
    if (
      !(batch >= 0 && batch < ishape.length && k >= 1 && batch + k <= shape.length && sameBatch)
    ) {
      ctx.fail(
        `indices ${formatShape(ishape)} with batch_dims ${batch} for data ${formatShape(shape)}`,
        "give index tuples of at most data's rank past batch_dims, batch axes as data's",
        "shape-mismatch",
      );
    }
    return [{ shape: [...ishape.slice(0, -1), ...shape.slice(batch + k)], dtype }];
  },
  decompose: (e, [data, indices], a) => {
    const shape = e.typeOf(data).shape, ishape = e.typeOf(indices).shape;
    const batch = (a.batch_dims as number | undefined) ?? 0, k = ishape.at(-1)!;
    const rest = shape.slice(batch + k), known = e.constantOf(indices);
    const tuples = sizeOf(ishape.slice(0, -1));
    const picks = known
      ? constantTensor(e, rowsOf(known, k, shape, batch), [tuples], "i32")
      : rowsAtRunTime(e, indices, shape, batch);
    const flat = e.op("Reshape", [data], { shape: [sizeOf(shape.slice(0, batch + k)), ...rest] });
    const picked = e.op("Gather", [flat, picks], { axis: 0 });
    return [e.op("Reshape", [picked], { shape: [...ishape.slice(0, -1), ...rest] })];
  },
};

defineOps([gatherND]);
