/**
 * Reference kernels of the QOperator ops (`jit/ops/qoperator.ts`): each operand dequantized and
 * the result quantized by DequantizeLinear's and QuantizeLinear's reference kernels, the float op
 * between them by its own; QGemm's exact sums by MatMulInteger's, then rescaled in f32 arithmetic
 * as its definition orders the steps.
 *
 * @module
 */
import { flatOpset, FLOAT_OPS, qgemmRoles, quantizedRoles } from "../../jit/ops/qoperator.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { type Kernel, runKernel } from "./kernel.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import type { DType } from "../../jit/ir/dtype.ts";
import { read, written } from "./tensor_io.ts";

/** Kernel `op` of `kernels` run on `inputs` giving one output of `shape` and `dtype`. */
function run(
  kernels: (op: string) => Kernel,
  op: string,
  given: [readonly RefTensor[], Attrs],
  out: [readonly number[], DType],
  where: string,
): RefTensor {
  return runKernel(kernels(op), op, given, out, where);
}

/** One QOperator op's kernel: dequantize, the float op, quantize. */
function qoperator(name: string, kernels: (op: string) => Kernel): Kernel {
  return ({ inputs, outputs, ctx }) => {
    const r = quantizedRoles(inputs, ctx.attrs), where = ctx.where, shape = outputs[0].shape;
    const real = r.operands.map((o) =>
      run(kernels, "DequantizeLinear", [[o.x, o.scale, ...(o.zero ? [o.zero] : [])], {}], [
        o.x.shape,
        "f32",
      ], where)
    );
    const [op, attrs] = FLOAT_OPS[name](ctx.attrs, real.map((x) => x.shape));
    let y: RefTensor;
    if (flatOpset(name, ctx.attrs)) {
      // Softmax before opset 13: one row of the 2-D view from the axis on.
      const rows = shape.slice(0, attrs.axis as number).reduce((p, d) => p * d, 1);
      const view = [rows, real[0].data.length / rows];
      y = run(kernels, op, [[{ ...real[0], shape: view }], { axis: 1 }], [view, "f32"], where);
    } else y = run(kernels, op, [real, attrs], [shape, "f32"], where);
    const q = [{ ...y, shape }, r.y.scale, ...(r.y.zero ? [r.y.zero] : [])];
    return [run(kernels, "QuantizeLinear", [q, {}], [shape, outputs[0].dtype], where).data];
  };
}

/** QGemm: the exact sums, the i32 bias, the scales and alpha in f32 arithmetic, quantized. */
function qGemm(kernels: (op: string) => Kernel): Kernel {
  return ({ inputs, outputs, ctx }) => {
    const r = qgemmRoles(inputs, ctx.attrs), f = Math.fround, where = ctx.where;
    const alpha = ctx.float("alpha", 1), [m, n] = outputs[0].shape;
    const t = (x: RefTensor, on: boolean): RefTensor => {
      if (!on) return x;
      const [rows, cols] = x.shape, v = read(x);
      const out = Array.from(
        { length: v.length },
        (_, i) => v[(i % rows) * cols + Math.floor(i / rows)],
      );
      return { data: written(x.dtype, out), shape: [cols, rows], dtype: x.dtype };
    };
    const zeros = [r.xZero, r.wZero].filter((z) => z !== undefined);
    const flags = { a_zero: +!!r.xZero, b_zero: +!!r.wZero };
    const operands = [t(r.x, ctx.int("transA", 0) === 1), t(r.w, ctx.int("transB", 0) === 1)];
    const acc = read(
      run(kernels, "MatMulInteger", [[...operands, ...zeros], flags], [[m, n], "i32"], where),
    );
    const [xs, ws] = [r.xScale, r.wScale].map(read), bias = r.bias && read(r.bias);
    const y = Array.from(acc, (v, i) => {
      const j = i % n,
        scale = f(xs[0] * ws[ws.length > 1 ? j : 0]),
        b = bias ? bias[j % bias.length] : 0;
      let out = f(f(alpha === 1 ? (v + b) | 0 : v) * scale);
      if (alpha !== 1) out = f(out * f(alpha));
      return bias && alpha !== 1 ? f(out + f(f(b) * scale)) : out;
    });
    const real = { data: written("f32", y), shape: [m, n], dtype: "f32" as const };
    if (!r.yScale) return [real.data];
    const q = [real, r.yScale, ...(r.yZero ? [r.yZero] : [])];
    return [run(kernels, "QuantizeLinear", [q, {}], [[m, n], outputs[0].dtype], where).data];
  };
}

/** The QOperator ops' kernels, finding the kernels they run through `kernels`. */
export function qoperatorKernels(kernels: (op: string) => Kernel): Record<string, Kernel> {
  const table: Record<string, Kernel> = { QGemm: qGemm(kernels) };
  for (const name of Object.keys(FLOAT_OPS)) table[name] = qoperator(name, kernels);
  return table;
}
