/**
 * A recurrent node's form, read once from its attributes for inference, the decomposition and
 * the reference kernel alike (`recurrent.ts`): gates, directions, activations with their alpha
 * and beta, and which optional inputs are there. Each activation's value is defined twice here:
 * as graph ops (`activate`) and as a number (`activation`), ONNX's formulas both.
 *
 * @module
 */
import type { Attrs, EmitRef, Emitter } from "./registry.ts";

/** An activation of ONNX's list, its alpha and beta resolved. */
export interface Activation {
  /** ONNX's name, lower case. */
  readonly name: string;
  readonly alpha: number;
  readonly beta: number;
}

/** What a recurrent node computes, from its attributes. */
export interface RecurrentForm {
  readonly kind: string;
  /** Gates a cell has: RNN 1, GRU 3, LSTM 4. */
  readonly gates: number;
  readonly direction: string;
  readonly dirs: number;
  readonly layout: number;
  readonly hidden: number;
  readonly clip?: number;
  readonly linearBeforeReset: boolean;
  readonly inputForget: boolean;
  readonly sequenceLens?: readonly number[];
  /** The optional inputs there, in order: `b`, `h`, `c` (LSTM), `p` (LSTM). */
  readonly present: readonly string[];
  /** Each direction's activations f, g (and h). */
  readonly activations: readonly (readonly Activation[])[];
}

/** The cells: gate count, default activations, the optional inputs they take. */
const CELLS: Record<string, { gates: number; defaults: string[]; optional: string[] }> = {
  RNN: { gates: 1, defaults: ["tanh"], optional: ["b", "h"] },
  GRU: { gates: 3, defaults: ["sigmoid", "tanh"], optional: ["b", "h"] },
  LSTM: { gates: 4, defaults: ["sigmoid", "tanh", "tanh"], optional: ["b", "h", "c", "p"] },
};

/** Each activation's alpha and beta defaults (undefined: it takes none). */
const PARAMETERS: Record<string, [number?, number?]> = {
  sigmoid: [],
  tanh: [],
  relu: [],
  softsign: [],
  softplus: [],
  leakyrelu: [0.01],
  thresholdedrelu: [1],
  elu: [1],
  hardsigmoid: [0.2, 0.5],
  affine: [1, 0],
  scaledtanh: [1, 1],
};

/** Reads a node's form; `fail` refuses (what is wrong, how to fix it). */
export function recurrentForm(
  kind: string,
  a: Attrs,
  inputs: number,
  fail: (what: string, fix: string) => never,
): RecurrentForm {
  const cell = CELLS[kind], direction = (a.direction as string | undefined) ?? "forward";
  if (!["forward", "reverse", "bidirectional"].includes(direction)) {
    fail(`direction "${direction}"`, "use forward, reverse or bidirectional");
  }
  const dirs = direction === "bidirectional" ? 2 : 1;
  const present = ((a.present as string | undefined) ?? "").split(",").filter(Boolean);
  if (present.some((p) => !cell.optional.includes(p)) || present.length !== inputs - 3) {
    fail(`optional inputs "${present}" for ${inputs} inputs`, "name each input after R once");
  }
  const listed = ((a.activations as string | undefined) ?? "").split(",").filter(Boolean);
  const alphas = [...((a.activation_alpha as readonly number[] | undefined) ?? [])];
  const betas = [...((a.activation_beta as readonly number[] | undefined) ?? [])];
  const perDir = cell.defaults.length;
  const activations = [...Array(dirs).keys()].map((d) =>
    cell.defaults.map((fallback, i) => {
      const name = (listed[d * perDir + i] ?? fallback).toLowerCase();
      const defaults = PARAMETERS[name];
      if (!defaults) {
        fail(
          `activation "${name}"`,
          "use Sigmoid, Tanh, Relu, LeakyRelu, HardSigmoid, Affine, ScaledTanh, Elu, Softsign, Softplus or ThresholdedRelu",
        );
      }
      const alpha = defaults[0] === undefined ? 0 : alphas.length ? alphas.shift()! : defaults[0];
      const beta = defaults[1] === undefined ? 0 : betas.length ? betas.shift()! : defaults[1];
      return { name, alpha, beta };
    })
  );
  return {
    kind,
    gates: cell.gates,
    direction,
    dirs,
    layout: (a.layout as number | undefined) ?? 0,
    hidden: a.hidden_size as number,
    clip: a.clip as number | undefined,
    linearBeforeReset: a.linear_before_reset === 1,
    inputForget: a.input_forget === 1,
    sequenceLens: a.sequence_lens as readonly number[] | undefined,
    present,
    activations,
  };
}

/** Activation `a` of `x`, as graph ops. */
export function activate(e: Emitter, a: Activation, x: EmitRef): EmitRef {
  const k = (v: number) => e.scalar(v, e.typeOf(x).dtype);
  switch (a.name) {
    case "sigmoid":
      return e.op("Sigmoid", [x]);
    case "tanh":
      return e.op("Tanh", [x]);
    case "relu":
      return e.op("Relu", [x]);
    case "softsign":
      return e.op("Div", [x, e.op("Add", [e.op("Abs", [x]), k(1)])]);
    case "softplus":
      return e.op("Log", [e.op("Add", [e.op("Exp", [x]), k(1)])]);
    case "leakyrelu":
      return e.op("LeakyRelu", [x], { alpha: a.alpha });
    case "thresholdedrelu":
      return e.op("Where", [e.op("Greater", [x, k(a.alpha)]), x, k(0)]);
    case "elu":
      return e.op("Where", [
        e.op("Less", [x, k(0)]),
        e.op("Mul", [k(a.alpha), e.op("Sub", [e.op("Exp", [x]), k(1)])]),
        x,
      ]);
    case "hardsigmoid":
      return e.op("HardSigmoid", [x], { alpha: a.alpha, beta: a.beta });
    case "affine":
      return e.op("Add", [e.op("Mul", [x, k(a.alpha)]), k(a.beta)]);
    default: // scaledtanh
      return e.op("Mul", [e.op("Tanh", [e.op("Mul", [x, k(a.beta)])]), k(a.alpha)]);
  }
}

/** Activation `a` of the number `x`. */
export function activation(a: Activation, x: number): number {
  switch (a.name) {
    case "sigmoid":
      return 1 / (1 + Math.exp(-x));
    case "tanh":
      return Math.tanh(x);
    case "relu":
      return Math.max(0, x);
    case "softsign":
      return x / (1 + Math.abs(x));
    case "softplus":
      return Math.log(Math.exp(x) + 1);
    case "leakyrelu":
      return x < 0 ? a.alpha * x : x;
    case "thresholdedrelu":
      return x > a.alpha ? x : 0;
    case "elu":
      return x < 0 ? a.alpha * (Math.exp(x) - 1) : x;
    case "hardsigmoid":
      return Math.max(0, Math.min(1, a.alpha * x + a.beta));
    case "affine":
      return a.alpha * x + a.beta;
    default: // scaledtanh
      return a.alpha * Math.tanh(a.beta * x);
  }
}
