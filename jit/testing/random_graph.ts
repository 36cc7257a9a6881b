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

/**
 * Values no uniform draw gives: NaN, ±inf, ±0, a subnormal, and values past exp's, erf's and the
 * f32 sine reduction's ranges (the exact precision's special cases).
 */
export const SPECIAL_VALUES: readonly number[] = [
  NaN,
  Infinity,
  -Infinity,
  0,
  -0,
  1e-40,
  88.73,
  -104,
  1e30,
  3.93,
  8192.5,
];

/** `inputs` (f32) with every seventh element, from the fourth, replaced by a special value. */
export function withSpecials(inputs: Record<string, HostTensor>): Record<string, HostTensor> {
  const n = SPECIAL_VALUES.length;
  return Object.fromEntries(
    Object.entries(inputs).map(([name, t]) => {
      const data = Float32Array.from(t.data as Float32Array);
      for (let i = 3; i < data.length; i += 7) data[i] = SPECIAL_VALUES[Math.floor(i / 7) % n];
      return [name, { ...t, data }];
    }),
  );
}

/** Builds the random case for `seed`. */
export function randomGraph(seed: number, options: RandomGraphOptions = {}): RandomCase {
  const draw = new GraphDraw(seed, options.maxDim ?? 7);
  const first = draw.newInput(draw.randomShape());
  const ops = draw.int(3, options.maxOps ?? 20);
  for (let i = 0; i < ops; i++) {
    const v = draw.next() < 0.75 ? draw.vals[draw.vals.length - 1] : draw.pick(draw.vals);
    draw.step(v);
  }
  return draw.finish(first);
}

/** One random graph being drawn: the seeded stream, the builder and the values so far. */
class GraphDraw {
  readonly next: () => number;
  readonly vals: Val[] = [];
  readonly #seed: number;
  readonly #maxDim: number;
  readonly #b = new GraphBuilder();
  readonly #inputs: Record<string, HostTensor> = {};

  constructor(seed: number, maxDim: number) {
    this.next = rng(seed * 7919 + 17);
    this.#seed = seed;
    this.#maxDim = maxDim;
  }

  /** A whole number in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  /** One of `xs`. */
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)];
  }

  /** A new graph input of `shape`, with seeded data. */
  newInput(shape: Shape): Val {
    const index = Object.keys(this.#inputs).length;
    const name = `x${index}`;
    this.#inputs[name] = {
      data: uniform(sizeOf(shape), this.#seed * 31 + index),
      shape,
      dtype: "f32",
    };
    const v = { sym: this.#b.input(name, shape), type: { shape, dtype: "f32" as const } };
    this.vals.push(v);
    return v;
  }

  /** A shape of rank 0 to 4. */
  randomShape(): number[] {
    return [...Array(this.int(0, 4))].map(() => this.int(1, this.#maxDim));
  }

  /** `op` of `ins`, if its types infer to one output of at most 4096 elements. */
  apply(op: string, ins: Val[], attrs: Attrs = {}): Val | undefined {
    let types: ValueType[];
    try {
      types = inferNode(op, ins.map((v) => v.type), attrs, op);
    } catch {
      return undefined;
    }
    if (types.length !== 1 || sizeOf(types[0].shape) > 4096) return undefined;
    const v = { sym: this.#b.op(op, ins.map((x) => x.sym), attrs), type: types[0] };
    this.vals.push(v);
    return v;
  }

  /** A value broadcast-compatible with `v`: a trailing subshape with some dims set to 1. */
  partner(v: Val): Val {
    const reuse = this.vals.filter((o) => o !== v && broadcastable(o.type.shape, v.type.shape));
    if (reuse.length && this.next() < 0.4) return this.pick(reuse);
    const rank = this.int(0, v.type.shape.length);
    return this.newInput(
      v.type.shape.slice(v.type.shape.length - rank).map((d) => (this.next() < 0.3 ? 1 : d)),
    );
  }

  /** One random op on `v` (and partners it draws). */
  step(v: Val): void {
    const rank = v.type.shape.length;
    const axis = rank ? this.int(-rank, rank - 1) : 0;
    const kind = this.pick([
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
    ]);
    if (kind === "unary") this.apply(this.pick(UNARY), [v]);
    else if (kind === "binary") {
      const [a, c] = this.next() < 0.5 ? [v, this.partner(v)] : [this.partner(v), v];
      this.apply(this.pick(BINARY), [a, c]);
    } else if (kind === "reduce") {
      const axes = [...Array(rank).keys()].filter(() => this.next() < 0.5);
      this.apply(this.pick(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]), [v], {
        axes,
        keepdims: this.int(0, 1),
      });
    } else if (kind === "row") this.row(v, axis);
    else if (kind === "matmul") this.matmul(v);
    else if (kind === "move") this.move(v);
    else this.index(v, axis);
  }

  /** A row op along `axis`: softmax or log-softmax, or a layer norm. */
  row(v: Val, axis: number): void {
    const rank = v.type.shape.length;
    if (!rank) return;
    if (this.next() < 0.6) this.apply(this.pick(["Softmax", "LogSoftmax"]), [v], { axis });
    else {
      const norm = v.type.shape.slice(axis < 0 ? axis + rank : axis);
      this.apply("LayerNormalization", [v, this.newInput(norm), this.newInput(norm)], {
        axis,
        epsilon: 1e-3,
      });
    }
  }

  /** `v` times a new weight (batched or not), sometimes with a bias added. */
  matmul(v: Val): void {
    const rank = v.type.shape.length;
    if (rank < 1) return;
    const k = v.type.shape[rank - 1];
    const w = this.next() < 0.7
      ? this.newInput([k, this.int(1, this.#maxDim)])
      : this.newInput([...v.type.shape.slice(0, -2), k, this.int(1, this.#maxDim)]);
    const y = this.apply("MatMul", [v, w]);
    if (y && this.next() < 0.5) {
      this.apply("Add", [y, this.newInput([y.type.shape[y.type.shape.length - 1] ?? 1])]);
    }
  }

  /** `v` concatenated with itself, or gathered at a few indices along `axis`. */
  index(v: Val, axis: number): void {
    const rank = v.type.shape.length;
    if (!rank) return;
    if (this.next() < 0.5) {
      this.apply("Concat", [v, v], { axis });
      return;
    }
    const dim = v.type.shape[axis < 0 ? axis + rank : axis];
    const n = this.int(1, 3);
    const idx = Int32Array.from({ length: n }, () => this.int(-dim, dim - 1));
    const indices = { sym: this.#b.constant(idx), type: { shape: [n], dtype: "i32" as const } };
    this.apply("Gather", [v, indices], { axis });
  }
  /** A movement op on `v`. */
  move(v: Val): void {
    const s = v.type.shape;
    const rank = s.length;
    switch (this.pick(["Transpose", "Reshape", "Slice", "Expand", "Pad", "Unsqueeze", "Squeeze"])) {
      case "Transpose":
        this.apply("Transpose", [v], { perm: this.shuffle([...Array(rank).keys()]) });
        break;
      case "Reshape": {
        const n = sizeOf(s);
        const dims: number[] = [];
        let rest = n;
        while (rest > 1 && dims.length < 3) {
          const d = [...Array(rest).keys()].map((x) => x + 1).filter((x) =>
            rest % x === 0 && x > 1
          );
          const f = this.pick(d);
          dims.push(f);
          rest /= f;
        }
        if (rest > 1 || !dims.length) dims.push(rest);
        this.apply("Reshape", [v], {
          shape: this.next() < 0.3 && dims.length > 1 ? [...dims.slice(0, -1), -1] : dims,
        });
        break;
      }
      case "Slice": {
        if (!rank) break;
        const a = this.int(0, rank - 1);
        const d = s[a];
        const step = this.pick([1, 1, 2, -1]);
        const starts = step > 0 ? this.int(0, d - 1) : this.int(0, d - 1) - d;
        this.apply("Slice", [v], {
          starts: [starts],
          ends: [step > 0 ? this.int(starts + 1, d + 2) : -d - 1],
          axes: [a],
          steps: [step],
        });
        break;
      }
      case "Expand":
        this.apply("Expand", [v], {
          shape: [this.int(1, 3), ...s.map((d) => (d === 1 ? this.int(1, 4) : d))],
        });
        break;
      case "Pad":
        this.apply("Pad", [v], {
          pads: [...s.map(() => this.int(0, 2)), ...s.map(() => this.int(0, 2))],
          value: this.pick([0, 1.5]),
        });
        break;
      case "Unsqueeze":
        this.apply("Unsqueeze", [v], { axes: [this.int(0, rank)] });
        break;
      case "Squeeze":
        this.apply("Squeeze", [v]);
        break;
    }
  }
  /** `xs` shuffled in place. */
  shuffle(xs: number[]): number[] {
    for (let i = xs.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [xs[i], xs[j]] = [xs[j], xs[i]];
    }
    return xs;
  }

  /** The case: the last value and a few others as outputs (the first input where none). */
  finish(first: Val): RandomCase {
    const produced = this.vals.filter((v) => !(v.sym.name in this.#inputs));
    const outs = produced.length
      ? [produced[produced.length - 1], ...produced.filter(() => this.next() < 0.15)]
      : [first];
    [...new Set(outs)].forEach((v, i) => this.#b.output(`y${i}`, v.sym));
    return { seed: this.#seed, graph: this.#b.build(), inputs: this.#inputs };
  }
}

function broadcastable(a: Shape, into: Shape): boolean {
  if (a.length > into.length) return false;
  return a.every((d, i) => d === 1 || d === into[into.length - a.length + i]);
}
