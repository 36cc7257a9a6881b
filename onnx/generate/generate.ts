/**
 * Text generation with an ONNX decoder: prefill the prompt, then one token a step, each step's
 * present caches fed back as the next step's past. Where the model can mask padding (see
 * {@linkcode CacheLayout}), the cache has a fixed capacity: prefill compiles once for the
 * prompt's length and decode once for all its steps, and on a backend with device memory the
 * caches stay there between steps (a step reads back only its token, or the last logits when
 * sampling).
 *
 * @module
 */
import type { CompileOptions } from "../../jit/compile.ts";
import {
  allocate,
  type BoundaryDType,
  fromNumbers,
  internalDType,
  type TensorData,
} from "../../jit/ir/dtype.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { checkBudget } from "../../jit/runtime/budget.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import type { Executable, InputMap } from "../../jit/runtime/executable.ts";
import { convertData } from "../../jit/passes/precision.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { modelOfProto, modelProto, type OnnxModel } from "../model.ts";
import { type CacheLayout, type Decoder, findDecoder } from "./decoder.ts";
import { Sampler, type SamplingOptions } from "./sampling.ts";
import { STEP, type StepForm, stepProto } from "./step_model.ts";

/** Options of {@linkcode generate}: how tokens are chosen, when to stop, where it runs. */
export interface GenerateOptions extends SamplingOptions, CompileOptions {
  /** Most tokens generated (default 32). */
  readonly maxNewTokens?: number;
  /** Token ids that end the generation (the stop id is yielded, then nothing more). */
  readonly stopIds?: readonly number[];
  /**
   * Cache capacity in tokens (default: prompt plus new tokens, rounded up to a power of two, at
   * least 64, so generations of similar lengths share their executables).
   */
  readonly capacity?: number;
}

/** What a finished generation measured. */
export interface GenerationStats {
  /** Prompt tokens. */
  readonly promptTokens: number;
  /** Tokens generated. */
  readonly newTokens: number;
  /** Prefill (the prompt's step, compile included on a first run), ms. */
  readonly prefillMs: number;
  /** The decode steps after it together, ms. */
  readonly decodeMs: number;
  /** Prompt tokens a second through prefill. */
  readonly prefillTokensPerSecond: number;
  /** Tokens a second through the decode steps (0 when there were none). */
  readonly decodeTokensPerSecond: number;
  /** Distinct executables the steps ran (prefill and decode: 2 with a fixed capacity). */
  readonly executables: number;
  /** How the cache was kept. */
  readonly layout: CacheLayout;
  /** The cache capacity, where it was fixed. */
  readonly capacity?: number;
}

/** Step models by source model and form: repeated generations reuse their executables. */
const stepModels = new WeakMap<OnnxModel, Map<string, OnnxModel>>();

/** `model` as a generation step of `form` (cached). */
function stepModel(model: OnnxModel, decoder: Decoder, form: StepForm): OnnxModel {
  let forms = stepModels.get(model);
  if (!forms) stepModels.set(model, forms = new Map());
  const key = `${form.capacity}:${form.topK ?? ""}:${form.feedback ?? false}`;
  let step = forms.get(key);
  if (!step) forms.set(key, step = modelOfProto(stepProto(modelProto(model), decoder, form)));
  return step;
}

const bad = (what: string, fix: string) => new KilnError(what, { code: "bad-input", fix });

/**
 * A tensor of `values` in `dtype` (i64 as BigInt64Array, as the boundary takes it; other dtypes
 * as `fromNumbers` stores them, an f16 mask as its bits).
 */
function ints(values: readonly number[], shape: number[], dtype: BoundaryDType): HostTensor {
  const data = dtype === "i64"
    ? BigInt64Array.from(values, BigInt)
    : fromNumbers(internalDType(dtype), values);
  return { data, shape, dtype };
}

/** Whether `t` can be a token id of a vocabulary of `size` (any whole number where unknown). */
const isToken = (t: unknown, size = 2 ** 31) =>
  Number.isSafeInteger(t) && (t as number) >= 0 && (t as number) < size;

/** The checked prompt, new-token count, stop ids and capacity, for decoder `d`. */
function plan(prompt: readonly number[], o: GenerateOptions, d: Decoder) {
  if (!Array.isArray(prompt) || prompt.length === 0) {
    throw bad("The prompt holds no token ids", "pass at least one token id, e.g. [1]");
  }
  const wrong = prompt.find((t) => !isToken(t, d.vocabulary));
  if (wrong !== undefined) {
    throw bad(
      `Prompt id ${wrong} is not a token id of this model`,
      `pass whole numbers from 0 up${
        d.vocabulary ? `, below its vocabulary of ${d.vocabulary}` : ""
      }`,
    );
  }
  const stop = (o.stopIds ?? []).find((t) => !isToken(t));
  if (stop !== undefined) {
    throw bad(`Stop id ${stop} is not a token id`, "pass whole numbers from 0 up");
  }
  const maxNew = o.maxNewTokens ?? 32;
  if (!(Number.isSafeInteger(maxNew) && maxNew >= 1)) {
    throw bad(`maxNewTokens ${maxNew} is not a whole number >= 1`, "pass 1 or more");
  }
  const need = prompt.length + maxNew;
  const capacity = o.capacity ?? Math.max(64, 2 ** Math.ceil(Math.log2(need)));
  if (!(Number.isSafeInteger(capacity) && capacity >= need - 1)) {
    throw bad(
      `capacity ${capacity} cannot hold ${prompt.length} prompt and ${maxNew} new tokens`,
      `pass a capacity of at least ${need - 1}, or leave it out`,
    );
  }
  // The largest cache a step holds (its present: the capacity and the prompt), checked before
  // anything is allocated.
  for (const c of d.caches) {
    checkBudget([1, c.heads, capacity + prompt.length, c.headSize], c.dtype, `cache "${c.past}"`);
  }
  return { maxNew, stops: new Set(o.stopIds ?? []), capacity };
}

/** One step's inputs besides the caches: `ids` after `past` valid entries. */
function stepFeeds(
  d: Decoder,
  ids: readonly number[],
  past: number,
  capacity: number | undefined,
): InputMap {
  const s = ids.length, feeds: InputMap = {};
  feeds[d.ids] = ints(ids, [1, s], d.dtypes[d.ids]);
  const positions = ids.map((_, i) => past + i);
  if (d.positions) feeds[d.positions] = ints(positions, [1, s], d.dtypes[d.positions]);
  if (d.useCache) {
    feeds[d.useCache] = ints([capacity !== undefined || past > 0 ? 1 : 0], [1], "bool");
  }
  const width = (capacity ?? past) + s;
  // Which of the mask's entries are real: the packed layout's first past + s; the appended
  // layout's valid past and the new entries after the whole capacity.
  const valid = (j: number) => d.layout === "appended" ? j < past || j >= width - s : j < past + s;
  if (d.mask) {
    feeds[d.mask] = ints(
      [...Array(width).keys()].map((j) => +valid(j)),
      [1, width],
      d.dtypes[d.mask],
    );
  }
  if (capacity !== undefined) {
    // Slot j of the next past keeps present entry j, except the new entries' slots.
    const from = (j: number) =>
      d.layout === "appended" && j >= past && j < past + s ? capacity + j - past : j;
    feeds[STEP.slots] = ints([...Array(capacity).keys()].map(from), [capacity], "i64");
  }
  return feeds;
}

/** Empty caches: `capacity` zero entries each (none without a capacity). */
function emptyCaches(d: Decoder, capacity: number | undefined): Record<string, HostTensor> {
  const out: Record<string, HostTensor> = {};
  for (const c of d.caches) {
    const shape = [1, c.heads, capacity ?? 0, c.headSize];
    out[c.past] = {
      data: allocate(c.dtype, c.heads * (capacity ?? 0) * c.headSize),
      shape,
      dtype: c.dtype,
    } as HostTensor;
  }
  return out;
}

/**
 * Host views of outputs as numbers: device tensors read back together (one map where the
 * backend batches reads) and freed.
 */
async function numbers(ts: readonly (HostTensor | DeviceTensor)[]): Promise<ArrayLike<number>[]> {
  const device = ts.filter((t): t is DeviceTensor => t instanceof DeviceTensor);
  const read = device.length ? await DeviceTensor.readAll(device) : [];
  device.forEach((t) => t.dispose());
  return ts.map((t) => {
    const host = t instanceof DeviceTensor ? read[device.indexOf(t)] : t;
    const data: TensorData = host.data;
    if (data instanceof BigInt64Array) return Array.from(data, Number);
    return host.dtype === "f16"
      ? convertData(data, "f16", "f32") as Float32Array
      : data as Float32Array;
  });
}

/** The tokens of a generation, as they come; {@linkcode generate} makes one. */
export class Generation implements AsyncIterable<number> {
  readonly #model: OnnxModel;
  readonly #decoder: Decoder;
  readonly #prompt: readonly number[];
  readonly #options: GenerateOptions;
  readonly #sampler: Sampler;
  readonly #plan: ReturnType<typeof plan>;
  #started = false;
  #stats?: GenerationStats;

  /** A generation, checked: a model that is not a decoder or bad options throw here. */
  constructor(model: OnnxModel, prompt: readonly number[], options: GenerateOptions = {}) {
    this.#decoder = findDecoder(modelProto(model));
    this.#plan = plan(prompt, options, this.#decoder);
    this.#sampler = new Sampler(options);
    this.#model = model;
    this.#prompt = [...prompt];
    this.#options = options;
  }

  /** What the generation measured, once it has ended (undefined before). */
  get stats(): GenerationStats | undefined {
    return this.#stats;
  }

  /** The token ids, one at a time; a generation is iterated once. */
  [Symbol.asyncIterator](): AsyncIterator<number> {
    if (this.#started) {
      throw bad("This generation has already been iterated", "call generate() again");
    }
    this.#started = true;
    return this.#steps();
  }

  /** Every token id, once the generation ends. */
  async collect(): Promise<number[]> {
    const out: number[] = [];
    for await (const t of this) out.push(t);
    return out;
  }

  async *#steps(): AsyncGenerator<number> {
    const d = this.#decoder, { maxNew, stops } = this.#plan;
    const capacity = d.layout === "exact" ? undefined : this.#plan.capacity;
    // Sampling among the top k draws from 2k numbers computed on the device, not the
    // vocabulary's logits (600 KB a token for 151936 ids).
    const { topK } = this.#options;
    const greedy = this.#sampler.greedy;
    const onDevice = !greedy && topK !== undefined && topK < (d.vocabulary ?? 0);
    // A greedy step of a fixed capacity hands its argmax to the next step on the device (see
    // `chain`).
    const feedback = greedy && capacity !== undefined;
    const form = { capacity: capacity !== undefined, topK: onDevice ? topK : undefined, feedback };
    const step = stepModel(this.#model, d, form);
    const nexts = d.caches.map((c) => (capacity === undefined ? c.present : STEP.next(c.past)));
    const choice = greedy ? [STEP.argmax] : onDevice ? [STEP.topValues, STEP.topIds] : [STEP.last];
    const wanted = [...choice, ...nexts, ...(feedback ? [STEP.nextIds] : [])];
    const runner = new StepRunner(step, this.#options, wanted);
    let caches: InputMap = emptyCaches(d, capacity);
    let ids: readonly number[] = this.#prompt, past = 0, made = 0;
    let next: Promise<StepOutputs> | undefined;
    // The ids on the device that `next` reads, and those that the step which made `out` read.
    let nextFed: DeviceTensor | undefined, fed: DeviceTensor | undefined;
    const began = performance.now();
    let prefilled = began;
    // With a fixed capacity the decode step's shapes are known now: it compiles beside prefill,
    // so the first decode steps run as fast as later ones.
    if (capacity !== undefined) {
      await runner.prepare([
        { ...stepFeeds(d, ids, 0, capacity), ...caches },
        { ...stepFeeds(d, [0], ids.length, capacity), ...caches },
      ]);
    }
    try {
      let out = await runner.run({ ...stepFeeds(d, ids, past, capacity), ...caches });
      while (true) {
        // Greedy steps read the device's argmax; sampling reads the top k or the last logits.
        const reading = numbers(choice.map((name) => out[name]));
        // The step that made `out` has read its inputs (queue order keeps them until it ran):
        // they go back to the pool at the same point of every step, not as a step settles, so
        // the buffers the pool hands out next do not depend on timing. (Steps in flight together
        // also bind their programs' own buffers: `backends/webgpu/own_buffers.ts`.)
        runner.release(caches);
        release(fed);
        caches = Object.fromEntries(d.caches.map((c, i) => [c.past, out[nexts[i]]]));
        past += ids.length;
        const nextIds = out[STEP.nextIds];
        next = made + 1 < maxNew ? chain(runner, d, nextIds, past, capacity, caches) : undefined;
        nextFed = next && nextIds instanceof DeviceTensor ? nextIds : undefined;
        if (!next) release(nextIds);
        const [values, topIds] = await reading;
        const token = greedy
          ? values[0]
          : topIds
          ? topIds[this.#sampler.pick(values)]
          : this.#sampler.pick(values);
        if (made++ === 0) prefilled = performance.now();
        ids = [token];
        yield token;
        if (stops.has(token) || made >= maxNew) break;
        const chained = next;
        [next, fed, nextFed] = [undefined, nextFed, undefined];
        const fromHost = () => runner.run({ ...stepFeeds(d, ids, past, capacity), ...caches });
        out = await (chained?.catch((e) => {
          // A model that specialises on its small inputs needs the ids' value on the host.
          if (!(e instanceof KilnError && e.code === "bad-input")) throw e;
          runner.chains = false;
          return fromHost();
        }) ?? fromHost());
      }
    } finally {
      // A step started before its predecessor's token said stop is run out and let go.
      if (next) { for (const t of Object.values(await next)) release(t); }
      release(nextFed);
      release(fed);
      runner.release(caches);
      this.#stats = statsOf(
        this.#prompt.length,
        made,
        began,
        prefilled,
        runner,
        d.layout,
        capacity,
      );
    }
  }
}

/** The outputs of one step. */
type StepOutputs = Record<string, HostTensor | DeviceTensor>;

/** Frees `t` where it is a device tensor. */
const release = (t: HostTensor | DeviceTensor | undefined) => {
  if (t instanceof DeviceTensor) t.dispose();
};

/**
 * The next step, started on the device with the argmax of the step before as its ids (`fed`, a
 * device tensor), before that token is read back: the host's work for a step (its feeds,
 * encoding hundreds of kernels) then overlaps the device's work on the one before. `undefined`
 * where the ids are on the host (a backend without device memory): the loop feeds the token.
 */
function chain(
  runner: StepRunner,
  d: Decoder,
  fed: HostTensor | DeviceTensor | undefined,
  past: number,
  capacity: number | undefined,
  caches: InputMap,
): Promise<StepOutputs> | undefined {
  if (!(fed instanceof DeviceTensor) || !runner.chains) {
    release(fed);
    return undefined;
  }
  // The caller lets the ids go once the step has run (see the loop).
  return runner.run({ ...stepFeeds(d, [0], past, capacity), [d.ids]: fed, ...caches });
}

/** The stats of a generation that made `made` tokens. */
function statsOf(
  promptTokens: number,
  made: number,
  began: number,
  prefilled: number,
  runner: StepRunner,
  layout: CacheLayout,
  capacity: number | undefined,
): GenerationStats {
  const end = performance.now();
  const prefillMs = prefilled - began, decodeMs = made > 1 ? end - prefilled : 0;
  return {
    promptTokens,
    newTokens: made,
    prefillMs,
    decodeMs,
    prefillTokensPerSecond: prefillMs > 0 ? promptTokens / prefillMs * 1000 : 0,
    decodeTokensPerSecond: decodeMs > 0 ? (made - 1) / decodeMs * 1000 : 0,
    executables: runner.executables,
    layout,
    capacity,
  };
}

/**
 * Runs steps of a step model: compiled for each step's shapes (cached by the model), on the
 * device where the backend has device memory, so the caches it returns stay there.
 */
class StepRunner {
  readonly #model: OnnxModel;
  readonly #options: CompileOptions;
  readonly #seen = new Set<Executable>();
  #resident = true;
  /** Whether a step may take the ids on the device (see `chain`). */
  chains = true;
  /** The outputs each step reads: the token's source first, then the next caches. */
  readonly wanted: readonly string[];

  constructor(model: OnnxModel, options: CompileOptions, wanted: readonly string[]) {
    this.#model = model;
    this.#options = options;
    this.wanted = wanted;
  }

  /** Executables run so far. */
  get executables(): number {
    return this.#seen.size;
  }

  /** One step's wanted outputs. */
  async run(feeds: InputMap): Promise<StepOutputs> {
    const { executable, inputs } = await this.#model.compileFor(feeds, this.#options);
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
    return await executable.run(inputs, options);
  }

  /**
   * Compiles the executables of steps with these inputs (their shapes and small values), and
   * warms the last one (the decode step, run at every token) up now, inside prefill, not in the
   * middle of the first decode steps.
   */
  async prepare(feeds: readonly InputMap[]): Promise<void> {
    const compiled = await Promise.all(feeds.map((f) => this.#model.compileFor(f, this.#options)));
    await compiled.at(-1)?.executable.warmUp();
  }

  /** Frees the device caches of a step once the next step has read them. */
  release(caches: InputMap): void {
    for (const t of Object.values(caches)) if (t instanceof DeviceTensor) t.dispose();
  }
}

/**
 * Generates token ids with an ONNX decoder after `promptIds`: greedy by default, or sampled
 * (`temperature`, `topK`, `topP`, `seed`). Iterate the result for the ids as they come, or
 * `collect()` them; `stats` then tells prefill and decode speed. A model that is not a decoder
 * (no past inputs with present outputs, no ids input, no logits) is a typed error.
 *
 * @example
 * ```ts
 * import { generate, OnnxModel } from "../../mod.ts";
 * const model = await OnnxModel.load("onnx/testdata/decoders/genai_tiny.onnx");
 * const ids = await generate(model, [3, 17, 42], { maxNewTokens: 4, backend: "wasm" }).collect();
 * ```
 */
export function generate(
  model: OnnxModel,
  promptIds: readonly number[],
  options: GenerateOptions = {},
): Generation {
  return new Generation(model, promptIds, options);
}
