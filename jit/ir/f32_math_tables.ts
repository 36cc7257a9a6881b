/**
 * Polynomial coefficients of the f32 transcendentals, shared by the wasm generator's vector
 * library (`shaders/wasm/math.ts`) and the exact precision's decompositions
 * (`jit/passes/exact_math.ts`). Each list is in ascending powers.
 *
 * @module
 */

/**
 * Cephes' `logf`: log(1 + f) ≈ f − f²/2 + f³·P(f) on f ∈ [√½ − 1, √2 − 1].
 */
export const LOG_POLY: readonly number[] = [
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

/** erf(x) ≈ x·P(x²) below |x| = 1: a least-squares fit against 30-digit erf (`mpmath`). */
export const ERF_SMALL: readonly number[] = [
  1.1283791065216064,
  -0.37612414360046387,
  0.11280788481235504,
  -0.026726972311735153,
  0.004934494849294424,
  -0.0005696599255315959,
];

/** erf(x) ≈ P(|x| − 2.5) on |x| ∈ [1, 3.92): fitted as {@linkcode ERF_SMALL}. */
export const ERF_MID: readonly number[] = [
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

/** Beyond this |x| erf is ±1 in f32 (erfc(3.92) is below half an ulp of 1). */
export const ERF_ONE = 3.92;
