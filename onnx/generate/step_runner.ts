/**
 * {@linkcode StepRunner}: a generation's steps compiled and run, on the backend the generation
 * chose, with the caches left on its device between steps.
 *
 * @module
 */
import type { CompileOptions } from "../../jit/compile_options.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { Backend } from "../../jit/runtime/backend.ts";
import type { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import type { Executable, InputMap } from "../../jit/runtime/executable.ts";
import type { IntoMap } from "../../jit/runtime/into.ts";
import { KilnError } from "../../jit/support/errors.ts";
import type { OnnxModel } from "../model.ts";

/** The outputs of one step, by name. */
export type StepOutputs = Record<string, HostTensor | DeviceTensor>;

/**
 * Runs steps of a step model: compiled for each step's shapes (cached by the model), on the
 * device where the backend has device memory, so the caches it returns stay there.
 */
export class StepRunner {
  readonly #model: OnnxModel;
  #options: CompileOptions;
  /** Backends the steps move to where the current one cannot compile them (see `#trying`). */
  readonly #rest: Backend[];
  readonly #seen = new Set<Executable>();
  #resident = true;
  /** Whether a step may take the ids on the device (see `chain`). */
  chains = true;
  /** The outputs each step reads: the token's source first, then the next caches. */
  readonly wanted: readonly string[];

  /**
   * Steps of `model` compiled with `options`, on the first of `backends` that compiles them where
   * any are given (see `generationBackends`).
   */
  constructor(
    model: OnnxModel,
    options: CompileOptions,
    wanted: readonly string[],
    backends: readonly Backend[] = [],
  ) {
    this.#model = model;
    const [first, ...rest] = backends;
    this.#options = first ? { ...options, backend: first.id } : options;
    this.#rest = rest;
    this.wanted = wanted;
  }

  /** The backend the steps ran on (undefined before the first). */
  get backend(): string | undefined {
    return [...this.#seen].at(-1)?.backend.id;
  }

  /** The executables run so far, in the order each first ran. */
  get ran(): readonly Executable[] {
    return [...this.#seen];
  }

  /** Whether steps run on a device beside the host (a GPU), so starting one ahead overlaps. */
  get overlaps(): boolean {
    return [...this.#seen].at(-1)?.backend.kind === "gpu";
  }

  /** One step's wanted outputs. */
  async run(feeds: InputMap, into?: IntoMap): Promise<StepOutputs> {
    const { executable, inputs } = await this.#trying(() =>
      this.#model.compileFor(feeds, this.#options)
    );
    this.#seen.add(executable);
    const options = { outputs: [...this.wanted] };
    if (this.#resident) {
      try {
        return await executable.runOnDevice(inputs, options);
      } catch (e) {
        if (!(e instanceof KilnError && e.code === "unsupported")) throw e;
        this.#resident = false;
      }
    }
    return await executable.run(inputs, { ...options, into });
  }

  /**
   * Compiles the executables of steps with these inputs (their shapes and small values), and
   * warms the last one (the decode step, run at every token) up now, inside prefill, not in the
   * middle of the first decode steps.
   */
  async prepare(feeds: readonly InputMap[]): Promise<void> {
    const compiled = await this.#trying(() =>
      Promise.all(feeds.map((f) => this.#model.compileFor(f, this.#options)))
    );
    await compiled.at(-1)?.executable.warmUp();
  }

  /**
   * `compiling`, moved to the next backend while the current one cannot compile a step (an op it
   * lacks) and no step has run: the steps' caches stay on the device of the steps before.
   */
  async #trying<T>(compiling: () => Promise<T>): Promise<T> {
    while (true) {
      try {
        return await compiling();
      } catch (e) {
        const next = this.#seen.size === 0 ? this.#rest.shift() : undefined;
        if (!(e instanceof KilnError && e.code === "unsupported") || !next) throw e;
        this.#options = { ...this.#options, backend: next.id };
      }
    }
  }
}
