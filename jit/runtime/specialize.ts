/**
 * Executables specialised by where their inputs are when a run starts (the `local-first`
 * policy): a run given device tensors of some backend runs on a variant compiled with those
 * inputs on that backend, so the work goes to the data instead of the data being copied to the
 * host; the variant is kept for the next run that gives its inputs there. A run whose inputs lie
 * where the executable was compiled for runs the executable itself.
 *
 * @module
 */
import { DeviceTensor } from "./device_tensor.ts";
import { RunHandle } from "./run_handle.ts";
import type { DeviceTensorMap, InputMap, RunOptions, TensorMap } from "./run_types.ts";

/** Where device-tensor inputs lie: input name → backend id. */
export type InputsOn = Readonly<Record<string, string>>;

/** What a variant offers: an executable's runs. */
export interface Runner {
  /** Runs to host outputs. */
  run(inputs: InputMap, options?: RunOptions): RunHandle<TensorMap>;
  /** Runs leaving outputs on the device. */
  runOnDevice(inputs: InputMap, options?: RunOptions): RunHandle<DeviceTensorMap>;
  /** Frees it. */
  dispose(): void;
}

/** Compiles the variant for inputs lying as `on` says. */
export type Specializer = (on: InputsOn) => Promise<Runner>;

/** The place of `inputs`' device tensors, as a stable key and as a map. */
export function inputsOn(inputs: InputMap): { key: string; on: InputsOn } {
  const on = Object.fromEntries(
    Object.entries(inputs).flatMap(([name, t]) =>
      t instanceof DeviceTensor ? [[name, t.backend]] : []
    ).sort(([a], [b]) => (a < b ? -1 : 1)),
  );
  return { key: JSON.stringify(on), on };
}

/** An executable's variants by the place of its inputs (see the module's description). */
export class Variants {
  #make: Specializer;
  #own: string;
  #variants = new Map<string, Promise<Runner>>();

  /** Variants made by `make`, for an executable compiled for inputs lying as `own` says. */
  constructor(make: Specializer, own: InputsOn = {}) {
    this.#make = make;
    this.#own = JSON.stringify(own);
  }

  /**
   * The handle of a run of `inputs` on the variant for their place, or `undefined` where they
   * lie as the executable was compiled for (it runs them itself).
   */
  run<T extends TensorMap | DeviceTensorMap>(
    inputs: InputMap,
    options: RunOptions | undefined,
    onDevice: boolean,
  ): RunHandle<T> | undefined {
    const { key, on } = inputsOn(inputs);
    if (key === this.#own) return undefined;
    let variant = this.#variants.get(key);
    if (!variant) {
      this.#variants.set(key, variant = this.#make(on));
      variant.catch(() => this.#variants.delete(key));
    }
    // The variant runs after an await: the caller may change its host arrays once run returns.
    const args: InputMap = Object.fromEntries(
      Object.entries(inputs).map((
        [name, t],
      ) => [name, t instanceof DeviceTensor ? t : { ...t, data: t.data.slice() }]),
    );
    // Wrapped: a promise would take the handle, itself a promise-like, for its result.
    const started = variant.then((exe) => ({
      handle: (onDevice ? exe.runOnDevice(args, options) : exe.run(args, options)) as RunHandle<T>,
    }));
    return new RunHandle(
      started.then(({ handle }) => handle),
      started.then(({ handle }) => handle.timing()),
    );
  }

  /** Frees every variant made. */
  dispose(): void {
    for (const v of this.#variants.values()) v.then((exe) => exe.dispose(), () => {});
    this.#variants.clear();
  }
}
