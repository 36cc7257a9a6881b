/**
 * The exact precision's kernels (`precision: "exact"`): every backend computes them to the same
 * bits as the reference. Two things differ between backends otherwise, and both are settled here
 * in the kernel IR, so that no backend has its own version of them:
 *
 * - **Transcendentals.** WGSL's `exp`, `log`, `sin` and `cos` are the driver's, wasm has its own
 *   polynomials and the reference calls `Math`. Here Exp, Log, Erf, Sin, Cos and Pow become
 *   sequences of the operations IEEE 754 rounds exactly (add, subtract, multiply, divide, floor,
 *   comparisons, casts and bit reinterpretation), which each backend already computes to the bit:
 *   Cephes' f32 algorithms, the erf fits of the wasm library.
 * - **Order.** The kernel is marked `exact`: a generator sums each reduction in f32, one term
 *   after another in the order of the reduced coordinates, never contracts a product into an add
 *   and does not replace the kernel by a specialized one (tiles, flash attention, block products).
 *
 * Accuracy, in f32: exp and log within about 1 ulp, erf 2e-7 relative, sin and cos within about
 * 1 ulp for |x| up to 8192 (Cephes' three-part reduction; beyond, the reduction loses bits, the
 * same bits everywhere), Pow by a whole constant of at most 64 by repeated squaring, any other
 * as exp(b·log|a|), whose relative error grows with |b·log a|·2⁻²⁴.
 *
 * @module
 */
import type { DType } from "../ir/dtype.ts";
import type { AluOp, Expr, KernelIR } from "../ir/kernel_ir.ts";
import { ERF_MID, ERF_ONE, ERF_SMALL, LOG_POLY } from "../ir/f32_math_tables.ts";

/** `kernel` as the exact precision runs it: marked, its transcendentals decomposed. */
export function exactKernel(kernel: KernelIR): KernelIR {
  const memo = new Map<Expr, Expr>();
  const rewrite = (e: Expr): Expr => {
    let out = memo.get(e);
    if (out) return out;
    if (e.kind !== "alu") return e;
    const args = e.args.map(rewrite);
    out = decomposed(e.op, args, e.dtype) ??
      (args.every((a, i) => a === e.args[i]) ? e : { ...e, args });
    memo.set(e, out);
    return out;
  };
  return {
    ...kernel,
    exact: true,
    reductions: kernel.reductions.map((r) => ({ ...r, expr: rewrite(r.expr) })),
    outputs: kernel.outputs.map((o) => ({ ...o, expr: canonicalNaN(rewrite(o.expr)) })),
  };
}

/**
 * `e` with every NaN stored as the one quiet NaN (0x7fc00000) each backend writes for a NaN
 * constant: the NaNs that arithmetic makes differ in sign and payload between a CPU and a GPU.
 */
function canonicalNaN(e: Expr): Expr {
  return e.dtype === "f32" ? where(isNaN(e), f(NaN), e) : e;
}

/** The decomposition of `op` over `args` for a `dtype` result, or `undefined` to keep it. */
function decomposed(op: AluOp, args: readonly Expr[], dtype: DType): Expr | undefined {
  // The exact precision's graphs are f32 (compile refuses f16); f64 keeps the host's functions,
  // which the reference and wasm share.
  const form = FORMS[op];
  return form && dtype === "f32" ? form(args) : undefined;
}

const FORMS: Partial<Record<AluOp, (args: readonly Expr[]) => Expr | undefined>> = {
  Exp: ([x]) => exp(x),
  Log: ([x]) => log(x),
  Erf: ([x]) => erf(x),
  Sin: ([x]) => sine(x, true),
  Cos: ([x]) => sine(x, false),
  Pow: ([a, b]) => pow(a, b),
};

// ---- The IR's basic operations, as builders ------------------------------------------------

const f = (value: number): Expr => ({ kind: "const", value, dtype: "f32" });
const int = (value: number): Expr => ({ kind: "const", value, dtype: "i32" });
const alu = (op: AluOp, dtype: DType, ...args: Expr[]): Expr => ({ kind: "alu", op, args, dtype });
const add = (a: Expr, b: Expr) => alu("Add", "f32", a, b);
const sub = (a: Expr, b: Expr) => alu("Sub", "f32", a, b);
const mul = (a: Expr, b: Expr) => alu("Mul", "f32", a, b);
const floor = (a: Expr) => alu("Floor", "f32", a);
const abs = (a: Expr) => alu("Abs", "f32", a);
const where = (c: Expr, a: Expr, b: Expr) => alu("Where", "f32", c, a, b);
const less = (a: Expr, b: Expr) => alu("Less", "bool", a, b);
const greater = (a: Expr, b: Expr) => alu("Greater", "bool", a, b);
const equal = (a: Expr, b: Expr) => alu("Equal", "bool", a, b);
const and = (a: Expr, b: Expr) => alu("And", "bool", a, b);
const or = (a: Expr, b: Expr) => alu("Or", "bool", a, b);
const not = (a: Expr) => alu("Not", "bool", a);
const xor = (a: Expr, b: Expr) => or(and(a, not(b)), and(not(a), b));
const isNaN = (a: Expr) => alu("IsNaN", "bool", a);
const cast = (a: Expr, to: DType): Expr => a.dtype === to ? a : alu("Cast", to, a);
const bits = (a: Expr) => alu("Bitcast", "i32", a);
const fromBits = (a: Expr) => alu("Bitcast", "f32", a);

/** Horner's rule in f32: Σ coeffs[i]·x^i. */
function poly(x: Expr, coeffs: readonly number[]): Expr {
  return coeffs.slice(0, -1).reduceRight(
    (acc, k) => add(mul(acc, x), f(k)),
    f(coeffs[coeffs.length - 1]),
  );
}

/** 2^n for a whole f32 `n` in [-126, 127], built from its exponent bits. */
function power2(n: Expr): Expr {
  const biased = alu("Add", "i32", cast(n, "i32"), int(127));
  return fromBits(alu("Mul", "i32", biased, int(1 << 23)));
}

// ---- The functions ------------------------------------------------------------------------

/** Cephes' `expf` polynomial: exp(r) ≈ 1 + r + r²·P(r) on |r| ≤ ln2/2. */
const EXP_POLY = [
  5.0000001201e-1,
  1.6666665459e-1,
  4.1665795894e-2,
  8.3334519073e-3,
  1.3981999507e-3,
  1.9875691500e-4,
];

/**
 * exp(x): x clamped to [-104, 89] (beyond, the result is 0 or +inf either way), n = ⌊x·log₂e +
 * ½⌋, r = x − n·ln2 in Cephes' two parts (the first exact), the polynomial, and 2ⁿ applied as two
 * factors so that subnormal results round once.
 */
function exp(x: Expr): Expr {
  const clamped = where(greater(x, f(89)), f(89), where(less(x, f(-104)), f(-104), x));
  const n = floor(add(mul(clamped, f(Math.LOG2E)), f(0.5)));
  const r = sub(sub(clamped, mul(n, f(0.693359375))), mul(n, f(-2.12194440e-4)));
  const p = add(add(mul(mul(r, r), poly(r, EXP_POLY)), r), f(1));
  const half = floor(mul(n, f(0.5)));
  return mul(mul(p, power2(half)), power2(sub(n, half)));
}

/**
 * log(x): the mantissa m and exponent e from the bits (a subnormal scaled by 2²³ first), m taken
 * into [√½, √2), then Cephes' `logf`: f = m − 1, f − f²/2 + f³·P(f) + e·ln2 in two parts.
 */
function log(x: Expr): Expr {
  const tiny = less(abs(x), f(2 ** -126));
  const scaled = where(tiny, mul(x, f(2 ** 23)), x);
  const word = bits(scaled);
  const biased = alu("Div", "i32", alu("And", "i32", word, int(0x7f800000)), int(1 << 23));
  const unit = fromBits(
    alu("Or", "i32", alu("And", "i32", word, int(0x007fffff)), int(0x3f800000)),
  );
  const high = greater(unit, f(Math.SQRT2));
  const m = where(high, mul(unit, f(0.5)), unit);
  const e = add(
    sub(cast(biased, "f32"), where(tiny, f(127 + 23), f(127))),
    where(high, f(1), f(0)),
  );
  const t = sub(m, f(1));
  const z = mul(t, t);
  let y = mul(mul(poly(t, LOG_POLY), t), z);
  y = add(y, mul(e, f(-2.12194440e-4)));
  y = add(y, mul(z, f(-0.5)));
  const value = add(add(t, y), mul(e, f(0.693359375)));
  // The specials as C's log: NaN for NaN and below zero, −inf at ±0, +inf at +inf.
  return where(
    or(isNaN(x), less(x, f(0))),
    f(NaN),
    where(equal(x, f(0)), f(-Infinity), where(equal(x, f(Infinity)), x, value)),
  );
}

/** erf(x): x·P(x²) below |x| = 1, ±P(|x| − 2.5) below 3.92, ±1 beyond (NaN stays NaN). */
function erf(x: Expr): Expr {
  const a = abs(x);
  const sign = where(less(x, f(0)), f(-1), f(1));
  const mid = mul(sign, poly(sub(a, f(2.5)), ERF_MID));
  return where(
    less(a, f(1)),
    mul(x, poly(mul(x, x), ERF_SMALL)),
    where(less(a, f(ERF_ONE)), mid, where(isNaN(x), x, sign)),
  );
}

/** π/4 in Cephes' three parts for `sinf`/`cosf` (the first two exact in their products). */
const DP = [0.78515625, 2.4187564849853515625e-4, 3.77489497744594108e-8];
const SIN_POLY = [-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4];
const COS_POLY = [4.166664568298827e-2, -1.388731625493765e-3, 2.443315711809948e-5];

/**
 * sin(x) (`sine`) or cos(x): Cephes' `sinf`/`cosf` in f32, the octant j = ⌊|x|·4/π⌋ rounded up to
 * even, z = |x| − j·π/4 in three parts, then the sine or cosine polynomial and the octant's sign.
 */
function sine(x: Expr, sine: boolean): Expr {
  const a = abs(x);
  const j0 = floor(mul(a, f(4 / Math.PI)));
  const j = add(j0, sub(j0, mul(floor(mul(j0, f(0.5))), f(2))));
  const octant = sub(j, mul(floor(mul(j, f(0.125))), f(8)));
  const upper = greater(octant, f(3));
  const o = where(upper, sub(octant, f(4)), octant);
  const z = sub(sub(sub(a, mul(j, f(DP[0]))), mul(j, f(DP[1]))), mul(j, f(DP[2])));
  const zz = mul(z, z);
  const sinPoly = add(mul(mul(poly(zz, SIN_POLY), zz), z), z);
  const cosPoly = add(sub(mul(mul(poly(zz, COS_POLY), zz), zz), mul(zz, f(0.5))), f(1));
  const two = equal(o, f(2));
  // sin: negative for a sign bit (−0 too), flipped in the upper half; cos: flipped in octants 2-5.
  const flip = sine ? xor(less(bits(x), int(0)), upper) : xor(upper, two);
  const value = sine ? where(two, cosPoly, sinPoly) : where(two, sinPoly, cosPoly);
  return where(flip, alu("Neg", "f32", value), value);
}

/** Whole exponents up to this magnitude are computed by repeated squaring. */
const SQUARINGS = 64;

/**
 * a^b as C's `pow`: by squaring for a whole constant b, else exp(b·log|a|) with C's cases. A
 * constant 0 keeps the op: its value, 1 whatever a is, every backend gives already, and a
 * decomposition would read no a (a kernel binding a buffer its shader never reads is refused
 * by WebGPU).
 */
function pow(a: Expr, b: Expr): Expr | undefined {
  if (b.kind === "const" && b.value === 0) return undefined;
  if (b.kind === "const" && Number.isInteger(b.value) && Math.abs(b.value) <= SQUARINGS) {
    return whole(a, b.value);
  }
  const magnitude = exp(mul(b, log(abs(a))));
  const integer = equal(floor(b), b);
  const half = mul(b, f(0.5));
  const odd = and(integer, not(equal(floor(half), half)));
  const negative = less(a, f(0));
  let v = where(and(odd, negative), alu("Neg", "f32", magnitude), magnitude);
  const infinite = equal(abs(a), f(Infinity));
  v = where(and(and(negative, not(infinite)), not(integer)), f(NaN), v);
  // A zero base: +0 or +inf by the power's sign, negated for −0 to an odd power.
  const zero = where(greater(b, f(0)), f(0), f(Infinity));
  const signed = less(bits(a), int(0));
  v = where(equal(a, f(0)), where(and(odd, signed), alu("Neg", "f32", zero), zero), v);
  v = where(or(isNaN(a), isNaN(b)), f(NaN), v);
  const one = or(
    or(equal(b, f(0)), equal(a, f(1))),
    and(equal(a, f(-1)), equal(abs(b), f(Infinity))),
  );
  return where(one, f(1), v);
}

/** a^n for a whole n, 0 < |n| ≤ {@linkcode SQUARINGS}: binary powering, 1/aⁿ for n < 0. */
function whole(a: Expr, n: number): Expr {
  let result: Expr | undefined, square = a;
  for (let k = Math.abs(n); k > 0; k >>= 1) {
    if (k & 1) result = result ? mul(result, square) : square;
    if (k > 1) square = mul(square, square);
  }
  return n < 0 ? alu("Div", "f32", f(1), result!) : result!;
}
