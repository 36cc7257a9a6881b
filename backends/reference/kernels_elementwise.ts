/**
 * Reference kernels for elementwise ops, broadcast through precomputed offset maps. Every
 * activation is implemented directly here (not through its decomposition) so tests can check the
 * decompositions against an independent implementation.
 *
 * @module
 */
import { ALU_OPS, type AluOp } from "../../jit/ir/kernel_ir.ts";
import { byteSize, fromBf16Bits, toBf16Bits } from "../../jit/ir/dtype.ts";
import { broadcastOffsets, sameShape, sizeOf } from "../../jit/ir/shape.ts";
import type { Kernel } from "./kernel.ts";
import { erf } from "./scalar_math.ts";
import { scalarOp } from "./scalar_ops.ts";
import { read, writer } from "./tensor_io.ts";
import { num } from "../../jit/ops/elementwise.ts";

type Unary = (x: number) => number;
type Binary = (a: number, b: number) => number;

/** Elementwise map over any number of broadcast inputs. */
function map(fn: (args: number[]) => number): Kernel {
  return ({ inputs, outputs }) => {
    const out = outputs[0];
    const n = sizeOf(out.shape);
    const xs = inputs.map(read);
    const offs = inputs.map((t) => broadcastOffsets(t.shape, out.shape));
    const w = writer(out.dtype, n);
    const args = new Array<number>(xs.length);
    for (let i = 0; i < n; i++) {
      for (let k = 0; k < xs.length; k++) {
        const o = offs[k];
        args[k] = xs[k][o ? o[i] : i];
      }
      w.out[i] = fn(args);
    }
    return [w.finish()];
  };
}

function unary(fn: Unary): Kernel {
  return ({ inputs, outputs }) => {
    const x = read(inputs[0]);
    const w = writer(outputs[0].dtype, x.length);
    for (let i = 0; i < x.length; i++) w.out[i] = fn(x[i]);
    return [w.finish()];
  };
}

function binary(fn: Binary): Kernel {
  const general = map(([a, b]) => fn(a, b));
  return (args) => {
    const [a, b] = args.inputs;
    // The fast path only where nothing broadcasts: [3, 1, 4] and [3, 4, 1] have as many elements
    // and axes, and broadcast to [3, 4, 4] (a length-and-rank test once paired them element by
    // element, and import-time folding gave TopK's comparisons wrong values).
    const out = args.outputs[0].shape;
    if (!sameShape(a.shape, out) || !sameShape(b.shape, out)) return general(args);
    const x = read(a), y = read(b);
    const w = writer(args.outputs[0].dtype, x.length);
    for (let i = 0; i < x.length; i++) w.out[i] = fn(x[i], y[i]);
    return [w.finish()];
  };
}

const sigmoid: Unary = (x) => 1 / (1 + Math.exp(-x));
const hardSigmoid = (x: number, alpha: number, beta: number) => {
  const v = alpha * x + beta;
  return v < 0 ? 0 : v > 1 ? 1 : v;
};

/** A kernel applying the shared scalar semantics of a primitive elementwise op. */
function primitive(op: AluOp): Kernel {
  return (args) => {
    const fn = scalarOp(op, args.outputs[0].dtype, args.attrs)!;
    return (args.inputs.length === 1
      ? unary((x) => fn([x]))
      : args.inputs.length === 2
      ? binary((a, b) => fn([a, b]))
      : map(fn))(args);
  };
}

/** Kernels of the elementwise family, by op name. */
export const elementwiseKernels: Record<string, Kernel> = {
  ...Object.fromEntries(ALU_OPS.map((op) => [op, primitive(op)])),
  GreaterOrEqual: binary((a, b) => +(a >= b)),
  LessOrEqual: binary((a, b) => +(a <= b)),
  // Of 0/1 bools, inequality; of integers, bitwise (written back into the type's width).
  Xor: binary((a, b) => a ^ b),
  BitShift: (args) => {
    const bits = 8 * byteSize(args.outputs[0].dtype),
      left = args.ctx.choice("direction", ["LEFT", "RIGHT"]) === "LEFT";
    return binary((x, y) =>
      y >= bits ? 0 : left ? (x * 2 ** y) % 2 ** bits : Math.floor(x / 2 ** y)
    )(args);
  },
  RoundToBf16: unary((x) => (Number.isNaN(x) ? x : fromBf16Bits(toBf16Bits(x)))),
  Trilu: ({ inputs: [x], outputs, attrs }) => {
    const k = num(attrs.k, 0), upper = num(attrs.upper, 1) !== 0;
    const [rows, cols] = x.shape.slice(-2);
    const v = read(x), w = writer(outputs[0].dtype, v.length);
    for (let i = 0; i < v.length; i++) {
      const offset = (i % cols) - (Math.floor(i / cols) % rows);
      w.out[i] = (upper ? offset >= k : offset <= k) ? v[i] : 0;
    }
    return [w.finish()];
  },
  Sum: map((xs) => xs.reduce((a, b) => a + b)),
  Mean: map((xs) => xs.reduce((a, b) => a + b) / xs.length),
  Max: map((xs) => xs.reduce((a, b) => (Number.isNaN(a) || a > b ? a : b))),
  Min: map((xs) => xs.reduce((a, b) => (Number.isNaN(a) || a < b ? a : b))),
  Reciprocal: unary((x) => 1 / x),
  Relu: unary((x) => (x < 0 ? 0 : x)),
  Sigmoid: unary(sigmoid),
  Tanh: unary(Math.tanh),
  HardSwish: unary((x) => x * hardSigmoid(x, 1 / 6, 0.5)),
  Elu: (args) => {
    const alpha = num(args.attrs.alpha, 1);
    return unary((x) => (x < 0 ? alpha * (Math.exp(x) - 1) : x))(args);
  },
  Selu: (args) => {
    const alpha = num(args.attrs.alpha, 1.67326319217681884765625);
    const gamma = num(args.attrs.gamma, 1.05070102214813232421875);
    return unary((x) => gamma * (x > 0 ? x : alpha * Math.exp(x) - alpha))(args);
  },
  Celu: (args) => {
    const alpha = num(args.attrs.alpha, 1);
    return unary((x) => Math.max(x, 0) + Math.min(alpha * (Math.exp(x / alpha) - 1), 0))(args);
  },
  ThresholdedRelu: (args) => {
    const alpha = num(args.attrs.alpha, 1);
    return unary((x) => (x > alpha ? x : 0))(args);
  },
  // Stable for large x: exp overflowed from x ≈ 709 and gave ∞ where softplus(x) is x.
  Softplus: unary((x) => Math.max(x, 0) + Math.log1p(Math.exp(-Math.abs(x)))),
  PRelu: binary((x, slope) => (x < 0 ? x * slope : x)),
  Shrink: (args) => {
    const bias = num(args.attrs.bias, 0), lambd = num(args.attrs.lambd, 0.5);
    return unary((x) => (x < -lambd ? x + bias : x > lambd ? x - bias : 0))(args);
  },
  // Math.sign keeps ±0 and NaN (NaN gave 0).
  Sign: unary(Math.sign),
  IsInf: (args) => {
    const pos = num(args.attrs.detect_positive, 1) === 1;
    const neg = num(args.attrs.detect_negative, 1) === 1;
    return unary((x) => +((pos && x === Infinity) || (neg && x === -Infinity)))(args);
  },
  Softsign: unary((x) => x / (Math.abs(x) + 1)),
  Tan: unary(Math.tan),
  Sinh: unary(Math.sinh),
  Cosh: unary(Math.cosh),
  Asinh: unary(Math.asinh),
  Acosh: unary(Math.acosh),
  Atanh: unary(Math.atanh),
  Atan: unary(Math.atan),
  Asin: unary(Math.asin),
  Acos: unary(Math.acos),
  // Softplus as x past 20, as the decomposition (and ONNX Runtime) take it.
  Mish: unary((x) => x * Math.tanh(x > 20 ? x : Math.log1p(Math.exp(x)))),
  LeakyRelu: (args) =>
    unary((x) => (x < 0 ? x * ((args.attrs.alpha as number | undefined) ?? 0.01) : x))(args),
  HardSigmoid: (args) =>
    unary((x) =>
      hardSigmoid(
        x,
        (args.attrs.alpha as number | undefined) ?? 0.2,
        (args.attrs.beta as number | undefined) ?? 0.5,
      )
    )(args),
  Gelu: (args) =>
    unary(
      args.attrs.approximate === "tanh"
        ? (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)))
        : (x) => 0.5 * x * (1 + erf(x * Math.SQRT1_2)),
    )(args),
  Clip: (args) => {
    const lo = (args.attrs.min as number | undefined) ?? -Infinity;
    const hi = (args.attrs.max as number | undefined) ?? Infinity;
    return unary((x) => (x < lo ? lo : x > hi ? hi : x))(args);
  },
};
