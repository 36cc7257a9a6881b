/**
 * The activations and transcendental functions ONNX defines as functions of other ops (Elu,
 * Selu, Celu, ThresholdedRelu, Softplus, Softsign, Tan and the hyperbolic functions), each a kiln
 * op with its one decomposition: legalization rewrites it into primitives where a backend has no
 * kernel of its own (the reference backend runs it directly, the test suite checks both paths
 * agree), and importers only map a node onto it.
 *
 * @module
 */
import { defineOps, type OpDef } from "./registry.ts";
import { composite, FLOATS, like, num, sameAsInput } from "./elementwise.ts";

const floats = sameAsInput(FLOATS);

/** ONNX's default Selu constants (the float32 values its reference uses). */
const SELU_ALPHA = 1.67326319217681884765625, SELU_GAMMA = 1.05070102214813232421875;

const activationOps: readonly OpDef[] = [
  composite("Elu", [1, 1], floats, (e, [x], a) =>
    e.op("Where", [
      e.op("Less", [x, like(e, x, 0)]),
      e.op("Mul", [like(e, x, num(a.alpha, 1)), e.op("Sub", [e.op("Exp", [x]), like(e, x, 1)])]),
      x,
    ])),
  composite("Selu", [1, 1], floats, (e, [x], a) => {
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
  composite("Celu", [1, 1], floats, (e, [x], a) => {
    const alpha = num(a.alpha, 1);
    const scaled = e.op("Exp", [e.op("Div", [x, like(e, x, alpha)])]);
    const neg = e.op("Mul", [like(e, x, alpha), e.op("Sub", [scaled, like(e, x, 1)])]);
    return e.op("Add", [e.op("Max", [x, like(e, x, 0)]), e.op("Min", [neg, like(e, x, 0)])]);
  }),
  composite(
    "ThresholdedRelu",
    [1, 1],
    floats,
    (e, [x], a) =>
      e.op("Where", [e.op("Greater", [x, like(e, x, num(a.alpha, 1))]), x, like(e, x, 0)]),
  ),
  composite(
    "Softplus",
    [1, 1],
    floats,
    (e, [x]) => e.op("Log", [e.op("Add", [e.op("Exp", [x]), like(e, x, 1)])]),
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
  composite(
    "Asinh",
    [1, 1],
    floats,
    (e, [x]) =>
      e.op("Log", [
        e.op("Add", [x, e.op("Sqrt", [e.op("Add", [e.op("Mul", [x, x]), like(e, x, 1)])])]),
      ]),
  ),
  composite(
    "Acosh",
    [1, 1],
    floats,
    (e, [x]) =>
      e.op("Log", [
        e.op("Add", [x, e.op("Sqrt", [e.op("Sub", [e.op("Mul", [x, x]), like(e, x, 1)])])]),
      ]),
  ),
  composite("Atanh", [1, 1], floats, (e, [x]) =>
    e.op("Mul", [
      e.op("Log", [
        e.op("Div", [e.op("Add", [like(e, x, 1), x]), e.op("Sub", [like(e, x, 1), x])]),
      ]),
      like(e, x, 0.5),
    ])),
];

defineOps(activationOps);
