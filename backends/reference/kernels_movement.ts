/**
 * Reference kernels for movement and indexing ops. Each one is a gather through an offset map:
 * transposes, slices and broadcasts are strided views ({@linkcode offsetsFor}), so the kernels
 * differ only in how they build the map. Outputs never alias inputs.
 *
 * @module
 */
import { allocate, type TensorData, toF16Bits } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { resolvePads, resolvePerm, resolveSlice, resolveSplit } from "../../jit/ops/movement.ts";
import { broadcastOffsets, offsetsFor, type Shape, sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import type { Kernel, KernelArgs } from "./kernel.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";

function gather(src: RefTensor, offsets: ArrayLike<number>): TensorData {
  const out = allocate(src.dtype, offsets.length) as Exclude<TensorData, BigInt64Array>;
  const data = src.data as Exclude<TensorData, BigInt64Array>;
  for (let i = 0; i < offsets.length; i++) out[i] = data[offsets[i]];
  return out;
}

const copy: Kernel = ({ inputs }) => [inputs[0].data.slice()];

function sliceOffsets(args: KernelArgs, x: RefTensor): Int32Array {
  const axes = resolveSlice(args.ctx, x.shape);
  const strides = stridesOf(x.shape);
  const base = axes.reduce((b, a, i) => b + a.start * strides[i], 0);
  return offsetsFor(axes.map((a) => a.count), axes.map((a, i) => a.step * strides[i]), base);
}

/** Wraps a negative index and checks bounds; the error names the op and the bad index. */
export function index(i: number, dim: number, where: string): number {
  const j = i < 0 ? i + dim : i;
  if (j < 0 || j >= dim) {
    throw new KilnError(`${where}: index ${i} is out of range for an axis of size ${dim}`, {
      code: "out-of-range",
      fix: `use indices in [${-dim}, ${dim - 1}]`,
    });
  }
  return j;
}

function padOffsets(args: KernelArgs, x: RefTensor, out: Shape): Int32Array {
  const mode = args.ctx.choice("mode", ["constant", "reflect", "edge", "wrap"]);
  const { before } = resolvePads(args.ctx, x.shape.length);
  const strides = stridesOf(x.shape);
  const outOffsets = offsetsFor(out, stridesOf(out), 0);
  const outStrides = stridesOf(out);
  const result = new Int32Array(outOffsets.length);
  for (let i = 0; i < result.length; i++) {
    let off = 0;
    let rest = i;
    for (let d = 0; d < out.length; d++) {
      const q = Math.floor(rest / outStrides[d]);
      rest -= q * outStrides[d];
      let j = q - before[d];
      const n = x.shape[d];
      if (j < 0 || j >= n) {
        if (mode === "constant") {
          off = -1;
          break;
        }
        if (mode === "edge") j = j < 0 ? 0 : n - 1;
        else if (mode === "wrap") j = ((j % n) + n) % n;
        else {
          const period = 2 * (n - 1);
          j = n === 1 ? 0 : Math.abs(((j % period) + period) % period);
          if (j >= n) j = period - j;
        }
      }
      off += j * strides[d];
    }
    result[i] = off;
  }
  return result;
}

/** Kernels of the movement and indexing family, by op name. */
export const movementKernels: Record<string, Kernel> = {
  Identity: copy,
  ToDevice: copy,
  ToHost: copy,
  Reshape: copy,
  Flatten: copy,
  Squeeze: copy,
  Unsqueeze: copy,
  Transpose: ({ inputs, outputs, ctx }) => {
    const x = inputs[0];
    const strides = stridesOf(x.shape);
    const perm = resolvePerm(ctx, x.shape.length);
    return [gather(x, offsetsFor(outputs[0].shape, perm.map((p) => strides[p]), 0))];
  },
  Expand: ({ inputs, outputs }) => {
    const offs = broadcastOffsets(inputs[0].shape, outputs[0].shape);
    return [offs ? gather(inputs[0], offs) : inputs[0].data.slice()];
  },
  Slice: (args) => [gather(args.inputs[0], sliceOffsets(args, args.inputs[0]))],
  Split: (args) => {
    const x = args.inputs[0];
    const axis = args.ctx.axis(args.ctx.int("axis", 0), x.shape.length);
    const strides = stridesOf(x.shape);
    let start = 0;
    return resolveSplit(args.ctx, x.shape[axis]).map((n, k) => {
      const offs = offsetsFor(args.outputs[k].shape, strides, start * strides[axis]);
      start += n;
      return gather(x, offs);
    });
  },
  Concat: ({ inputs, outputs, ctx }) => {
    const shape = outputs[0].shape;
    const axis = ctx.axis(ctx.int("axis"), shape.length);
    const out = allocate(outputs[0].dtype, sizeOf(shape)) as Exclude<TensorData, BigInt64Array>;
    const outStrides = stridesOf(shape);
    let start = 0;
    for (const x of inputs) {
      const dst = offsetsFor(x.shape, outStrides, start * outStrides[axis]);
      const src = x.data as Exclude<TensorData, BigInt64Array>;
      for (let i = 0; i < dst.length; i++) out[dst[i]] = src[i];
      start += x.shape[axis];
    }
    return [out];
  },
  Pad: (args) => {
    const x = args.inputs[0];
    const offs = padOffsets(args, x, args.outputs[0].shape);
    const value = args.ctx.float("value", 0);
    const src = x.data as Exclude<TensorData, BigInt64Array>;
    const out = allocate(x.dtype, offs.length) as Exclude<TensorData, BigInt64Array>;
    const fill = x.dtype === "f16" ? toF16Bits(value) : x.dtype === "bool" ? +(value !== 0) : value;
    for (let i = 0; i < offs.length; i++) out[i] = offs[i] < 0 ? fill : src[offs[i]];
    return [out];
  },
  Tile: ({ inputs, outputs }) => {
    const x = inputs[0], out = outputs[0].shape, xs = stridesOf(x.shape), os = stridesOf(out);
    const offs = Int32Array.from(
      { length: sizeOf(out) },
      (_, i) =>
        out.reduce((p, _d, a) => p + (Math.floor(i / os[a]) % out[a] % x.shape[a]) * xs[a], 0),
    );
    return [gather(x, offs)];
  },
  CenterCropPad: ({ inputs, outputs }) => {
    const x = inputs[0], out = outputs[0].shape, xs = stridesOf(x.shape), os = stridesOf(out);
    // Per axis, where output index 0 reads: past the crop's start, or before the pad's end.
    const shift = out.map((w, a) =>
      Math.floor((x.shape[a] - w) / 2) * (w < x.shape[a] ? 1 : 0) +
      (w > x.shape[a] ? -Math.floor((w - x.shape[a]) / 2) : 0)
    );
    const offs = Int32Array.from({ length: sizeOf(out) }, (_, i) => {
      let p = 0;
      for (let a = 0; a < out.length; a++) {
        const j = (Math.floor(i / os[a]) % out[a]) + shift[a];
        if (j < 0 || j >= x.shape[a]) return -1;
        p += j * xs[a];
      }
      return p;
    });
    const data = x.data as Exclude<TensorData, BigInt64Array>;
    const y = allocate(x.dtype, offs.length) as Exclude<TensorData, BigInt64Array>;
    offs.forEach((o, i) => (y[i] = o < 0 ? 0 : data[o]));
    return [y];
  },
  GatherND: ({ inputs, outputs, ctx }) => {
    const [x, idx] = inputs;
    const batch = ctx.int("batch_dims", 0), k = idx.shape.at(-1)!;
    const rest = sizeOf(x.shape.slice(batch + k)), xs = stridesOf(x.shape);
    const ids = Array.from(idx.data as ArrayLike<number | bigint>, Number);
    const tuples = ids.length / k, perBatch = tuples / sizeOf(x.shape.slice(0, batch));
    const offs = new Int32Array(sizeOf(outputs[0].shape));
    for (let t = 0; t < tuples; t++) {
      // The batch's first element: the batch axes of tuple t's position.
      let base = Math.floor(t / perBatch) * (batch ? xs[batch - 1] : 0);
      for (let d = 0; d < k; d++) {
        base += index(ids[t * k + d], x.shape[batch + d], ctx.where) * xs[batch + d];
      }
      for (let r = 0; r < rest; r++) offs[t * rest + r] = base + r;
    }
    return [gather(x, offs)];
  },
  Gather: ({ inputs, outputs, ctx }) => {
    const [x, idx] = inputs;
    const axis = ctx.axis(ctx.int("axis", 0), x.shape.length);
    const dim = x.shape[axis];
    const inner = sizeOf(x.shape.slice(axis + 1));
    const outer = sizeOf(x.shape.slice(0, axis));
    const ids = idx.data as Int32Array;
    const offs = new Int32Array(sizeOf(outputs[0].shape));
    let k = 0;
    for (let o = 0; o < outer; o++) {
      for (let j = 0; j < ids.length; j++) {
        const base = (o * dim + index(ids[j], dim, ctx.where)) * inner;
        for (let i = 0; i < inner; i++) offs[k++] = base + i;
      }
    }
    return [gather(x, offs)];
  },
  GatherElements: ({ inputs, ctx }) => {
    const [x, idx] = inputs;
    const axis = ctx.axis(ctx.int("axis", 0), x.shape.length);
    const xs = stridesOf(x.shape);
    const pos = offsetsFor(idx.shape, xs, 0);
    const along = offsetsFor(idx.shape, idx.shape.map((_, d) => (d === axis ? 1 : 0)), 0);
    const ids = idx.data as Int32Array;
    const offs = new Int32Array(ids.length);
    for (let i = 0; i < ids.length; i++) {
      offs[i] = pos[i] + (index(ids[i], x.shape[axis], ctx.where) - along[i]) * xs[axis];
    }
    return [gather(x, offs)];
  },
};
