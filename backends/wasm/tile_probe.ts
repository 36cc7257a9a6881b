/**
 * Which of wasm's two f32 product tiles this host runs faster, timed once a process: the inner
 * loops of both (`shaders/wasm/tile_probe.ts`) in turns over the same multiply-adds, the best of
 * each after the first turns (V8 runs a fresh module's first calls in its baseline tier). The
 * dot tiles are taken only where they win by `MARGIN`: where the two are close the broadcast
 * tiles' products measured a few percent ahead (the 2-core AMD VM, `bench/dot_tiles_ab.ts`).
 *
 * @module
 */
import { probeMadds, type TileForm, tileProbe } from "../../shaders/wasm/tile_probe.ts";

/** Vector multiply-adds of each timed call: about 0.2-0.5 ms on the hosts measured. */
const CALL_MADDS = 1 << 20;

/** Turns of both calls, and the first ones not counted. */
const TURNS = 12, WARM = 4;

/** How much less time the dot tiles must take to be chosen. */
const MARGIN = 1.08;

/** The verdicts, by whether the multiply-adds are fused. */
const verdicts = new Map<boolean, boolean>();

/**
 * Whether the dot tiles beat the broadcast tiles on this host by `MARGIN`, their multiply-adds
 * fused where `fma` (as the kernels' will be). About 10 ms the first time, then remembered.
 */
export function dotTilesFaster(fma: boolean): boolean {
  let verdict = verdicts.get(fma);
  if (verdict === undefined) {
    const [dot, broadcast] = bestTimes(fma);
    verdict = dot * MARGIN < broadcast;
    verdicts.set(fma, verdict);
  }
  return verdict;
}

/** The best time (ms) of the dot and the broadcast probe over the counted turns. */
export function bestTimes(fma: boolean): [dot: number, broadcast: number] {
  const forms: TileForm[] = ["dot", "broadcast"];
  const runs = forms.map((form) => {
    const module = new WebAssembly.Module(tileProbe(form, fma) as Uint8Array<ArrayBuffer>);
    const run = new WebAssembly.Instance(module).exports.run as (reps: number) => number;
    return { run, reps: Math.round(CALL_MADDS / probeMadds(form)) };
  });
  const best = [Infinity, Infinity];
  for (let turn = 0; turn < TURNS; turn++) {
    for (const [i, { run, reps }] of runs.entries()) {
      const start = performance.now();
      run(reps);
      const ms = performance.now() - start;
      if (turn >= WARM) best[i] = Math.min(best[i], ms);
    }
  }
  return [best[0], best[1]];
}
