/**
 * Reference kernels for elementwise ops, broadcast through precomputed offset maps. Every
 * activation is implemented directly here (not through its decomposition) so tests can check the
 * decompositions against an independent implementation.
 *
 * @module
 */
import { isInt } from "../../jit/dtype.ts";
import { broadcastOffsets, sizeOf } from "../../jit/shape.ts";
import type { Kernel } from "./kernel.ts";
import { castValue, erf, intMod, roundHalfEven } from "./scalar_math.ts";
import { read, writer } from "./tensor_io.ts";

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
    if (a.data.length !== b.data.length || a.shape.length !== b.shape.length) return general(args);
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

/** Kernels of the elementwise family, by op name. */
export const elementwiseKernels: Record<string, Kernel> = {
  Add: binary((a, b) => a + b),
  Sub: binary((a, b) => a - b),
  Mul: (args) => binary(isInt(args.outputs[0].dtype) ? Math.imul : (a, b) => a * b)(args),
  Div: binary((a, b) => a / b),
  Pow: binary(Math.pow),
  Mod: (args) =>
    binary(
      args.attrs.fmod === 1
        ? (a, b) => (b === 0 && isInt(args.outputs[0].dtype) ? 0 : a % b)
        : intMod,
    )(args),
  Equal: binary((a, b) => +(a === b)),
  Greater: binary((a, b) => +(a > b)),
  Less: binary((a, b) => +(a < b)),
  GreaterOrEqual: binary((a, b) => +(a >= b)),
  LessOrEqual: binary((a, b) => +(a <= b)),
  And: binary((a, b) => +(a !== 0 && b !== 0)),
  Or: binary((a, b) => +(a !== 0 || b !== 0)),
  Max: map((xs) => xs.reduce((a, b) => (Number.isNaN(a) || a > b ? a : b))),
  Min: map((xs) => xs.reduce((a, b) => (Number.isNaN(a) || a < b ? a : b))),
  Where: map(([c, a, b]) => (c !== 0 ? a : b)),
  Neg: unary((x) => -x),
  Abs: unary(Math.abs),
  Sqrt: unary(Math.sqrt),
  Exp: unary(Math.exp),
  Log: unary(Math.log),
  Erf: unary(erf),
  Sin: unary(Math.sin),
  Cos: unary(Math.cos),
  Floor: unary(Math.floor),
  Ceil: unary(Math.ceil),
  Round: unary(roundHalfEven),
  Not: unary((x) => +(x === 0)),
  IsNaN: unary((x) => +Number.isNaN(x)),
  Reciprocal: unary((x) => 1 / x),
  Relu: unary((x) => (x < 0 ? 0 : x)),
  Sigmoid: unary(sigmoid),
  Tanh: unary(Math.tanh),
  HardSwish: unary((x) => x * hardSigmoid(x, 1 / 6, 0.5)),
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
  Cast: (args) => {
    const to = args.outputs[0].dtype;
    return unary((x) => castValue(x, to))(args);
  },
};
