/**
 * The memory budget: every tensor's size is checked against it before anything is allocated, at
 * import (initializers, folded constants), when a graph is built (every value, intermediates
 * included: a fused-away intermediate still sizes the loop that computes it) and when inputs
 * arrive. A hostile or mistaken shape is a typed error in microseconds instead of a process
 * killed for memory minutes later.
 *
 * The default is an eighth of the machine's memory, at most 2 GiB (also WebGPU's usual
 * storage-buffer limit); `KILN_MAX_TENSOR_BYTES` or {@linkcode setMemoryBudget} override it.
 *
 * @module
 */
import { type BoundaryDType, byteSize } from "../ir/dtype.ts";
import { envVar } from "../support/env.ts";
import { checkOptions, KilnError, shown } from "../support/errors.ts";
import { isValidShape, type Shape } from "../ir/shape.ts";

/** Limits on tensor sizes. */
export interface MemoryBudget {
  /** Largest tensor, in bytes. */
  readonly maxTensorBytes: number;
}

/**
 * Most elements of one tensor whatever the budget: generated kernels index with 32-bit integers
 * and JavaScript's typed arrays stop near here too.
 */
export const MAX_ELEMENTS: number = 2 ** 31 - 1;

const DEFAULT_CAP = 2 ** 31;

let override: MemoryBudget | undefined;
/** The default, computed once: asking the OS for its memory on every tensor took 80 µs each. */
let fallback: MemoryBudget | undefined;

function machineMemory(): number | undefined {
  try {
    const deno = (globalThis as { Deno?: { systemMemoryInfo?(): { total: number } } }).Deno;
    return deno?.systemMemoryInfo?.().total;
  } catch {
    return undefined;
  }
}

function defaultBudget(): MemoryBudget {
  const raw = envVar("KILN_MAX_TENSOR_BYTES");
  if (raw !== undefined) {
    const env = Number(raw);
    // A typo must not leave the default in force: the setting is a limit someone relies on.
    if (raw.trim() === "" || !Number.isSafeInteger(env) || env <= 0) {
      throw new KilnError(`KILN_MAX_TENSOR_BYTES="${raw}" is not a positive byte count`, {
        code: "bad-input",
        fix: "set it to a whole number of bytes such as 1073741824, or unset it",
      });
    }
    return { maxTensorBytes: env };
  }
  const total = machineMemory();
  return { maxTensorBytes: total ? Math.min(DEFAULT_CAP, Math.floor(total / 8)) : DEFAULT_CAP };
}

/** The budget in force. */
export function memoryBudget(): MemoryBudget {
  return override ?? (fallback ??= defaultBudget());
}

/** Sets the budget (`undefined` restores the default). */
export function setMemoryBudget(budget: Partial<MemoryBudget> | undefined): void {
  checkOptions(budget, ["maxTensorBytes"], "setMemoryBudget");
  if (
    budget?.maxTensorBytes !== undefined &&
    !(typeof budget.maxTensorBytes === "number" && budget.maxTensorBytes > 0)
  ) {
    throw new KilnError(`maxTensorBytes must be a positive number, got ${budget.maxTensorBytes}`, {
      code: "bad-input",
      fix: "pass a byte count such as 2 ** 30",
    });
  }
  fallback = undefined;
  override = budget
    ? { maxTensorBytes: budget.maxTensorBytes ?? defaultBudget().maxTensorBytes }
    : undefined;
}

/**
 * Throws a {@linkcode KilnError} (code `limit`) when `bytes` of one tensor would exceed the
 * budget, before they are read or allocated; `what` names the tensor.
 */
export function checkBytes(bytes: number, what: string): void {
  const { maxTensorBytes } = memoryBudget();
  if (bytes <= maxTensorBytes) return;
  throw new KilnError(
    `${what} takes ${(bytes / 2 ** 30).toFixed(2)} GiB, over the memory budget of ${
      (maxTensorBytes / 2 ** 30).toFixed(2)
    } GiB per tensor`,
    {
      code: "limit",
      fix: "raise the budget with KILN_MAX_TENSOR_BYTES or setMemoryBudget({ maxTensorBytes })",
    },
  );
}

/**
 * Throws a {@linkcode KilnError} (code `limit`) when a tensor of `shape` and `dtype` would exceed
 * the budget; `what` names it in the message. Dimensions must already be non-negative integers.
 */
export function checkBudget(shape: Shape, dtype: BoundaryDType, what: string): void {
  if (!isValidShape(shape)) {
    // Its reduce had failed inside as a TypeError, or a negative size passed as small.
    throw new KilnError(`checkBudget: ${what}'s shape ${shown(shape)} is not a list of sizes`, {
      code: "bad-input",
      fix: "pass the shape as an array of non-negative integers",
    });
  }
  const elements = shape.reduce((a, b) => a * b, 1);
  const bytes = elements * byteSize(dtype);
  const { maxTensorBytes } = memoryBudget();
  if (elements <= MAX_ELEMENTS && bytes <= maxTensorBytes) return;
  const size = `[${shape.join(", ")}] ${dtype}: ${elements.toExponential(3)} elements, ${
    (bytes / 2 ** 30).toFixed(2)
  } GiB`;
  throw new KilnError(
    elements > MAX_ELEMENTS
      ? `${what} has shape ${size}, over the limit of ${MAX_ELEMENTS} elements per tensor`
      : `${what} has shape ${size}, over the memory budget of ${
        (maxTensorBytes / 2 ** 30).toFixed(2)
      } GiB per tensor`,
    {
      code: "limit",
      fix: elements > MAX_ELEMENTS
        ? "split the computation into smaller tensors"
        : "use smaller shapes, or raise the budget with KILN_MAX_TENSOR_BYTES or setMemoryBudget({ maxTensorBytes })",
    },
  );
}
