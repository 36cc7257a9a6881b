/**
 * Reference kernels of the recurrent layers (`jit/ops/recurrent.ts`): every step of every
 * direction computed in float64, each gate a direct sum over the input and the state, in ONNX's
 * gate orders (GRU z, r, h; LSTM i, o, f, c) and with its activations' formulas.
 *
 * @module
 */
import { activation, type RecurrentForm, recurrentForm } from "../../jit/ops/recurrent_form.ts";
import type { Kernel, KernelArgs } from "./kernel.ts";
import { read, written } from "./tensor_io.ts";

/** A node's operands as float64 arrays, and its sizes. */
interface Operands {
  readonly form: RecurrentForm;
  readonly seq: number;
  readonly batch: number;
  readonly input: number;
  /** Element (t, b, i) of X, whatever the layout. */
  readonly x: (t: number, b: number, i: number) => number;
  readonly w: ArrayLike<number>;
  readonly r: ArrayLike<number>;
  readonly bias?: ArrayLike<number>;
  /** Direction d's initial hidden (and cell) state of row b, element k. */
  readonly h0: (d: number, b: number, k: number) => number;
  readonly c0: (d: number, b: number, k: number) => number;
  readonly p?: ArrayLike<number>;
}

/** Reads a node's operands. */
function operands(kind: string, { inputs, attrs, ctx }: KernelArgs): Operands {
  const form = recurrentForm(
    kind,
    attrs,
    inputs.length,
    (what, fix) => ctx.fail(what, fix, "bad-attribute"),
  );
  const named: Record<string, ArrayLike<number>> = {};
  form.present.forEach((name, i) => (named[name] = read(inputs[3 + i])));
  const xs = read(inputs[0]), [a, b, input] = inputs[0].shape, batchFirst = form.layout === 1;
  const [seq, batch] = batchFirst ? [b, a] : [a, b], hidden = form.hidden;
  const state = (data?: ArrayLike<number>) => (d: number, row: number, k: number) => {
    if (!data) return 0;
    return data[(batchFirst ? row * form.dirs + d : d * batch + row) * hidden + k];
  };
  return {
    form,
    seq,
    batch,
    input,
    x: (t, row, i) => xs[(batchFirst ? row * seq + t : t * batch + row) * input + i],
    w: read(inputs[1]),
    r: read(inputs[2]),
    bias: named.b,
    h0: state(named.h),
    c0: state(named.c),
    p: named.p,
  };
}

/** Gate `g`'s rows of direction `d`: x·W + the input bias, h·R + the recurrent bias. */
function gateSums(o: Operands, d: number, t: number, row: number, h: Float64Array, g: number) {
  const { form, input } = o, hidden = form.hidden, rows = form.gates * hidden;
  const xw = new Float64Array(hidden), hr = new Float64Array(hidden);
  for (let k = 0; k < hidden; k++) {
    const j = g * hidden + k;
    for (let i = 0; i < input; i++) xw[k] += o.x(t, row, i) * o.w[(d * rows + j) * input + i];
    for (let i = 0; i < hidden; i++) hr[k] += h[i] * o.r[(d * rows + j) * hidden + i];
    if (o.bias) {
      xw[k] += o.bias[d * 2 * rows + j];
      hr[k] += o.bias[d * 2 * rows + rows + j];
    }
  }
  return { xw, hr };
}

/** One step of one batch row: the new hidden and cell states. */
function cellStep(
  o: Operands,
  d: number,
  t: number,
  row: number,
  [h, c]: [Float64Array, Float64Array],
): [Float64Array, Float64Array] {
  const { form } = o, hidden = form.hidden, acts = form.activations[d];
  const clip = (
    v: number,
  ) => (form.clip === undefined ? v : Math.max(-form.clip, Math.min(form.clip, v)));
  const act = (i: number, v: number) => activation(acts[i], clip(v));
  const sums = [...Array(form.gates).keys()].map((g) => gateSums(o, d, t, row, h, g));
  const hNew = new Float64Array(hidden), cNew = new Float64Array(c);
  if (form.kind === "RNN") {
    for (let k = 0; k < hidden; k++) hNew[k] = act(0, sums[0].xw[k] + sums[0].hr[k]);
  } else if (form.kind === "GRU") {
    const [z, r, n] = sums;
    const rg = r.xw.map((v, k) => act(0, v + r.hr[k]));
    // Without linear_before_reset the candidate's recurrence reads r ⊙ h.
    const rh = form.linearBeforeReset
      ? undefined
      : gateSums(o, d, t, row, h.map((v, k) => v * rg[k]), 2);
    for (let k = 0; k < hidden; k++) {
      const zk = act(0, z.xw[k] + z.hr[k]);
      const cand = form.linearBeforeReset ? n.xw[k] + rg[k] * n.hr[k] : n.xw[k] + rh!.hr[k];
      hNew[k] = (1 - zk) * act(1, cand) + zk * h[k];
    }
  } else {
    const [ig, og, fg, cg] = sums,
      p = o.p,
      peep = (i: number, k: number) => p ? p[(d * 3 + i) * hidden + k] : 0;
    for (let k = 0; k < hidden; k++) {
      const i = act(0, ig.xw[k] + ig.hr[k] + peep(0, k) * c[k]);
      const f = form.inputForget ? 1 - i : act(0, fg.xw[k] + fg.hr[k] + peep(2, k) * c[k]);
      cNew[k] = f * c[k] + i * act(1, cg.xw[k] + cg.hr[k]);
      const out = act(0, og.xw[k] + og.hr[k] + peep(1, k) * cNew[k]);
      hNew[k] = out * activation(acts[2], cNew[k]);
    }
  }
  return [hNew, cNew];
}

/** Every direction and step: Y, Y_h and Y_c in the node's layout. */
function run(kind: string, args: KernelArgs) {
  const o = operands(kind, args), { form, seq, batch } = o, { dirs, hidden } = form;
  const y = new Float64Array(seq * dirs * batch * hidden);
  const yh = new Float64Array(dirs * batch * hidden), yc = new Float64Array(yh.length);
  const first = form.layout === 1;
  const yAt = (t: number, d: number, b: number) =>
    (first ? ((b * seq + t) * dirs + d) : ((t * dirs + d) * batch + b)) * hidden;
  const stateAt = (d: number, b: number) => (first ? b * dirs + d : d * batch + b) * hidden;
  for (let d = 0; d < dirs; d++) {
    const reverse = form.direction === "reverse" || d === 1;
    for (let b = 0; b < batch; b++) {
      const length = form.sequenceLens?.[b] ?? seq;
      const init = (f: typeof o.h0) => Float64Array.from({ length: hidden }, (_, k) => f(d, b, k));
      let state: [Float64Array, Float64Array] = [init(o.h0), init(o.c0)];
      for (let s = 0; s < seq; s++) {
        const t = reverse ? seq - 1 - s : s;
        // A row past its length keeps its state and outputs 0 there.
        if (t >= length) continue;
        state = cellStep(o, d, t, b, state);
        y.set(state[0], yAt(t, d, b));
      }
      yh.set(state[0], stateAt(d, b));
      yc.set(state[1], stateAt(d, b));
    }
  }
  const outs = [y, yh, ...(kind === "LSTM" ? [yc] : [])];
  return outs.map((data, i) => written(args.outputs[i].dtype, data));
}

/** Kernels of the recurrent layers, by op name. */
export const recurrentKernels: Record<string, Kernel> = {
  RNN: (args) => run("RNN", args),
  GRU: (args) => run("GRU", args),
  LSTM: (args) => run("LSTM", args),
};
