/**
 * {@linkcode GraphBuilder}: the programmatic way to write a graph. It records declarations and
 * nodes by value name and hands them to `Graph.create`, which validates everything at `build()`.
 *
 * @module
 */
import {
  type BoundaryDType,
  dtypeOfData,
  fromNumbers,
  narrowToBf16,
  type TensorData,
} from "../ir/dtype.ts";
import { KilnError, shown } from "../support/errors.ts";
import {
  Graph,
  type InputSpec,
  type NodeSpec,
  type OutputSpec,
  type ParamSpec,
} from "../ir/graph.ts";
import type { Attrs } from "../ops/mod.ts";
import type { Shape } from "../ir/shape.ts";

/** A reference to a value while a graph is being built. */
export interface Sym {
  /** The value's name. */
  readonly name: string;
}

/** Options for {@linkcode GraphBuilder.op}. */
export interface OpOptions {
  /** Node name (for messages and `explain`). */
  name?: string;
  /** Name of the output value (default: a fresh `%N`). */
  output?: string;
}

/**
 * Builds a {@linkcode Graph}.
 *
 * @example A two-layer MLP
 * ```ts
 * import { GraphBuilder } from "./graph_builder.ts";
 * const b = new GraphBuilder();
 * const x = b.input("x", [1, 4]);
 * const w = b.param("w", [4, 2], "f32", new Float32Array(8).fill(0.5));
 * const y = b.op("Relu", [b.op("MatMul", [x, w])]);
 * b.output("y", y);
 * const graph = b.build();
 * console.log(graph.values[graph.outputs[0].value].shape); // [1, 2]
 * ```
 */
export class GraphBuilder {
  #inputs: InputSpec[] = [];
  #params: ParamSpec[] = [];
  #nodes: NodeSpec[] = [];
  #outputs: OutputSpec[] = [];
  #next = 0;

  /**
   * Declares a graph input. An `i64` input is held in 32 bits (its data range-checked as it
   * arrives): ops on it compute in i32; Cast it to `"i64"` for int64 arithmetic that can leave
   * that range (exact to 2^53 on wasm and the reference, checked on WebGPU).
   */
  input(name: string, shape: Shape, dtype: BoundaryDType = "f32"): Sym {
    this.#inputs.push({ name, shape, dtype });
    return { name };
  }

  /** Declares a parameter with optional initial data (copied at `build()`). */
  param(name: string, shape: Shape, dtype: BoundaryDType = "f32", data?: TensorData): Sym {
    this.#params.push({ name, shape, dtype, data });
    return { name };
  }

  /**
   * Adds a constant. A plain number makes a scalar of `dtype` (default f32); typed data keeps its
   * natural dtype unless `dtype` says otherwise (e.g. `"bool"` for a `Uint8Array`).
   */
  constant(value: number | TensorData, shape?: Shape, dtype?: BoundaryDType): Sym {
    const data = typeof value === "number" ? numberData(value, dtype ?? "f32") : value;
    const tensor = {
      data,
      shape: shape ?? (typeof value === "number" ? [] : [data.length]),
      dtype: dtype ?? dtypeOfData(data),
    };
    return this.op("Constant", [], { value: tensor });
  }

  /** Adds a single-output node and returns its output. */
  op(op: string, inputs: readonly (Sym | string)[], attrs?: Attrs, options?: OpOptions): Sym {
    if (op === "Cast" && attrs?.to === "bf16") {
      // bf16 is held as f32 (see `BoundaryDType`): a cast to it is one to f32, then rounded.
      const wide = this.op("Cast", inputs, { ...attrs, to: "f32" });
      return this.op("RoundToBf16", [wide], undefined, options);
    }
    const output = options?.output ?? this.#fresh();
    this.#nodes.push({
      op,
      inputs: namesOf(op, inputs),
      outputs: [output],
      attrs,
      name: options?.name,
    });
    return { name: output };
  }

  /** Adds a node with `outputs` outputs (a count, or their names) and returns them. */
  opN(
    op: string,
    inputs: readonly (Sym | string)[],
    attrs: Attrs | undefined,
    outputs: number | readonly string[],
    options?: { name?: string },
  ): Sym[] {
    const names = typeof outputs === "number"
      ? [...Array(outputs)].map(() => this.#fresh())
      : [...outputs];
    this.#nodes.push({
      op,
      inputs: namesOf(op, inputs),
      outputs: names,
      attrs,
      name: options?.name,
    });
    return names.map((name) => ({ name }));
  }

  /** Marks `value` as a graph output named `name`; `dtype: "i64"` widens i32 results. */
  output(name: string, value: Sym | string, options?: { dtype?: BoundaryDType }): this {
    this.#outputs.push({ name, value: nameOf(value), dtype: options?.dtype });
    return this;
  }

  /** Validates and returns the graph. */
  build(): Graph {
    return Graph.create({
      inputs: this.#inputs,
      params: this.#params,
      nodes: this.#nodes,
      outputs: this.#outputs,
    });
  }

  #fresh(): string {
    return `%${this.#next++}`;
  }
}

/** The names of node `op`'s `inputs`: a list (anything else had failed inside as a TypeError). */
function namesOf(op: string, inputs: readonly (Sym | string)[]): string[] {
  if (Array.isArray(inputs)) return inputs.map(nameOf);
  throw new KilnError(`${op}'s inputs are ${shown(inputs)}, not a list`, {
    code: "invalid-graph",
    fix: "pass a list of the Syms returned by input()/param()/op() (or value names), e.g. [x]",
  });
}

function nameOf(v: Sym | string): string {
  if (typeof v === "string") return v;
  if (v && typeof v.name === "string") return v.name;
  throw new KilnError(`Expected a value reference, got ${shown(v)}`, {
    code: "invalid-graph",
    fix: "pass the Sym returned by input()/param()/op(), or a value name",
  });
}

function numberData(value: number, dtype: BoundaryDType): TensorData {
  if (dtype === "i64") return new BigInt64Array([BigInt(Math.trunc(value))]);
  if (dtype === "bf16") return narrowToBf16([value]);
  // A bool constant keeps the number it was given (fromNumbers would make it 0/1).
  if (dtype === "bool") return new Uint8Array([value]);
  return fromNumbers(dtype, [value]);
}
