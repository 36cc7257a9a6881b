/**
 * Vectorized f32 transcendentals, emitted into each module that uses them as internal functions
 * `v128 → v128` (`vexp`, `vlog`, `verf`). Scalar code calls the same function on a splat and takes
 * lane 0, so a kernel's vector body and its scalar tail agree bit for bit.
 *
 * - exp: Cody–Waite reduction `x = n·ln2 + r`, |r| ≤ ln2/2, Cephes' degree-6 polynomial, and the
 *   scale 2ⁿ applied as two factors so results down to the smallest subnormal are exact to
 *   rounding. Max relative error 1.7e-7 (2 ulp) on normal results.
 * - log: mantissa in [√½, √2), Cephes' degree-9 polynomial; subnormal inputs are pre-scaled by
 *   2²³. Max relative error 1.2e-7.
 * - erf: `x·P(x²)` (degree 5) below |x| = 1, a degree-12 polynomial in `|x| - 2.5` on [1, 3.92),
 *   ±1 beyond (erfc(3.92) is below half an f32 ulp of 1). Coefficients are least-squares fits
 *   against 30-digit erf (`mpmath`); max relative error 2e-7 evaluated in f32.
 *
 * NaN propagates, ±Inf and ±0 follow C99 (exp(-Inf) = 0, log(0) = -Inf, log(x<0) = NaN,
 * erf(±Inf) = ±1). The tests check every claim against float64 over sampled f32 ranges.
 *
 * @module
 */
import type { Binaryen } from "./wasm_codegen.ts";

/** The vector math functions a module can call. */
export type MathFunction = "vexp" | "vlog" | "verf";

const EXP_POLY = [
  5.0000001201e-1,
  1.6666665459e-1,
  4.1665795894e-2,
  8.3334519073e-3,
  1.3981999507e-3,
  1.98756915e-4,
];
const LOG_POLY = [
  3.3333331174e-1,
  -2.4999993993e-1,
  2.0000714765e-1,
  -1.6668057665e-1,
  1.4249322787e-1,
  -1.2420140846e-1,
  1.1676998740e-1,
  -1.1514610310e-1,
  7.0376836292e-2,
];
const ERF_SMALL = [
  1.1283791065216064,
  -0.37612414360046387,
  0.11280788481235504,
  -0.026726972311735153,
  0.004934494849294424,
  -0.0005696599255315959,
];
const ERF_MID = [
  0.9995930790901184,
  0.002178095979616046,
  -0.005446659401059151,
  0.008353054523468018,
  -0.008615347556769848,
  0.006103817373514175,
  -0.0028179737273603678,
  0.0005696486332453787,
  0.00028618419310078025,
  -0.0002785062533803284,
  6.208592822076753e-05,
  2.0963174392818473e-05,
  -9.166536074189935e-06,
];

/** Adds the functions in `used` to module `m`. */
export function addMathFunctions(m: Binaryen, binaryen: Binaryen, used: Set<MathFunction>): void {
  const v128 = binaryen.v128, f4 = m.f32x4, i4 = m.i32x4;
  const c = (x: number) => f4.splat(m.f32.const(x));
  const ci = (x: number) => i4.splat(m.i32.const(x));
  const arg = () => m.local.get(0, v128);
  const at = (l: number) => m.local.get(l, v128);
  /** Horner's rule: Σ coeffs[i]·x^i. */
  const poly = (x: () => number, coeffs: readonly number[]) =>
    coeffs.slice(0, -1).reduceRight(
      (acc, k) => f4.add(f4.mul(acc, x()), c(k)),
      c(coeffs[coeffs.length - 1]),
    );
  const define = (name: MathFunction, locals: number, body: (set: SetLocal) => number[]) => {
    const stmts = body((l, v) => m.local.set(l, v));
    m.addFunction(
      name,
      v128,
      v128,
      new Array(locals).fill(v128),
      m.block(null, stmts, v128),
    );
  };

  if (used.has("vexp")) {
    // locals: 1 x, 2 n, 3 r, 4 ni, 5 n1
    define("vexp", 5, (set) => [
      set(1, f4.min(f4.max(arg(), c(-104)), c(89))),
      set(2, f4.nearest(f4.mul(at(1), c(Math.LOG2E)))),
      set(3, f4.add(f4.sub(at(1), f4.mul(at(2), c(0.693359375))), f4.mul(at(2), c(2.12194440e-4)))),
      set(4, i4.trunc_sat_f32x4_s(at(2))),
      set(5, i4.shr_s(at(4), m.i32.const(1))),
      f4.mul(
        f4.mul(
          f4.add(f4.add(f4.mul(poly(() => at(3), EXP_POLY), f4.mul(at(3), at(3))), at(3)), c(1)),
          i4.shl(i4.add(at(5), ci(127)), m.i32.const(23)),
        ),
        i4.shl(i4.add(i4.sub(at(4), at(5)), ci(127)), m.i32.const(23)),
      ),
    ]);
  }
  if (used.has("vlog")) {
    // locals: 1 subnormal mask, 2 bits, 3 exponent (i32), 4 mantissa, 5 small mask, 6 z, 7 e (f32), 8 y
    define("vlog", 8, (set) => [
      set(1, f4.lt(arg(), c(1.17549435e-38))),
      set(2, m.v128.bitselect(f4.mul(arg(), c(8388608)), arg(), at(1))),
      set(
        3,
        i4.sub(
          i4.sub(i4.shr_u(at(2), m.i32.const(23)), ci(126)),
          m.v128.and(at(1), ci(23)),
        ),
      ),
      set(4, m.v128.or(m.v128.and(at(2), ci(0x007fffff)), ci(0x3f000000))),
      set(5, f4.lt(at(4), c(Math.SQRT1_2))),
      set(3, i4.add(at(3), at(5))),
      set(4, f4.sub(f4.add(at(4), m.v128.and(at(4), at(5))), c(1))),
      set(6, f4.mul(at(4), at(4))),
      set(7, f4.convert_i32x4_s(at(3))),
      set(8, f4.mul(f4.mul(poly(() => at(4), LOG_POLY), at(4)), at(6))),
      set(8, f4.add(at(8), f4.mul(at(7), c(-2.12194440e-4)))),
      set(8, f4.sub(at(8), f4.mul(at(6), c(0.5)))),
      set(8, f4.add(f4.add(at(4), at(8)), f4.mul(at(7), c(0.693359375)))),
      set(8, m.v128.bitselect(c(-Infinity), at(8), f4.eq(arg(), c(0)))),
      set(8, m.v128.bitselect(c(Infinity), at(8), f4.eq(arg(), c(Infinity)))),
      m.v128.bitselect(
        c(NaN),
        at(8),
        m.v128.or(f4.lt(arg(), c(0)), f4.ne(arg(), arg())),
      ),
    ]);
  }
  if (used.has("verf")) {
    // locals: 1 |x|, 2 x², 3 |x| - 2.5, 4 sign bit
    define("verf", 4, (set) => [
      set(1, f4.abs(arg())),
      set(2, f4.mul(arg(), arg())),
      set(3, f4.sub(at(1), c(2.5))),
      set(4, m.v128.and(arg(), ci(-0x80000000))),
      m.v128.bitselect(
        f4.mul(arg(), poly(() => at(2), ERF_SMALL)),
        m.v128.bitselect(
          m.v128.or(c(1), at(4)),
          m.v128.or(poly(() => at(3), ERF_MID), at(4)),
          f4.ge(at(1), c(3.92)),
        ),
        f4.lt(at(1), c(1)),
      ),
    ]);
  }
}

type SetLocal = (local: number, value: number) => number;
