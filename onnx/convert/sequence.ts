/**
 * The sequence ops, run in the importer: a sequence is a list of tensors known element by element
 * when the model is compiled, so SequenceConstruct, SequenceEmpty, SequenceInsert, SequenceErase,
 * SequenceAt, SequenceLength, SplitToSequence and ConcatFromSequence only rearrange that list
 * (positions must be constant). What reaches the graph are the tensors: Split, Concat, Unsqueeze.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import {
  attribute,
  attrs,
  constant,
  constInts,
  type Known,
  type NodeContext,
  type None,
  type Sequence,
  typeOf,
} from "../import/node_context.ts";

const sequence = (items: readonly Known[]): Sequence => ({ kind: "sequence", items });

/** Input `i` as whatever it is: a tensor, a sequence, or an empty optional (also when left out). */
function anything(c: NodeContext, i: number): Known | Sequence | None {
  if (!c.node.input[i] || c.absent(i)) return { kind: "none" };
  return c.input(i) ?? sequence(c.sequence(i));
}

/** A position input (default `fallback`), negative counting from the end, checked against `n`. */
function position(
  c: NodeContext,
  i: number,
  n: number,
  fallback: number,
  inclusive = false,
): number {
  const p = constInts(c, i, "position")?.[0] ?? fallback;
  const at = p < 0 ? p + n : p;
  if (!(at >= 0 && (inclusive ? at <= n : at < n))) {
    throw new KilnError(`${c.label}: position ${p} is outside a sequence of ${n}`, {
      code: "out-of-range",
      fix: `use a position in [${-n}, ${inclusive ? n : n - 1}]`,
    });
  }
  return at;
}

/** Converters by ONNX op type. */
export const SEQUENCE_CONVERTERS: Record<
  string,
  (c: NodeContext) => (Known | Sequence | None)[]
> = {
  // Identity passes any value through: a tensor, a sequence, an empty optional.
  Identity: (c) => {
    const v = anything(c, 0);
    return [v.kind === "const" || v.kind === "value" ? c.emit("Identity", [v])[0] : v];
  },
  Optional: (c) => {
    attribute(c, "type"); // the element type of an empty optional: nothing to compute from it
    return [anything(c, 0)];
  },
  OptionalHasElement: (c) => [constant([+(anything(c, 0).kind !== "none")], [], "bool")],
  OptionalGetElement: (c) => {
    const v = anything(c, 0);
    if (v.kind === "none") {
      throw new KilnError(`${c.label}: the optional is empty`, {
        code: "bad-input",
        fix: "pass a value for the optional input (OptionalHasElement tells whether there is one)",
      });
    }
    return [v.kind === "sequence" ? v : c.emit("Identity", [v])[0]];
  },
  SequenceMap: (c) => {
    const items = c.sequence(0);
    const extra = c.node.input.slice(1).map((_, i) => anything(c, 1 + i));
    const outs: Known[][] = [];
    items.forEach((item, t) => {
      // A sequence among the extra inputs contributes its element t; a tensor, itself.
      const args = extra.map((e) => (e.kind === "sequence" ? e.items[t] : e));
      c.subgraph("body", [item, ...args]).forEach((o, j) => {
        if (o.kind !== "const" && o.kind !== "value") {
          throw new KilnError(`${c.label}: its body outputs a ${o.kind}`, {
            code: "unsupported",
            fix: "map to tensors",
          });
        }
        (outs[j] ??= []).push(o);
      });
    });
    const count = attribute(c, "body")?.g?.output?.length ?? outs.length;
    return [...Array(count)].map((_, j) => sequence(outs[j] ?? []));
  },
  SequenceEmpty: (c) => {
    attrs(c).int("dtype");
    return [sequence([])];
  },
  SequenceConstruct: (c) => [sequence(c.inputs())],
  SequenceInsert: (c) => {
    const items = [...c.sequence(0)];
    items.splice(position(c, 2, items.length, items.length, true), 0, c.required(1));
    return [sequence(items)];
  },
  SequenceErase: (c) => {
    const items = [...c.sequence(0)];
    items.splice(position(c, 1, items.length, -1), 1);
    return [sequence(items)];
  },
  SequenceAt: (c) => {
    const items = c.sequence(0);
    return c.emit("Identity", [items[position(c, 1, items.length, 0)]]);
  },
  SequenceLength: (c) => [constant([c.sequence(0).length], [], "i32", true)],
  SplitToSequence: (c) => {
    const x = c.required(0);
    const shape = typeOf(x).shape;
    const a = attrs(c);
    const axisAttr = a.int("axis", 0)!;
    const axis = axisAttr < 0 ? axisAttr + shape.length : axisAttr;
    const keepdims = a.int("keepdims", 1) === 1;
    const given = c.input(1) ? constInts(c, 1, "split")! : undefined;
    const n = shape[axis];
    // A scalar split is a chunk size (the last chunk smaller); a list gives every size.
    const scalar = given && typeOf(c.required(1)).shape.length === 0;
    const sizes = !given
      ? Array(n).fill(1)
      : scalar
      ? Array.from({ length: Math.ceil(n / given[0]) }, (_, i) =>
        Math.min(given[0], n - i * given[0]))
      : given;
    if (sizes.reduce((p, q) => p + q, 0) !== n || sizes.some((s) => s < 0)) {
      throw new KilnError(`${c.label}: split [${sizes}] of an axis of ${n}`, {
        code: "bad-attribute",
        fix: "give split sizes that add up to the axis",
      });
    }
    const parts = c.emit("Split", [x], { axis, split: sizes }, sizes.length);
    const items = !given && !keepdims
      ? parts.map((p) => c.emit("Squeeze", [p], { axes: [axis] })[0])
      : parts;
    return [sequence(items)];
  },
  ConcatFromSequence: (c) => {
    const items = c.sequence(0);
    const a = attrs(c);
    const axis = a.int("axis")!;
    const fresh = a.int("new_axis", 0) === 1;
    if (items.length === 0) {
      throw new KilnError(`${c.label}: an empty sequence has nothing to concatenate`, {
        code: "invalid-graph",
        fix: "concatenate a sequence with at least one tensor",
      });
    }
    const parts = fresh ? items.map((k) => c.emit("Unsqueeze", [k], { axes: [axis] })[0]) : items;
    return parts.length === 1
      ? c.emit("Identity", [parts[0]])
      : c.emit("Concat", [...parts], { axis });
  },
};
