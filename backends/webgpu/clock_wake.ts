/**
 * The GPU's clock after a long compile. NVIDIA's driver raises a GPU's clock when a process makes
 * a device, holds it about 3.5 s, then lets it fall to its floor while the GPU idles (345 MHz on
 * the H200, where a kernel then takes 4-5× as long). Light work does not raise it again, and full
 * load takes about a second and a stall of 0.3-0.45 s to. A compile that outlasts the window left
 * a model's first 20-40 runs 3× slower (ResNet-50 QDQ: 7-8 ms a run against 2.3-2.8).
 * Making a second device, and releasing it, raises the clock at once: 0.1 s after such a compile,
 * where the first runs lost more (`bench/REPORT-quant.md`, session 64: `.device/scratch/dvfs4.ts`).
 *
 * @module
 */

/** How long the driver holds the clock up after a device is made, with a margin. */
export const CLOCK_WINDOW_MS = 3000;

/** Whether an adapter's GPU lowers its clock as NVIDIA's driver does (see the module note). */
export function lowersClock(info: { vendor?: string; description?: string }): boolean {
  return /nvidia/i.test(`${info.vendor ?? ""} ${info.description ?? ""}`);
}

/**
 * When the clock was last raised (a device made), and whether a compile ending now should raise
 * it again: where the window has passed. Times in `performance.now()` milliseconds.
 */
export class ClockWindow {
  #raised: number;

  /** A window opened at `now` (the device's creation). */
  constructor(now: number = performance.now()) {
    this.#raised = now;
  }

  /** Whether the window has passed at `now`. */
  passed(now: number = performance.now()): boolean {
    return now - this.#raised > CLOCK_WINDOW_MS;
  }

  /** Notes that the clock was raised at `now`. */
  raised(now: number = performance.now()): void {
    this.#raised = now;
  }
}

/**
 * Raises the clock of `adapter`'s GPU by making a device of a second adapter of `gpu` (asked as
 * `options`) and releasing it. Best effort: a failure leaves the clock as it was.
 */
export async function raiseClock(gpu: GPU, options: GPURequestAdapterOptions): Promise<void> {
  try {
    const adapter = await gpu.requestAdapter(options);
    const device = await adapter?.requestDevice();
    device?.destroy();
  } catch {
    // Nothing was promised: the runs go at whatever clock the driver keeps.
  }
}
