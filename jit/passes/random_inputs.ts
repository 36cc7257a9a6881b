/**
 * Random ops as drawn inputs. `RandomUniform` nodes (and `RandomNormal`, which decomposes into
 * two of them) leave the graph before any backend sees it: each becomes a graph input that the
 * executable fills with fresh numbers on every run, from a seeded stream of its own. The kernels
 * around it read it as any other input, so Bernoulli, training Dropout and the normal transform
 * fuse on every backend, and no backend needs a generator of its own.
 *
 * A node with a `seed` draws the same sequence in every executable compiled from it (the first run
 * the same numbers, the second the next ones, as a seeded ONNX Runtime session does); one without
 * draws from a seed taken from the platform's random source. A clone starts its streams over, as
 * a fresh executable does; a run with `repeat` draws once for all its repetitions.
 *
 * @module
 */
import { decompose } from "./decompose.ts";
import { boundaryOf, Graph, type NodeSpec, nodeSpecOf } from "../ir/graph.ts";
import { mt19937 } from "../support/random.ts";
import type { Shape } from "../ir/shape.ts";
import { sizeOf } from "../ir/shape.ts";

/**
 * The ops that draw at random: never folded into constants, drawn per run instead. All but
 * RandomUniform are written out into RandomUniform first (`jit/ops/source.ts`,
 * `jit/ops/random_ops.ts`).
 */
export const RANDOM_OPS: ReadonlySet<string> = new Set([
  "RandomUniform",
  "RandomNormal",
  "Bernoulli",
  "Multinomial",
  "Dropout",
]);

/** An input the executable fills on every run with uniform numbers in `[low, high)`. */
export interface DrawnInput {
  /** The input's name (the random node's output value). */
  readonly name: string;
  /** Its shape. */
  readonly shape: Shape;
  /** Lower bound (inclusive). */
  readonly low: number;
  /** Upper bound (exclusive). */
  readonly high: number;
  /** The node's seed, if it had one. */
  readonly seed?: number;
  /** Which of the streams of that seed (a RandomNormal draws from two). */
  readonly stream: number;
}

/**
 * `graph` with every random node replaced by a drawn input, and those inputs (`graph` itself and
 * none when it draws nothing).
 */
export function hoistRandom(graph: Graph): { graph: Graph; drawn: DrawnInput[] } {
  if (!graph.nodes.some((n) => RANDOM_OPS.has(n.op))) {
    return { graph, drawn: [] };
  }
  const g = decompose(graph, (n) => n.op !== "RandomUniform" && RANDOM_OPS.has(n.op));
  const name = (v: number) => g.values[v].name;
  const drawn: DrawnInput[] = [];
  const nodes: NodeSpec[] = [];
  for (const n of g.nodes) {
    if (n.op !== "RandomUniform") {
      nodes.push(nodeSpecOf(g, n));
      continue;
    }
    const seed = n.attrs.seed as number | undefined;
    drawn.push({
      name: name(n.outputs[0]),
      shape: g.values[n.outputs[0]].shape,
      low: (n.attrs.low as number | undefined) ?? 0,
      high: (n.attrs.high as number | undefined) ?? 1,
      ...(seed === undefined ? {} : { seed }),
      stream: (n.attrs.stream as number | undefined) ?? 0,
    });
  }
  const boundary = boundaryOf(g);
  const hoisted = Graph.create({
    ...boundary,
    inputs: [
      ...boundary.inputs,
      ...drawn.map((d) => ({ name: d.name, shape: d.shape, dtype: "f32" as const })),
    ],
    nodes,
  });
  return { graph: hoisted, drawn };
}

/** The generators of an executable's drawn inputs: one stream per input, advancing per run. */
export class Draws {
  #drawn = new Map<string, { input: DrawnInput; next: () => number }>();

  /** Streams for `drawn`, seeded from each input's seed (or at random). */
  constructor(drawn: readonly DrawnInput[]) {
    for (const d of drawn) {
      // A whole seed's first stream is numpy's `np.random.seed(seed)`, as ONNX's reference
      // draws; other streams and seeds are mixed into a 32-bit one.
      const whole = d.seed !== undefined && d.stream === 0 && Number.isInteger(d.seed) &&
        d.seed >= 0 && d.seed < 2 ** 32;
      const seed = d.seed === undefined ? freshSeed() : whole ? d.seed : mix(d.seed, d.stream);
      this.#drawn.set(d.name, { input: d, next: mt19937(seed) });
    }
  }

  /** Whether input `name` is drawn (checked per input on every run: no allocation). */
  has(name: string): boolean {
    return this.#drawn.has(name);
  }

  /** The next numbers of drawn input `name` (a fresh array per run). */
  next(name: string): Float32Array {
    const { input: { shape, low, high }, next } = this.#drawn.get(name)!;
    const out = new Float32Array(sizeOf(shape));
    // Math.fround may round low + (high - low)·u up to high itself: drawn again, [low, high).
    for (let k = 0; k < out.length; k++) {
      let v = Math.fround(low + (high - low) * next());
      while (v >= high && high > low) v = Math.fround(low + (high - low) * next());
      out[k] = v;
    }
    return out;
  }
}

/** A 32-bit stream seed from an ONNX float seed and a stream index. */
function mix(seed: number, stream: number): number {
  const f = new Float64Array([seed]);
  const [lo, hi] = new Uint32Array(f.buffer);
  let h = Math.imul(lo ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(hi ^ stream, 0xc2b2ae35);
  h ^= h >>> 16;
  return Math.imul(h, 0x27d4eb2f) >>> 0;
}

/** A seed from the platform's random source. */
function freshSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0];
}
