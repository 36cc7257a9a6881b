/**
 * The types of a run as the caller writes and reads it: named inputs and results, and the run's
 * options. Apart from the executable, so that what runs executables (variants specialised by
 * their inputs' place) names them without importing it.
 *
 * @module
 */
import type { DeviceTensor } from "./device_tensor.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import type { IntoMap } from "./into.ts";
import { checkOptions, KilnError } from "../support/errors.ts";

/** Named host tensors: a run's inputs or results. */
export type TensorMap = Record<string, HostTensor>;

/** A run's named inputs: host tensors, or device tensors of the executable's backend. */
export type InputMap = Record<string, HostTensor | DeviceTensor>;

/** Named device tensors: the results of `Executable.runOnDevice`. */
export type DeviceTensorMap = Record<string, DeviceTensor>;

/** Options for `Executable.run`. */
export interface RunOptions {
  /** Output names to read back (default: all). */
  readonly outputs?: readonly string[];
  /**
   * Runs the graph this many times back to back (default 1), each repetition's state outputs
   * feeding the next one's state inputs; the outputs are the last repetition's. On a GPU the
   * repetitions go into one submission with a single readback at the end.
   */
  readonly repeat?: number;
  /** Caller-owned buffers to fill with outputs, by name (see `jit/runtime/into.ts`). */
  readonly into?: IntoMap;
}

/** The names {@linkcode RunOptions} has. */
export const RUN_OPTION_KEYS: readonly (keyof RunOptions)[] = ["outputs", "repeat", "into"];

/**
 * `options` checked by name (a misspelt `outputz` had read back every output without a word) and
 * its repeat count, a whole number of at least 1 (default 1).
 */
export function checkRunOptions(options: RunOptions | undefined): number {
  checkOptions(options, RUN_OPTION_KEYS, "run()");
  const repeat = options?.repeat ?? 1;
  if (!Number.isInteger(repeat) || repeat < 1) {
    throw new KilnError(`repeat must be a whole number of at least 1, got ${repeat}`, {
      code: "bad-input",
      fix: "pass repeat: 1 or more (or leave it out)",
    });
  }
  return repeat;
}

/**
 * `inputs` checked against the graph's input `names`: an object, naming every input but those
 * `held` as state, and no other.
 */
export function checkInputNames(
  inputs: InputMap,
  names: readonly string[],
  held: (name: string) => boolean,
): void {
  if (typeof inputs !== "object" || inputs === null) {
    throw new KilnError(
      `run() expects an object of named inputs, got ${inputs === null ? "null" : typeof inputs}`,
      { code: "bad-input", fix: `pass { ${names.map((n) => `${n}: HostTensor`).join(", ")} }` },
    );
  }
  const expected = new Set(names);
  const unknown = Object.keys(inputs).filter((k) => !expected.has(k));
  const missing = names.filter((k) => !(k in inputs) && !held(k));
  if (unknown.length || missing.length) {
    const parts = [
      missing.length ? `missing ${missing.join(", ")}` : "",
      unknown.length ? `unknown ${unknown.join(", ")}` : "",
    ];
    throw new KilnError(
      `run() inputs do not match the graph: ${parts.filter(Boolean).join("; ")}`,
      { code: "bad-input", fix: `pass exactly: ${names.join(", ") || "no inputs"}` },
    );
  }
}
