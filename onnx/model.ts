/**
 * {@linkcode OnnxModel}: an imported model that compiles on demand. Symbolic input dimensions are
 * bound from the data passed to `run`; each distinct set of shapes (per backend and policy) is
 * imported and compiled once and then reused. Inputs that decide shapes or attributes (a
 * Reshape's target, Slice bounds, axes, pads given as graph inputs) are read when the model runs:
 * the model is then specialised on the values of its small inputs, one executable per distinct
 * value set (the last {@linkcode SPECIALISATIONS} kept).
 *
 * @module
 */
import { compile, type CompileOptions } from "../jit/compile.ts";
import { COMPILE_OPTIONS, compileOptionsOf } from "../jit/compile_options.ts";
import type { Executable, InputMap, RunOptions, TensorMap } from "../jit/runtime/executable.ts";
import { DeviceTensor } from "../jit/runtime/device_tensor.ts";
import type { Graph } from "../jit/ir/graph.ts";
import { type ProgressCallback, reporter } from "../jit/runtime/progress.ts";
import { hexBytes } from "../jit/ir/digest.ts";
import { RUN_OPTION_KEYS } from "../jit/runtime/run_types.ts";
import { checkOptions, KilnError, shown } from "../jit/support/errors.ts";
import type { Shape } from "../jit/ir/shape.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import {
  type ExternalReader,
  fileReader,
  inlineExternalData,
  urlReader,
} from "./import/external_data.ts";
import { importModel } from "./import/import.ts";
import { hostFs } from "../jit/support/host_fs.ts";
import { checkCompileArgs, type OnnxInputInfo, onnxInputs } from "./import/inputs.ts";
import { NeedsValue } from "./import/node_context.ts";
import { decodeModel, int, type ModelProto } from "./wire/proto.ts";
import { ALIGN_ROOM, decodeAligned } from "./wire/aligned.ts";
import { type ModelSummary, summarizeModel } from "./import/summary.ts";
import type { StringTensor } from "./import/string_ops.ts";
import { StringStage, type Value } from "./import/strings.ts";

const identities = new WeakMap<object, number>();
let identified = 0;
/**
 * A number for `o` for as long as it lives: options held by reference (a backend instance, a
 * registry, a kernel cache) key compiled executables by which object they are. By a backend's
 * id alone, a second `WasmBackend` with other threads or profiling got the first one's
 * executable back.
 */
function identity(o: object): number {
  let id = identities.get(o);
  if (id === undefined) identities.set(o, id = ++identified);
  return id;
}

/** Most value-specialised executables an {@linkcode OnnxModel} keeps (least recently used go). */
export const SPECIALISATIONS = 16;

/** Elements up to which an input counts as small enough to specialise on. */
const SMALL = 64;

/** Largest model file read: protobuf messages cannot exceed 2 GiB. */
const MAX_MODEL_BYTES = 2 ** 31;

/** Most redirects followed for one file. */
const MAX_REDIRECTS = 8;

/**
 * The response for `url`, following redirects one at a time where `redirected` (which throws to
 * refuse) lets it, so the request to a refused place is never made; without `redirected` the
 * host's fetch follows them as it does.
 */
async function followed(url: string | URL, redirected?: (to: URL) => void): Promise<Response> {
  if (!redirected) return await fetch(url);
  let at = new URL(url);
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    const response = await fetch(at, { redirect: "manual" });
    // A browser hides a manual redirect's target: it cannot be checked, so it is not taken.
    if (response.type === "opaqueredirect") throw new Error("redirected to a place not shown");
    const location = response.headers.get("location");
    if (response.status < 300 || response.status > 399 || location === null) return response;
    await response.body?.cancel();
    at = new URL(location, at);
    redirected(at);
  }
  throw new Error(`more than ${MAX_REDIRECTS} redirects`);
}

/**
 * The bytes at `url`, at most {@linkcode MAX_MODEL_BYTES}; each redirect shown to `redirected`
 * first where given; failures are typed errors.
 */
async function fetched(url: string | URL, redirected?: (to: URL) => void): Promise<Uint8Array> {
  const fail = (why: string, cause?: unknown) =>
    new KilnError(`Cannot fetch the model ${url}: ${why}`, {
      code: "bad-input",
      fix: "check the URL (and, in a browser, that the server allows the page's origin)",
      cause,
    });
  let response: Response;
  try {
    response = await followed(url, redirected);
  } catch (e) {
    if (e instanceof KilnError) throw e;
    throw fail((e as Error)?.message ?? String(e), e);
  }
  if (!response.ok) throw fail(`HTTP ${response.status} ${response.statusText}`);
  const declared = Number(response.headers.get("content-length") ?? 0);
  if (declared > MAX_MODEL_BYTES) throw fail(`${declared} bytes, over ONNX's 2 GiB limit`);
  // Read with a running total: a server may send more than it declared, or nothing at all.
  const chunks: Uint8Array[] = [];
  let total = 0;
  const reader = response.body?.getReader();
  while (reader) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > MAX_MODEL_BYTES) {
      await reader.cancel();
      throw fail(`over ONNX's 2 GiB limit`);
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) bytes.set(c, (at += c.byteLength) - c.byteLength);
  return bytes;
}

/**
 * An ONNX value: a tensor, a tensor of strings, a sequence of tensors, or `null` (an empty
 * optional).
 */
export type OnnxValue = HostTensor | StringTensor | readonly HostTensor[] | null;

/** A cache key of bound input shapes (sequence elements and empty-sequence markers included). */
function shapesKey(shapes: Readonly<Record<string, Shape>>): string {
  return JSON.stringify(Object.entries(shapes).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** Options of {@linkcode OnnxModel.load} and {@linkcode OnnxModel.fromBytes}. */
export interface OnnxLoadOptions {
  /** Receives the progress of the model's compiles (import, fuse, codegen, pipelines). */
  readonly onProgress?: ProgressCallback;
}

let protoOf: (m: OnnxModel) => ModelProto;
let modelOf: (proto: ModelProto) => OnnxModel;

/**
 * The decoded model behind `model`, for code of this package that derives a model from it (the
 * generation loop adds outputs); not part of the public API.
 */
export function modelProto(model: OnnxModel): ModelProto {
  return protoOf(model);
}

/** An {@linkcode OnnxModel} of an already decoded (and checked) model; internal, as above. */
export function modelOfProto(proto: ModelProto): OnnxModel {
  return modelOf(proto);
}

/** What `run` and `runValues` take: compile options and a run's own. */
const RUN_OPTIONS: readonly string[] = [...COMPILE_OPTIONS, ...RUN_OPTION_KEYS];

/** An imported ONNX model. */
export class OnnxModel {
  /** Declared inputs (symbolic dimensions by name). */
  readonly inputs: readonly OnnxInputInfo[];
  /** Output names. */
  readonly outputs: readonly string[];
  /** Opset version of the default domain. */
  readonly opset: number;
  #proto: ModelProto;
  #graphs = new Map<string, Graph>();
  #executables = new Map<string, Promise<Executable>>();
  /** Executables specialised on input values, least recently used first. */
  #specialisations = new Map<string, Promise<Executable>>();
  /** Inputs read at compile time, once the importer has asked for run-time values. */
  #valueInputs?: ReadonlySet<string>;
  /** How a model with string tensors splits around its numeric part (undefined without). */
  #strings?: StringStage;
  /** That numeric part, as a model of its own. */
  #numeric?: OnnxModel;

  /** Receives the progress of this model's imports and compiles (see `load`'s options). */
  #onProgress?: ProgressCallback;

  static {
    protoOf = (m) => m.#proto;
    modelOf = (proto) => new OnnxModel(proto);
  }

  private constructor(proto: ModelProto, options: OnnxLoadOptions = {}) {
    // A misspelt key (`onProgres`) or a callback that is not a function had been ignored.
    checkOptions(options, ["onProgress"], "OnnxModel.load");
    if (options.onProgress !== undefined && typeof options.onProgress !== "function") {
      throw new KilnError(`onProgress is ${shown(options.onProgress)}, not a function`, {
        code: "bad-input",
        fix: "pass a function that takes each Progress, e.g. (p) => console.log(p.phase)",
      });
    }
    this.#proto = proto;
    this.#onProgress = options.onProgress;
    this.#strings = StringStage.of(proto);
    this.inputs = onnxInputs(proto);
    this.outputs = proto.graph.output.map((o) => o.name);
    this.opset = int(
      proto.opsetImport.find((o) => (o.domain ?? "") === "" || o.domain === "ai.onnx")?.version,
    );
  }

  /**
   * Parses model bytes (malformed bytes give a typed error). The model keeps a copy: the decoded
   * tensors are views of the bytes they were read from, and the caller's may change later.
   */
  static fromBytes(bytes: Uint8Array, options: OnnxLoadOptions = {}): OnnxModel {
    // A string had been read as an empty model, null failed inside (a TypeError).
    if (!(bytes instanceof Uint8Array)) {
      throw new KilnError(`OnnxModel.fromBytes takes the model's bytes, got ${shown(bytes)}`, {
        code: "bad-input",
        fix: "pass a Uint8Array (new Uint8Array(arrayBuffer)), or OnnxModel.load(path) for a file",
      });
    }
    return new OnnxModel(decodeModel(bytes.slice()), options);
  }

  /**
   * Reads and parses a `.onnx` file, or fetches it when `path` is an `http:`, `https:`, `blob:`
   * or `data:` URL (in browsers, and in Deno and Node too).
   */
  static async load(path: string | URL, options: OnnxLoadOptions = {}): Promise<OnnxModel> {
    // Bytes given here would be read as a path, and the error would print them all.
    if (typeof path !== "string" && !(path instanceof URL)) {
      throw new KilnError(
        `OnnxModel.load takes a path or a URL, not a ${
          Object.prototype.toString.call(path).slice(8, -1)
        }`,
        {
          code: "bad-input",
          fix: "pass a model's bytes to OnnxModel.fromBytes(bytes), or its file's path here",
        },
      );
    }
    if (/^(https?|blob|data):/i.test(String(path))) {
      return await OnnxModel.#withData(await fetched(path), urlReader(path, fetched), options);
    }
    let bytes: Uint8Array;
    try {
      const fs = await hostFs();
      if (!fs) throw new Error("this host has no file system: pass a URL or the bytes");
      // Checked first: reading a device (/dev/zero) or a FIFO would never end.
      const info = await fs.stat(path);
      if (!info.isFile) throw new Error("not a regular file");
      if (info.size > MAX_MODEL_BYTES) {
        throw new Error(`${info.size} bytes, over ONNX's 2 GiB protobuf limit`);
      }
      bytes = await fs.readFile(path, ALIGN_ROOM);
    } catch (e) {
      throw new KilnError(`Cannot read the model ${path}: ${(e as Error).message}`, {
        code: "bad-input",
        fix: "check the path",
        cause: e,
      });
    }
    const file = path instanceof URL ? decodeURIComponent(path.pathname) : path;
    const slash = Math.max(file.lastIndexOf("/"), file.lastIndexOf("\\"));
    const folder = slash < 0 ? "." : file.slice(0, slash);
    return await OnnxModel.#withData(bytes, fileReader(folder), options);
  }

  /** The model of `bytes`, its external data (files beside it) read through `read`. */
  static async #withData(
    bytes: Uint8Array,
    read: ExternalReader,
    options: OnnxLoadOptions,
  ): Promise<OnnxModel> {
    // The bytes are the load's own: moved in place where that lets tensors view them.
    const proto = decodeAligned(bytes);
    await inlineExternalData(proto, read);
    return new OnnxModel(proto, options);
  }

  /** `options` with the model's progress callback where the call names none. */
  #withProgress<T extends CompileOptions>(options: T): T {
    return options.onProgress || !this.#onProgress
      ? options
      : { ...options, onProgress: this.#onProgress };
  }

  /** `importing()`'s graph, its import reported as a phase of the compile. */
  #imported(options: CompileOptions, importing: () => Graph): Graph {
    const report = reporter(options.onProgress);
    report({ phase: "import", done: 0, total: 1 });
    const graph = importing();
    report({ phase: "import", done: 1, total: 1 });
    return graph;
  }

  /**
   * Producer, opsets, declared inputs and outputs, parameter count and bytes, op histogram and
   * unsupported ops (`kiln info MODEL`), read without importing the model.
   */
  summary(): ModelSummary {
    return summarizeModel(this.#proto);
  }

  /** The graph for concrete input shapes (required for symbolic dimensions), imported once. */
  graph(inputShapes: Readonly<Record<string, Shape>> = {}): Graph {
    const key = shapesKey(inputShapes);
    let g = this.#graphs.get(key);
    if (!g) this.#graphs.set(key, g = importModel(this.#proto, { inputShapes }));
    return g;
  }

  /** Compiles for `inputShapes` (cached per shapes, backend and policy). */
  compile(
    inputShapes: Readonly<Record<string, Shape>> = {},
    options: CompileOptions = {},
  ): Promise<Executable> {
    // Refused as the promise's rejection, as every other compile error is.
    try {
      checkCompileArgs(inputShapes, options);
    } catch (e) {
      return Promise.reject(e);
    }
    const key = this.#key(inputShapes, options);
    let exe = this.#executables.get(key);
    if (!exe) {
      const withProgress = this.#withProgress(options);
      exe = Promise.resolve().then(() =>
        compile(this.#imported(withProgress, () => this.graph(inputShapes)), withProgress)
      );
      exe.catch(() => this.#executables.delete(key));
      this.#executables.set(key, exe);
    }
    return exe;
  }

  /**
   * Runs the model, binding symbolic dimensions from `inputs`' shapes (and, where the model
   * needs them, specialising on the values of its small inputs).
   */
  async run(inputs: TensorMap, options: CompileOptions & RunOptions = {}): Promise<TensorMap> {
    if (this.#strings) {
      const out = await this.runValues(inputs, options);
      for (const [name, v] of Object.entries(out)) {
        if (v === null || Array.isArray(v) || (v as StringTensor).dtype === "string") {
          throw new KilnError(`Output "${name}" is not a numeric tensor`, {
            code: "unsupported",
            fix: "run the model with runValues, which returns strings, sequences and optionals",
          });
        }
      }
      return out as TensorMap;
    }
    return this.#run(inputs, this.#shapesOf(inputs), options);
  }

  /**
   * Runs the model on ONNX values: a tensor, an array of tensors for a sequence input, `null`
   * for an empty optional. Outputs come back the same way (sequences as arrays, an empty
   * optional output as `null`).
   */
  async runValues(
    inputs: Readonly<Record<string, OnnxValue>>,
    options: CompileOptions & RunOptions = {},
  ): Promise<Record<string, OnnxValue>> {
    if (this.#strings) {
      return await this.#strings.run(inputs as Record<string, Value>, (core, feeds) => {
        this.#numeric ??= new OnnxModel(core);
        return this.#numeric.runValues(feeds as Record<string, OnnxValue>, options);
      });
    }
    const feeds: Record<string, HostTensor> = {}, shapes: Record<string, Shape> = {};
    for (const [name, v] of Object.entries(inputs)) {
      if (v === null || v === undefined) continue;
      if (Array.isArray(v)) {
        // A sequence: element i is the graph input `name[i]`; `name[]` marks an empty one.
        if (v.length === 0) shapes[`${name}[]`] = [];
        v.forEach((t: HostTensor, i: number) => {
          feeds[`${name}[${i}]`] = t;
          shapes[`${name}[${i}]`] = t.shape;
        });
      } else {
        const t = v as HostTensor;
        feeds[name] = t;
        if (t.shape) shapes[name] = t.shape;
      }
    }
    const flat = await this.#run(feeds, shapes, options);
    const out: Record<string, OnnxValue> = {};
    for (const o of this.#proto.graph.output) {
      const inner = o.type?.optionalType?.elemType ?? o.type;
      if (inner?.sequenceType) {
        const items: HostTensor[] = [];
        for (let i = 0; flat[`${o.name}[${i}]`]; i++) items.push(flat[`${o.name}[${i}]`]);
        out[o.name] = o.type?.optionalType && items.length === 0 && !(o.name in flat)
          ? null
          : items;
      } else out[o.name] = flat[o.name] ?? null;
    }
    return out;
  }

  /**
   * The executable {@linkcode OnnxModel.run} runs `inputs` on, and the inputs to run it with:
   * compiled for their shapes and, where the model needs the values of inputs that decide a shape
   * or an attribute (Reshape's shape, GroupQueryAttention's total_sequence_length), specialised
   * on the values of its small inputs, which it then holds as constants (they are left out of
   * the inputs returned). For numeric models (see {@linkcode OnnxModel.runValues} for strings).
   *
   * @example
   * ```ts
   * import { OnnxModel } from "../mod.ts";
   * const bytes = await Deno.readFile("onnx/testdata/misc_ops.onnx");
   * const model = OnnxModel.fromBytes(bytes);
   * const x = { data: new Float32Array(80), shape: [2, 5, 8], dtype: "f32" as const };
   * const { executable, inputs } = await model.compileFor({ x });
   * const outputs = await executable.run(inputs);
   * ```
   */
  async compileFor<T extends InputMap = TensorMap>(
    inputs: T,
    options: CompileOptions = {},
  ): Promise<{ executable: Executable; inputs: T }> {
    if (this.#strings) {
      throw new KilnError(
        "This model has string tensors: it runs in stages, not as one executable",
        {
          code: "unsupported",
          fix: "run it with runValues (or run), which take strings",
        },
      );
    }
    checkOptions(options, COMPILE_OPTIONS, "compileFor()");
    return await this.#compileFor(inputs, this.#shapesOf(inputs), options);
  }

  /** The shapes of the model's inputs among `inputs`. */
  #shapesOf(inputs: InputMap): Record<string, Shape> {
    const shapes: Record<string, Shape> = {};
    for (const i of this.inputs) if (inputs[i.name]?.shape) shapes[i.name] = inputs[i.name].shape;
    return shapes;
  }

  async #compileFor<T extends InputMap>(
    inputs: T,
    shapes: Record<string, Shape>,
    options: CompileOptions,
  ): Promise<{ executable: Executable; inputs: T }> {
    if (!this.#valueInputs) {
      try {
        return { executable: await this.compile(shapes, options), inputs };
      } catch (e) {
        if (!(e instanceof NeedsValue)) throw e;
        this.#valueInputs = new Set(
          this.inputs.filter((i) => {
            const t = inputs[i.name];
            return t?.shape && t.shape.reduce((p, d) => p * d, 1) <= SMALL;
          }).map((i) => i.name),
        );
      }
    }
    const values: Record<string, HostTensor> = {};
    const rest: InputMap = {};
    for (const [name, t] of Object.entries(inputs)) {
      if (!this.#valueInputs.has(name)) rest[name] = t;
      else if (!(t instanceof DeviceTensor)) values[name] = t;
      else {
        throw new KilnError(`Input "${name}" decides a shape, so its values are needed here`, {
          code: "bad-input",
          fix: `pass "${name}" as a host tensor ({ data, shape, dtype }), not a DeviceTensor`,
        });
      }
    }
    return { executable: await this.#specialised(shapes, values, options), inputs: rest as T };
  }

  async #run(
    inputs: TensorMap,
    shapes: Record<string, Shape>,
    options: CompileOptions & RunOptions,
  ): Promise<TensorMap> {
    checkOptions(options, RUN_OPTIONS, "run()");
    const compiling = compileOptionsOf(options);
    const { executable, inputs: feeds } = await this.#compileFor(inputs, shapes, compiling);
    const { outputs, repeat, into } = options;
    return await executable.run(feeds, { outputs, repeat, into });
  }

  /** The executable for these shapes and input values (cached, least recently used evicted). */
  #specialised(
    shapes: Record<string, Shape>,
    values: Record<string, HostTensor>,
    options: CompileOptions,
  ): Promise<Executable> {
    // Keyed by the values' bytes: +0 and -0 (whose reciprocals differ) or two NaN payloads
    // never share an executable, as their decimal strings would.
    const key = this.#key(
      shapes,
      options,
      Object.entries(values).map(([k, t]) => [k, t.dtype, t.shape, hexBytes(t.data)]),
    );
    const cache = this.#specialisations;
    let exe = cache.get(key);
    if (exe) {
      cache.delete(key);
      cache.set(key, exe);
      return exe;
    }
    const withProgress = this.#withProgress(options);
    const importing = () => importModel(this.#proto, { inputShapes: shapes, inputValues: values });
    exe = Promise.resolve().then(() =>
      compile(this.#imported(withProgress, importing), withProgress)
    );
    exe.catch(() => cache.delete(key));
    cache.set(key, exe);
    for (const old of [...cache.keys()].slice(0, Math.max(0, cache.size - SPECIALISATIONS))) {
      cache.get(old)!.then((x) => x.dispose(), () => {});
      cache.delete(old);
    }
    return exe;
  }

  /**
   * The cache key of an executable: input shapes, where it runs, its precision and any
   * specialised values.
   */
  #key(
    shapes: Readonly<Record<string, Shape>>,
    options: CompileOptions,
    values: unknown[] = [],
  ): string {
    const { backend, registry, cache, state } = options;
    return JSON.stringify([
      shapesKey(shapes),
      typeof backend === "object" ? identity(backend) : backend,
      options.policy,
      registry && identity(registry),
      typeof cache === "object" ? identity(cache) : cache,
      options.fuse,
      state && Object.entries(state).sort(),
      options.buckets,
      options.precision,
      options.narrowF64,
      // A donating executable disposes the device tensors it is given and writes over them.
      options.donate,
      options.inputsOn && Object.entries(options.inputsOn).sort(),
      options.workload?.runs,
      values,
    ]);
  }

  /** Disposes every executable compiled for this model. */
  dispose(): void {
    this.#numeric?.dispose();
    for (const cache of [this.#executables, this.#specialisations]) {
      for (const exe of cache.values()) exe.then((x) => x.dispose(), () => {});
      cache.clear();
    }
  }
}
