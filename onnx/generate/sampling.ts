/**
 * Choosing the next token from the last position's logits: greedy (the argmax, which the step
 * model computes on the device), or drawn from the softmax at a temperature, limited to the `topK`
 * likeliest tokens and to the smallest set whose probability reaches `topP`, from a seeded
 * stream, so a seed gives the same tokens on every run and backend.
 *
 * @module
 */
import { KilnError, shown } from "../../jit/support/errors.ts";
import { rng } from "../../jit/support/random.ts";

/** How the next token is chosen. */
export interface SamplingOptions {
  /** Softmax temperature; 0 (the default) is greedy. */
  readonly temperature?: number;
  /** Draw only among the `topK` likeliest tokens (default: all). */
  readonly topK?: number;
  /** Draw only among the likeliest tokens whose probabilities sum to `topP` (default 1). */
  readonly topP?: number;
  /** Seed of the draws (default: a random one). */
  readonly seed?: number;
}

/** The keys of {@linkcode SamplingOptions}, for the check of an options object's names. */
export const SAMPLING_OPTIONS: readonly (keyof SamplingOptions)[] = [
  "temperature",
  "topK",
  "topP",
  "seed",
];

const bad = (what: string, fix: string) => new KilnError(what, { code: "bad-input", fix });

/** The options checked, with their defaults. */
function checked(o: SamplingOptions): Required<SamplingOptions> {
  const { temperature = 0, topK = Infinity, topP = 1, seed } = o;
  // Numbers only: a string passed the range checks by coercion ("0.9" as topP).
  if (!(typeof temperature === "number" && temperature >= 0 && Number.isFinite(temperature))) {
    throw bad(`temperature ${shown(temperature)} is not a finite number >= 0`, "pass 0 for greedy");
  }
  if (topK !== Infinity && !(Number.isSafeInteger(topK) && topK >= 1)) {
    throw bad(`topK ${shown(topK)} is not a whole number >= 1`, "pass 1 or more, or leave it out");
  }
  if (!(typeof topP === "number" && topP > 0 && topP <= 1)) {
    throw bad(
      `topP ${shown(topP)} is not in (0, 1]`,
      "pass a probability such as 0.9, or leave it out",
    );
  }
  if (seed !== undefined && !Number.isSafeInteger(seed)) {
    throw bad(`seed ${shown(seed)} is not a whole number`, "pass an integer seed");
  }
  return { temperature, topK, topP, seed: seed ?? Math.floor(Math.random() * 2 ** 32) };
}

/** Picks tokens from logits as {@linkcode SamplingOptions} say. */
export class Sampler {
  readonly #options: Required<SamplingOptions>;
  readonly #next: () => number;

  /** A sampler; bad options are typed errors. */
  constructor(options: SamplingOptions = {}) {
    this.#options = checked(options);
    this.#next = rng(this.#options.seed);
  }

  /** Whether the choice is the argmax (temperature 0, or only one candidate). */
  get greedy(): boolean {
    return this.#options.temperature === 0 || this.#options.topK === 1;
  }

  /** The token drawn from `logits` (one row, the vocabulary); the argmax when greedy. */
  pick(logits: ArrayLike<number>): number {
    if (this.greedy) return argmax(logits);
    const { temperature, topK, topP } = this.#options;
    const top = argmax(logits), peak = logits[top];
    if (!Number.isFinite(peak)) return top;
    // Candidates, likeliest first (ties to the lower id); a weight that is 0 in double
    // precision (a logit more than ~745 temperatures below the peak) can never be drawn.
    const ids: number[] = [];
    for (let i = 0; i < logits.length; i++) {
      if ((logits[i] - peak) / temperature > -745) ids.push(i);
    }
    ids.sort((a, b) => logits[b] - logits[a] || a - b);
    const kept = ids.slice(0, Math.min(ids.length, topK));
    const weights = kept.map((i) => Math.exp((logits[i] - peak) / temperature));
    const total = weights.reduce((a, b) => a + b, 0);
    // The smallest prefix whose probability reaches topP.
    let n = 0;
    for (let mass = 0; n < kept.length && mass < topP * total;) mass += weights[n++];
    let u = this.#next() * weights.slice(0, n).reduce((a, b) => a + b, 0);
    for (let i = 0; i < n; i++) {
      u -= weights[i];
      if (u < 0) return kept[i];
    }
    return kept[n - 1];
  }
}

/** The index of the largest value (the first of ties; NaN counts as largest, as ArgMax does). */
export function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) {
    if (Number.isNaN(values[best])) break;
    if (values[i] > values[best] || Number.isNaN(values[i])) best = i;
  }
  return best;
}
