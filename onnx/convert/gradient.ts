/**
 * ONNX's `Gradient` (`ai.onnx.preview.training`): the derivatives of tensor `y` with respect to
 * tensors `xs`, by reverse-mode differentiation of the nodes that compute `y` from them, at
 * import time. The seed is ones (the gradient of the sum of `y`'s elements, as training graphs
 * use it); each node's vector-Jacobian product is emitted as ordinary kiln ops, so the gradient
 * fuses and runs on every backend like the forward graph. Gradients through a broadcast are
 * summed back to the operand's shape.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import type { Shape } from "../../jit/ir/shape.ts";
import { scalar } from "./composite.ts";
import {
  attribute,
  type Converter,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  type Producer,
  typeOf,
} from "../import/node_context.ts";

const UTF8 = new TextDecoder();

/** `g` (of a broadcast result) summed back to `shape`. */
function unbroadcast(op: OpFn, g: Known, shape: Shape): Known {
  const gs = typeOf(g).shape;
  if (gs.join() === shape.join()) return g;
  const lead = gs.length - shape.length;
  const axes = gs.flatMap((d, i) => (i < lead || (shape[i - lead] === 1 && d !== 1) ? [i] : []));
  const summed = axes.length ? op("ReduceSum", [g], { axes, keepdims: 1 }) : g;
  return op("Reshape", [summed], { shape: [...shape] });
}

/** The last two axes swapped. */
function transposed(op: OpFn, x: Known): Known {
  const rank = typeOf(x).shape.length;
  const perm = [...Array(rank).keys()];
  [perm[rank - 2], perm[rank - 1]] = [perm[rank - 1], perm[rank - 2]];
  return op("Transpose", [x], { perm });
}

/**
 * Per op: the gradients of its inputs from `g`, the gradient of its (first) output `y`. An input
 * that needs none (or is not differentiable) gets undefined.
 */
const RULES: Record<string, (op: OpFn, g: Known, x: Known[], y: Known) => (Known | undefined)[]> = {
  Identity: (_op, g) => [g],
  Add: (op, g, [a, b]) => [g, g].map((d, i) => unbroadcast(op, d, typeOf([a, b][i]).shape)),
  Sub: (op, g, [a, b]) => [
    unbroadcast(op, g, typeOf(a).shape),
    unbroadcast(op, op("Neg", [g]), typeOf(b).shape),
  ],
  Mul: (op, g, [a, b]) => [
    unbroadcast(op, op("Mul", [g, b]), typeOf(a).shape),
    unbroadcast(op, op("Mul", [g, a]), typeOf(b).shape),
  ],
  Div: (op, g, [a, b], y) => [
    unbroadcast(op, op("Div", [g, b]), typeOf(a).shape),
    unbroadcast(op, op("Neg", [op("Div", [op("Mul", [g, y]), b])]), typeOf(b).shape),
  ],
  Neg: (op, g) => [op("Neg", [g])],
  Exp: (op, g, _x, y) => [op("Mul", [g, y])],
  Log: (op, g, [x]) => [op("Div", [g, x])],
  Sqrt: (op, g, _x, y) => [op("Div", [g, op("Mul", [y, scalar(2, typeOf(y).dtype)])])],
  Relu: (op, g, [x]) => {
    const zero = scalar(0, typeOf(x).dtype);
    return [op("Where", [op("Greater", [x, zero]), g, zero])];
  },
  Sigmoid: (op, g, _x, y) => {
    const one = scalar(1, typeOf(y).dtype);
    return [op("Mul", [g, op("Mul", [y, op("Sub", [one, y])])])];
  },
  Tanh: (op, g, _x, y) => {
    const one = scalar(1, typeOf(y).dtype);
    return [op("Mul", [g, op("Sub", [one, op("Mul", [y, y])])])];
  },
  MatMul: (op, g, [a, b]) => {
    if (typeOf(a).shape.length < 2 || typeOf(b).shape.length < 2) return [undefined, undefined];
    return [
      unbroadcast(op, op("MatMul", [g, transposed(op, b)]), typeOf(a).shape),
      unbroadcast(op, op("MatMul", [transposed(op, a), g]), typeOf(b).shape),
    ];
  },
};

/** The names of string-list attribute `name`. */
function names(c: NodeContext, name: string): string[] {
  return (attribute(c, name)?.strings ?? []).map((b) => UTF8.decode(b));
}

/** `Gradient(xs…, zs…)`: dy/dx for each x of `xs`. */
function gradient(c: NodeContext): Known[] {
  const op = opOf(c);
  const xs = names(c, "xs");
  names(c, "zs"); // inputs held constant: they simply get no gradient
  const yName = attribute(c, "y")?.s;
  const y = yName ? c.value(UTF8.decode(yName)) : undefined;
  if (!y || xs.length === 0) {
    throw new KilnError(`${c.label}: Gradient needs its "y" and "xs" attributes naming tensors`, {
      code: "bad-attribute",
      fix: "name the differentiated tensor in y and the inputs in xs",
    });
  }
  const wanted = new Set(xs);
  // The nodes between xs and y, from y back (each node once, in reverse topological order).
  const order: Producer[] = [];
  const seen = new Set<string>();
  const reaches = new Map<string, boolean>();
  const visit = (name: string): boolean => {
    if (reaches.has(name)) return reaches.get(name)!;
    reaches.set(name, wanted.has(name));
    const p = wanted.has(name) ? undefined : c.producer(name);
    if (!p) return reaches.get(name)!;
    const hit = p.node.input.map((i) => (i ? visit(i) : false)).some((h) => h);
    reaches.set(name, hit);
    if (hit && !seen.has(p.node.output[0])) {
      seen.add(p.node.output[0]);
      order.push(p);
    }
    return hit;
  };
  const yKey = UTF8.decode(yName!);
  visit(yKey);
  const grads = new Map<string, Known>();
  const add = (name: string, g: Known) => {
    const prev = grads.get(name);
    grads.set(name, prev ? op("Add", [prev, g]) : g);
  };
  const ty = typeOf(y);
  add(yKey, op("Expand", [scalar(1, ty.dtype)], { shape: [...ty.shape] }));
  for (const p of order.reverse()) {
    const out = p.node.output[0];
    const g = grads.get(out);
    if (!g) continue;
    const rule = RULES[p.node.opType];
    if (!rule || p.node.output.filter((o) => o).length !== 1) {
      throw new KilnError(
        `${c.label}: kiln cannot differentiate ${p.node.opType} (node "${
          p.node.name || out
        }") on the way from xs to y`,
        {
          code: "unsupported",
          fix: `Gradient differentiates ${Object.keys(RULES).join(", ")}`,
        },
      );
    }
    const inputs = p.inputs.map((k, i) => {
      if (!k) {
        throw new KilnError(`${c.label}: input ${i} of ${p.node.opType} is missing`, {
          code: "invalid-graph",
          fix: "re-export the model",
        });
      }
      return k;
    });
    rule(op, g, inputs, c.value(out)!).forEach((d, i) => {
      const name = p.node.input[i];
      if (d && name && reaches.get(name)) add(name, d);
    });
  }
  return xs.map((x) => {
    const known = c.value(x);
    if (!known) {
      throw new KilnError(`${c.label}: xs names "${x}", which is not a tensor`, {
        code: "bad-attribute",
        fix: "name tensors of the graph in xs",
      });
    }
    const t = typeOf(known);
    // y does not depend on x: its gradient is zero.
    return grads.get(x) ?? op("Expand", [scalar(0, t.dtype)], { shape: [...t.shape] });
  });
}

/** The Gradient op of the preview training domain. */
export const GRADIENT_CONVERTERS: Record<string, Converter<Known>> = { Gradient: gradient };
