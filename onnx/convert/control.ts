/**
 * Control flow, resolved when the model is compiled: If inlines the branch its (constant)
 * condition picks; Loop and Scan unroll their body, inlined once per iteration, over a trip count
 * and conditions known at import (Loop's condition output must fold to a constant each time).
 * Scan outputs are stacked with Unsqueeze and Concat; opset 8's batched Scan unrolls each batch
 * element's scan. A condition or trip count computed at run time makes `OnnxModel` specialise on
 * it (small inputs) or is a typed error.
 *
 * @module
 */
import { KilnError, shown } from "../../jit/support/errors.ts";
import {
  attribute,
  attrs,
  constant,
  constInts,
  type Converter,
  type Known,
  type NodeContext,
  type None,
  type Sequence,
  typeOf,
} from "../import/node_context.ts";

/** Most iterations a Loop is unrolled to. */
const MAX_ITERATIONS = 4096;

const tensorOnly = (c: NodeContext, k: Known | Sequence | None, what: string): Known => {
  if (k.kind === "sequence" || k.kind === "none") {
    throw new KilnError(
      `${c.label}: its ${what} is a ${k.kind === "none" ? "missing optional" : "sequence"}`,
      {
        code: "unsupported",
        fix: "kiln unrolls loops over tensors",
      },
    );
  }
  return k;
};

/** Stacks per-iteration tensors along a new `axis` (reversed when `reverse`). */
function stack(c: NodeContext, items: Known[], axis: number, reverse: boolean): Known {
  const ordered = reverse ? [...items].reverse() : items;
  const lifted = ordered.map((k) => c.emit("Unsqueeze", [k], { axes: [axis] })[0]);
  return lifted.length === 1 ? lifted[0] : c.emit("Concat", lifted, { axis })[0];
}

/** Converters by ONNX op type. */
export const CONTROL_CONVERTERS: Record<string, Converter> = {
  If: (c) => {
    c.required(0);
    const [cond] = constInts(c, 0, "cond")!;
    // Both branches are attributes the node defines; the one not taken is read all the same.
    attribute(c, cond ? "else_branch" : "then_branch");
    return c.subgraph(cond ? "then_branch" : "else_branch", []);
  },
  Loop: (c) => {
    const scalar = (i: number, what: string) => {
      const v = constInts(c, i, what)!;
      if (v.length !== 1) {
        throw new KilnError(`${c.label}: its ${what} has ${v.length} values`, {
          code: "invalid-graph",
          fix: `give the loop a scalar ${what}`,
        });
      }
      return v[0];
    };
    const trips = c.input(0) ? scalar(0, "M") : undefined;
    let cond = c.input(1) ? scalar(1, "cond") !== 0 : true;
    let carried: (Known | Sequence | None)[] = c.node.input.slice(2).map((_, i) =>
      c.absent(2 + i)
        ? { kind: "none" }
        : c.input(2 + i) ?? { kind: "sequence", items: c.sequence(2 + i) }
    );
    const scans: Known[][] = [];
    let i = 0;
    for (; cond && (trips === undefined || i < trips); i++) {
      if (i >= MAX_ITERATIONS) {
        throw new KilnError(`${c.label}: more than ${MAX_ITERATIONS} iterations to unroll`, {
          code: "limit",
          fix: "bound the loop with a smaller trip count",
        });
      }
      const outs = c.subgraph("body", [
        constant([i], [], "i32", true),
        constant([1], [], "bool"),
        ...carried,
      ]);
      const next = tensorOnly(c, outs[0], "condition");
      if (next.kind !== "const") {
        throw new KilnError(`${c.label}: its condition is computed at run time`, {
          code: "unsupported",
          fix: "kiln unrolls loops: the condition must follow from constants (or use a trip count)",
        });
      }
      cond = Number(next.tensor.data[0]) !== 0;
      carried = outs.slice(1, 1 + carried.length);
      outs.slice(1 + carried.length).forEach((k, j) =>
        (scans[j] ??= []).push(tensorOnly(c, k, "scan output"))
      );
    }
    if (i === 0 && (attribute(c, "body")?.g?.output?.length ?? 0) > 1 + carried.length) {
      throw new KilnError(
        `${c.label}: a loop that never runs has empty scan outputs of unknown shape`,
        {
          code: "unsupported",
          fix: "run the loop at least once",
        },
      );
    }
    return [...carried, ...scans.map((items) => stack(c, items, 0, false))];
  },
  Scan: (c) => {
    const a = attrs(c);
    const m = a.int("num_scan_inputs")!;
    if (c.opset < 9) return batchedScan(c, m, a.ints("directions"));
    const inputs = c.inputs();
    const n = inputs.length - m;
    const scanned = inputs.slice(n);
    const axes = (a.ints("scan_input_axes") ?? scanned.map(() => 0)).map((x, i) =>
      x < 0 ? x + typeOf(scanned[i]).shape.length : x
    );
    const { states, outs } = unrollScan(
      c,
      inputs.slice(0, n),
      scanned,
      axes,
      a.ints("scan_input_directions"),
    );
    const outAxes = a.ints("scan_output_axes") ?? outs.map(() => 0);
    const outDirections = a.ints("scan_output_directions") ?? outs.map(() => 0);
    return [
      ...states,
      ...outs.map((items, j) => {
        const rank = typeOf(items[0]).shape.length + 1;
        const axis = outAxes[j] < 0 ? outAxes[j] + rank : outAxes[j];
        return stack(c, items, axis, outDirections[j] === 1);
      }),
    ];
  },
};

/**
 * Scan's body inlined once per step along each scanned input's axis (reversed where its
 * direction is 1): the final states and each scan output's per-step values.
 */
function unrollScan(
  c: NodeContext,
  states0: readonly (Known | Sequence | None)[],
  scanned: readonly Known[],
  axes: readonly number[],
  directions?: readonly number[],
): { states: (Known | Sequence | None)[]; outs: Known[][] } {
  const length = scanned.length ? typeOf(scanned[0]).shape[axes[0]] : 0;
  let states = [...states0];
  const outs: Known[][] = [];
  for (let t = 0; t < length; t++) {
    const slices = scanned.map((x, i) => {
      const at = directions?.[i] ? length - 1 - t : t;
      return c.emit("Gather", [x, constant([at], [], "i32")], { axis: axes[i] })[0];
    });
    const result = c.subgraph("body", [...states, ...slices]);
    states = result.slice(0, states0.length);
    result.slice(states0.length).forEach((k, j) =>
      (outs[j] ??= []).push(tensorOnly(c, k, "scan output"))
    );
  }
  return { states, outs };
}

/**
 * Scan of opsets 8 and before: every state, scanned input and output has a batch axis first, the
 * sequence runs along axis 1, and input 0 is the optional `sequence_lens`. Each batch element's
 * scan is unrolled on its own (the body sees no batch axis) and the results stacked back along
 * axis 0. Sequence lengths shorter than the inputs' are a typed error.
 */
function batchedScan(c: NodeContext, m: number, directions?: readonly number[]): Known[] {
  const inputs = c.node.input.slice(1).map((_, i) => c.required(1 + i));
  const n = inputs.length - m;
  const rank = (x: Known) => typeOf(x).shape.length;
  if (!(m >= 1 && n >= 0) || inputs.some((x, i) => rank(x) < (i < n ? 1 : 2))) {
    throw new KilnError(
      `${c.label}: an opset-8 Scan needs its states (batch, …), then num_scan_inputs ≥ 1 ` +
        `scanned inputs (batch, sequence, …); it has ${inputs.length} inputs and ` +
        `num_scan_inputs ${m}`,
      { code: "invalid-graph", fix: "give Scan its states, then its num_scan_inputs inputs" },
    );
  }
  const [batch, length] = typeOf(inputs[n]).shape;
  if (c.input(0)) {
    const lens = constInts(c, 0, "sequence_lens")!;
    if (lens.some((l) => l !== length)) {
      throw new KilnError(
        `${c.label}: sequence_lens ${shown(lens)} leave some of the ${length} steps out`,
        { code: "unsupported", fix: "give every batch element the full sequence length" },
      );
    }
  }
  const finals: Known[][] = inputs.slice(0, n).map(() => []);
  const outs: Known[][] = [];
  for (let b = 0; b < batch; b++) {
    const element = inputs.map((x) =>
      c.emit("Gather", [x, constant([b], [], "i32")], { axis: 0 })[0]
    );
    const scanned = element.slice(n);
    const run = unrollScan(c, element.slice(0, n), scanned, scanned.map(() => 0), directions);
    run.states.forEach((k, i) => finals[i].push(tensorOnly(c, k, "state")));
    run.outs.forEach((items, j) => (outs[j] ??= []).push(stack(c, items, 0, false)));
  }
  return [...finals, ...outs].map((items) => stack(c, items, 0, false));
}
