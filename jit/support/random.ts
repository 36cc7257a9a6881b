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

/**
 * numpy's legacy generator (`np.random.seed(seed)` then `np.random.random_sample()`): MT19937
 * seeded by `init_genrand`, each number 53 bits from two 32-bit outputs. Seeded random ops draw
 * from it, so where ONNX's reference seeds numpy with the node's seed (training-mode Dropout), a
 * first run gives its very numbers.
 */
export function mt19937(seed: number): () => number {
  const N = 624, M = 397;
  const mt = new Uint32Array(N);
  mt[0] = seed >>> 0;
  for (let i = 1; i < N; i++) {
    const x = mt[i - 1] ^ (mt[i - 1] >>> 30);
    // 1812433253 · x + i without losing the low bits to doubles.
    mt[i] = (Math.imul(1812433253, x) + i) >>> 0;
  }
  let at = N;
  const word = (): number => {
    if (at >= N) {
      for (let k = 0; k < N; k++) {
        const y = (mt[k] & 0x80000000) | (mt[(k + 1) % N] & 0x7fffffff);
        mt[k] = mt[(k + M) % N] ^ (y >>> 1) ^ (y & 1 ? 0x9908b0df : 0);
      }
      at = 0;
    }
    let y = mt[at++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    return (y ^ (y >>> 18)) >>> 0;
  };
  return () => ((word() >>> 5) * 67108864 + (word() >>> 6)) / 9007199254740992;
}
