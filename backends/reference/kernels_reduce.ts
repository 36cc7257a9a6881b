/**
 * Reference kernels for reductions and row-wise composites. Every reduction is written as
 * "outer × inner": the kept axes index rows, the reduced axes index elements within a row, both
 * through strided offset maps, so any set of axes works without transposing. Accumulation is in
 * float64.
 *
 * @module
 */
import type { DType, TensorData } from "../../jit/ir/dtype.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { reduceAxes } from "../../jit/ops/reduce.ts";
import { offsetsFor, type Shape, sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import type { Kernel, KernelArgs } from "./kernel.ts";
import { read, writer, written } from "./tensor_io.ts";

/** Offsets of every row start (kept axes) and of every element within a row (reduced axes). */
export function rowsAndColumns(
  shape: Shape,
  axes: readonly number[],
): { rows: Int32Array; cols: Int32Array } {
  const strides = stridesOf(shape);
  const kept = shape.map((_, i) => i).filter((i) => !axes.includes(i));
  const red = shape.map((_, i) => i).filter((i) => axes.includes(i));
  return {
    rows: offsetsFor(kept.map((i) => shape[i]), kept.map((i) => strides[i]), 0),
    cols: offsetsFor(red.map((i) => shape[i]), red.map((i) => strides[i]), 0),
  };
}

function reduction(
  init: number,
  step: (acc: number, x: number) => number,
  finish?: (acc: number, n: number) => number,
): Kernel {
  return ({ inputs, attrs, outputs }) => {
    const x = inputs[0];
    const { rows, cols } = rowsAndColumns(x.shape, reduceAxes(attrs, x.shape.length));
    const v = read(x);
    const w = writer(outputs[0].dtype, rows.length);
    for (let r = 0; r < rows.length; r++) {
      let acc = init;
      const base = rows[r];
      for (let c = 0; c < cols.length; c++) acc = step(acc, v[base + cols[c]]);
      w.out[r] = finish ? finish(acc, cols.length) : acc;
    }
    return [w.finish()];
  };
}

/**
 * `finish(Σ each(x))` over the axes, or with `noop` (ONNX's noop_with_empty_axes and no axes)
 * `finish(each(x))` element by element: the sum-defined reductions.
 */
function sumOf(each: (x: number) => number, finish: (s: number) => number = (s) => s): Kernel {
  const reduced = reduction(0, (a, x) => a + each(x), (a) => finish(a));
  return (args) => {
    if (args.attrs.noop !== 1) return reduced(args);
    const v = read(args.inputs[0]);
    const w = writer(args.outputs[0].dtype, v.length);
    for (let i = 0; i < v.length; i++) w.out[i] = finish(each(v[i]));
    return [w.finish()];
  };
}

/** log Σ exp(x) over the axes, shifted by each row's maximum; with `noop`, x itself. */
const logSumExp: Kernel = (args) => {
  const x = args.inputs[0];
  if (args.attrs.noop === 1) return sumOf((v) => v)(args);
  const { rows, cols } = rowsAndColumns(x.shape, reduceAxes(args.attrs, x.shape.length));
  const v = read(x);
  const w = writer(args.outputs[0].dtype, rows.length);
  for (let r = 0; r < rows.length; r++) {
    let m = -Infinity, s = 0;
    for (let c = 0; c < cols.length; c++) m = maxStep(m, v[rows[r] + cols[c]]);
    for (let c = 0; c < cols.length; c++) s += Math.exp(v[rows[r] + cols[c]] - m);
    // Where the maximum is infinite (or NaN) this is NaN, as the decomposition's x − m makes it.
    w.out[r] = m + Math.log(s);
  }
  return [w.finish()];
};

const maxStep = (a: number, x: number) => (Number.isNaN(a) || a >= x ? a : x);
const minStep = (a: number, x: number) => (Number.isNaN(a) || a <= x ? a : x);

/** Applies `fn` to each row along the single axis `axis`, writing a row of the same length. */
function rowwise(
  args: KernelArgs,
  axes: readonly number[],
  fn: (row: Float64Array) => void,
): TensorData[] {
  const x = args.inputs[0];
  const { rows, cols } = rowsAndColumns(x.shape, axes);
  const v = read(x);
  const w = writer(args.outputs[0].dtype, v.length);
  const row = new Float64Array(cols.length);
  for (let r = 0; r < rows.length; r++) {
    for (let c = 0; c < cols.length; c++) row[c] = v[rows[r] + cols[c]];
    fn(row);
    for (let c = 0; c < cols.length; c++) w.out[rows[r] + cols[c]] = row[c];
  }
  return [w.finish()];
}

function softmaxRow(row: Float64Array, log: boolean): void {
  let m = -Infinity;
  for (const v of row) m = maxStep(m, v);
  let s = 0;
  for (let i = 0; i < row.length; i++) s += Math.exp(row[i] - m);
  const lse = Math.log(s);
  for (let i = 0; i < row.length; i++) row[i] = log ? row[i] - m - lse : Math.exp(row[i] - m) / s;
}

const axisOf = (args: KernelArgs, fallback: number): number =>
  args.ctx.axis(args.ctx.int("axis", fallback), args.inputs[0].shape.length);

/** Kernels of the reduction family, by op name. */
export const reduceKernels: Record<string, Kernel> = {
  ReduceSum: reduction(0, (a, x) => a + x),
  ReduceMean: reduction(0, (a, x) => a + x, (a, n) => a / n),
  ReduceMax: reduction(-Infinity, maxStep),
  ReduceMin: reduction(Infinity, minStep),
  ReduceL1: sumOf(Math.abs),
  ReduceL2: sumOf((x) => x * x, Math.sqrt),
  ReduceSumSquare: sumOf((x) => x * x),
  ReduceLogSum: sumOf((x) => x, Math.log),
  ReduceLogSumExp: logSumExp,
  ReduceProd: (args) => {
    if (args.attrs.noop !== 1) return reduction(1, (a, x) => a * x)(args);
    return [written(args.outputs[0].dtype, read(args.inputs[0]))];
  },
  ArgMax: (args) => {
    const x = args.inputs[0];
    const { rows, cols } = rowsAndColumns(x.shape, [axisOf(args, 0)]);
    const last = (args.attrs.select_last_index ?? 0) !== 0;
    const v = read(x);
    const out = new Int32Array(rows.length);
    for (let r = 0; r < rows.length; r++) {
      let best = 0;
      for (let c = 1; c < cols.length; c++) {
        const a = v[rows[r] + cols[best]], b = v[rows[r] + cols[c]];
        if (Number.isNaN(a)) break;
        if (b > a || Number.isNaN(b) || (last && b === a)) best = c;
      }
      out[r] = best;
    }
    return [out];
  },
  CumSum: (args) => {
    const exclusive = args.attrs.exclusive === 1, reverse = args.attrs.reverse === 1;
    return rowwise(args, [axisOf(args, 0)], (row) => {
      let acc = 0;
      for (let k = 0; k < row.length; k++) {
        const i = reverse ? row.length - 1 - k : k;
        const v = row[i];
        row[i] = exclusive ? acc : acc + v;
        acc += v;
      }
    });
  },
  LpNormalization: (args) =>
    rowwise(args, [axisOf(args, -1)], (row) => {
      const p = args.ctx.int("p", 2);
      let sum = 0;
      for (const v of row) sum += p === 1 ? Math.abs(v) : v * v;
      const norm = Math.fround(p === 1 ? sum : Math.sqrt(Math.fround(sum)));
      for (let i = 0; i < row.length; i++) row[i] = norm === 0 ? 0 : row[i] / norm;
    }),
  Hardmax: (args) =>
    rowwise(args, [axisOf(args, -1)], (row) => {
      // The first maximum, a NaN counting as the largest (ArgMax's rule).
      let best = 0;
      for (let c = 1; c < row.length && !Number.isNaN(row[best]); c++) {
        if (row[c] > row[best] || Number.isNaN(row[c])) best = c;
      }
      row.fill(0);
      if (row.length) row[best] = 1;
    }),
  Softmax: (args) => rowwise(args, [axisOf(args, -1)], (row) => softmaxRow(row, false)),
  LogSoftmax: (args) => rowwise(args, [axisOf(args, -1)], (row) => softmaxRow(row, true)),
  LayerNormalization: (args) => {
    const rank = args.inputs[0].shape.length;
    const axis = axisOf(args, -1);
    const eps = args.ctx.float("epsilon", 1e-5);
    const norm = args.inputs[0].shape.slice(axis);
    const param = (i: number) =>
      args.inputs[i] ? expandTo(args.inputs[i].shape, norm, read(args.inputs[i])) : undefined;
    const scale = param(1)!, bias = param(2);
    const means: number[] = [], invs: number[] = [];
    const [y] = rowwise(args, [...Array(rank - axis).keys()].map((i) => i + axis), (row) => {
      let mean = 0;
      for (const v of row) mean += v;
      mean /= row.length;
      let variance = 0;
      for (const v of row) variance += (v - mean) ** 2;
      const inv = 1 / Math.sqrt(variance / row.length + eps);
      means.push(mean);
      invs.push(inv);
      for (let i = 0; i < row.length; i++) {
        row[i] = (row[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0);
      }
    });
    if (args.attrs.stats !== 1) return [y];
    const dtype = args.outputs[0].dtype;
    return [y, written(dtype, means), written(dtype, invs)];
  },
  GroupNormalization: (args) => {
    const [x, scale, bias] = args.inputs;
    const groups = args.ctx.int("num_groups"), eps = args.ctx.float("epsilon", 1e-5);
    const [n, c] = x.shape, inner = sizeOf(x.shape.slice(2)), per = (c / groups) * inner;
    const v = read(x), s = read(scale), b = read(bias);
    const w = writer(args.outputs[0].dtype, v.length);
    for (let at = 0; at < n * groups * per; at += per) {
      let mean = 0, variance = 0;
      for (let i = 0; i < per; i++) mean += v[at + i];
      mean /= per;
      for (let i = 0; i < per; i++) variance += (v[at + i] - mean) ** 2;
      const inv = 1 / Math.sqrt(variance / per + eps);
      for (let i = 0; i < per; i++) {
        const channel = Math.floor((at + i) / inner) % c;
        w.out[at + i] = (v[at + i] - mean) * inv * s[channel] + b[channel];
      }
    }
    return [w.finish()];
  },
  BatchNormalization: (args) => {
    const [x, scale, bias, mean, variance] = args.inputs.map(read);
    const shape = args.inputs[0].shape;
    const eps = args.ctx.float("epsilon", 1e-5);
    const inner = sizeOf(shape.slice(2));
    const c = shape[1];
    const training = args.ctx.int("training_mode", 0) === 1;
    // Training mode: the batch's moments per channel (population variance).
    const [mu, sigma2] = training ? channelMoments(x, shape) : [mean, variance];
    const w = writer(args.outputs[0].dtype, x.length);
    for (let i = 0; i < x.length; i++) {
      const ch = Math.floor(i / inner) % c;
      w.out[i] = (x[i] - mu[ch]) / Math.sqrt(sigma2[ch] + eps) * scale[ch] + bias[ch];
    }
    if (!training) return [w.finish()];
    const m = args.ctx.float("momentum", 0.9);
    const blend = (running: ArrayLike<number>, batch: ArrayLike<number>) =>
      written(args.outputs[1].dtype, Array.from(running, (r, ch) => r * m + batch[ch] * (1 - m)));
    return [w.finish(), blend(mean, mu), blend(variance, sigma2)];
  },
  InstanceNormalization: (args) => {
    const [xt, st, bt] = args.inputs, s = read(st), b = read(bt), c = xt.shape[1];
    const eps = args.ctx.float("epsilon", 1e-5);
    // Rows are (image, channel) pairs in order: row r is channel r mod C.
    const axes = xt.shape.slice(2).map((_, i) => 2 + i);
    return [
      normalizedRows(
        xt,
        axes,
        args.outputs[0].dtype,
        (d, variance, r) => (d / Math.sqrt(variance + eps)) * s[r % c] + b[r % c],
      ),
    ];
  },
  MeanVarianceNormalization: (args) => {
    const x = args.inputs[0];
    const axes = reduceAxes({ axes: args.ctx.ints("axes", [0, 2, 3]) }, x.shape.length);
    return [normalizedRows(x, axes, args.outputs[0].dtype, (d, v) => d / (Math.sqrt(v) + 1e-9))];
  },
  GlobalAveragePool: (args) => {
    const rank = args.inputs[0].shape.length;
    const axes = [...Array(rank - 2).keys()].map((i) => i + 2);
    return reduction(0, (a, x) => a + x, (a, n) => a / n)({ ...args, attrs: { axes } });
  },
};

/** Broadcasts a parameter of shape `from` over `to` (both trailing-aligned) into a dense array. */
function expandTo(from: Shape, to: Shape, data: ArrayLike<number>): Float64Array {
  const out = new Float64Array(sizeOf(to));
  const strides = stridesOf(from);
  const full = to.map((_, i) => {
    const j = i - (to.length - from.length);
    return j < 0 || from[j] === 1 ? 0 : strides[j];
  });
  const offs = offsetsFor(to, full, 0);
  for (let i = 0; i < out.length; i++) out[i] = data[offs[i]];
  return out;
}

/** The mean and population variance of each channel (axis 1) of an N×C×… tensor. */
function channelMoments(x: ArrayLike<number>, shape: Shape): [Float64Array, Float64Array] {
  const { mean, variance } = moments(x, shape, shape.map((_, i) => i).filter((i) => i !== 1));
  return [mean, variance];
}

/**
 * The rows of a reduction of `x` over `axes` ({@linkcode rowsAndColumns}) with each row's mean and
 * population variance.
 */
function moments(x: ArrayLike<number>, shape: Shape, axes: readonly number[]) {
  const { rows, cols } = rowsAndColumns(shape, axes);
  const mean = new Float64Array(rows.length), variance = new Float64Array(rows.length);
  for (let r = 0; r < rows.length; r++) {
    let sum = 0, squares = 0;
    for (const c of cols) sum += x[rows[r] + c];
    mean[r] = sum / cols.length;
    for (const c of cols) squares += (x[rows[r] + c] - mean[r]) ** 2;
    variance[r] = squares / cols.length;
  }
  return { rows, cols, mean, variance };
}

/**
 * `t` with every row of a reduction over `axes` normalized as `f` says: `f(x − mean, variance,
 * row)` at each of its elements.
 */
function normalizedRows(
  t: RefTensor,
  axes: readonly number[],
  dtype: DType,
  f: (d: number, variance: number, row: number) => number,
): TensorData {
  const x = read(t), { rows, cols, mean, variance } = moments(x, t.shape, axes);
  const out = new Float64Array(x.length);
  for (let r = 0; r < rows.length; r++) {
    for (const c of cols) out[rows[r] + c] = f(x[rows[r] + c] - mean[r], variance[r], r);
  }
  return written(dtype, out);
}
