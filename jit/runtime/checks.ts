/**
 * Run-time checks a graph carries as outputs of its own: a boolean value (any shape) whose output
 * is named `kiln.check:WHY` must hold no `true` after a run, or the run fails with a typed error
 * saying WHY. The importer and the int64 lowering (`jit/passes/int64.ts`) add them where a value
 * can leave the range kiln computes it in (an int64 product held in 32 bits, or in f64 past
 * 2^53), so a wrapped or rounded result is refused instead of returned. Check
 * outputs are the executable's own: they are always computed, never returned, and not listed
 * among its output names.
 *
 * @module
 */
import { DeviceTensor, pendingChecks } from "./device_tensor.ts";
import type { TensorData } from "../ir/dtype.ts";
import { KilnError, shown } from "../support/errors.ts";
import type { Graph } from "../ir/graph.ts";

/** The output-name prefix of a check. */
export const CHECK_PREFIX = "kiln.check:";

/** Whether output `name` is a check. */
export function isCheck(name: string): boolean {
  return name.startsWith(CHECK_PREFIX);
}

/** The output name of a check saying `why` (`n` keeps names of repeated checks apart). */
export function checkName(why: string, n: number): string {
  return `${CHECK_PREFIX}${why}#${n}`;
}

/**
 * Indices of the outputs a run computes: those named (all returned ones when `names` is
 * undefined) and every check. An unknown or check name is a typed error.
 */
export function outputIndices(graph: Graph, names: readonly string[] | undefined): number[] {
  const returned = graph.outputs.flatMap((o, i) => (isCheck(o.name) ? [] : [i]));
  const checks = graph.outputs.flatMap((o, i) => (isCheck(o.name) ? [i] : []));
  if (!names) return [...returned, ...checks];
  if (!Array.isArray(names)) {
    throw new KilnError(`outputs is ${shown(names)}, not a list of output names`, {
      code: "bad-input",
      fix: `pass e.g. { outputs: [${JSON.stringify(graph.outputs[returned[0]]?.name ?? "y")}] }`,
    });
  }
  const picked = names.map((n) => {
    const i = returned.find((r) => graph.outputs[r].name === n);
    if (i === undefined) {
      throw new KilnError(`No output "${n}"`, {
        code: "bad-input",
        fix: `request some of: ${returned.map((r) => graph.outputs[r].name).join(", ")}`,
      });
    }
    return i;
  });
  return [...picked, ...checks];
}

/** Throws the typed error of check output `name` when `data` holds a `true` (a non-zero byte). */
export function assertCheck(name: string, data: TensorData): void {
  if (!(data as ArrayLike<number>).length) return;
  for (let i = 0; i < data.length; i++) {
    if (!data[i]) continue;
    const why = name.slice(CHECK_PREFIX.length).replace(/#\d+$/, "");
    throw new KilnError(why, {
      code: "out-of-range",
      fix:
        "keep int64 values within the range named: ±2^53 where kiln holds int64 in f64 (wasm, the reference), [-2^31, 2^31) where it holds them in 32 bits (WebGPU, indices and shapes); or compute them in float",
    });
  }
}

/**
 * Reads the checks left on the device (`names` of `tensors`) in one batched read, then frees them,
 * and asserts none holds a `true`.
 */
async function readChecks(names: readonly string[], tensors: DeviceTensor[]): Promise<void> {
  try {
    const read = await DeviceTensor.readAll(tensors);
    names.forEach((name, i) => assertCheck(name, read[i].data));
  } finally {
    for (const t of tensors) t.dispose();
  }
}

/** The check outputs a run left on the device, read together (see {@linkcode runChecks}). */
export class DeviceChecks {
  readonly #names: string[] = [];
  readonly #tensors: DeviceTensor[] = [];

  /** Adds check output `name`, held in `t`. */
  add(name: string, t: DeviceTensor): void {
    this.#names.push(name);
    this.#tensors.push(t);
  }

  /** Starts reading them: what the run's outputs wait on, with its device `inputs`' checks. */
  pending(inputs: readonly unknown[]): Promise<void> | undefined {
    const own = this.#tensors.length ? readChecks(this.#names, this.#tensors) : undefined;
    return runChecks(own, inputs);
  }
}

/**
 * The checks a device run's outputs wait on: its own (`checks`, being read) and those its device
 * inputs still wait on; `undefined` where there are none. Handled here, so a run whose outputs
 * are never read leaves no unhandled rejection: a failure surfaces where an output is read.
 */
function runChecks(
  checks: Promise<void> | undefined,
  inputs: readonly unknown[],
): Promise<void> | undefined {
  const inherited = inputs.flatMap((a) => {
    const p = a instanceof DeviceTensor ? pendingChecks(a) : undefined;
    return p ? [p] : [];
  });
  const all = checks ? [checks, ...inherited] : inherited;
  if (!all.length) return undefined;
  const pending = all.length === 1 ? all[0] : Promise.all(all).then(() => {});
  pending.catch(() => {});
  return pending;
}

/**
 * Waits for a host run's checks (`pending`, see {@linkcode runChecks}); where one fails, the
 * run's device outputs `out` are freed before its error is thrown (the caller never receives
 * them).
 */
export async function settleChecks(
  pending: Promise<void> | undefined,
  out: Readonly<Record<string, unknown>>,
): Promise<void> {
  try {
    await pending;
  } catch (e) {
    for (const t of Object.values(out)) if (t instanceof DeviceTensor) t.dispose();
    throw e;
  }
}
