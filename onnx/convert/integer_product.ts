/**
 * Integer products onto kiln's ops of their names (`jit/ops/integer_products.ts`):
 * MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, expanded at import so a constant
 * weight's shift and its exact chunks are worked out once.
 *
 * @module
 */
import { window } from "./conv.ts";
import type { Converter, Known, NodeContext } from "../import/node_context.ts";

/** MatMulInteger and ConvInteger: the zero points given, flagged for the op. */
function integerProduct(c: NodeContext, op: "MatMulInteger" | "ConvInteger"): Known[] {
  const [az, bz] = [c.input(2), c.input(3)];
  const ins = [c.required(0), c.required(1), ...[az, bz].filter((z) => z !== undefined)];
  const conv = op === "ConvInteger" ? window(c) : {};
  return c.emit(op, ins, { ...conv, a_zero: +!!az, b_zero: +!!bz });
}

/** A QLinear op's eight inputs (all required) and Conv's bias where given. */
function qlinear(c: NodeContext): Known[] {
  const bias = c.input(8);
  return [...[0, 1, 2, 3, 4, 5, 6, 7].map((i) => c.required(i)), ...(bias ? [bias] : [])];
}

/** The converters of this module, by op type. */
export const INTEGER_PRODUCT_CONVERTERS: Record<string, Converter<Known>> = {
  MatMulInteger: (c) => integerProduct(c, "MatMulInteger"),
  ConvInteger: (c) => integerProduct(c, "ConvInteger"),
  QLinearMatMul: (c) => c.emit("QLinearMatMul", qlinear(c).slice(0, 8), {}),
  QLinearConv: (c) => c.emit("QLinearConv", qlinear(c), window(c)),
};
