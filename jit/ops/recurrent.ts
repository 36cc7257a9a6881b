/**
 * The recurrent layers `RNN`, `GRU` and `LSTM` as kiln ops, with ONNX's semantics: inputs X
 * [seq, batch, input] ([batch, seq, input] where `layout` is 1), W, R and, as `present` lists
 * them, B, initial_h, (LSTM) initial_c and P; outputs Y [seq, dirs, batch, hidden] and Y_h
 * [dirs, batch, hidden] (LSTM: and Y_c), batch first where `layout` is 1. `direction`
 * (forward, reverse, bidirectional), `clip`, `activations` (comma-separated, ONNX's names) with
 * `activation_alpha` and `activation_beta`, GRU's `linear_before_reset`, LSTM's peepholes and
 * `input_forget` follow the ONNX spec; `sequence_lens` (lengths known when the graph is built)
 * masks each batch row past its length: its state stops changing and its outputs there are 0.
 *
 * They decompose unrolled over the sequence length: the input projection of every step is one
 * MatMul up front; each step then adds its recurrent MatMul and applies the gates.
 *
 * @module
 */
import type { DType } from "../ir/dtype.ts";
import { formatShape } from "../ir/shape.ts";
import { activate, type RecurrentForm, recurrentForm } from "./recurrent_form.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** One direction's operands, as the steps read them. */
interface Direction {
  /** Every step's input projection, with the input bias: [seq, batch, gates · hidden]. */
  readonly xw: EmitRef;
  /** The recurrence's weights transposed [hidden, gates · hidden], its bias, the peepholes. */
  readonly rt: EmitRef;
  readonly rb?: EmitRef;
  readonly pd?: EmitRef;
  /** The direction's activations f, g (and h). */
  readonly acts: readonly ((x: EmitRef) => EmitRef)[];
}

/** The decomposition's view of one node: its form, the emitter and shorthands. */
interface Unroll {
  readonly e: Emitter;
  readonly form: RecurrentForm;
  readonly dt: DType;
  /** Gate `i`'s slice of `t` along `axis`. */
  readonly part: (t: EmitRef, i: number, axis: number) => EmitRef;
  /** `t` clipped where the node clips. */
  readonly clipped: (t: EmitRef) => EmitRef;
}

/** The outputs' types, the inputs checked against one another. */
function recurrentTypes(ctx: InferContext, kind: string): ValueType[] {
  const form = recurrentForm(
    kind,
    ctx.attrs,
    ctx.inputs.length,
    (what, fix) => ctx.fail(what, fix, "bad-attribute"),
  );
  const dtype = ctx.requireFloat(0);
  const [x, w, r] = [0, 1, 2].map((i) => ctx.input(i).shape);
  const [seq, batch] = form.layout === 1 ? [x[1], x[0]] : [x[0], x[1]];
  const rows = form.gates * form.hidden;
  if (
    x.length !== 3 || w.join() !== `${form.dirs},${rows},${x[2]}` ||
    r.join() !== `${form.dirs},${rows},${form.hidden}`
  ) {
    ctx.fail(
      `X ${formatShape(x)}, W ${formatShape(w)}, R ${
        formatShape(r)
      } for ${form.dirs} direction(s) of ${form.hidden}`,
      `give W [dirs, ${form.gates}·hidden, input] and R [dirs, ${form.gates}·hidden, hidden]`,
      "shape-mismatch",
    );
  }
  const lens = form.sequenceLens;
  if (lens && (lens.length !== batch || lens.some((l) => !(l >= 0 && l <= seq)))) {
    ctx.fail(
      `sequence_lens [${lens}] for ${batch} batch rows of ${seq} steps`,
      `pass ${batch} lengths between 0 and seq_length (${seq})`,
      "out-of-range",
    );
  }
  const y = form.layout === 1
    ? [batch, seq, form.dirs, form.hidden]
    : [seq, form.dirs, batch, form.hidden];
  const state = form.layout === 1
    ? [batch, form.dirs, form.hidden]
    : [form.dirs, batch, form.hidden];
  return [y, state, ...(kind === "LSTM" ? [state] : [])].map((shape) => ({ shape, dtype }));
}

/** Direction `d`'s slice of `t` (its first axis), squeezed. */
function direction(e: Emitter, t: EmitRef, d: number): EmitRef {
  return e.op("Squeeze", [e.op("Slice", [t], { starts: [d], ends: [d + 1], axes: [0] })], {
    axes: [0],
  });
}

/** Direction `d`'s projections and weights. */
function directionOf(u: Unroll, x: EmitRef, ins: Record<string, EmitRef>, d: number): Direction {
  const { e, form } = u, rows = form.gates * form.hidden;
  let xw = e.op("MatMul", [x, e.op("Transpose", [direction(e, ins.w, d)], { perm: [1, 0] })]);
  let rb: EmitRef | undefined;
  if (ins.b) {
    const bd = direction(e, ins.b, d);
    rb = e.op("Slice", [bd], { starts: [rows], ends: [2 * rows], axes: [0] });
    xw = e.op("Add", [xw, e.op("Slice", [bd], { starts: [0], ends: [rows], axes: [0] })]);
  }
  const rt = e.op("Transpose", [direction(e, ins.r, d)], { perm: [1, 0] });
  const pd = ins.p ? direction(e, ins.p, d) : undefined;
  const acts = form.activations[d].map((a) => (t: EmitRef) => activate(e, a, t));
  return { xw, rt, rb, pd, acts };
}

/** A GRU step's new hidden state: gates z, r, h; h's recurrent bias apart for linear_before_reset. */
function gruStep(u: Unroll, dir: Direction, xt: EmitRef, h: EmitRef): EmitRef {
  const { e, part, clipped } = u, [f, g] = dir.acts, rb = dir.rb;
  const rh = e.op("MatMul", [h, dir.rt]);
  const gate = (i: number) => {
    const v = e.op("Add", [part(xt, i, 1), part(rh, i, 1)]);
    return f(clipped(rb ? e.op("Add", [v, part(rb, i, 0)]) : v));
  };
  const z = gate(0), rg = gate(1);
  let cand: EmitRef;
  if (u.form.linearBeforeReset) {
    const lin = rb ? e.op("Add", [part(rh, 2, 1), part(rb, 2, 0)]) : part(rh, 2, 1);
    cand = e.op("Add", [part(xt, 2, 1), e.op("Mul", [rg, lin])]);
  } else {
    const rh2 = e.op("MatMul", [e.op("Mul", [rg, h]), part(dir.rt, 2, 1)]);
    cand = e.op("Add", [part(xt, 2, 1), rh2]);
    if (rb) cand = e.op("Add", [cand, part(rb, 2, 0)]);
  }
  const hc = g(clipped(cand));
  return e.op("Add", [e.op("Mul", [e.op("Sub", [e.scalar(1, u.dt), z]), hc]), e.op("Mul", [z, h])]);
}

/** An LSTM step's new hidden and cell states (gates i, o, f, c; peepholes Pi, Po, Pf). */
function lstmStep(u: Unroll, dir: Direction, gates: EmitRef, c: EmitRef): [EmitRef, EmitRef] {
  const { e, part, clipped } = u, [f, g, hAct] = dir.acts, pd = dir.pd;
  const pre = (i: number, peepAt?: number, on?: EmitRef) => {
    const v = part(gates, i, 1);
    const peeped = pd && peepAt !== undefined
      ? e.op("Add", [v, e.op("Mul", [part(pd, peepAt, 0), on!])])
      : v;
    return clipped(peeped);
  };
  const ig = f(pre(0, 0, c));
  const fg = u.form.inputForget ? e.op("Sub", [e.scalar(1, u.dt), ig]) : f(pre(2, 2, c));
  const cNew = e.op("Add", [e.op("Mul", [fg, c]), e.op("Mul", [ig, g(pre(3))])]);
  const og = f(pre(1, 1, cNew));
  return [e.op("Mul", [og, hAct(cNew)]), cNew];
}

/** The unrolled steps of direction `d`: its outputs per step, its last states. */
function unrolled(u: Unroll, dir: Direction, init: { h: EmitRef; c?: EmitRef }, d: number) {
  const { e, form } = u, seq = e.typeOf(dir.xw).shape[0], batch = e.typeOf(init.h).shape[0];
  const lens = form.sequenceLens, zeros = e.scalar(0, u.dt);
  const reverse = form.direction === "reverse" || d === 1;
  let h = init.h, c = init.c;
  const out: EmitRef[] = Array(seq);
  for (let s = 0; s < seq; s++) {
    const t = reverse ? seq - 1 - s : s;
    const xt = direction(e, dir.xw, t);
    let hNew: EmitRef, cNew: EmitRef | undefined;
    if (form.kind === "GRU") hNew = gruStep(u, dir, xt, h);
    else {
      let gates = e.op("Add", [xt, e.op("MatMul", [h, dir.rt])]);
      if (dir.rb) gates = e.op("Add", [gates, dir.rb]);
      if (form.kind === "RNN") hNew = dir.acts[0](u.clipped(gates));
      else [hNew, cNew] = lstmStep(u, dir, gates, c!);
    }
    // Batch rows past their length keep their state and output 0.
    if (lens && lens.some((l) => l < seq)) {
      const data = Uint8Array.from(lens, (l) => +(t < l));
      const mask = e.op("Constant", [], { value: { data, shape: [batch, 1], dtype: "bool" } });
      hNew = e.op("Where", [mask, hNew, h]);
      if (cNew) cNew = e.op("Where", [mask, cNew, c!]);
      out[t] = e.op("Where", [mask, hNew, zeros]);
    } else out[t] = hNew;
    h = hNew;
    c = cNew ?? c;
  }
  return { out, h, c };
}

/** The decomposition of an RNN, GRU or LSTM node. */
function recurrent(e: Emitter, ins: readonly EmitRef[], attrs: Attrs, kind: string): EmitRef[] {
  const form = recurrentForm(kind, attrs, ins.length, () => {
    throw new Error("checked by inference");
  });
  const named: Record<string, EmitRef> = { w: ins[1], r: ins[2] };
  // Batch first (layout 1): X and the initial states as [seq or dirs, batch, ...].
  const first = (t: EmitRef) => form.layout === 1 ? e.op("Transpose", [t], { perm: [1, 0, 2] }) : t;
  form.present.forEach((name, i) => {
    named[name] = name === "h" || name === "c" ? first(ins[3 + i]) : ins[3 + i];
  });
  const x = first(ins[0]);
  const dt = e.typeOf(x).dtype, [, batch] = e.typeOf(x).shape, hidden = form.hidden;
  const u: Unroll = {
    e,
    form,
    dt,
    part: (t, i, axis) =>
      e.op("Slice", [t], { starts: [i * hidden], ends: [(i + 1) * hidden], axes: [axis] }),
    clipped: (t) =>
      form.clip === undefined ? t : e.op("Clip", [t], { min: -form.clip, max: form.clip }),
  };
  const state = (init: EmitRef | undefined, d: number) =>
    init ? direction(e, init, d) : e.op("Expand", [e.scalar(0, dt)], { shape: [batch, hidden] });
  const runs = [...Array(form.dirs).keys()].map((d) =>
    unrolled(u, directionOf(u, x, named, d), {
      h: state(named.h, d),
      c: kind === "LSTM" ? state(named.c, d) : undefined,
    }, d)
  );
  const seq = runs[0].out.length;
  const steps = [...Array(seq).keys()].map((t) =>
    e.op("Concat", runs.map((r) => e.op("Unsqueeze", [r.out[t]], { axes: [0, 1] })), { axis: 1 })
  );
  const y = seq === 1 ? steps[0] : e.op("Concat", steps, { axis: 0 });
  const stack = (xs: EmitRef[]) =>
    e.op("Concat", xs.map((k) => e.op("Unsqueeze", [k], { axes: [0] })), { axis: 0 });
  const outs = [
    y,
    stack(runs.map((r) => r.h)),
    ...(kind === "LSTM" ? [stack(runs.map((r) => r.c!))] : []),
  ];
  if (form.layout !== 1) return outs;
  return outs.map((o, i) => e.op("Transpose", [o], { perm: i === 0 ? [2, 0, 1, 3] : [1, 0, 2] }));
}

const recurrentOps: OpDef[] = ["RNN", "GRU", "LSTM"].map((kind) => ({
  name: kind,
  category: "composite",
  arity: [3, kind === "LSTM" ? 7 : 5],
  primitive: false,
  infer: (ctx) => recurrentTypes(ctx, kind),
  decompose: (e, ins, attrs) => recurrent(e, ins, attrs, kind),
}));

defineOps(recurrentOps);
