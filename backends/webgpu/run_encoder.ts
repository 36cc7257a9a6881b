/**
 * One run's commands, submitted in parts: a run of many kernels is submitted after its first few
 * dispatches and again after more, so that the GPU starts on the first kernels while the host
 * encodes the rest. Encoding and submitting ResNet-50's 77 kernels took about 1 ms a run through
 * Dawn on the H200's host, all of it before the GPU had any work. Where a read is in flight on the
 * device, the queue has work ahead of the run and the GPU is busy: the run is submitted whole,
 * since each part's submit costs the host time (a 0.5B decoder's pipelined steps, submitted in
 * parts, decoded at 375 tokens/s against 409-425 whole).
 *
 * @module
 */
import { readsPending } from "./gpu_storage.ts";

/** Runs of at least this many kernels are submitted in parts. */
export const SPLIT_FROM = 32;
/**
 * The counts of dispatches after which a run in parts submits what it has encoded, and past the
 * last of them a part every {@linkcode SPLIT_EVERY}: early parts start the GPU soon, later ones
 * keep its queue ahead of the host on models of hundreds of kernels (GPT-2 small's runs 6.3-8.0
 * ms with parts after 4, 16 and 48 dispatches only, 5.7-7.3 with a part every 64 after).
 */
const SPLIT_AFTER: readonly number[] = [4, 16, 48];
const SPLIT_EVERY = 64;

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
    this.#split = !whole && kernels >= SPLIT_FROM && !readsPending(device);
    this.encoder = device.createCommandEncoder();
  }

  /**
   * Notes a dispatch in `pass`; where a part ends here, ends the pass, submits the part and starts
   * a new encoder, and says so (the caller then begins a new pass).
   */
  dispatched(pass: GPUComputePassEncoder): boolean {
    if (!this.#split || !partEnds(++this.#dispatched)) return false;
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

/** Whether a part ends after `n` dispatches. */
function partEnds(n: number): boolean {
  const last = SPLIT_AFTER[SPLIT_AFTER.length - 1];
  return SPLIT_AFTER.includes(n) || (n > last && (n - last) % SPLIT_EVERY === 0);
}
