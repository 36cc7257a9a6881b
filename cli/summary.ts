/**
 * What `kiln run` and `kiln bench` say of a run's outputs: each output's summary statistics, and a
 * note where outputs hold NaN from inputs seeded at random.
 *
 * @module
 */
import type { HostTensor } from "../jit/ir/host_tensor.ts";

/** Summary statistics of one output. */
export interface OutputSummary {
  /** Shape. */
  shape: readonly number[];
  /** Boundary dtype. */
  dtype: string;
  /** Smallest value. */
  min: number;
  /** Largest value. */
  max: number;
  /** Mean value. */
  mean: number;
  /** The first few values. */
  head: number[];
  /** File written by `--save`. */
  file?: string;
}

/**
 * A line for stderr where outputs hold NaN and some inputs were seeded at random: such inputs may
 * lie outside what the model expects (a token id past its vocabulary; an attention mask of 7,
 * which a BERT's additive mask overflows to NaN). `undefined` otherwise.
 */
export function seededNote(
  outputs: Record<string, HostTensor>,
  sources: Record<string, string>,
): string | undefined {
  const seeded = Object.keys(sources).filter((k) => sources[k] === "seeded random");
  const nan = Object.keys(outputs).filter((k) => {
    const t = outputs[k];
    return (t.dtype === "f32" || t.dtype === "f64") &&
      (t.data as Float32Array | Float64Array).some(Number.isNaN);
  });
  if (!seeded.length || !nan.length) return undefined;
  return `note: ${nan.join(", ")} ${
    nan.length > 1 ? "hold" : "holds"
  } NaN from inputs seeded at random (${
    seeded.join(", ")
  }): give the model's own with --input NAME=FILE`;
}

/** `t`'s summary statistics (its values as numbers: smallest, largest, mean, the first six). */
export function summarize(t: HostTensor): OutputSummary {
  const values = Array.from(t.data as ArrayLike<number | bigint>, Number);
  let min = Infinity, max = -Infinity, sum = 0;
  for (const v of values) {
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v;
  }
  return {
    shape: t.shape,
    dtype: t.dtype,
    min,
    max,
    mean: values.length ? sum / values.length : NaN,
    head: values.slice(0, 6),
  };
}
