/**
 * RNN, GRU and LSTM unrolled over the sequence length the model is compiled for. The input
 * projection of every step is one MatMul up front; each step then adds its recurrent MatMul and
 * applies the gates. Directions (forward, reverse, bidirectional), `layout`, `clip`, the
 * activation lists with their alpha/beta, GRU's `linear_before_reset`, LSTM's peepholes and
 * `input_forget` follow the ONNX spec. `sequence_lens` (known at compile time) masks each batch
 * row past its length: its state stops changing and its outputs there are 0.
 *
 * @module
 */
import type { DType } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import {
  attribute,
  attrs,
  constant,
  constInts,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  typeOf,
} from "../import/node_context.ts";

type Activation = (x: Known) => Known;

/** The recurrent cell kinds: gate count and default activations. */
const CELLS = {
  RNN: { gates: 1, defaults: ["Tanh"] },
  GRU: { gates: 3, defaults: ["Sigmoid", "Tanh"] },
  LSTM: { gates: 4, defaults: ["Sigmoid", "Tanh", "Tanh"] },
} as const;

/** Activation `name` (with its alpha/beta, consumed from the lists as ONNX orders them). */
function activation(
  c: NodeContext,
  op: OpFn,
  name: string,
  params: { alphas: number[]; betas: number[] },
  dtype: DType,
): Activation {
  const k = (v: number) => scalar(v, dtype);
  const take = (list: number[], fallback: number) => list.length ? list.shift()! : fallback;
  switch (name.toLowerCase()) {
    case "sigmoid":
      return (x) => op("Sigmoid", [x]);
    case "tanh":
      return (x) => op("Tanh", [x]);
    case "relu":
      return (x) => op("Relu", [x]);
    case "softsign":
      return (x) => op("Div", [x, op("Add", [op("Abs", [x]), k(1)])]);
    case "softplus":
      return (x) => op("Log", [op("Add", [op("Exp", [x]), k(1)])]);
    case "leakyrelu": {
      const alpha = take(params.alphas, 0.01);
      return (x) => op("LeakyRelu", [x], { alpha });
    }
    case "thresholdedrelu": {
      const alpha = take(params.alphas, 1);
      return (x) => op("Where", [op("Greater", [x, k(alpha)]), x, k(0)]);
    }
    case "elu": {
      const alpha = take(params.alphas, 1);
      return (x) =>
        op("Where", [
          op("Less", [x, k(0)]),
          op("Mul", [k(alpha), op("Sub", [op("Exp", [x]), k(1)])]),
          x,
        ]);
    }
    case "hardsigmoid": {
      const alpha = take(params.alphas, 0.2), beta = take(params.betas, 0.5);
      return (x) => op("HardSigmoid", [x], { alpha, beta });
    }
    case "affine": {
      const alpha = take(params.alphas, 1), beta = take(params.betas, 0);
      return (x) => op("Add", [op("Mul", [x, k(alpha)]), k(beta)]);
    }
    case "scaledtanh": {
      const alpha = take(params.alphas, 1), beta = take(params.betas, 1);
      return (x) => op("Mul", [op("Tanh", [op("Mul", [x, k(beta)])]), k(alpha)]);
    }
    default:
      throw new KilnError(`${c.label}: activation "${name}"`, {
        code: "unsupported",
        fix: "use Sigmoid, Tanh, Relu, LeakyRelu, HardSigmoid, Affine, ScaledTanh, Elu, " +
          "Softsign, Softplus or ThresholdedRelu",
      });
  }
}

/** Converts an RNN, GRU or LSTM node. */
function recurrent(kind: keyof typeof CELLS) {
  return (c: NodeContext): Known[] => {
    const op = opOf(c);
    const a = attrs(c);
    const cell = CELLS[kind];
    const G = cell.gates;
    const direction = a.string("direction", "forward")!;
    const dirs = direction === "bidirectional" ? 2 : 1;
    const layout = a.int("layout", 0)!;
    const clip = a.float("clip");
    const linearBeforeReset = a.int("linear_before_reset", 0) === 1;
    const inputForget = a.int("input_forget", 0) === 1;
    let x = c.required(0);
    if (layout === 1) x = op("Transpose", [x], { perm: [1, 0, 2] });
    const [seq, batch] = typeOf(x).shape;
    const dt = typeOf(x).dtype;
    const w = c.required(1), r = c.required(2);
    const hidden = a.int("hidden_size") ?? typeOf(r).shape[2];
    const bias = c.input(3);
    const lens = constInts(c, 4, "sequence_lens");
    if (lens && (lens.length !== batch || lens.some((l) => !(l >= 0 && l <= seq)))) {
      // Clamping would run a sequence the caller did not describe.
      throw new KilnError(
        `${c.label}: sequence_lens [${lens}] must give each of the ${batch} batch rows a length in [0, ${seq}]`,
        { code: "out-of-range", fix: `pass ${batch} lengths between 0 and seq_length (${seq})` },
      );
    }
    const h0 = c.input(5);
    const c0 = kind === "LSTM" ? c.input(6) : undefined;
    const peep = kind === "LSTM" ? c.input(7) : undefined;
    const listed = attribute(c, "activations")?.strings?.map((x) => new TextDecoder().decode(x));
    const params = {
      alphas: [...(a.floats("activation_alpha") ?? [])],
      betas: [...(a.floats("activation_beta") ?? [])],
    };
    const perDir = cell.defaults.length;
    const acts = [...Array(dirs)].map((_, d) =>
      [...Array(perDir)].map((_, i) =>
        activation(c, op, listed?.[d * perDir + i] ?? cell.defaults[i], params, dt)
      )
    );
    const sel = (t: Known, d: number) =>
      op("Squeeze", [op("Slice", [t], { starts: [d], ends: [d + 1], axes: [0] })], { axes: [0] });
    const part = (t: Known, i: number, axis: number) =>
      op("Slice", [t], { starts: [i * hidden], ends: [(i + 1) * hidden], axes: [axis] });
    const clipped = (t: Known) =>
      clip === undefined ? t : op("Clip", [t], { min: -clip, max: clip });
    const zeros = scalar(0, dt);
    const state = (init: Known | undefined, d: number) =>
      init ? sel(init, d) : op("Expand", [zeros], { shape: [batch, hidden] });
    // Per step, which batch rows are still inside their sequence ([batch, 1] masks).
    const live = (t: number): Known | undefined => {
      if (!lens || lens.every((l) => l >= seq)) return undefined;
      return constant(lens.map((l) => +(t < l)), [batch, 1], "bool");
    };
    const ys: Known[][] = [], hs: Known[] = [], cs: Known[] = [];
    for (let d = 0; d < dirs; d++) {
      const reverse = direction === "reverse" || d === 1;
      const wd = sel(w, d), rd = sel(r, d);
      // Input projections of every step at once: [seq, batch, G·hidden].
      let xw = op("MatMul", [x, op("Transpose", [wd], { perm: [1, 0] })]);
      let rb: Known | undefined;
      if (bias) {
        const bd = sel(bias, d);
        const wb = op("Slice", [bd], { starts: [0], ends: [G * hidden], axes: [0] });
        rb = op("Slice", [bd], { starts: [G * hidden], ends: [2 * G * hidden], axes: [0] });
        xw = op("Add", [xw, wb]);
      }
      const rt = op("Transpose", [rd], { perm: [1, 0] });
      const pd = peep ? sel(peep, d) : undefined;
      let h = state(h0, d), cstate = kind === "LSTM" ? state(c0, d) : undefined;
      const out: Known[] = Array(seq);
      for (let s = 0; s < seq; s++) {
        const t = reverse ? seq - 1 - s : s;
        const xt = sel(xw, t);
        let hNew: Known, cNew: Known | undefined;
        const step: StepInputs = {
          op,
          dt,
          xt,
          h,
          cstate,
          rt,
          rb,
          pd,
          acts: acts[d],
          part,
          clipped,
          linearBeforeReset,
          inputForget,
        };
        if (kind === "GRU") hNew = gruStep(step);
        else {
          let gates = op("Add", [xt, op("MatMul", [h, rt])]);
          if (rb) gates = op("Add", [gates, rb]);
          if (kind === "RNN") hNew = acts[d][0](clipped(gates));
          else [hNew, cNew] = lstmStep(step, gates);
        }
        const mask = live(t);
        if (mask) {
          hNew = op("Where", [mask, hNew, h]);
          if (cNew) cNew = op("Where", [mask, cNew, cstate!]);
          out[t] = op("Where", [mask, hNew, zeros]);
        } else out[t] = hNew;
        h = hNew;
        cstate = cNew ?? cstate;
      }
      ys.push(out);
      hs.push(h);
      if (cstate) cs.push(cstate);
    }
    const [y, yh, yc] = stackOutputs(op, { ys, hs, cs, seq, layout });
    return kind === "LSTM" ? [y, yh, yc!] : [y, yh];
  };
}

/** What one step of a cell reads: its input projection, the state, the recurrent weights. */
interface StepInputs {
  readonly op: OpFn;
  readonly dt: DType;
  /** This step's input projection (with the input bias): [batch, gates · hidden]. */
  readonly xt: Known;
  /** The hidden state, and the LSTM's cell state. */
  readonly h: Known;
  readonly cstate?: Known;
  /** The recurrence's weights transposed, its bias and the LSTM's peepholes. */
  readonly rt: Known;
  readonly rb?: Known;
  readonly pd?: Known;
  /** The direction's activations f, g and h. */
  readonly acts: readonly Activation[];
  /** Gate `i`'s slice of `t` along `axis`. */
  readonly part: (t: Known, i: number, axis: number) => Known;
  /** `t` clipped where the node clips. */
  readonly clipped: (t: Known) => Known;
  readonly linearBeforeReset: boolean;
  readonly inputForget: boolean;
}

/** A GRU step's new hidden state: gates z, r, h; h's recurrent bias apart for linear_before_reset. */
function gruStep(s: StepInputs): Known {
  const { op, dt, xt, h, rt, rb, part, clipped } = s;
  const [f, g] = s.acts;
  const rh = op("MatMul", [h, rt]);
  const rbias = (i: number) => rb ? part(rb, i, 0) : undefined;
  const gate = (i: number, act: Activation) => {
    let v = op("Add", [part(xt, i, 1), part(rh, i, 1)]);
    if (rbias(i)) v = op("Add", [v, rbias(i)!]);
    return act(clipped(v));
  };
  const z = gate(0, f), rg = gate(1, f);
  let cand: Known;
  if (s.linearBeforeReset) {
    let lin = part(rh, 2, 1);
    if (rbias(2)) lin = op("Add", [lin, rbias(2)!]);
    cand = op("Add", [part(xt, 2, 1), op("Mul", [rg, lin])]);
  } else {
    const rh2 = op("MatMul", [op("Mul", [rg, h]), part(rt, 2, 1)]);
    cand = op("Add", [part(xt, 2, 1), rh2]);
    if (rbias(2)) cand = op("Add", [cand, rbias(2)!]);
  }
  const hc = g(clipped(cand));
  return op("Add", [
    op("Mul", [op("Sub", [scalar(1, dt), z]), hc]),
    op("Mul", [z, h]),
  ]);
}

/** An LSTM step's new hidden and cell states from its `gates` (i, o, f, c; peepholes Pi, Po, Pf). */
function lstmStep(s: StepInputs, gates: Known): [Known, Known] {
  const { op, dt, cstate, pd, part, clipped } = s;
  const [f, g, hAct] = s.acts;
  const pre = (i: number, peepAt?: number, on?: Known) => {
    let v = part(gates, i, 1);
    if (pd && peepAt !== undefined) {
      v = op("Add", [v, op("Mul", [part(pd, peepAt, 0), on!])]);
    }
    return clipped(v);
  };
  const ig = f(pre(0, 0, cstate));
  const fg = s.inputForget ? op("Sub", [scalar(1, dt), ig]) : f(pre(2, 2, cstate));
  const cc = g(pre(3));
  const cNew = op("Add", [op("Mul", [fg, cstate!]), op("Mul", [ig, cc])]);
  const og = f(pre(1, 1, cNew));
  return [op("Mul", [og, hAct(cNew)]), cNew];
}

/**
 * Y: [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]); Y_h, Y_c: [dirs, batch,
 * hidden] (layout 1: [batch, dirs, hidden]).
 */
function stackOutputs(
  op: OpFn,
  o: { ys: Known[][]; hs: Known[]; cs: Known[]; seq: number; layout: number },
): [Known, Known, Known | undefined] {
  const steps = [...Array(o.seq).keys()].map((t) =>
    op("Concat", o.ys.map((out) => op("Unsqueeze", [out[t]], { axes: [0, 1] })), { axis: 1 })
  );
  let y = o.seq === 1 ? steps[0] : op("Concat", steps, { axis: 0 });
  const stack = (xs: Known[]) =>
    op("Concat", xs.map((k) => op("Unsqueeze", [k], { axes: [0] })), { axis: 0 });
  let yh = stack(o.hs), yc = o.cs.length ? stack(o.cs) : undefined;
  if (o.layout === 1) {
    y = op("Transpose", [y], { perm: [2, 0, 1, 3] });
    yh = op("Transpose", [yh], { perm: [1, 0, 2] });
    if (yc) yc = op("Transpose", [yc], { perm: [1, 0, 2] });
  }
  return [y, yh, yc];
}

/** Converters by ONNX op type. */
export const RNN_CONVERTERS: Record<string, (c: NodeContext) => Known[]> = {
  RNN: recurrent("RNN"),
  GRU: recurrent("GRU"),
  LSTM: recurrent("LSTM"),
};
