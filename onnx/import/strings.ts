/**
 * Models with string tensors. Strings are host data (no backend has kernels for them), so such a
 * model runs in three steps: the string ops whose inputs are all known before any compute (the
 * model's inputs and initializers: parsing, normalizing, comparing) run on the host; then the
 * numeric rest, imported and compiled as any model, on the chosen backend; then the string ops
 * that read its results (formatting numbers). Only a string op feeding numbers back into that
 * numeric rest is refused: it would split the compiled part in two.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { CODE_OF_DTYPE, type ModelProto, type NodeProto, tensorOf } from "../wire/proto.ts";
import {
  type HostValue,
  isStringTensor,
  runStringNode,
  STRING,
  stringsOf,
  type StringTensor,
} from "./string_ops.ts";

/** Ops whose output is a string tensor when their first input is one. */
const MOVES = new Set(["Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"]);

/** The outputs of `n` that are string tensors, given the names known to be strings. */
function stringOutputs(n: NodeProto, strings: ReadonlySet<string>): string[] {
  const attr = (name: string) => n.attribute.find((a) => a.name === name);
  switch (n.opType) {
    case "Cast":
      return Number(attr("to")?.i ?? 0) === STRING ? [n.output[0]] : [];
    case "CastLike":
      return strings.has(n.input[1]) ? [n.output[0]] : [];
    case "Constant":
      return attr("value_strings") || attr("value")?.t?.dataType === STRING ? [n.output[0]] : [];
    case "StringNormalizer":
    case "StringConcat":
    case "StringSplit":
      return [n.output[0]];
  }
  return MOVES.has(n.opType) && strings.has(n.input[0]) ? [n.output[0]] : [];
}

/** A value a model run takes or gives: a tensor, a string tensor, a sequence, or `null`. */
export type Value = HostValue | readonly HostTensor[] | null;

/** How a model with strings is split around its compiled numeric part. */
export class StringStage {
  /** Host nodes whose inputs are all known before the numeric part runs. */
  readonly before: readonly NodeProto[];
  /** Host nodes that read what the numeric part computes. */
  readonly after: readonly NodeProto[];
  #model: ModelProto;
  #coreNodes: NodeProto[];
  /** Values the numeric part reads from `before`. */
  #coreInputs: string[];
  /** Values `after` or the caller read from the numeric part. */
  #coreOutputs: string[];
  #constants = new Map<string, HostValue>();
  /** The numeric part's model, built on the first run. */
  #core?: ModelProto;

  private constructor(model: ModelProto, host: ReadonlySet<NodeProto>) {
    this.#model = model;
    const g = model.graph;
    const early = new Set([...g.input.map((i) => i.name), ...g.initializer.map((t) => t.name!)]);
    const late = new Set<string>();
    const before: NodeProto[] = [], after: NodeProto[] = [];
    this.#coreNodes = [];
    for (const n of g.node) {
      const ins = n.input.filter((x) => x);
      if (host.has(n)) {
        const now = ins.every((x) => early.has(x));
        (now ? before : after).push(n);
        for (const o of n.output) (now ? early : late).add(o);
        continue;
      }
      const fed = ins.find((x) => late.has(x));
      if (fed) {
        throw new KilnError(
          `node "${n.name || n.output[0]}" (${n.opType}) reads "${fed}", which string ops make ` +
            "from numbers the model computes; kiln runs string ops only before or after its " +
            "compiled part",
          {
            code: "unsupported",
            fix: "compute those strings from the model's inputs, or split the model in two",
          },
        );
      }
      this.#coreNodes.push(n);
    }
    this.before = before;
    this.after = after;
    const made = new Set(this.#coreNodes.flatMap((n) => n.output));
    const fromBefore = new Set(before.flatMap((n) => n.output));
    this.#coreInputs = [
      ...new Set(this.#coreNodes.flatMap((n) => n.input).filter((x) => fromBefore.has(x))),
    ];
    const wanted = [...g.output.map((o) => o.name), ...after.flatMap((n) => n.input)];
    this.#coreOutputs = [...new Set(wanted.filter((x) => made.has(x)))];
    const read = new Set([...before, ...after].flatMap((n) => n.input));
    for (const t of g.initializer) {
      if (!read.has(t.name!)) continue;
      this.#constants.set(
        t.name!,
        t.dataType === STRING ? stringsOf(t, "initializer") : tensorOf(t, "initializer"),
      );
    }
  }

  /** The stage of `model`, or undefined when no value of it is a string. */
  static of(model: ModelProto): StringStage | undefined {
    const g = model.graph;
    const strings = new Set<string>();
    for (const i of g.input) if (i.type?.tensorType?.elemType === STRING) strings.add(i.name);
    for (const t of g.initializer) if (t.dataType === STRING) strings.add(t.name!);
    const host = new Set<NodeProto>();
    for (const n of g.node) {
      const made = stringOutputs(n, strings);
      if (made.length || n.input.some((x) => strings.has(x))) host.add(n);
      for (const o of made) strings.add(o);
    }
    return host.size ? new StringStage(model, host) : undefined;
  }

  /**
   * The numeric part as a model of its own: the string nodes gone, what they give it as
   * inputs of the types first seen (`types`), what they read of it as outputs.
   */
  #coreModel(types: Record<string, number>): ModelProto {
    const g = this.#model.graph;
    const inputs = g.input.filter((i) => i.type?.tensorType?.elemType !== STRING);
    return {
      ...this.#model,
      graph: {
        ...g,
        node: this.#coreNodes,
        initializer: g.initializer.filter((t) => t.dataType !== STRING),
        input: [
          ...inputs,
          ...this.#coreInputs.map((name) => ({
            name,
            type: { tensorType: { elemType: types[name] } },
          })),
        ],
        output: this.#coreOutputs.map((name) => g.output.find((o) => o.name === name) ?? { name }),
      },
    };
  }

  /**
   * Runs the model: `before` on the host, the numeric part through `runCore` (given the same
   * model every time, built on the first run), then `after`. Returns every graph output.
   */
  async run(
    feeds: Readonly<Record<string, Value>>,
    runCore: (core: ModelProto, feeds: Record<string, Value>) => Promise<Record<string, Value>>,
  ): Promise<Record<string, Value>> {
    for (const [name, v] of Object.entries(feeds)) if (isStringTensor(v)) checkStrings(v, name);
    const env = new Map<string, Value>([...this.#constants, ...Object.entries(feeds)]);
    this.#runNodes(this.before, env);
    if (this.#coreOutputs.length) {
      const coreFeeds: Record<string, Value> = {};
      for (const i of this.#model.graph.input) {
        const v = feeds[i.name];
        if (v !== undefined && !isStringTensor(v)) coreFeeds[i.name] = v;
      }
      for (const name of this.#coreInputs) coreFeeds[name] = env.get(name)!;
      this.#core ??= this.#coreModel(Object.fromEntries(
        this.#coreInputs.map((name) => [name, CODE_OF_DTYPE[(env.get(name) as HostTensor).dtype]]),
      ));
      const results = await runCore(this.#core, coreFeeds);
      for (const name of this.#coreOutputs) env.set(name, results[name]);
    }
    this.#runNodes(this.after, env);
    return Object.fromEntries(
      this.#model.graph.output.map((o) => [o.name, env.get(o.name) ?? null]),
    );
  }

  /** Runs host `nodes` in order, reading and writing `env`. */
  #runNodes(nodes: readonly NodeProto[], env: Map<string, Value>): void {
    for (const n of nodes) {
      const inputs = n.input.map((name) => {
        if (!name) return undefined;
        const v = env.get(name);
        if (v === undefined || v === null || Array.isArray(v)) {
          throw new KilnError(
            `node "${n.name || n.output[0]}" (${n.opType}): no tensor "${name}"`,
            {
              code: "bad-input",
              fix: v === undefined ? `pass the input "${name}"` : "pass a tensor",
            },
          );
        }
        return v as HostValue;
      });
      runStringNode(n, inputs).forEach((v, i) => n.output[i] && env.set(n.output[i], v));
    }
  }
}

/** A string tensor's strings as given by a caller: checked, so a bad one is a typed error. */
export function checkStrings(t: StringTensor, name: string): StringTensor {
  const count = t.shape.reduce((p, d) => p * d, 1);
  if (
    !Array.isArray(t.data) || t.data.length !== count || t.data.some((s) => typeof s !== "string")
  ) {
    throw new KilnError(
      `input "${name}": a string tensor of shape [${t.shape}] needs ${count} strings`,
      {
        code: "bad-input",
        fix: 'pass { dtype: "string", shape, data: string[] } with one string per element',
      },
    );
  }
  return t;
}
