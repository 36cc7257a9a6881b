/**
 * Every failure kiln reports on purpose is a {@linkcode KilnError}: a stable `code` a program can
 * branch on, a message that says what was wrong and where, and a `fix` hint that says what to do.
 * The message always ends with the hint, so a log line alone is enough to act on.
 *
 * @module
 */

/** Stable, machine-readable categories of kiln errors. */
export type KilnErrorCode =
  | "invalid-graph"
  | "shape-mismatch"
  | "dtype-mismatch"
  | "bad-axis"
  | "bad-attribute"
  | "unknown-op"
  | "cycle"
  | "dangling-input"
  | "duplicate-name"
  | "bad-input"
  | "unsupported"
  | "out-of-range"
  | "limit"
  | "disposed"
  | "backend"
  | "internal"
  | "usage";

/** Options for constructing a {@linkcode KilnError}. */
export interface KilnErrorOptions {
  /** Category of the failure. */
  code: KilnErrorCode;
  /** What to do about it; appended to the message as `Fix: …`. */
  fix: string;
  /** The underlying error, when this one wraps another. */
  cause?: unknown;
}

/**
 * The error type kiln throws for bad input, unsupported requests and runtime failures.
 *
 * @example Branch on the code, show the message
 * ```ts
 * import { KilnError } from "./errors.ts";
 * try {
 *   throw new KilnError("Reshape of [2, 3] to [4] changes the element count", {
 *     code: "shape-mismatch",
 *     fix: "use a target shape with 6 elements",
 *   });
 * } catch (e) {
 *   if (e instanceof KilnError && e.code === "shape-mismatch") console.log(e.message);
 * }
 * ```
 */
export class KilnError extends Error {
  /** Category of the failure. */
  readonly code: KilnErrorCode;
  /** The fix hint on its own (also part of `message`). */
  readonly fix: string;

  /** Creates an error whose message is `what` followed by `Fix: <fix>`. */
  constructor(what: string, options: KilnErrorOptions) {
    super(`${what.replace(/\.$/, "")}. Fix: ${options.fix}`, { cause: options.cause });
    this.name = "KilnError";
    this.code = options.code;
    this.fix = options.fix;
  }
}

/** Longest rendering of a caller's value in an error message. */
const SHOWN_CHARS = 80;

/**
 * `value` as an error message shows it: JSON where JSON can say it (bigints as numbers), else its
 * string form, cut to 80 characters. A caller's value can be anything — a 100 KB array passed as
 * a shape, a bigint JSON refuses, an object that refers to itself — and the error about it must
 * neither throw nor bury its message.
 */
export function shown(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value, (_, v) => (typeof v === "bigint" ? `${v}n` : v)) ?? String(value);
  } catch {
    text = Object.prototype.toString.call(value);
  }
  return text.length > SHOWN_CHARS ? `${text.slice(0, SHOWN_CHARS - 1)}…` : text;
}

/**
 * `value` checked as `what`'s options: undefined, or an object whose keys are among `keys`. A
 * string, a number or a misspelled key had been ignored without a word (`setMemoryBudget("big")`
 * kept the default), or failed inside as a TypeError.
 */
export function checkOptions(value: unknown, keys: readonly string[], what: string): void {
  if (value === undefined) return;
  const listed = keys.join(", ");
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new KilnError(`${what} takes an object of options, got ${shown(value)}`, {
      code: "bad-input",
      fix: `pass an object with some of: ${listed}`,
    });
  }
  const unknown = Object.keys(value).find((k) => !keys.includes(k));
  if (unknown !== undefined) {
    throw new KilnError(`${what} has no option "${unknown}"`, {
      code: "bad-input",
      fix: `use some of: ${listed}`,
    });
  }
}

/**
 * `run()`'s result as a promise, its throw as a rejection: a synchronous computation behind an
 * asynchronous interface fails the way callers of that interface expect.
 */
export function settled<T>(run: () => T): Promise<T> {
  try {
    return Promise.resolve(run());
  } catch (e) {
    return Promise.reject(e);
  }
}
