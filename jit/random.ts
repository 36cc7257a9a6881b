/**
 * Seeded pseudo-random numbers (mulberry32) for demo weights, test data and CLI inputs, so every
 * run of a seed sees the same values on every machine.
 *
 * @module
 */

/** A generator of uniform numbers in [0, 1) from a 32-bit seed. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `n` uniform f32 values in [lo, hi) from `seed`. */
export function uniform(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  const next = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * next();
  return out;
}
