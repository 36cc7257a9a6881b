/**
 * {@linkcode OnnxModel}: an imported model that compiles on demand. Symbolic input dimensions are
 * bound from the data passed to `run`; each distinct set of shapes (per backend and policy) is
 * imported and compiled once and then reused.
 *
 * @module
 */
import { compile, type CompileOptions } from "../jit/compile.ts";
import type { Executable, RunOptions, TensorMap } from "../jit/executable.ts";
import type { Graph } from "../jit/graph.ts";
import { KilnError } from "../jit/errors.ts";
import type { Shape } from "../jit/shape.ts";
import { importModel, type OnnxInputInfo, onnxInputs } from "./import.ts";
import { decodeModel, int, type ModelProto } from "./proto.ts";

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

  private constructor(proto: ModelProto) {
    this.#proto = proto;
    this.inputs = onnxInputs(proto);
    this.outputs = proto.graph.output.map((o) => o.name);
    this.opset = int(
      proto.opsetImport.find((o) => (o.domain ?? "") === "" || o.domain === "ai.onnx")?.version,
    );
  }

  /** Parses model bytes (malformed bytes give a typed error). */
  static fromBytes(bytes: Uint8Array): OnnxModel {
    return new OnnxModel(decodeModel(bytes));
  }

  /** Reads and parses a `.onnx` file. */
  static async load(path: string | URL): Promise<OnnxModel> {
    const { readFile } = await import("node:fs/promises");
    let bytes: Uint8Array;
    try {
      bytes = new Uint8Array(await readFile(path));
    } catch (e) {
      throw new KilnError(`Cannot read the model ${path}: ${(e as Error).message}`, {
        code: "bad-input",
        fix: "check the path",
        cause: e,
      });
    }
    return OnnxModel.fromBytes(bytes);
  }

  /** The graph for concrete input shapes (required for symbolic dimensions), imported once. */
  graph(inputShapes: Readonly<Record<string, Shape>> = {}): Graph {
    const key = JSON.stringify(this.inputs.map((i) => inputShapes[i.name] ?? null));
    let g = this.#graphs.get(key);
    if (!g) this.#graphs.set(key, g = importModel(this.#proto, { inputShapes }));
    return g;
  }

  /** Compiles for `inputShapes` (cached per shapes, backend and policy). */
  compile(
    inputShapes: Readonly<Record<string, Shape>> = {},
    options: CompileOptions = {},
  ): Promise<Executable> {
    const backend = typeof options.backend === "object" ? options.backend.id : options.backend;
    const key = JSON.stringify([
      this.inputs.map((i) => inputShapes[i.name] ?? null),
      backend,
      options.policy,
      options.fuse,
    ]);
    let exe = this.#executables.get(key);
    if (!exe) {
      exe = Promise.resolve().then(() => compile(this.graph(inputShapes), options));
      exe.catch(() => this.#executables.delete(key));
      this.#executables.set(key, exe);
    }
    return exe;
  }

  /** Runs the model, binding symbolic dimensions from `inputs`' shapes. */
  async run(inputs: TensorMap, options: CompileOptions & RunOptions = {}): Promise<TensorMap> {
    const shapes: Record<string, Shape> = {};
    for (const i of this.inputs) if (inputs[i.name]?.shape) shapes[i.name] = inputs[i.name].shape;
    const exe = await this.compile(shapes, options);
    return await exe.run(inputs, { outputs: options.outputs });
  }
}
