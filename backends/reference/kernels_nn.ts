/**
 * Reference kernels for MatMul/Gemm (and IntegerMatMul), Conv and pooling. MatMul runs i-k-j with a float64 row
 * accumulator: simple, exact to float64 before the final rounding, and fast enough that a
 * 1024×1024 product takes about a second.
 *
 * @module
 */
import { resolveWindow, swapLast, type Window } from "../../jit/ops/nn.ts";
import { as2d } from "../../jit/ops/window_lowering.ts";
import { InferContext } from "../../jit/ops/mod.ts";
import type { DType, TensorData } from "../../jit/ir/dtype.ts";
import { sizeOf, stridesOf, tryBroadcast } from "../../jit/ir/shape.ts";
import type { Kernel, KernelArgs } from "./kernel.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { read, writer, written } from "./tensor_io.ts";

/** Batched matmul of [..., m, k] × [..., k, n] with broadcast batch dims. */
function matmul(a: RefTensor, b: RefTensor, out: { dtype: RefTensor["dtype"]; length: number }) {
  const as = a.shape.length === 1 ? [1, a.shape[0]] : a.shape;
  const bs = b.shape.length === 1 ? [b.shape[0], 1] : b.shape;
  const m = as[as.length - 2], k = as[as.length - 1], n = bs[bs.length - 1];
  const batch = tryBroadcast([as.slice(0, -2), bs.slice(0, -2)])!;
  const batchOffsets = (shape: readonly number[], size: number) => {
    const s = stridesOf(shape);
    return (i: number) => {
      let off = 0, rest = i;
      for (let d = batch.length - 1; d >= 0; d--) {
        const q = rest % batch[d];
        rest = Math.floor(rest / batch[d]);
        const j = d - (batch.length - shape.length);
        if (j >= 0 && shape[j] !== 1) off += q * s[j];
      }
      return off * size;
    };
  };
  const aOff = batchOffsets(as.slice(0, -2), m * k);
  const bOff = batchOffsets(bs.slice(0, -2), k * n);
  const x = read(a), y = read(b);
  const w = writer(out.dtype, out.length);
  const acc = new Float64Array(n);
  for (let t = 0; t < sizeOf(batch); t++) {
    const ao = aOff(t), bo = bOff(t), oo = t * m * n;
    for (let i = 0; i < m; i++) {
      acc.fill(0);
      for (let p = 0; p < k; p++) {
        const av = x[ao + i * k + p];
        const row = bo + p * n;
        for (let j = 0; j < n; j++) acc[j] += av * y[row + j];
      }
      for (let j = 0; j < n; j++) w.out[oo + i * n + j] = acc[j];
    }
  }
  return w.finish();
}

/** Visits every output position of a 2-D window op with the input rows/cols its taps fall on (may lie outside). */
export function forEachWindow(
  win: Window,
  visit: (o: number, rows: number[], cols: number[]) => void,
): void {
  const [oh, ow] = win.out;
  for (let y = 0; y < oh; y++) {
    const rows = [...Array(win.kernel[0]).keys()].map((i) =>
      y * win.strides[0] - win.padsBegin[0] + i * win.dilations[0]
    );
    for (let x = 0; x < ow; x++) {
      const cols = [...Array(win.kernel[1]).keys()].map((i) =>
        x * win.strides[1] - win.padsBegin[1] + i * win.dilations[1]
      );
      visit(y * ow + x, rows, cols);
    }
  }
}

/** Kernels of the linear-algebra and spatial family, by op name. */
export const nnKernels: Record<string, Kernel> = {
  MatMul: (
    { inputs, outputs },
  ) => [
    matmul(inputs[0], inputs[1], { dtype: outputs[0].dtype, length: sizeOf(outputs[0].shape) }),
  ],
  // Products of integers summed in float64 are exact while the sums stay under 2^53: at most
  // 2^23 products of IntegerMatMul's bound 2^30.
  IntegerMatMul: ({ inputs, outputs }) => [
    matmul(inputs[0], inputs[1], { dtype: outputs[0].dtype, length: sizeOf(outputs[0].shape) }),
  ],
  Gemm: ({ inputs, outputs, ctx }) => {
    const [a, b, c] = inputs;
    const ta = ctx.int("transA", 0) !== 0, tb = ctx.int("transB", 0) !== 0;
    const alpha = ctx.float("alpha", 1), beta = ctx.float("beta", 1);
    const [m, n] = outputs[0].shape;
    const k = ta ? a.shape[0] : a.shape[1];
    const x = read(a), y = read(b), z = c ? read(c) : undefined;
    const out = writer(outputs[0].dtype, m * n);
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let p = 0; p < k; p++) {
          s += x[ta ? p * m + i : i * k + p] * y[tb ? j * k + p : p * n + j];
        }
        let bias = 0;
        if (z) {
          const cs = c!.shape;
          const ci = cs.length === 2
            ? (cs[0] === 1 ? 0 : i) * cs[1] + (cs[1] === 1 ? 0 : j)
            : cs.length === 1
            ? (cs[0] === 1 ? 0 : j)
            : 0;
          bias = z[ci];
        }
        out.out[i * n + j] = alpha * s + beta * bias;
      }
    }
    return [out.finish()];
  },
  FusedMatMul: ({ inputs: [a, b], outputs, ctx }) => {
    const swapped = (t: RefTensor, on: boolean): RefTensor => {
      if (!on || t.shape.length < 2) return t;
      const [r, c] = t.shape.slice(-2), v = read(t), out = writer(t.dtype, v.length);
      for (let i = 0; i < v.length; i++) {
        const base = i - (i % (r * c)), at = i % (r * c);
        // Row at ÷ c, column at mod c: the column's row of the swapped tensor.
        out.out[base + (at % c) * r + Math.floor(at / c)] = v[i];
      }
      return { data: out.finish(), shape: swapLast(t.shape, true), dtype: t.dtype };
    };
    const out = outputs[0], alpha = ctx.float("alpha", 1);
    const ta = swapped(a, ctx.int("transA", 0) === 1), tb = swapped(b, ctx.int("transB", 0) === 1);
    const y = matmul(ta, tb, { dtype: out.dtype, length: sizeOf(out.shape) });
    if (alpha === 1) return [y];
    return [written(out.dtype, Array.from(read({ ...out, data: y }), (x) => x * alpha))];
  },
  // Conv's float64 loop over integers: exact while its sums stay under 2^53, then wrapped to i32.
  IntegerConv: (args) => nnKernels.Conv(args),
  Conv: (args) => {
    const { inputs, outputs, ctx } = args;
    const [xt, wt, bt] = inputs;
    if (xt.shape.length === 3) {
      // 1-D: the same data as 2-D over a height of 1 (the 2-D loop is the fast one).
      return nnKernels.Conv({ ...lifted(args), inputs: [up(xt), up(wt), ...(bt ? [bt] : [])] });
    }
    if (xt.shape.length !== 4) return [convNd(inputs, outputs[0].dtype, ctx)];
    const [n, c, h, wd] = xt.shape;
    const [m, cg, kh, kw] = wt.shape;
    const group = ctx.int("group", 1);
    const win = resolveWindow(ctx, [h, wd], [kh, kw]);
    const [oh, ow] = win.out;
    const x = read(xt), w = read(wt), b = bt ? read(bt) : undefined;
    const out = writer(outputs[0].dtype, n * m * oh * ow);
    const mg = m / group;
    for (let img = 0; img < n; img++) {
      for (let oc = 0; oc < m; oc++) {
        const g = Math.floor(oc / mg);
        const obase = (img * m + oc) * oh * ow;
        forEachWindow(win, (o, rows, cols) => {
          let s = b ? b[oc] : 0;
          for (let ci = 0; ci < cg; ci++) {
            const xc = (img * c + g * cg + ci) * h * wd;
            const wc = (oc * cg + ci) * kh * kw;
            for (let i = 0; i < kh; i++) {
              if (rows[i] < 0 || rows[i] >= h) continue;
              for (let j = 0; j < kw; j++) {
                if (cols[j] >= 0 && cols[j] < wd) {
                  s += x[xc + rows[i] * wd + cols[j]] * w[wc + i * kw + j];
                }
              }
            }
          }
          out.out[obase + o] = s;
        });
      }
    }
    return [out.finish()];
  },
  LRN: ({ inputs: [x], outputs, ctx }) => {
    const size = ctx.int("size"), alpha = ctx.float("alpha", 1e-4);
    const beta = ctx.float("beta", 0.75), bias = ctx.float("bias", 1);
    const [n, ch] = x.shape, rest = sizeOf(x.shape.slice(2));
    const v = read(x), w = writer(outputs[0].dtype, v.length);
    const lo = Math.floor((size - 1) / 2), hi = Math.ceil((size - 1) / 2);
    for (let b = 0; b < n; b++) {
      for (let c = 0; c < ch; c++) {
        for (let p = 0; p < rest; p++) {
          let sum = 0;
          for (let k = Math.max(0, c - lo); k <= Math.min(ch - 1, c + hi); k++) {
            sum += v[(b * ch + k) * rest + p] ** 2;
          }
          const at = (b * ch + c) * rest + p;
          w.out[at] = v[at] / (bias + (alpha / size) * sum) ** beta;
        }
      }
    }
    return [w.finish()];
  },
  MaxPool: (args) => pool(args.inputs[0], args, "max"),
  AveragePool: (args) => pool(args.inputs[0], args, "avg"),
};

/** A 1-D tensor [N, C, W] as 2-D data over a height of 1 (the same elements). */
const up = (t: RefTensor): RefTensor => ({ ...t, shape: [...t.shape.slice(0, 2), 1, t.shape[2]] });

/** A 1-D window op's kernel arguments as its 2-D form's: the attributes lifted (`as2d`). */
function lifted(args: KernelArgs): KernelArgs {
  const { ctx } = args, attrs = as2d(ctx.attrs);
  return {
    ...args,
    attrs,
    ctx: new InferContext({ op: ctx.op, where: ctx.where, inputs: ctx.inputs, attrs }),
  };
}

function pool(xt: RefTensor, args: Parameters<Kernel>[0], kind: "max" | "avg"): TensorData[] {
  const { outputs, ctx } = args;
  if (xt.shape.length === 3) {
    // 1-D: the same data as 2-D over a height of 1.
    return pool(up(xt), lifted(args), kind);
  }
  if (xt.shape.length !== 4) {
    return ctx.fail(
      "the reference pools support 1-D and 2-D spatial inputs only",
      "reshape the input to N×C×H×W",
      "unsupported",
    );
  }
  const [n, c, h, wd] = xt.shape;
  const win = resolveWindow(ctx, [h, wd], ctx.ints("kernel_shape"));
  const includePad = ctx.int("count_include_pad", 0) !== 0;
  const [oh, ow] = win.out;
  const x = read(xt);
  const out = writer(outputs[0].dtype, n * c * oh * ow);
  for (let plane = 0; plane < n * c; plane++) {
    const base = plane * h * wd;
    forEachWindow(win, (o, rows, cols) => {
      let acc = kind === "max" ? -Infinity : 0;
      let count = 0;
      for (const r of rows) {
        for (const col of cols) {
          if (r >= 0 && r < h && col >= 0 && col < wd) {
            const v = x[base + r * wd + col];
            acc = kind === "max" ? (Number.isNaN(acc) || acc >= v ? acc : v) : acc + v;
            count++;
          } else if (includePad && insidePads(r, h, win, 0) && insidePads(col, wd, win, 1)) count++;
        }
      }
      out.out[plane * oh * ow + o] = kind === "max" ? acc : acc / count;
    });
  }
  return [out.finish()];
}

/** Whether a window tap lies within the input or its explicit pads (not the ceil_mode overhang). */
function insidePads(p: number, size: number, win: Window, axis: number): boolean {
  return p >= -win.padsBegin[axis] && p < size + win.padsEnd[axis];
}

/**
 * A convolution over any number of spatial axes (the 3-D one; 1-D and 2-D take the 2-D loop):
 * per output point, the channels of its group, then the kernel's taps in row-major order.
 */
function convNd(
  [xt, wt, bt]: readonly RefTensor[],
  dtype: DType,
  ctx: InferContext,
): TensorData {
  const [n, c, ...spatial] = xt.shape, [m, cg, ...kernel] = wt.shape;
  const win = resolveWindow(ctx, spatial, kernel), group = ctx.int("group", 1), mg = m / group;
  const outs = sizeOf(win.out), taps = sizeOf(kernel), plane = sizeOf(spatial);
  const os = stridesOf(win.out), ks = stridesOf(kernel), xs = stridesOf(spatial);
  const x = read(xt), w = read(wt), b = bt ? read(bt) : undefined;
  const out = writer(dtype, n * m * outs);
  for (let img = 0; img < n; img++) {
    for (let oc = 0; oc < m; oc++) {
      const g = Math.floor(oc / mg);
      for (let o = 0; o < outs; o++) {
        let s = b ? b[oc] : 0;
        for (let ci = 0; ci < cg; ci++) {
          const xc = (img * c + g * cg + ci) * plane, wc = (oc * cg + ci) * taps;
          for (let t = 0; t < taps; t++) {
            let at = 0;
            for (let d = 0; d < spatial.length && at >= 0; d++) {
              const q = (Math.floor(o / os[d]) % win.out[d]) * win.strides[d] - win.padsBegin[d] +
                (Math.floor(t / ks[d]) % kernel[d]) * win.dilations[d];
              at = q >= 0 && q < spatial[d] ? at + q * xs[d] : -1;
            }
            if (at >= 0) s += x[xc + at] * w[wc + t];
          }
        }
        out.out[(img * m + oc) * outs + o] = s;
      }
    }
  }
  return out.finish();
}
