/**
 * The host's speed over time, kiln aside: a fixed JS loop timed 200 calls a window, 30 windows,
 * each window's median printed in ms. A machine that holds one speed prints one number over and
 * over; the 2-core VM and the H200 host print two (1.9 and 3.4 ms, 1.8 and 3.0–3.2 ms on
 * 2026-11-27), each for seconds at a time, which is why `bench/models.ts` runs its processes in
 * rounds.
 *
 *   deno run bench/phases.ts
 *
 * @module
 */
import { median } from "./timed.ts";

const values = Float32Array.from({ length: 4096 }, (_, i) => i * 1e-3);
let sink = 0;
/** The fixed work: 20 passes of tanh and a multiply-add over 4096 floats. */
function work(): void {
  for (let r = 0; r < 20; r++) {
    for (let i = 0; i < values.length; i++) sink += Math.tanh(values[i]) * values[i];
  }
}

const windows: string[] = [];
for (let w = 0; w < 30; w++) {
  const ms: number[] = [];
  for (let i = 0; i < 200; i++) {
    const start = performance.now();
    work();
    ms.push(performance.now() - start);
  }
  windows.push(median(ms).toFixed(3));
}
console.log(windows.join(" "), sink > 0 ? "" : "(no work)");
