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
import { COMPILE_OPTIONS, compileOptionsOf } from "../../jit/compile_options.ts";
import type { TensorData } from "../../jit/ir/dtype.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { checkBudget } from "../../jit/runtime/budget.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import type { Executable, InputMap } from "../../jit/runtime/executable.ts";
import type { IntoMap } from "../../jit/runtime/into.ts";
import { convertData } from "../../jit/passes/precision.ts";
import { checkOptions, KilnError, shown } from "../../jit/support/errors.ts";
import { modelOfProto, modelProto, OnnxModel } from "../model.ts";
import { generationBackends } from "./backend_choice.ts";
import { type CacheLayout, type Decoder, findDecoder } from "./decoder.ts";
import { Sampler, SAMPLING_OPTIONS, type SamplingOptions } from "./sampling.ts";
import { STEP, type StepForm, stepProto } from "./step_model.ts";
import { emptyCaches, sharesBuffer, stepFeeds } from "./step_feeds.ts";
import { type StepOutputs, StepRunner } from "./step_runner.ts";

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

/**
 * The keys {@linkcode generate} takes: any other is refused, since a misspelt one
 * (`maxNewToken: 200`) had generated the default 32 tokens without a word.
 */
export const GENERATE_OPTIONS: readonly (keyof GenerateOptions)[] = [
  ...COMPILE_OPTIONS,
  ...SAMPLING_OPTIONS,
  "maxNewTokens",
  "stopIds",
  "capacity",
];

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
  /** The backend the steps ran on (its id), where one ran. */
  readonly backend?: string;
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
  const key = `${form.capacity}:${form.shared ?? false}:${form.topK ?? ""}:${
    form.feedback ?? false
  }`;
  let step = forms.get(key);
  if (!step) forms.set(key, step = modelOfProto(stepProto(modelProto(model), decoder, form)));
  return step;
}

const bad = (what: string, fix: string) => new KilnError(what, { code: "bad-input", fix });

/** Whether `t` can be a token id of a vocabulary of `size` (any whole number where unknown). */
const isToken = (t: unknown, size = 2 ** 31) =>
  Number.isSafeInteger(t) && (t as number) >= 0 && (t as number) < size;

/** The checked prompt, new-token count, stop ids and capacity, for decoder `d`. */
function plan(prompt: readonly number[], o: GenerateOptions, d: Decoder) {
  if (!Array.isArray(prompt)) {
    throw bad(`The prompt is ${shown(prompt)}, not a list of token ids`, "pass e.g. [1, 2, 3]");
  }
  if (prompt.length === 0) {
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
  if (o.stopIds !== undefined && !Array.isArray(o.stopIds)) {
    throw bad(
      `stopIds is ${shown(o.stopIds)}, not a list of token ids`,
      "pass e.g. [2], or leave it out",
    );
  }
  const stop = (o.stopIds ?? []).find((t) => !isToken(t));
  if (stop !== undefined) {
    throw bad(`Stop id ${stop} is not a token id`, "pass whole numbers from 0 up");
  }
  const maxNew = o.maxNewTokens ?? 32;
  if (!(Number.isSafeInteger(maxNew) && maxNew >= 1)) {
    throw bad(`maxNewTokens ${shown(maxNew)} is not a whole number >= 1`, "pass 1 or more");
  }
  // Positions 0 … n + maxNew − 2 are fed (the last token is not): each needs a row of the
  // model's position tables, or the step fails inside (a Gather out of range).
  const positions = prompt.length + maxNew - 1, limit = d.positionLimit;
  if (limit !== undefined && positions > limit) {
    throw bad(
      `The prompt's ${prompt.length} tokens and ${maxNew} new ones need ${positions} positions; ` +
        `this model's position tables have ${limit}`,
      prompt.length > limit
        ? `shorten the prompt to at most ${limit} tokens`
        : `ask for at most ${limit - prompt.length + 1} new tokens (maxNewTokens)`,
    );
  }
  const need = prompt.length + maxNew;
  const capacity = o.capacity ?? Math.max(64, 2 ** Math.ceil(Math.log2(need)));
  if (!Number.isSafeInteger(capacity)) {
    throw bad(`capacity ${shown(capacity)} is not a whole number`, "pass a token count, e.g. 256");
  }
  if (capacity < need - 1) {
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
  #runner?: StepRunner;

  /** A generation, checked: a model that is not a decoder or bad options throw here. */
  constructor(model: OnnxModel, prompt: readonly number[], options: GenerateOptions = {}) {
    if (!(model instanceof OnnxModel)) {
      throw bad("generate() takes an OnnxModel first", "load it with OnnxModel.load(path)");
    }
    checkOptions(options, GENERATE_OPTIONS, "generate()");
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

  /**
   * The executables the generation's steps ran, in the order each first ran (prefill, then the
   * decode step where the capacity is fixed); empty before it starts. Compiled with a backend
   * that profiles (`profile: true`), each one's `deviceTimes()` gives its last run kernel by
   * kernel (`bench/generate_kernels.ts`).
   */
  get executables(): readonly Executable[] {
    return this.#runner?.ran ?? [];
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
    // A greedy step of a fixed capacity hands its argmax to the next step on the device, so
    // steps can start before their tokens are read (see `Ahead`).
    const feedback = greedy && capacity !== undefined;
    const shared = sharesBuffer(d, capacity);
    const form = {
      capacity: capacity !== undefined,
      shared,
      topK: onDevice ? topK : undefined,
      feedback,
    };
    const step = stepModel(this.#model, d, form);
    const nexts = d.caches.map((
      c,
    ) => (capacity === undefined || shared ? c.present : STEP.next(c.past)));
    const choice = greedy ? [STEP.argmax] : onDevice ? [STEP.topValues, STEP.topIds] : [STEP.last];
    const wanted = [...choice, ...nexts, ...(feedback ? [STEP.nextIds] : [])];
    // Each step's caches feed only the next one: the steps may write over them (in place where
    // the present is the past and a new entry, see `jit/schedule/in_place.ts`).
    const donate = d.caches.map((c) => c.past);
    const options = { ...compileOptionsOf(this.#options), donate };
    const backends = await generationBackends(this.#options);
    const runner = this.#runner = new StepRunner(step, options, wanted, backends);
    const ahead = new Ahead(runner, d, { choice, nexts, capacity });
    const began = performance.now();
    let prefilled = began, made = 0;
    // With a fixed capacity the decode step's shapes are known now: it compiles beside prefill,
    // so the first decode steps run as fast as later ones.
    const empty = emptyCaches(d, capacity);
    if (capacity !== undefined) {
      await runner.prepare([
        { ...stepFeeds(d, this.#prompt, 0, capacity), ...empty },
        { ...stepFeeds(d, [0], this.#prompt.length, capacity), ...empty },
      ]);
    }
    try {
      await ahead.start(this.#prompt, 0, empty);
      while (true) {
        // Steps on the device run ahead of the token being read, as far as there are tokens.
        if (feedback) await ahead.fill(maxNew - made);
        const [values, topIds] = await ahead.oldest();
        const token = greedy
          ? values[0]
          : topIds
          ? topIds[this.#sampler.pick(values)]
          : this.#sampler.pick(values);
        if (made++ === 0) prefilled = performance.now();
        yield token;
        if (stops.has(token) || made >= maxNew) break;
        // Without steps ahead (sampling, ids on the host), the token is the next step's ids.
        await ahead.next(token);
      }
    } finally {
      // Steps started before a token said stop are run out, and everything let go.
      await ahead.dispose();
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

/** Frees `t` where it is a device tensor. */
const release = (t: HostTensor | DeviceTensor | undefined) => {
  if (t instanceof DeviceTensor) t.dispose();
};

/**
 * Steps a greedy generation starts ahead of the token being read. Each step stores its caches
 * over its predecessor's (donated: `jit/schedule/in_place.ts`), so the steps in flight share one
 * set whatever the capacity; a step ahead had cost a set of caches more, and past 32 MiB of them
 * (a Qwen2.5-0.5B-shaped decoder at about 1,360 tokens of capacity) only one ran ahead.
 */
const STEPS_AHEAD = 2;

/** A step started: its outputs, the read of its token's source, and the cache entries after it. */
interface Started {
  readonly out: StepOutputs;
  readonly reading: Promise<ArrayLike<number>[]>;
  readonly past: number;
  /** Whether its caches and ids have gone back (a later step has read them, or the end). */
  spent: boolean;
}

/**
 * The steps of a generation that have started and whose tokens are not read yet, oldest first.
 * A greedy step with a fixed capacity takes its predecessor's argmax on the device as its ids
 * (`STEP.nextIds`), so up to two steps ({@linkcode STEPS_AHEAD}) start before the oldest token is
 * read: the host's work for a step (its feeds, encoding hundreds of kernels) overlaps the
 * device's work on those before, and a readback that is late (Dawn's event processing, a
 * collection pause) holds up no step behind it. With one step ahead a decode step on the H200
 * waited for its predecessor's token about a fifth of its time.
 *
 * Each step's readback is asked for as soon as the step is submitted, so it queues right behind
 * it, not behind the steps after it. A step's inputs go back to the pool once the step that read
 * them is submitted: queue order keeps them until it ran, and they go back at the same point of
 * every step, so the buffers the pool hands out next do not depend on timing. (Steps in flight
 * together also bind their programs' own buffers: `backends/webgpu/own_buffers.ts`.)
 */
class Ahead {
  /** Steps this generation starts ahead (see {@linkcode STEPS_AHEAD}). */
  readonly #steps = STEPS_AHEAD;
  readonly #runner: StepRunner;
  readonly #d: Decoder;
  readonly #choice: readonly string[];
  readonly #nexts: readonly string[];
  readonly #capacity: number | undefined;
  readonly #queue: Started[] = [];
  /** The step whose token was read last (its caches feed the next step from the host). */
  #read?: Started;
  /** Host buffers for the next step's caches (see `#readCaches`). */
  #spare?: IntoMap;

  constructor(
    runner: StepRunner,
    d: Decoder,
    o: { choice: readonly string[]; nexts: readonly string[]; capacity: number | undefined },
  ) {
    this.#runner = runner;
    this.#d = d;
    this.#choice = o.choice;
    this.#nexts = o.nexts;
    this.#capacity = o.capacity;
  }

  /** Starts the step of `ids` after `past` entries of `caches` (prefill, or ids from the host). */
  async start(
    ids: readonly number[],
    past: number,
    caches: InputMap,
    from?: Started,
  ): Promise<void> {
    const feeds = { ...stepFeeds(this.#d, ids, past, this.#capacity), ...caches };
    await this.#started(feeds, past + ids.length, from);
  }

  /** Starts steps on the device after the newest until `#steps` wait behind the oldest. */
  async fill(tokensLeft: number): Promise<void> {
    const queue = this.#queue;
    // A CPU runs a step as it is started: ahead of the token, it would only run past a stop.
    if (!this.#runner.overlaps) return;
    while (this.#runner.chains && queue.length <= this.#steps && queue.length < tokensLeft) {
      const tail = queue.at(-1)!;
      const fed = tail.out[STEP.nextIds];
      if (!(fed instanceof DeviceTensor)) return;
      const feeds = {
        ...stepFeeds(this.#d, [0], tail.past, this.#capacity),
        ...this.#caches(tail),
        [this.#d.ids]: fed,
      };
      try {
        await this.#started(feeds, tail.past + 1, tail);
      } catch (e) {
        // A model that specialises on its small inputs needs the ids' value on the host.
        if (!(e instanceof KilnError && e.code === "bad-input")) throw e;
        this.#runner.chains = false;
      }
    }
  }

  /** The token source of the oldest step started, read back; that step leaves the queue. */
  async oldest(): Promise<ArrayLike<number>[]> {
    const step = this.#queue.shift()!;
    this.#read = step;
    return await step.reading;
  }

  /** Starts the step after the one read last from the host, with `token` as its ids. */
  async next(token: number): Promise<void> {
    const read = this.#read!;
    if (this.#queue.length > 0) return;
    await this.start([token], read.past, this.#caches(read), read);
  }

  /** Waits for the steps started and lets go of every buffer. */
  async dispose(): Promise<void> {
    for (const step of this.#queue.splice(0)) {
      await step.reading.catch(() => undefined);
      this.#spend(step);
    }
    if (this.#read) this.#spend(this.#read);
  }

  /**
   * The host caches a step has read, by the outputs the next step writes (the same shapes with a
   * fixed capacity): that step's buffers, so a host step allocates no caches (6.3 MB a token for
   * a 0.5B decoder at capacity 256, fresh pages each time). Undefined where any is on a device.
   */
  #readCaches(feeds: InputMap): IntoMap | undefined {
    const spare: Record<string, TensorData> = {};
    for (const [i, c] of this.#d.caches.entries()) {
      const t = feeds[c.past];
      if (!t || t instanceof DeviceTensor) return undefined;
      spare[this.#nexts[i]] = t.data as TensorData;
    }
    return spare;
  }

  /** The caches `step` made, by the past inputs they feed. */
  #caches(step: Started): InputMap {
    return Object.fromEntries(this.#d.caches.map((c, i) => [c.past, step.out[this.#nexts[i]]]));
  }

  async #started(feeds: InputMap, past: number, from?: Started): Promise<void> {
    const out = await this.#runner.run(feeds, this.#spare);
    this.#spare = this.#capacity === undefined ? undefined : this.#readCaches(feeds);
    // Its readback queues right behind it (see the class's description).
    const reading = numbers(this.#choice.map((name) => out[name]));
    reading.catch(() => undefined);
    if (from) this.#spend(from);
    this.#queue.push({ out, reading, past, spent: false });
  }

  /** Lets go of `step`'s caches and ids (its token's source is freed where it is read). */
  #spend(step: Started): void {
    if (step.spent) return;
    step.spent = true;
    for (const name of [...this.#nexts, STEP.nextIds]) release(step.out[name]);
  }
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
    executables: runner.ran.length,
    backend: runner.backend,
    layout,
    capacity,
  };
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
