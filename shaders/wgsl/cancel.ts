/**
 * What the structure of its operands lets a float op's WGSL skip: which adds, subtracts and
 * multiplies need their IEEE specials decided on the bits ({@linkcode mayCancel}), and which
 * divisions are an exact scaling ({@linkcode exactScale}).
 *
 * @module
 */
import type { AluOp, Expr, Load } from "../../jit/ir/kernel_ir.ts";

/**
 * Numbers equal for structurally equal expressions (what a compiler's CSE may merge): each
 * distinct node gets the next number, keyed by its op and its operands' numbers, so keys stay
 * short however deeply expressions nest and share operands.
 */
export class Structure {
  #ids = new Map<Expr, number>();
  #interned = new Map<string, number>();
  #address: (load: Load) => string;

  /**
   * Structures whose loads are equal where `address` says they read the same element (default:
   * the same steps). Loads through different steps may reach one address a compiler sees: a
   * one-element tensor and its squeezed view, both at index 0, whose difference llvmpipe folded to
   * 0 where −inf − (−inf) is NaN.
   */
  constructor(address: (load: Load) => string = (l) => JSON.stringify(l.steps)) {
    this.#address = address;
  }

  /** The number of `e`'s structure. */
  of(e: Expr): number {
    let id = this.#ids.get(e);
    if (id !== undefined) return id;
    let key: string;
    switch (e.kind) {
      case "const":
        key = `c${e.dtype}:${Object.is(e.value, -0) ? "-0" : e.value}`;
        break;
      case "acc":
        key = `acc${e.index}`;
        break;
      case "load":
        key = `l${e.input}:${this.#address(e)}`;
        break;
      case "alu":
        key = `${e.op}${JSON.stringify(e.attrs ?? {})}(${e.args.map((a) => this.of(a))})`;
        break;
    }
    id = this.#interned.get(key);
    if (id === undefined) this.#interned.set(key, id = this.#interned.size);
    this.#ids.set(e, id);
    return id;
  }
}

/**
 * The expression under negations and identities a compiler may drop (x + 0, x − 0, x · 1,
 * x / 1), so that x − (x + 0) counts as cancelling too.
 */
function core(e: Expr): Expr {
  if (e.kind !== "alu") return e;
  const [a, b] = e.args;
  const is = (x: Expr | undefined, v: number) => x?.kind === "const" && x.value === v;
  if (e.op === "Neg") return core(a);
  if ((e.op === "Add" || e.op === "Sub") && is(b, 0)) return core(a);
  if (e.op === "Add" && is(a, 0)) return core(b);
  if ((e.op === "Mul" || e.op === "Div") && is(b, 1)) return core(a);
  if (e.op === "Mul" && is(a, 1)) return core(b);
  return e;
}

/**
 * Whether a float Add, Sub or Mul could be folded wrongly by a compiler that assumes no NaN or
 * infinity (WGSL allows it; llvmpipe and NVIDIA's compiler do): x − x and x + (−x) to 0, and
 * through reassociation (x − y) + y and (x + y) − y to x, x − (x − y) to y; x · 0 to 0, where the 0
 * is a constant or a padded load's fill (a compiler that unrolls a small kernel may see the fill
 * as a constant: a padded matmul then dropped 0 · −inf, which is NaN). Those need
 * their specials decided on the bits (`k_add`, `k_sub`, `k_mul`); any other pair of operands
 * leaves the compiler nothing to fold, and the hardware's own IEEE result stands (other products
 * only pass through `k_prod`, against contraction). Costly to apply everywhere: the guards took
 * W1 over 64M elements from the copy's 0.13 ms to 0.22 ms on an H200, and layer norm over
 * 16384×4096 from 0.18 to 0.31 ms.
 */
export function mayCancel(op: AluOp, args: readonly Expr[], structure: Structure): boolean {
  if (op === "Mul") return args.some(mayBeZero);
  if (op !== "Add" && op !== "Sub") return false;
  // A term on one side cancels one of the opposite sign on the other.
  const left = terms(args[0], 1, structure);
  return [...terms(args[1], op === "Add" ? -1 : 1, structure)].some((t) => left.has(t));
}

/** Whether `e` is 0 at compile time somewhere: a constant 0, or a load outside its bounds. */
function mayBeZero(e: Expr): boolean {
  const c = core(e);
  if (c.kind === "const") return c.value === 0;
  return c.kind === "load" &&
    c.steps.some((s) => s.kind === "affine" && s.bounds !== undefined && (s.fill ?? 0) === 0);
}

/** Most terms a side of a sum is unfolded into (a DAG can repeat a term exponentially). */
const MAX_TERMS = 32;

/**
 * The signed terms of a sum, as a compiler may reassociate it: `e`'s Add/Sub/Neg tree unfolded
 * (under `sign`), each leaf by structure with its sign (`id` for +, `-id - 1` for −).
 */
function terms(e: Expr, sign: 1 | -1, structure: Structure): Set<number> {
  const out = new Set<number>();
  const walk = (x: Expr, s: 1 | -1): void => {
    if (out.size >= MAX_TERMS) return;
    if (x.kind === "const" && x.value === 0) return; // ±0 adds nothing to cancel
    if (x.kind === "alu" && x.op === "Neg") return walk(x.args[0], -s as 1 | -1);
    if (x.kind === "alu" && (x.op === "Add" || x.op === "Sub")) {
      walk(x.args[0], s);
      return walk(x.args[1], x.op === "Add" ? s : -s as 1 | -1);
    }
    const id = structure.of(core(x));
    out.add(s === 1 ? id : -id - 1);
  };
  walk(e, sign);
  return out;
}

/**
 * 1 / v for a divisor that is the constant ±2^k with 1 / v normal: division by it is exact
 * scaling, the same as multiplying by its reciprocal (no residual step needed).
 */
export function exactScale(divisor: Expr): number | undefined {
  if (divisor.kind !== "const") return undefined;
  const v = Math.fround(divisor.value);
  const k = Math.log2(Math.abs(v));
  return Number.isInteger(k) && Math.abs(k) <= 126 ? 1 / v : undefined;
}

/**
 * Whether a Div is a finite constant over a constant of 1 or more plus an Exp (Sigmoid's and
 * Tanh's): such a divisor is ≥ 1, +inf or NaN, never ±0 and never negative, and the quotient
 * cannot overflow, so of the division's special cases only the divisor's +inf and NaN remain (see
 * `k_fdivexp`).
 */
export function overOnePlusExp(dividend: Expr, divisor: Expr): boolean {
  if (dividend.kind !== "const" || !Number.isFinite(Math.fround(dividend.value))) return false;
  if (divisor.kind !== "alu" || divisor.op !== "Add") return false;
  const [x, y] = divisor.args;
  const atLeastOne = (e: Expr) => e.kind === "const" && Math.fround(e.value) >= 1;
  const exp = (e: Expr) => e.kind === "alu" && e.op === "Exp";
  return (atLeastOne(x) && exp(y)) || (exp(x) && atLeastOne(y));
}
