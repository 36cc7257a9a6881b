/**
 * Vectorized f32 transcendentals, emitted into each module that uses them as internal functions
 * `v128 → v128` (`vexp`, `vlog`, `verf`). Scalar code calls the same function on a splat and takes
 * lane 0, so a kernel's vector body and its scalar tail agree bit for bit.
 *
 * - exp: Cody–Waite reduction `x = n·ln2 + r`, |r| ≤ ln2/2, `1 + r + r²·P(r)` with a minimax
 *   cubic P (below), and the scale 2ⁿ applied as two factors so results down to the smallest
 *   subnormal are exact to rounding. Max relative error 1.8e-7 on normal results (2·10⁶ points
 *   of [-103.9, 88.7]; 8e-8 with Cephes' six-term P).
 * - log: mantissa in [√½, √2), Cephes' degree-9 polynomial; subnormal inputs are pre-scaled by
 *   2²³. Max relative error 1.2e-7.
 * - erf: `x·P(x²)` (degree 5) below |x| = 1, a degree-12 polynomial in `|x| - 2.5` on [1, 3.92),
 *   ±1 beyond (erfc(3.92) is below half an f32 ulp of 1). Coefficients are least-squares fits
 *   against 30-digit erf (`mpmath`); max relative error 2e-7 evaluated in f32.
 *
 * - sin, cos: octant reduction with π/4 in three parts and Taylor polynomials, both in f64x2
 *   (an f32 reduction loses the relative accuracy of results near multiples of π); rounded once
 *   to f32, so within half an ulp plus 1e-9. Beyond |x| = 2²⁰ (and for NaN, ±Inf) the lanes call
 *   the host's `Math.sin`/`Math.cos`.
 *
 * NaN propagates, ±Inf and ±0 follow C99 (exp(-Inf) = 0, log(0) = -Inf, log(x<0) = NaN,
 * erf(±Inf) = ±1). The tests check every claim against float64 over sampled f32 ranges.
 *
 * @module
 */
import type { Wasm, WasmModule } from "./encoder.ts";
import { ERF_MID, ERF_ONE, ERF_SMALL, LOG_POLY } from "../../jit/ir/f32_math_tables.ts";

/** The vector math functions a module can call. */
export type MathFunction =
  | "vexp"
  | "vlog"
  | "verf"
  | "vsin"
  | "vcos"
  | "vf16"
  | "vsquare"
  | "vcube";

/** π/4 in three parts (Cephes): the first two products with an octant count < 2²⁹ are exact. */
const DP = [7.85398125648498535156e-1, 3.77489470793079817668e-8, 2.69515142907905952645e-15];
/** Taylor coefficients of sin(r)/r − 1 and cos(r) − 1 + r²/2 in r², enough on |r| ≤ π/4 in f64. */
const SIN_POLY = [-1 / 6, 1 / 120, -1 / 5040, 1 / 362880];
const COS_POLY = [1 / 24, -1 / 720, 1 / 40320, -1 / 3628800];
/** Above this |x| (and for NaN, ±Inf) sin and cos call the host per lane. */
const TRIG_LIMIT = 1048576;

/** 1.5·2²³: added to |y| < 2²² it rounds y to an integer held in the low mantissa bits. */
const ROUNDER = 12582912;
/** The bits of {@linkcode ROUNDER} as an f32. */
const ROUNDER_BITS = 0x4b400000;
/**
 * P in exp(r) ≈ 1 + r + r²·P(r) on |r| ≤ ln2/2: a minimax fit of relative error (Lawson's
 * iteration over 4000 Chebyshev points), 1.05e-7 before rounding. Two multiply-adds fewer
 * than Cephes' six terms took W3 (softmax over [4096, 1024], end to end) from 9.8 to 8.9 ms and
 * W1-1M from 2.46 to 2.16 ms, for 1.8e-7 instead of 8e-8 after rounding.
 */
const EXP_POLY = [
  0.499992311000824,
  0.16667115688323975,
  0.04189034551382065,
  0.008312510326504707,
];
/** Options of {@linkcode addMathFunctions}. */
export interface MathOptions {
  /** The functions to add. */
  readonly used: Set<MathFunction>;
  /**
   * Evaluate exp's and log's polynomials with relaxed SIMD's multiply-add (fused where the CPU
   * has FMA: shorter dependency chains, one rounding instead of two).
   */
  readonly fma?: boolean;
}

/** Adds the functions in `options.used` to module `m`. */
export function addMathFunctions(
  m: WasmModule,
  wasm: Wasm,
  options: MathOptions,
): void {
  const k = mathKit(m, wasm, options);
  for (const [name, { locals, body }] of BODIES) {
    if (!options.used.has(name)) continue;
    const stmts = body(k, (l, v) => m.local.set(l, v), name);
    m.addFunction(
      name,
      wasm.v128,
      wasm.v128,
      new Array(locals).fill(wasm.v128),
      m.block(null, stmts, wasm.v128),
    );
  }
}

/** What every math function's body is written with: the encoder, constants and its locals. */
function mathKit(m: WasmModule, wasm: Wasm, options: MathOptions) {
  const v128 = wasm.v128, f4 = m.f32x4, i4 = m.i32x4;
  /** `a·b + c`, fused when `options.fma`. */
  const madd = (a: number, b: number, c: number): number =>
    options.fma ? f4.relaxed_madd(a, b, c) : f4.add(f4.mul(a, b), c);
  const c = (x: number) => f4.splat(m.f32.const(x));
  const ci = (x: number) => i4.splat(m.i32.const(x));
  const arg = () => m.local.get(0, v128);
  const at = (l: number) => m.local.get(l, v128);
  /** Horner's rule: Σ coeffs[i]·x^i. */
  const poly = (x: () => number, coeffs: readonly number[]) =>
    coeffs.slice(0, -1).reduceRight(
      (acc, k) => madd(acc, x(), c(k)),
      c(coeffs[coeffs.length - 1]),
    );
  return { m, wasm, f4, i4, madd, c, ci, arg, at, poly };
}

/** The shared pieces of the math functions' bodies. */
type MathKit = ReturnType<typeof mathKit>;

/** A math function's locals (after its argument, all v128) and its body's statements. */
interface MathBody {
  readonly locals: number;
  body(k: MathKit, set: SetLocal, name: MathFunction): number[];
}

// locals: 1 x, 2 x·log2(e) + 1.5·2²³ (n in its low mantissa bits), 3 n, 4 r, 5 n (i32), 6 n1.
// pmax/pmin clamp with one instruction each on x86 (max/min cost ~8 for their NaN and ±0
// rules); with x as the first operand a NaN passes through. Adding 1.5·2²³ rounds to the
// nearest integer (ties to even, as `nearest`) and leaves it in the bits, which spares the
// costly saturating float → int conversion.
const VEXP: MathBody = {
  locals: 6,
  body: ({ m, f4, i4, madd, c, ci, arg, at, poly }, set) => [
    set(1, f4.pmin(f4.pmax(arg(), c(-104)), c(89))),
    set(2, f4.add(f4.mul(at(1), c(Math.LOG2E)), c(ROUNDER))),
    set(3, f4.sub(at(2), c(ROUNDER))),
    set(4, madd(at(3), c(2.12194440e-4), f4.sub(at(1), f4.mul(at(3), c(0.693359375))))),
    set(5, i4.sub(at(2), ci(ROUNDER_BITS))),
    set(6, i4.shr_s(at(5), m.i32.const(1))),
    f4.mul(
      f4.mul(
        f4.add(madd(poly(() => at(4), EXP_POLY), f4.mul(at(4), at(4)), at(4)), c(1)),
        i4.shl(i4.add(at(6), ci(127)), m.i32.const(23)),
      ),
      i4.shl(i4.add(i4.sub(at(5), at(6)), ci(127)), m.i32.const(23)),
    ),
  ],
};

// locals: 1 subnormal mask, 2 bits, 3 exponent (i32), 4 mantissa, 5 small mask, 6 z, 7 e (f32), 8 y
const VLOG: MathBody = {
  locals: 8,
  body: ({ m, f4, i4, c, ci, arg, at, poly }, set) => [
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
  ],
};

// locals: 1 half (f64x2), 2 r, 3 z, 4 octant (i32x4), 5 low result, 6 high result, 7 big, 8 out
const TRIG: MathBody = {
  locals: 8,
  body: (k, set, name) => {
    const { m, wasm, f4, i4, c, ci, arg, at } = k;
    const f2 = m.f64x2;
    const d = (x: number) => f2.splat(m.f64.const(x));
    /** -1 in each 64-bit lane where lane 0 or 1 of the i32x4 `x` is non-zero. */
    const wide = (x: number) => m.i64x2.extend_low_i32x4_s(i4.ne(x, ci(0)));

    const half = (src: number, out: number): number[] => {
      const y = () => f2.convert_low_i32x4_s(at(4));
      const poly64 = (coeffs: readonly number[]) =>
        coeffs.slice(0, -1).reduceRight(
          (acc, k) => f2.add(f2.mul(acc, at(3)), d(k)),
          d(coeffs[coeffs.length - 1]),
        );
      const sinPoly = f2.add(at(2), f2.mul(f2.mul(at(2), at(3)), poly64(SIN_POLY)));
      const cosPoly = f2.add(
        f2.sub(d(1), f2.mul(at(3), d(0.5))),
        f2.mul(f2.mul(at(3), at(3)), poly64(COS_POLY)),
      );
      const odd = wide(m.v128.and(at(4), ci(2)));
      const flip = m.v128.xor(
        wide(m.v128.and(at(4), ci(4))),
        name === "vsin" ? m.i64x2.shr_s(at(1), m.i32.const(63)) : wide(m.v128.and(at(4), ci(2))),
      );
      return [
        set(1, src),
        set(
          4,
          m.v128.and(
            i4.add(i4.trunc_sat_f64x2_s_zero(f2.mul(f2.abs(at(1)), d(4 / Math.PI))), ci(1)),
            ci(~1),
          ),
        ),
        set(
          2,
          f2.sub(
            f2.sub(f2.sub(f2.abs(at(1)), f2.mul(y(), d(DP[0]))), f2.mul(y(), d(DP[1]))),
            f2.mul(y(), d(DP[2])),
          ),
        ),
        set(3, f2.mul(at(2), at(2))),
        set(
          out,
          name === "vsin"
            ? m.v128.bitselect(cosPoly, sinPoly, odd)
            : m.v128.bitselect(sinPoly, cosPoly, odd),
        ),
        set(out, m.v128.bitselect(f2.neg(at(out)), at(out), flip)),
      ];
    };
    const host = name === "vsin" ? "sin" : "cos";
    return [
      ...half(f2.promote_low_f32x4(arg()), 5),
      ...half(f2.promote_low_f32x4(m.i8x16.shuffle(arg(), arg(), HIGH_HALF)), 6),
      set(
        8,
        m.i8x16.shuffle(
          f4.demote_f64x2_zero(at(5)),
          f4.demote_f64x2_zero(at(6)),
          [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23],
        ),
      ),
      set(7, m.v128.not(f4.le(f4.abs(arg()), c(TRIG_LIMIT)))),
      m.if(
        m.v128.any_true(at(7)),
        m.block(
          null,
          [0, 1, 2, 3].map((l) =>
            m.if(
              i4.extract_lane(at(7), l),
              set(
                8,
                f4.replace_lane(
                  at(8),
                  l,
                  m.f32.demote(
                    m.call(host, [m.f64.promote(f4.extract_lane(arg(), l))], wasm.f64),
                  ),
                ),
              ),
            )
          ),
        ),
      ),
      at(8),
    ];
  },
};

// locals: 1 |x|, 2 x², 3 |x| - 2.5, 4 sign bit
const VERF: MathBody = {
  locals: 4,
  body: ({ m, f4, c, ci, arg, at, poly }, set) => [
    set(1, f4.abs(arg())),
    set(2, f4.mul(arg(), arg())),
    set(3, f4.sub(at(1), c(2.5))),
    set(4, m.v128.and(arg(), ci(-0x80000000))),
    m.v128.bitselect(
      f4.mul(arg(), poly(() => at(2), ERF_SMALL)),
      m.v128.bitselect(
        m.v128.or(c(1), at(4)),
        m.v128.or(poly(() => at(3), ERF_MID), at(4)),
        f4.ge(at(1), c(ERF_ONE)),
      ),
      f4.lt(at(1), c(1)),
    ),
  ],
};

// Each lane rounded to the nearest f16 (ties to even), kept as an f32: what storing it as f16
// gives, in integer steps (a host call per value cost f16 models 250-370x their f32 time).
// locals: 1 |x| bits, 2 normal rounding (the 13 low mantissa bits, to even), 3 subnormal
// rounding (|x| + 0.5 − 0.5 rounds to a multiple of 2⁻²⁴, f16's subnormal step).
const VF16: MathBody = {
  locals: 3,
  body: ({ m, f4, i4, c, ci, arg, at }, set) => [
    set(1, m.v128.and(arg(), ci(0x7fffffff))),
    set(
      2,
      m.v128.and(
        i4.add(i4.add(at(1), ci(0xfff)), m.v128.and(i4.shr_u(at(1), m.i32.const(13)), ci(1))),
        ci(-0x2000),
      ),
    ),
    set(3, f4.sub(f4.add(at(1), c(0.5)), c(0.5))),
    m.v128.or(
      m.v128.and(arg(), ci(-0x80000000)),
      m.v128.bitselect(
        at(1), // NaN and ±∞ as they are
        m.v128.bitselect(
          ci(0x7f800000), // past f16's largest finite (65504) and its half step: ∞
          m.v128.bitselect(at(3), at(2), i4.lt_s(at(1), ci(0x38800000))),
          i4.ge_s(at(1), ci(0x477ff000)),
        ),
        i4.ge_s(at(1), ci(0x7f800000)),
      ),
    ),
  ],
};

// x² and x³ as the reference computes pow(x, 2) and pow(x, 3) (float64, rounded to f32): the
// square rounds once in f32; the cube is taken in f64x2 (x² exact there, x³ rounded once), then
// rounded to f32 — 20M random f32s gave the bits of Math.fround(Math.pow(x, 3)) every time. Pow
// had called the host's pow per lane: GPT-2's tanh GELU, x³ of 128 × 3072 values a layer, cost
// as much as the layer's product.
const VSQUARE: MathBody = { locals: 0, body: ({ f4, arg }) => [f4.mul(arg(), arg())] };

// locals: 1 lanes 0, 1 as f64, 2 lanes 2, 3 as f64.
const VCUBE: MathBody = {
  locals: 2,
  body: ({ m, f4, arg, at }, set) => {
    const f2 = m.f64x2,
      cube = (l: number) => f4.demote_f64x2_zero(f2.mul(f2.mul(at(l), at(l)), at(l)));
    return [
      set(1, f2.promote_low_f32x4(arg())),
      set(2, f2.promote_low_f32x4(m.i8x16.shuffle(arg(), arg(), HIGH_HALF))),
      m.i8x16.shuffle(cube(1), cube(2), [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]),
    ];
  },
};

/** The math functions in the order a module adds them. */
const BODIES: readonly [MathFunction, MathBody][] = [
  ["vexp", VEXP],
  ["vlog", VLOG],
  ["vsin", TRIG],
  ["vcos", TRIG],
  ["verf", VERF],
  ["vf16", VF16],
  ["vsquare", VSQUARE],
  ["vcube", VCUBE],
];

type SetLocal = (local: number, value: number) => number;

/** Shuffle bringing lanes 2, 3 of an f32x4 down to 0, 1 (to widen them to f64x2). */
export const HIGH_HALF: readonly number[] = [8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7];
