/**
 * One run's commands, submitted in parts: a run of many kernels is submitted after its first few
 * dispatches and again after more, so that the GPU starts on the first kernels while the host
 * encodes the rest. Encoding and submitting ResNet-50's 77 kernels took about 1 ms a run through
 * Dawn on the H200's host, all of it before the GPU had any work.
 *
 * @module
 */

/** Runs of at least this many kernels are submitted in parts. */
export const SPLIT_FROM = 32;
/** The counts of dispatches after which a run in parts submits what it has encoded. */
const SPLIT_AFTER: readonly number[] = [4, 16, 48];

/** One run's command encoder (see the module's description). */
export class RunEncoder {
  #device: GPUDevice;
  #split: boolean;
  #dispatched = 0;
  /** The encoder commands go to now (a new one after each part is submitted). */
  encoder: GPUCommandEncoder;

  /** A run of `kernels` kernels on `device`; never in parts where `whole` (timed kernels). */
  constructor(device: GPUDevice, kernels: number, whole: boolean) {
    this.#device = device;
    this.#split = !whole && kernels >= SPLIT_FROM;
    this.encoder = device.createCommandEncoder();
  }

  /**
   * Notes a dispatch in `pass`; where a part ends here, ends the pass, submits the part and starts
   * a new encoder, and says so (the caller then begins a new pass).
   */
  dispatched(pass: GPUComputePassEncoder): boolean {
    if (!this.#split || !SPLIT_AFTER.includes(++this.#dispatched)) return false;
    pass.end();
    this.submit();
    this.encoder = this.#device.createCommandEncoder();
    return true;
  }

  /** Submits what is encoded. */
  submit(): void {
    this.#device.queue.submit([this.encoder.finish()]);
  }
}
