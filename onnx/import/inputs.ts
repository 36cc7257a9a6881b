/**
 * The inputs an ONNX model declares (initializers excluded), and binding their symbolic
 * dimensions to the shapes of the data a run is given.
 *
 * @module
 */
import type { BoundaryDType } from "../../jit/ir/dtype.ts";
import { checkOptions, KilnError, shown } from "../../jit/support/errors.ts";
import { COMPILE_OPTIONS } from "../../jit/compile_options.ts";
import { formatShape, type Shape } from "../../jit/ir/shape.ts";
import { CODE_OF_DTYPE, dtypeOfCode, int, type ModelProto } from "../wire/proto.ts";
import { STRING } from "./string_ops.ts";

/** A graph input as the model declares it: fixed sizes, or names for symbolic dimensions. */
export interface OnnxInputInfo {
  /** Input name. */
  readonly name: string;
  /**
   * `tensor`, or `sequence` of tensors of `dims`/`dtype` (bound element by element: element `i`
   * is the graph input `name[i]`).
   */
  readonly kind: "tensor" | "sequence";
  /** Whether the input is an ONNX optional: it may be left out (an empty optional). */
  readonly optional: boolean;
  /** Whether the type declares a shape at all (`dims` is then its rank's dimensions). */
  readonly ranked: boolean;
  /** Dimensions: a size, or the symbolic name (e.g. `"batch"`). */
  readonly dims: readonly (number | string)[];
  /** Element type (`string` for a tensor of strings: `OnnxModel.runValues` takes those). */
  readonly dtype: BoundaryDType | "string";
}

/** The inputs a model declares (initializers excluded). */
export function onnxInputs(model: ModelProto): OnnxInputInfo[] {
  const inits = new Set(model.graph.initializer.map((t) => t.name));
  return model.graph.input.filter((i) => !inits.has(i.name)).map((i) => {
    const optional = i.type?.optionalType !== undefined && i.type?.optionalType !== null;
    const outer = optional ? i.type?.optionalType?.elemType : i.type;
    const sequence = outer?.sequenceType !== undefined && outer?.sequenceType !== null;
    const tt = sequence ? outer?.sequenceType?.elemType?.tensorType : outer?.tensorType;
    if (!tt) {
      throw new KilnError(
        `Input "${i.name}" is not a tensor, a sequence of tensors or an optional of them`,
        {
          code: "unsupported",
          fix: "kiln imports tensor inputs, sequences of tensors and optionals of either",
        },
      );
    }
    // A negative dim_value (some exporters write -1 for a dynamic axis) is no size: such an axis
    // is symbolic, bound from the data. Taken as a size, it reached converters as a length (an
    // LSTM's sequence of -1 steps: a RangeError from inside, found by fuzzing).
    const dims = (tt.shape?.dim ?? []).map((d, k) => {
      if (d.dimParam) return d.dimParam;
      const n = int(d.dimValue);
      return n < 0 ? `unknown_${k}` : n;
    });
    return {
      name: i.name,
      kind: sequence ? "sequence" : "tensor",
      optional,
      ranked: tt.shape !== undefined && tt.shape !== null,
      dims,
      // bfloat16 crosses the boundary as its bits (held as f32 inside).
      dtype: tt.elemType === STRING
        ? "string"
        : tt.elemType === CODE_OF_DTYPE.bf16
        ? "bf16"
        : dtypeOfCode(tt.elemType ?? 0, `input "${i.name}"`),
    };
  });
}

/** The shape input `input` takes for data of shape `given` (required for symbolic dimensions). */
export function bindShape(input: OnnxInputInfo, given: Shape | undefined): number[] {
  // A type without a shape takes whatever shape the data has.
  if (!input.ranked && given) return [...given];
  const symbolic = input.dims.filter((d) => typeof d === "string");
  if (!given) {
    if (symbolic.length) {
      throw new KilnError(
        `Input "${input.name}" has symbolic dimensions ${symbolic.join(", ")} [${
          input.dims.join(", ")
        }]`,
        {
          code: "bad-input",
          fix: `pass inputShapes: { ${JSON.stringify(input.name)}: [${
            input.dims.map((d) => (typeof d === "string" ? "…" : d)).join(", ")
          }] } (run() binds them from the data)`,
        },
      );
    }
    return input.dims as number[];
  }
  if (
    given.length !== input.dims.length ||
    input.dims.some((d, i) => typeof d === "number" && d !== given[i])
  ) {
    throw new KilnError(
      `Input "${input.name}" has shape [${input.dims.join(", ")}], got ${formatShape(given)}`,
      {
        code: "bad-input",
        fix: "pass data whose fixed dimensions match the model",
      },
    );
  }
  return [...given];
}

/**
 * Refuses `OnnxModel.compile` arguments of the wrong form: shapes that are not a map (null had
 * failed inside as a TypeError), options that are not an object or name no compile option (a
 * backend's name where the options go, a misspelt key: ignored without a word).
 */
export function checkCompileArgs(inputShapes: unknown, options: unknown): void {
  if (typeof inputShapes !== "object" || inputShapes === null || Array.isArray(inputShapes)) {
    throw new KilnError(`compile()'s input shapes are ${shown(inputShapes)}, not an object`, {
      code: "bad-input",
      fix: "pass a map of input names to shapes, e.g. { x: [1, 3, 224, 224] }, or {} for none",
    });
  }
  checkOptions(options, COMPILE_OPTIONS, "compile()");
}

/**
 * Refuses `shapes` (the caller's `inputShapes`) that name no input of the model, or whose values
 * are not lists of non-negative integers: ignored, they compiled the model for shapes the caller
 * did not give (`model.compile({ backend })`, the options where the shapes go, compiled on the
 * default backend). A sequence input's elements are named `input[i]` (`input[]`: none).
 */
export function checkInputShapes(
  inputs: readonly OnnxInputInfo[],
  shapes: Readonly<Record<string, unknown>>,
): void {
  const names = inputs.map((i) => i.name);
  const sequences = new Set(inputs.filter((i) => i.kind === "sequence").map((i) => i.name));
  for (const [key, shape] of Object.entries(shapes)) {
    const element = /^(.*)\[\d*\]$/.exec(key);
    if (!names.includes(key) && !(element && sequences.has(element[1]))) {
      throw new KilnError(`inputShapes names "${key}", which is not an input of the model`, {
        code: "bad-input",
        fix: (COMPILE_OPTIONS as readonly string[]).includes(key)
          ? "pass the compile options second: model.compile(inputShapes, options), with {} " +
            "for no shapes"
          : `name the model's inputs: ${names.map((n) => JSON.stringify(n)).join(", ")}`,
      });
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new KilnError(`inputShapes["${key}"] is not a shape: ${String(shape)}`, {
        code: "bad-input",
        fix: "give each input's shape as a list of non-negative integers, e.g. [1, 3, 224, 224]",
      });
    }
  }
}
