/**
 * What every generated shader shares around its kernel: the prelude of helper functions with the
 * reference's IEEE semantics (specials, division, pow, float-to-integer casts, erf), and the
 * entry point that sets the prelude's opaque flags before the body runs.
 *
 * @module
 */

/**
 * WGSL's non-short-circuit `&` of `terms` (each parenthesized; `true` for none). `&&` and `||`
 * compile to a branch and a phi per operand (Tint and naga alike), and those branches doubled
 * NVIDIA's pipeline compile of a reduction's NaN-aware max: 256 of them took 336 ms through
 * Deno's WebGPU and 630 through Dawn, 172 and 386 with `&` and `|` (H200). Generated conditions
 * are pure (WGSL bounds-checks every access, its integer division is total), so nothing needs
 * the short circuit.
 */
export function allOf(...terms: string[]): string {
  return joined(" & ", "true", terms);
}

/** WGSL's non-short-circuit `|` of `terms` (see {@linkcode allOf}); `false` for none. */
export function anyOf(...terms: string[]): string {
  return joined(" | ", "false", terms);
}

/** `terms` joined by `op` and parenthesized whole, each a unary expression; `empty` for none. */
const joined = (op: string, empty: string, terms: string[]) =>
  terms.length ? `(${terms.map((t) => (unary(t) ? t : `(${t})`)).join(op)})` : empty;

/** Whether `t` is a name, a literal or parenthesized whole, negated or not (no parentheses needed). */
function unary(t: string): boolean {
  const u = t.startsWith("!") ? t.slice(1) : t;
  if (/^[\w.]+$/.test(u)) return true;
  if (!u.startsWith("(")) return false;
  let depth = 0;
  for (let i = 0; i < u.length; i++) {
    depth += u[i] === "(" ? 1 : u[i] === ")" ? -1 : 0;
    if (depth === 0 && i < u.length - 1) return false;
  }
  return true;
}

/**
 * Helper functions every generated shader starts with (IEEE specials, erf, pow, casts). Its entry
 * point must begin with {@linkcode NEVER}.
 */
export const PRELUDE = `
// Dawn's Tint rejects a constant expression whose value is NaN or ±inf, so non-finite floats are
// bitcast from bits held in a private variable, which is not a constant expression.
var<private> k_special: vec3<u32> = vec3<u32>(0x7fc00000u, 0x7f800000u, 0xff800000u);
fn k_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn k_isinf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn k_iszero(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0u; }
// A compiler assuming finite values may fold x - x to 0, x * 0 to 0, x / x to 1 (llvmpipe does):
// the IEEE results of specials (NaN in, inf - inf, 0 · inf, inf / inf) are decided on the bits.
// The sums also reassociate ((y + x) - x to y, losing y's rounding against a huge x): their first
// operand passes through k_never (below), which no compiler can see through.
fn k_add(a: f32, b: f32) -> f32 {
  let bad = k_isnan(a) | k_isnan(b) | (k_isinf(a) & k_isinf(b) & (bitcast<u32>(a) != bitcast<u32>(b)));
  return select(select(a, b, k_never) + b, bitcast<f32>(k_special.x), bad);
}
fn k_sub(a: f32, b: f32) -> f32 {
  let bad = k_isnan(a) | k_isnan(b) | (k_isinf(a) & (bitcast<u32>(a) == bitcast<u32>(b)));
  return select(select(a, b, k_never) - b, bitcast<f32>(k_special.x), bad);
}
fn k_mul(a: f32, b: f32) -> f32 {
  let bad = k_isnan(a) | k_isnan(b) | (k_isinf(a) & k_iszero(b)) | (k_isinf(b) & k_iszero(a));
  return select(a * b, bitcast<f32>(k_special.x), bad);
}
// Every entry point sets k_never from a builtin (to false; no compiler can know that): a
// product passed through select(·, ·, k_never) is not contracted with the add that consumes it
// into one fma, whose single rounding differs from the reference's two (NVIDIA's compiler does
// contract a * b + c; DynamicQuantizeLinear's Round then came out one off).
var<private> k_never: bool;
fn k_prod(a: f32, b: f32) -> f32 { return select(a * b, a, k_never); }
// WGSL leaves fma's rounding to the implementation: NVIDIA fuses it, llvmpipe rounds the product
// first. Every entry point finds out (from a builtin, so no compiler folds it): 1 + 2^-12 squared
// has a 2^-24 that only a fused fma keeps. The answer is a word of all ones (fused) or all zeros,
// for the divisions' bitwise choices (below).
var<private> k_fusedmask: u32;
fn k_fma_fused(n: u32) -> bool {
  let t = 1.0 + bitcast<f32>(0x39800000u) * f32(min(n, 1u));
  return fma(t, t, -(t * t)) != 0.0;
}
fn k_f16(x: f32) -> f32 { return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x; }
fn k_erf(x: f32) -> f32 {
  // Abramowitz & Stegun 7.1.26 in the odd form; |error| < 1.5e-7.
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
  return select(sign(x) * y, x, k_isnan(x));
}
// The helpers below compute each case's value and select the one that applies (no divergent
// branches); the last select made is the reference's first case.
fn k_pow(a: f32, b: f32) -> f32 {
  let odd = abs(b % 2.0) == 1.0;
  let r = exp2(b * log2(abs(a)));
  // A negative base: an odd integer power is negative; a non-integer one NaN (of a finite base).
  var v = select(r, -r, odd & (a < 0.0));
  v = select(v, bitcast<f32>(k_special.x), (a < 0.0) & !k_isinf(a) & (b != trunc(b)));
  // A zero base: +0 or +inf by the power's sign, negated for −0 to an odd power.
  let zero = select(bitcast<f32>(k_special.y), 0.0, b > 0.0);
  v = select(v, select(zero, -zero, odd & ((bitcast<u32>(a) & 0x80000000u) != 0u)), a == 0.0);
  v = select(v, bitcast<f32>(k_special.x), k_isnan(a) | k_isnan(b));
  // As C's pow (not JavaScript's): 1 for a base of 1 whatever the power, and for −1 to ±inf.
  return select(v, 1.0, (b == 0.0) | (a == 1.0) | ((a == -1.0) & k_isinf(b)));
}
fn k_round(x: f32) -> f32 { return round(x); }
// WGSL leaves a runtime float division by zero indeterminate; IEEE gives ±inf or NaN. The
// divisions decide their special cases on the operands' bits with integer arithmetic, a word's
// top bit as the flag, and choose by masks: one select a case per division made NVIDIA's
// pipeline compile take 9-13 ms a division (a GRU's gates, 168 divisions: 2.3 s; 0.9 s so).
// The bits of y where mask m is set, of x elsewhere.
fn k_pick(x: u32, y: u32, m: u32) -> u32 { return (x & ~m) | (y & m); }
// Top bit set where the float of bits u is ±inf or NaN.
fn k_infnan(u: u32) -> u32 { return (u & 0x7f800000u) + 0x00800000u; }
// All ones where an operand is ±inf or NaN or the divisor ±0: the quotient is k_divspecial's.
fn k_divodd(ua: u32, ub: u32) -> u32 {
  return 0u - ((k_infnan(ua) | k_infnan(ub) | ((ub & 0x7fffffffu) - 1u)) >> 31u);
}
// The IEEE quotient's bits there: NaN for a NaN, inf / inf and 0 / 0; ±0 for a finite over ±inf;
// ±inf otherwise; the sign the operands' signs' xor.
fn k_divspecial(ua: u32, ub: u32) -> u32 {
  let aa = ua & 0x7fffffffu;
  let ab = ub & 0x7fffffffu;
  let nan = ((0x7f800000u - aa) | (0x7f800000u - ab) | (((aa ^ 0x7f800000u) | (ab ^ 0x7f800000u)) - 1u) | ((aa | ab) - 1u)) >> 31u;
  let zero = ((ab ^ 0x7f800000u) - 1u) >> 31u;
  let value = ((ua ^ ub) & 0x80000000u) | (0x7f800000u & (zero - 1u));
  return k_pick(value, 0x7fc00000u, 0u - nan);
}
fn k_fdiv(a: f32, b: f32) -> f32 {
  // WGSL's division may be 2.5 ulp off (it is on NVIDIA): one residual step rounds it as IEEE
  // does, so an exact quotient stays exact (Round(x / scale) of quantization needs that). The
  // quotient passes through k_never so that no compiler simplifies the residual a - q·b away.
  let q = select(a / b, a, k_never);
  let corrected = q + fma(-q, b, a) / b;
  // The residual a - q·b is exact only through a fused fma; an unfused one made llvmpipe's
  // correctly rounded −0.85000002 / 0.02 one ulp off. Without it, or where q overflowed to ±inf,
  // the division stands.
  let ua = bitcast<u32>(a);
  let ub = bitcast<u32>(b);
  let uq = bitcast<u32>(q);
  let step = k_fusedmask & ((k_infnan(uq) >> 31u) - 1u);
  let r = k_pick(uq, bitcast<u32>(corrected), step);
  return bitcast<f32>(k_pick(r, k_divspecial(ua, ub), k_divodd(ua, ub)));
}
// WGSL's sqrt may be off by an ulp or more (Vulkan's precision is inverseSqrt's): where fma is
// fused, one residual step (Markstein's) rounds a positive finite root as IEEE does. The exact
// precision's kernels use it; llvmpipe's sqrt is IEEE's already.
fn k_sqrt(x: f32) -> f32 {
  let s = select(sqrt(x), x, k_never);
  let corrected = fma(fma(-s, s, x), 0.5 / s, s);
  let step = k_fusedmask & select(0u, ~0u, (x > 0.0) & !k_isinf(x) & !k_isnan(x));
  return bitcast<f32>(k_pick(bitcast<u32>(s), bitcast<u32>(corrected), step));
}
// A finite a over 1 + exp(·) (Sigmoid's, Tanh's): b is ≥ 1, +inf or NaN, so q cannot overflow
// and of the special cases only b's remain (a signed zero over +inf, NaN over NaN): fewer
// operations for NVIDIA's compiler in every gate of a GRU or LSTM.
fn k_fdivexp(a: f32, b: f32) -> f32 {
  let q = select(a / b, a, k_never);
  let corrected = q + fma(-q, b, a) / b;
  let r = k_pick(bitcast<u32>(q), bitcast<u32>(corrected), k_fusedmask);
  let ub = bitcast<u32>(b) & 0x7fffffffu;
  let nan = 0u - ((0x7f800000u - ub) >> 31u);
  let special = k_pick(bitcast<u32>(a) & 0x80000000u, 0x7fc00000u, nan);
  return bitcast<f32>(k_pick(r, special, 0u - (k_infnan(ub) >> 31u)));
}
// An f16 quotient (its caller rounds it to f16): WGSL's f32 division, within 2.5 f32 ulp, rounds
// to the IEEE f16 quotient except within those ulp of an f16 rounding midpoint (an exact f16
// quotient stays exact), so k_fdiv's residual step, a second division, is not needed.
fn k_hdiv(a: f32, b: f32) -> f32 {
  let ua = bitcast<u32>(a);
  let ub = bitcast<u32>(b);
  return bitcast<f32>(k_pick(bitcast<u32>(a / b), k_divspecial(ua, ub), k_divodd(ua, ub)));
}
// Out of range, the conversion's value is the implementation's: it is computed, then replaced.
fn k_f2i(x: f32, lo: i32, hi: i32) -> i32 {
  var v = select(clamp(i32(trunc(x)), lo, hi), lo, x < -2147483648.0);
  v = select(v, hi, x >= 2147483648.0);
  return select(v, 0, k_isnan(x));
}
fn k_f2u(x: f32, hi: u32) -> u32 {
  let v = select(min(u32(trunc(x)), hi), hi, x >= 4294967296.0);
  return select(v, 0u, k_isnan(x) | (x <= 0.0));
}
`;

/** The first statements of every entry point using {@linkcode PRELUDE} (it has `nwg`). */
export const NEVER = "k_never = nwg.x == 0u; k_fusedmask = select(0u, ~0u, k_fma_fused(nwg.x));";

/**
 * A shader's entry point of workgroups of `size` (a WGSL `workgroup_size` argument list) around
 * `body`, which must begin with {@linkcode NEVER}; its builtins are `gid`, `lid`, `wid` and `nwg`.
 */
export function entryPoint(
  size: string | number,
  body: readonly string[],
  builtins?: string,
): string[] {
  return [
    `@compute @workgroup_size(${size})`,
    "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,",
    `        @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>${
      builtins ? `, ${builtins}` : ""
    }) {`,
    ...body,
    "}",
    "",
  ];
}
