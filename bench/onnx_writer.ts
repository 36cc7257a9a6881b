/**
 * A small writer of ONNX graphs with random weights, for the shaped models the benchmarks make on
 * machines without PyTorch (`bert_shaped.ts`, `gpt2_shaped.ts`): initializers from a fixed
 * pseudo-random stream, nodes by name, and the model written with its inputs beside it.
 *
 * @module
 */
import {
  type AttributeProto,
  encodeModel,
  type NodeProto,
  type TensorProto,
  type ValueInfoProto,
} from "../onnx/wire/proto.ts";

/** An int attribute. */
export const int = (name: string, i: number): AttributeProto => ({ name, type: 2, i });
/** A float attribute. */
export const float = (name: string, f: number): AttributeProto => ({ name, type: 1, f });
/** An ints attribute. */
export const ints = (name: string, v: number[]): AttributeProto => ({ name, type: 7, ints: v });

/** A graph being written (see the module's description). */
export class OnnxWriter {
  readonly #inits: TensorProto[] = [];
  readonly #nodes: NodeProto[] = [];
  #seed: number;

  /** A writer whose weights come from the stream seeded by `seed`. */
  constructor(seed: number) {
    this.#seed = seed;
  }

  /** The next number of the stream, in [0, 1). */
  random(): number {
    this.#seed = (this.#seed * 1103515245 + 12345) & 0x7fffffff;
    return this.#seed / 0x80000000;
  }

  /** An f32 initializer of `shape`: uniform in ±`scale`, or all `fill`; its name. */
  weight(name: string, shape: number[], scale: number, fill?: number): string {
    const data = Float32Array.from(
      { length: shape.reduce((p, d) => p * d, 1) },
      () => fill ?? (this.random() * 2 - 1) * scale,
    );
    this.#inits.push({ name, dims: shape, dataType: 1, rawData: new Uint8Array(data.buffer) });
    return name;
  }

  /** An f32 initializer of `shape` holding `data`; its name. */
  data(name: string, shape: number[], data: Float32Array): string {
    this.#inits.push({ name, dims: shape, dataType: 1, rawData: new Uint8Array(data.buffer) });
    return name;
  }

  /** A node of several outputs; their names. */
  nodes(op: string, input: string[], output: string[], attrs: AttributeProto[] = []): string[] {
    this.#nodes.push({ opType: op, domain: "", input, output, attribute: attrs, name: output[0] });
    return output;
  }

  /** An int64 initializer; its name. */
  int64(name: string, shape: number[], data: number[]): string {
    const raw = BigInt64Array.from(data, BigInt);
    this.#inits.push({ name, dims: shape, dataType: 7, rawData: new Uint8Array(raw.buffer) });
    return name;
  }

  /** A node of the default domain; its output's name. */
  node(op: string, input: string[], output: string, attrs: AttributeProto[] = []): string {
    return this.nodes(op, input, [output], attrs)[0];
  }

  /** LayerNormalization of `x` over its last axis of `width`, weights 1 and biases 0. */
  layerNorm(x: string, name: string, width: number, epsilon: number): string {
    const g = this.weight(`${name}.weight`, [width], 0, 1);
    const b = this.weight(`${name}.bias`, [width], 0, 0);
    return this.node("LayerNormalization", [x, g, b], `${name}.out`, [
      int("axis", -1),
      float("epsilon", epsilon),
    ]);
  }

  /**
   * [1, seq, heads · head] → [1, heads, seq, head] (or [1, heads, head, seq] for the keys), as the
   * exporters split attention heads: a Reshape and a Transpose.
   */
  heads(x: string, name: string, [seq, heads, head]: number[], keys: boolean): string {
    const shape = this.int64(`${name}.shape`, [4], [1, seq, heads, head]);
    const r = this.node("Reshape", [x, shape], `${name}.heads`);
    const perm = keys ? [0, 2, 3, 1] : [0, 2, 1, 3];
    return this.node("Transpose", [r], `${name}.t`, [ints("perm", perm)]);
  }

  /**
   * Writes the graph to `out` (opset 17), its inputs `[name, dtype, dims, data]` to
   * `OUT.in.NAME.DTYPE.bin` beside it as `bench/export_full_models.py` writes them.
   */
  write(
    out: string,
    inputs: [string, "int64" | "float32", number[], BigInt64Array | Float32Array][],
    outputs: [string, number[]][],
  ): void {
    const tensor = (name: string, elemType: number, dims: number[]): ValueInfoProto => ({
      name,
      type: { tensorType: { elemType, shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
    });
    const graph = {
      name: out.split("/").at(-1)!.replace(/\.onnx$/, ""),
      node: this.#nodes,
      initializer: this.#inits,
      input: inputs.map(([name, dtype, dims]) => tensor(name, dtype === "int64" ? 7 : 1, dims)),
      output: outputs.map(([name, dims]) => tensor(name, 1, dims)),
    };
    Deno.writeFileSync(
      out,
      encodeModel({ irVersion: 8, opsetImport: [{ domain: "", version: 17 }], graph }),
    );
    const base = out.replace(/\.onnx$/, "");
    for (const [name, dtype, , data] of inputs) {
      Deno.writeFileSync(`${base}.in.${name}.${dtype}.bin`, new Uint8Array(data.buffer));
    }
  }
}
