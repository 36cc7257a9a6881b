/**
 * The optimizers of ONNX's training domain (`ai.onnx.preview.training`): Adagrad, Momentum
 * (standard and Nesterov) and Adam (and, from `onnx/convert/gradient.ts`, Gradient), one update step of several tensors, each formula as ONNX
 * specifies it. They are elementwise arithmetic over the inputs, so they fuse and run on every
 * backend. The learning rate R and step count T are run-time scalars.
 *
 * @module
 */
import type { DType } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import { GRADIENT_CONVERTERS } from "./gradient.ts";
import {
  attrs,
  type Converter,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** The domain these ops live in. */
export const TRAINING_DOMAIN = "ai.onnx.preview.training";

/** R, T and the per-tensor input groups (X…, G…, and `groups - 2` state groups). */
function operands(c: NodeContext, groups: number): { r: Known; t: Known; sets: Known[][] } {
  const inputs = c.inputs();
  const n = (inputs.length - 2) / groups;
  if (!Number.isInteger(n) || n < 1 || inputs.some((k) => !k)) {
    throw new KilnError(
      `${c.label}: ${inputs.length} inputs; ${c.node.opType} takes R, T and ${groups} tensors per updated tensor`,
      { code: "bad-input", fix: "pass R, T, then every group of inputs in full" },
    );
  }
  const sets = [...Array(groups).keys()].map((g) => inputs.slice(2 + g * n, 2 + (g + 1) * n));
  return { r: inputs[0]!, t: inputs[1]!, sets: sets as Known[][] };
}

/** `norm_coefficient · X + G`, the regularized gradient. */
const regularized = (op: OpFn, x: Known, g: Known, norm: number) =>
  op("Add", [op("Mul", [x, scalar(norm, typeOf(x).dtype)]), g]);

/**
 * T and R in `d` (the updated tensors' float type: R may be f32 where they are f64), and whether
 * T is positive (the first step skips some terms).
 */
const step = (op: OpFn, t: Known, r: Known, d: DType) => {
  const tf = op("Cast", [t], { to: d });
  const rate = typeOf(r).dtype === d ? r : op("Cast", [r], { to: d });
  return { tf, rate, later: op("Greater", [tf, scalar(0, d)]) };
};

/** R / (1 + T · decay_factor). */
const decayed = (op: OpFn, r: Known, tf: Known, decay: number) => {
  const d = typeOf(tf).dtype;
  return op("Div", [r, op("Add", [scalar(1, d), op("Mul", [tf, scalar(decay, d)])])]);
};

/** The three optimizers. */
export const TRAINING_CONVERTERS: Record<string, Converter<Known>> = {
  ...GRADIENT_CONVERTERS,
  Adagrad: (c) => {
    const op = opOf(c);
    const a = attrs(c);
    const decay = a.float("decay_factor", 0)!, eps = a.float("epsilon", 1e-6)!;
    const norm = a.float("norm_coefficient", 0)!;
    const { r: r0, t, sets: [xs, gs, hs] } = operands(c, 3);
    const d = typeOf(xs[0]).dtype;
    const { tf, rate: r } = step(op, t, r0, d);
    const rate = decayed(op, r, tf, decay);
    const hNew = xs.map((x, i) => {
      const g = regularized(op, x, gs[i], norm);
      return op("Add", [hs[i], op("Mul", [g, g])]);
    });
    const xNew = xs.map((x, i) => {
      const g = regularized(op, x, gs[i], norm);
      const denom = op("Add", [op("Sqrt", [hNew[i]]), scalar(eps, d)]);
      return op("Sub", [x, op("Div", [op("Mul", [rate, g]), denom])]);
    });
    return [...xNew, ...hNew];
  },
  Momentum: (c) => {
    const op = opOf(c);
    const a = attrs(c);
    const alpha = a.float("alpha")!, beta = a.float("beta")!, norm = a.float("norm_coefficient")!;
    const mode = a.string("mode");
    if (mode !== "standard" && mode !== "nesterov") {
      throw new KilnError(`${c.label}: Momentum mode ${mode}`, {
        code: "bad-attribute",
        fix: 'use mode "standard" or "nesterov"',
      });
    }
    const { r: r0, t, sets: [xs, gs, vs] } = operands(c, 3);
    const d = typeOf(xs[0]).dtype;
    const { later, rate: r } = step(op, t, r0, d);
    // The gradient's coefficient is 1 at the first step (T = 0), beta after.
    const coefficient = op("Where", [later, scalar(beta, d), scalar(1, d)]);
    const vNew = xs.map((x, i) => {
      const g = regularized(op, x, gs[i], norm);
      return op("Add", [op("Mul", [vs[i], scalar(alpha, d)]), op("Mul", [g, coefficient])]);
    });
    const xNew = xs.map((x, i) => {
      const g = regularized(op, x, gs[i], norm);
      const move = mode === "standard"
        ? vNew[i]
        : op("Add", [g, op("Mul", [vNew[i], scalar(alpha, d)])]);
      return op("Sub", [x, op("Mul", [r, move])]);
    });
    return [...xNew, ...vNew];
  },
  Adam: (c) => {
    const op = opOf(c);
    const a = attrs(c);
    const alpha = a.float("alpha", 0.9)!, beta = a.float("beta", 0.999)!;
    const eps = a.float("epsilon", 1e-6)!, norm = a.float("norm_coefficient", 0)!;
    const post = a.float("norm_coefficient_post", 0)!;
    const { r: r0, t, sets: [xs, gs, vs, hs] } = operands(c, 4);
    const d = typeOf(xs[0]).dtype;
    const { tf, later, rate: r } = step(op, t, r0, d);
    // R · sqrt(1 − β^T) / (1 − α^T) after the first step (bias correction).
    const corrected = op("Div", [
      op("Mul", [
        r,
        op("Sqrt", [op("Sub", [scalar(1, d), op("Pow", [scalar(beta, d), tf])])]),
      ]),
      op("Sub", [scalar(1, d), op("Pow", [scalar(alpha, d), tf])]),
    ]);
    const rate = op("Where", [later, corrected, r]);
    const g = xs.map((x, i) => regularized(op, x, gs[i], norm));
    const vNew = g.map((gi, i) =>
      op("Add", [
        op("Mul", [vs[i], scalar(alpha, d)]),
        op("Mul", [gi, scalar(1 - alpha, d)]),
      ])
    );
    const hNew = g.map((gi, i) =>
      op("Add", [
        op("Mul", [hs[i], scalar(beta, d)]),
        op("Mul", [op("Mul", [gi, gi]), scalar(1 - beta, d)]),
      ])
    );
    const xNew = xs.map((x, i) => {
      const denom = op("Add", [op("Sqrt", [hNew[i]]), scalar(eps, d)]);
      const moved = op("Sub", [x, op("Div", [op("Mul", [rate, vNew[i]]), denom])]);
      return post ? op("Mul", [moved, scalar(1 - post, d)]) : moved;
    });
    for (const x of xs) {
      if (typeOf(x).dtype !== "f32" && typeOf(x).dtype !== "f64") {
        throw new KilnError(`${c.label}: Adam of ${typeOf(x).dtype} tensors`, {
          code: "dtype-mismatch",
          fix: "update f32 or f64 tensors",
        });
      }
    }
    return [...xNew, ...vNew, ...hNew];
  },
};
