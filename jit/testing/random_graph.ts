/**
 * A seeded generator of valid random graphs for differential testing: broadcasting binaries,
 * unary math, reductions over random axes, softmax/layer norm, matmuls, and movement ops
 * (transpose, reshape, slice, expand, pad, squeeze/unsqueeze, concat, gather), over odd sizes.
 * Ops whose results jump on tiny input changes (floor, comparisons as outputs) are left out so
 * that legitimately different rounding orders compare within tolerance.
 *
 * @module
 */
import type { Graph } from "../ir/graph.ts";
import { GraphBuilder, type Sym } from "../frontend/graph_builder.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { type Attrs, inferNode, type ValueType } from "../ops/mod.ts";
import { rng, uniform } from "../support/random.ts";
import { type Shape, sizeOf } from "../ir/shape.ts";

/** A random graph and inputs for it. */
export interface RandomCase {
  /** The seed that produced it. */
  readonly seed: number;
  /** The graph. */
  readonly graph: Graph;
  /** Seeded inputs. */
  readonly inputs: Record<string, HostTensor>;
}

/** Options of {@linkcode randomGraph}. */
export interface RandomGraphOptions {
  /** Most ops (default 20). */
  readonly maxOps?: number;
  /** Largest dimension (default 7). */
  readonly maxDim?: number;
}

interface Val {
  readonly sym: Sym;
  readonly type: ValueType;
}

const UNARY = [
  "Exp",
  "Neg",
  "Abs",
  "Sin",
  "Cos",
  "Relu",
  "Sigmoid",
  "Tanh",
  "Erf",
  "Gelu",
  "HardSwish",
  "LeakyRelu",
];
const BINARY = ["Add", "Sub", "Mul", "Max", "Min"];

/** Builds the random case for `seed`. */
export function randomGraph(seed: number, options: RandomGraphOptions = {}): RandomCase {
  const next = rng(seed * 7919 + 17);
  const int = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)];
  const maxDim = options.maxDim ?? 7;
  const b = new GraphBuilder();
  const vals: Val[] = [];
  const consumed = new Set<Val>();
  const inputs: Record<string, HostTensor> = {};
  const newInput = (shape: Shape): Val => {
    const name = `x${Object.keys(inputs).length}`;
    inputs[name] = {
      data: uniform(sizeOf(shape), seed * 31 + Object.keys(inputs).length),
      shape,
      dtype: "f32",
    };
    const v = { sym: b.input(name, shape), type: { shape, dtype: "f32" as const } };
    vals.push(v);
    return v;
  };
  const randomShape = (): number[] => [...Array(int(0, 4))].map(() => int(1, maxDim));
  const apply = (op: string, ins: Val[], attrs: Attrs = {}): Val | undefined => {
    let types: ValueType[];
    try {
      types = inferNode(op, ins.map((v) => v.type), attrs, op);
    } catch {
      return undefined;
    }
    if (types.length !== 1 || sizeOf(types[0].shape) > 4096) return undefined;
    const v = { sym: b.op(op, ins.map((x) => x.sym), attrs), type: types[0] };
    ins.forEach((x) => consumed.add(x));
    vals.push(v);
    return v;
  };
  /** A value broadcast-compatible with `v`: a trailing subshape with some dims set to 1. */
  const partner = (v: Val): Val => {
    const reuse = vals.filter((o) => o !== v && broadcastable(o.type.shape, v.type.shape));
    if (reuse.length && next() < 0.4) return pick(reuse);
    const rank = int(0, v.type.shape.length);
    return newInput(
      v.type.shape.slice(v.type.shape.length - rank).map((d) => (next() < 0.3 ? 1 : d)),
    );
  };
  const first = newInput(randomShape());
  const ops = int(3, options.maxOps ?? 20);
  for (let i = 0; i < ops; i++) {
    const v = next() < 0.75 ? vals[vals.length - 1] : pick(vals);
    const rank = v.type.shape.length;
    const axis = rank ? int(-rank, rank - 1) : 0;
    switch (
      pick([
        "unary",
        "unary",
        "binary",
        "binary",
        "reduce",
        "row",
        "matmul",
        "move",
        "move",
        "move",
        "index",
      ])
    ) {
      case "unary":
        apply(pick(UNARY), [v]);
        break;
      case "binary": {
        const [a, c] = next() < 0.5 ? [v, partner(v)] : [partner(v), v];
        apply(pick(BINARY), [a, c]);
        break;
      }
      case "reduce": {
        const axes = [...Array(rank).keys()].filter(() => next() < 0.5);
        apply(pick(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]), [v], {
          axes,
          keepdims: int(0, 1),
        });
        break;
      }
      case "row":
        if (!rank) break;
        if (next() < 0.6) apply(pick(["Softmax", "LogSoftmax"]), [v], { axis });
        else {
          const norm = v.type.shape.slice(axis < 0 ? axis + rank : axis);
          apply("LayerNormalization", [v, newInput(norm), newInput(norm)], { axis, epsilon: 1e-3 });
        }
        break;
      case "matmul": {
        if (rank < 1) break;
        const k = v.type.shape[rank - 1];
        const w = next() < 0.7
          ? newInput([k, int(1, maxDim)])
          : newInput([...v.type.shape.slice(0, -2), k, int(1, maxDim)]);
        const y = apply("MatMul", [v, w]);
        if (y && next() < 0.5) {
          apply("Add", [y, newInput([y.type.shape[y.type.shape.length - 1] ?? 1])]);
        }
        break;
      }
      case "move":
        move(v);
        break;
      case "index": {
        if (!rank) break;
        if (next() < 0.5) {
          apply("Concat", [v, v], { axis });
          break;
        }
        const dim = v.type.shape[axis < 0 ? axis + rank : axis];
        const n = int(1, 3);
        const idx = Int32Array.from({ length: n }, () => int(-dim, dim - 1));
        apply("Gather", [v, { sym: b.constant(idx), type: { shape: [n], dtype: "i32" } }], {
          axis,
        });
        break;
      }
    }
  }
  function move(v: Val): void {
    const s = v.type.shape;
    const rank = s.length;
    switch (pick(["Transpose", "Reshape", "Slice", "Expand", "Pad", "Unsqueeze", "Squeeze"])) {
      case "Transpose":
        apply("Transpose", [v], { perm: shuffle([...Array(rank).keys()]) });
        break;
      case "Reshape": {
        const n = sizeOf(s);
        const dims: number[] = [];
        let rest = n;
        while (rest > 1 && dims.length < 3) {
          const d = [...Array(rest).keys()].map((x) => x + 1).filter((x) =>
            rest % x === 0 && x > 1
          );
          const f = pick(d);
          dims.push(f);
          rest /= f;
        }
        if (rest > 1 || !dims.length) dims.push(rest);
        apply("Reshape", [v], {
          shape: next() < 0.3 && dims.length > 1 ? [...dims.slice(0, -1), -1] : dims,
        });
        break;
      }
      case "Slice": {
        if (!rank) break;
        const a = int(0, rank - 1);
        const d = s[a];
        const step = pick([1, 1, 2, -1]);
        const starts = step > 0 ? int(0, d - 1) : int(0, d - 1) - d;
        apply("Slice", [v], {
          starts: [starts],
          ends: [step > 0 ? int(starts + 1, d + 2) : -d - 1],
          axes: [a],
          steps: [step],
        });
        break;
      }
      case "Expand":
        apply("Expand", [v], { shape: [int(1, 3), ...s.map((d) => (d === 1 ? int(1, 4) : d))] });
        break;
      case "Pad":
        apply("Pad", [v], {
          pads: [...s.map(() => int(0, 2)), ...s.map(() => int(0, 2))],
          value: pick([0, 1.5]),
        });
        break;
      case "Unsqueeze":
        apply("Unsqueeze", [v], { axes: [int(0, rank)] });
        break;
      case "Squeeze":
        apply("Squeeze", [v]);
        break;
    }
  }
  function shuffle(xs: number[]): number[] {
    for (let i = xs.length - 1; i > 0; i--) {
      const j = Math.floor(next() * (i + 1));
      [xs[i], xs[j]] = [xs[j], xs[i]];
    }
    return xs;
  }
  const produced = vals.filter((v) => !(v.sym.name in inputs));
  const outs = produced.length
    ? [produced[produced.length - 1], ...produced.filter(() => next() < 0.15)]
    : [first];
  [...new Set(outs)].forEach((v, i) => b.output(`y${i}`, v.sym));
  return { seed, graph: b.build(), inputs };
}

function broadcastable(a: Shape, into: Shape): boolean {
  if (a.length > into.length) return false;
  return a.every((d, i) => d === 1 || d === into[into.length - a.length + i]);
}
