/**
 * The activations and elementwise functions ONNX defines as functions of other ops (Elu, Selu,
 * Celu, ThresholdedRelu, Softplus, Softsign, PRelu, Shrink, Sign, IsInf, Tan and the hyperbolic
 * functions, Atan, Asin and Acos), each a kiln
 * op with its one decomposition: legalization rewrites it into primitives where a backend has no
 * kernel of its own (the reference backend runs it directly, the test suite checks both paths
 * agree), and importers only map a node onto it.
 *
 * @module
 */
import {
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";
import {
  broadcastInputs,
  composite,
  FLOATS,
  like,
  num,
  NUMERIC,
  sameAsInput,
  SIGNED,
  withNumbers,
} from "./elementwise.ts";

const floats = sameAsInput(FLOATS);

/** ONNX's default Selu constants (the float32 values its reference uses). */
const SELU_ALPHA = 1.67326319217681884765625, SELU_GAMMA = 1.05070102214813232421875;

const activationOps: readonly OpDef[] = [
  composite("Elu", [1, 1], withNumbers(["alpha"], floats), (e, [x], a) =>
    e.op("Where", [
      e.op("Less", [x, like(e, x, 0)]),
      e.op("Mul", [like(e, x, num(a.alpha, 1)), e.op("Sub", [e.op("Exp", [x]), like(e, x, 1)])]),
      x,
    ])),
  composite("Selu", [1, 1], withNumbers(["alpha", "gamma"], floats), (e, [x], a) => {
    const alpha = num(a.alpha, SELU_ALPHA), gamma = num(a.gamma, SELU_GAMMA);
    const neg = e.op("Sub", [
      e.op("Mul", [like(e, x, alpha), e.op("Exp", [x])]),
      like(e, x, alpha),
    ]);
    return e.op("Mul", [
      like(e, x, gamma),
      e.op("Where", [e.op("Greater", [x, like(e, x, 0)]), x, neg]),
    ]);
  }),
  composite("Celu", [1, 1], withNumbers(["alpha"], floats), (e, [x], a) => {
    const alpha = num(a.alpha, 1);
    const scaled = e.op("Exp", [e.op("Div", [x, like(e, x, alpha)])]);
    const neg = e.op("Mul", [like(e, x, alpha), e.op("Sub", [scaled, like(e, x, 1)])]);
    return e.op("Add", [e.op("Max", [x, like(e, x, 0)]), e.op("Min", [neg, like(e, x, 0)])]);
  }),
  composite(
    "ThresholdedRelu",
    [1, 1],
    withNumbers(["alpha"], floats),
    (e, [x], a) =>
      e.op("Where", [e.op("Greater", [x, like(e, x, num(a.alpha, 1))]), x, like(e, x, 0)]),
  ),
  // log(1 + e^x) as max(x, 0) + log(1 + e^−|x|): e^x overflowed to ∞ from x ≈ 89 (ONNX
  // Runtime answers x there).
  composite(
    "Softplus",
    [1, 1],
    floats,
    (e, [x]) =>
      e.op("Add", [
        e.op("Max", [x, like(e, x, 0)]),
        e.op("Log", [
          e.op("Add", [e.op("Exp", [e.op("Neg", [e.op("Abs", [x])])]), like(e, x, 1)]),
        ]),
      ]),
  ),
  composite(
    "Softsign",
    [1, 1],
    floats,
    (e, [x]) => e.op("Div", [x, e.op("Add", [e.op("Abs", [x]), like(e, x, 1)])]),
  ),
  composite("Tan", [1, 1], floats, (e, [x]) => e.op("Div", [e.op("Sin", [x]), e.op("Cos", [x])])),
  composite(
    "Sinh",
    [1, 1],
    floats,
    (e, [x]) =>
      e.op("Mul", [
        e.op("Sub", [e.op("Exp", [x]), e.op("Exp", [e.op("Neg", [x])])]),
        like(e, x, 0.5),
      ]),
  ),
  composite(
    "Cosh",
    [1, 1],
    floats,
    (e, [x]) =>
      e.op("Mul", [
        e.op("Add", [e.op("Exp", [x]), e.op("Exp", [e.op("Neg", [x])])]),
        like(e, x, 0.5),
      ]),
  ),
  // asinh(|x|) with x's sign: for a negative x, x + √(x² + 1) cancelled to 0 (−∞ for −1e10).
  composite("Asinh", [1, 1], floats, (e, [x]) => {
    const a = e.op("Abs", [x]);
    const r = large(e, a, e.op("Add", [e.op("Mul", [a, a]), like(e, x, 1)]));
    return e.op("Where", [e.op("Less", [x, like(e, x, 0)]), e.op("Neg", [r]), r]);
  }),
  composite(
    "Acosh",
    [1, 1],
    floats,
    (e, [x]) => large(e, x, e.op("Sub", [e.op("Mul", [x, x]), like(e, x, 1)])),
  ),
  composite("Atanh", [1, 1], floats, (e, [x]) =>
    e.op("Mul", [
      e.op("Log", [
        e.op("Div", [e.op("Add", [like(e, x, 1), x]), e.op("Sub", [like(e, x, 1), x])]),
      ]),
      like(e, x, 0.5),
    ])),
  composite("Atan", [1, 1], floats, (e, [x]) => atan(e, x)),
  composite("Asin", [1, 1], floats, (e, [x]) => asin(e, x)),
  composite("Acos", [1, 1], floats, (e, [x]) => e.op("Sub", [like(e, x, Math.PI / 2), asin(e, x)])),
  // PRelu: x where it is not negative, x · slope where it is (the slope broadcast to x).
  composite(
    "PRelu",
    [2, 2],
    slopeRule,
    (e, [x, slope]) =>
      e.op("Where", [e.op("Less", [x, like(e, x, 0)]), e.op("Mul", [x, slope]), x]),
  ),
  // Shrink: x + bias below −lambd, x − bias above lambd, 0 between.
  composite("Shrink", [1, 1], withNumbers(["bias", "lambd"], sameAsInput(NUMERIC)), (e, [x], a) => {
    const bias = num(a.bias, 0), lambd = num(a.lambd, 0.5);
    const low = e.op("Less", [x, like(e, x, -lambd)]);
    const high = e.op("Greater", [x, like(e, x, lambd)]);
    const inner = e.op("Where", [high, e.op("Sub", [x, like(e, x, bias)]), like(e, x, 0)]);
    return e.op("Where", [low, e.op("Add", [x, like(e, x, bias)]), inner]);
  }),
  // Sign: 1, −1, or x·0 where neither comparison holds: ±0 for ±0, NaN for NaN (it gave 0).
  composite("Sign", [1, 1], sameAsInput(NUMERIC), (e, [x]) =>
    e.op("Where", [
      e.op("Greater", [x, like(e, x, 0)]),
      like(e, x, 1),
      e.op("Where", [
        e.op("Less", [x, like(e, x, 0)]),
        like(e, x, -1),
        e.op("Mul", [x, like(e, x, 0)]),
      ]),
    ])),
  // IsInf: x equal to +∞ and/or −∞ as the flags say (neither flag: all false).
  composite("IsInf", [1, 1], isInfRule, (e, [x], a) => {
    const hits = [
      ...(num(a.detect_positive, 1) === 1 ? [e.op("Equal", [x, like(e, x, Infinity)])] : []),
      ...(num(a.detect_negative, 1) === 1 ? [e.op("Equal", [x, like(e, x, -Infinity)])] : []),
    ];
    return hits.length ? hits.reduce((p, q) => e.op("Or", [p, q])) : e.op("Less", [x, x]);
  }),
];

/**
 * log(a + √`square`) for a ≥ 0 (asinh's and acosh's shared form), or log(a) + ln 2 where a is so
 * large that a² would overflow (from 1e18: √(a² ± 1) is a there in any float), as the functions
 * are: acosh(3e38) is 89.29, the squared form gave ∞.
 */
function large(e: Emitter, a: EmitRef, square: EmitRef): EmitRef {
  const direct = e.op("Log", [e.op("Add", [a, e.op("Sqrt", [square])])]);
  const far = e.op("Add", [e.op("Log", [a]), like(e, a, Math.LN2)]);
  return e.op("Where", [e.op("Greater", [a, like(e, a, 1e18)]), far, direct]);
}

/**
 * atan for |x| ≤ 1: two argument halvings (atan x = 2 atan(x / (1 + √(1 + x²)))) bring |x| under
 * tan(π/16) ≈ 0.2, where the odd Taylor series to x¹⁵ is exact to f32 precision.
 */
function atanSmall(e: Emitter, x: EmitRef): EmitRef {
  const k = (v: number) => like(e, x, v);
  const half = (t: EmitRef) =>
    e.op("Div", [t, e.op("Add", [k(1), e.op("Sqrt", [e.op("Add", [k(1), e.op("Mul", [t, t])])])])]);
  const t = half(half(x));
  const t2 = e.op("Mul", [t, t]);
  // Σ (−t²)^j / (2j + 1), by Horner in −t².
  let sum = k(1 / 15);
  for (let n = 13; n >= 1; n -= 2) sum = e.op("Sub", [k(1 / n), e.op("Mul", [t2, sum])]);
  return e.op("Mul", [e.op("Mul", [t, sum]), k(4)]);
}

/** atan on the whole line: atan x = sign(x)·π/2 − atan(1/x) past |x| = 1. */
function atan(e: Emitter, x: EmitRef): EmitRef {
  const k = (v: number) => like(e, x, v);
  const big = e.op("Greater", [e.op("Abs", [x]), k(1)]);
  const inner = atanSmall(e, e.op("Where", [big, e.op("Div", [k(1), x]), x]));
  const sign = e.op("Where", [e.op("Less", [x, k(0)]), k(-Math.PI / 2), k(Math.PI / 2)]);
  return e.op("Where", [big, e.op("Sub", [sign, inner]), inner]);
}

/** asin x = 2 atan(x / (1 + √(1 − x²))): no division by zero at ±1. */
function asin(e: Emitter, x: EmitRef): EmitRef {
  const root = e.op("Sqrt", [e.op("Sub", [like(e, x, 1), e.op("Mul", [x, x])])]);
  return e.op("Mul", [
    like(e, x, 2),
    atan(e, e.op("Div", [x, e.op("Add", [like(e, x, 1), root])])),
  ]);
}

/** PRelu's type rule: a signed x and a slope of its dtype that broadcasts to x's shape. */
function slopeRule(ctx: InferContext): ValueType[] {
  const dtype = ctx.sameDType();
  ctx.requireDType(0, SIGNED);
  return [{ shape: broadcastInputs(ctx), dtype }];
}

/** IsInf's type rule: a float input, a bool of its shape. */
function isInfRule(ctx: InferContext): ValueType[] {
  ctx.requireDType(0, FLOATS);
  for (const flag of ["detect_positive", "detect_negative"]) if (ctx.has(flag)) ctx.int(flag);
  return [{ shape: ctx.input(0).shape, dtype: "bool" }];
}

defineOps(activationOps);
