/**
 * Scalar functions with exact semantics the reference backend needs and `Math` lacks: a
 * double-precision erf, C's pow, ONNX rounding (half to even), saturating casts, integer modulo.
 *
 * @module
 */
import { type DType, intRange } from "../../jit/ir/dtype.ts";

/**
 * x^y as C's `pow` and IEEE 754 define it (and ONNX's reference, through NumPy): 1 for a base of
 * 1 whatever the power (NaN and ±∞ included) and for −1 to ±∞, where `Math.pow` gives NaN.
 * Self-contained, as {@linkcode erf}: the wasm backend's workers get its source text.
 */
export function pow(x: number, y: number): number {
  return x === 1 || (x === -1 && (y === Infinity || y === -Infinity)) ? 1 : Math.pow(x, y);
}

/**
 * erf(x) to about 1e-15: Taylor series below |x| = 2.5, continued fraction for erfc above.
 * Self-contained (it names nothing outside itself): the wasm backend's workers get its source
 * text, so their f64 kernels compute the same bits.
 */
export function erf(x: number): number {
  const TWO_OVER_SQRT_PI = 1.1283791670955126;
  if (Number.isNaN(x)) return NaN;
  const a = Math.abs(x);
  if (a < 2.5) {
    let term = a, sum = a;
    const x2 = a * a;
    for (let n = 1; n < 80; n++) {
      term *= -x2 / n;
      const t = term / (2 * n + 1);
      sum += t;
      if (Math.abs(t) < 1e-17 * Math.abs(sum)) break;
    }
    return Math.sign(x) * TWO_OVER_SQRT_PI * sum;
  }
  if (a > 6) return Math.sign(x);
  // erfc(a) = exp(-a²)/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + …)))), evaluated bottom-up.
  let f = 0;
  for (let n = 60; n >= 1; n--) f = (n / 2) / (a + f);
  const erfc = Math.exp(-a * a) / Math.sqrt(Math.PI) / (a + f);
  return Math.sign(x) * (1 - erfc);
}

/** Rounds half to even, as ONNX Round does. */
export function roundHalfEven(x: number): number {
  if (!Number.isFinite(x)) return x;
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** Converts a number for a Cast to `to`: truncate toward zero and saturate for integers, NaN → 0. */
export function castValue(v: number, to: DType): number {
  const range = intRange(to);
  if (!range) return v;
  if (Number.isNaN(v)) return 0;
  return Math.min(Math.max(Math.trunc(v), range[0]), range[1]);
}

/** Integer modulo with the divisor's sign (ONNX Mod, fmod = 0); 0 when dividing by 0. */
export function intMod(a: number, b: number): number {
  if (b === 0) return 0;
  const r = a % b;
  return r !== 0 && (r < 0) !== (b < 0) ? r + b : r;
}
