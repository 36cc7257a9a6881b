/**
 * The optimizers of ONNX's training domain (`ai.onnx.preview.training`): Adagrad, Momentum
 * (standard and Nesterov) and Adam, one update step of several tensors, as kiln's ops of the
 * same names (`jit/ops/training.ts`), one a tensor; and, from `onnx/convert/gradient.ts`,
 * Gradient.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { GRADIENT_CONVERTERS } from "./gradient.ts";
import { attrs, type Converter, type Known, type NodeContext } from "../import/node_context.ts";

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

/** Each optimizer's float attributes, as ONNX names them. */
const FLOAT_ATTRIBUTES: Record<string, readonly string[]> = {
  Adagrad: ["decay_factor", "epsilon", "norm_coefficient"],
  Momentum: ["alpha", "beta", "norm_coefficient"],
  Adam: ["alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"],
};

/**
 * The optimizer `name` over every updated tensor: one kiln op of the same name a tensor (R, T, its
 * X, G and state), the attributes given passed on (the op applies ONNX's defaults), the outputs
 * in ONNX's order (all the X, then each state for all the tensors).
 */
function optimizer(c: NodeContext, name: string, groups: number): Known[] {
  const { r, t, sets } = operands(c, groups), a = attrs(c);
  const given: Record<string, number | string> = {};
  for (const attr of FLOAT_ATTRIBUTES[name]) {
    const v = a.float(attr);
    if (v !== undefined) given[attr] = v;
  }
  const mode = a.string("mode");
  if (mode !== undefined) given.mode = mode;
  // X and the states come out; G does not.
  const updates = sets[0].map((_, i) =>
    c.emit(name, [r, t, ...sets.map((set) => set[i])], given, groups - 1)
  );
  return [...Array(groups - 1).keys()].flatMap((o) => updates.map((u) => u[o]));
}

/** The three optimizers, and Gradient. */
export const TRAINING_CONVERTERS: Record<string, Converter<Known>> = {
  ...GRADIENT_CONVERTERS,
  Adagrad: (c) => optimizer(c, "Adagrad", 3),
  Momentum: (c) => optimizer(c, "Momentum", 3),
  Adam: (c) => optimizer(c, "Adam", 4),
};
