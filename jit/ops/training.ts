/**
 * The optimizers of ONNX's training domain as kiln ops, one updated tensor each: `Adagrad`,
 * `Momentum` (standard or Nesterov) and `Adam` take the learning rate R and step count T (run-time
 * scalars), the tensor X, its gradient G and the optimizer's state (Adagrad's H, Momentum's V,
 * Adam's V and H), and give X and the state after one step, each formula as ONNX specifies it.
 * They decompose into elementwise arithmetic, so they fuse and run on every backend.
 *
 * @module
 */
import { FLOATS, INTEGERS } from "./elementwise.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** Momentum's modes (ONNX gives it no default). */
export const MOMENTUM_MODES = ["standard", "nesterov"] as const;

/** R and T scalars, X and `states` tensors of X's float type and shape: X's type, once a tensor. */
function updateTypes(ctx: InferContext, states: number): ValueType[] {
  ctx.requireDType(0, FLOATS);
  ctx.requireDType(1, INTEGERS);
  const x = ctx.input(2), dtype = ctx.requireDType(2, ["f32", "f64"]);
  for (const i of [0, 1]) {
    if (ctx.input(i).shape.some((d) => d !== 1)) {
      ctx.fail(
        `${i ? "T" : "R"} of shape [${ctx.input(i).shape}]`,
        "give a scalar",
        "shape-mismatch",
      );
    }
  }
  for (let i = 3; i < 4 + states; i++) {
    const t = ctx.input(i);
    if (t.dtype !== dtype || t.shape.join() !== x.shape.join()) {
      ctx.fail(
        `input ${i} ${t.dtype}[${t.shape}] beside X ${dtype}[${x.shape}]`,
        "give the gradient and the state in X's type and shape",
        "shape-mismatch",
      );
    }
  }
  return Array.from({ length: 1 + states }, () => ({ shape: x.shape, dtype }));
}

/** R and T in X's float type, and whether T is past the first step. */
function step(e: Emitter, [r, t, x]: readonly EmitRef[]) {
  const d = e.typeOf(x).dtype;
  const tf = e.op("Cast", [t], { to: d });
  const rate = e.typeOf(r).dtype === d ? r : e.op("Cast", [r], { to: d });
  return { d, tf, rate, later: e.op("Greater", [tf, e.scalar(0, d)]) };
}

/** `norm_coefficient · X + G`, the regularized gradient. */
function regularized(e: Emitter, x: EmitRef, g: EmitRef, norm: number): EmitRef {
  return e.op("Add", [e.op("Mul", [x, e.scalar(norm, e.typeOf(x).dtype)]), g]);
}

/** √h + ε, the denominators of Adagrad's and Adam's steps. */
function denominator(e: Emitter, h: EmitRef, eps: number): EmitRef {
  return e.op("Add", [e.op("Sqrt", [h]), e.scalar(eps, e.typeOf(h).dtype)]);
}

/** Adagrad: R / (1 + T · decay) times G over √H + ε, H the sum of G². */
function adagrad(e: Emitter, ins: readonly EmitRef[], a: Attrs): EmitRef[] {
  const [, , x, grad, h] = ins, { d, tf, rate } = step(e, ins);
  const decay = (a.decay_factor as number | undefined) ?? 0;
  const r = e.op("Div", [
    rate,
    e.op("Add", [e.scalar(1, d), e.op("Mul", [tf, e.scalar(decay, d)])]),
  ]);
  const g = regularized(e, x, grad, (a.norm_coefficient as number | undefined) ?? 0);
  const hNew = e.op("Add", [h, e.op("Mul", [g, g])]);
  const eps = (a.epsilon as number | undefined) ?? 1e-6;
  const xNew = e.op("Sub", [x, e.op("Div", [e.op("Mul", [r, g]), denominator(e, hNew, eps)])]);
  return [xNew, hNew];
}

/** Momentum: V = α·V + (β after the first step, else 1)·G; X less R times V (or G + α·V). */
function momentum(e: Emitter, ins: readonly EmitRef[], a: Attrs): EmitRef[] {
  const [, , x, grad, v] = ins, { d, later, rate } = step(e, ins);
  const alpha = a.alpha as number, beta = a.beta as number;
  const g = regularized(e, x, grad, a.norm_coefficient as number);
  const coefficient = e.op("Where", [later, e.scalar(beta, d), e.scalar(1, d)]);
  const vNew = e.op("Add", [
    e.op("Mul", [v, e.scalar(alpha, d)]),
    e.op("Mul", [g, coefficient]),
  ]);
  const move = a.mode === "standard"
    ? vNew
    : e.op("Add", [g, e.op("Mul", [vNew, e.scalar(alpha, d)])]);
  return [e.op("Sub", [x, e.op("Mul", [rate, move])]), vNew];
}

/** Adam: moments V and H, the rate bias-corrected after the first step, X scaled after. */
function adam(e: Emitter, ins: readonly EmitRef[], a: Attrs): EmitRef[] {
  const [, , x, grad, v, h] = ins, { d, tf, later, rate } = step(e, ins);
  const alpha = (a.alpha as number | undefined) ?? 0.9;
  const beta = (a.beta as number | undefined) ?? 0.999;
  const post = (a.norm_coefficient_post as number | undefined) ?? 0;
  const g = regularized(e, x, grad, (a.norm_coefficient as number | undefined) ?? 0);
  // R · √(1 − β^T) / (1 − α^T) after the first step.
  const power = (base: number) =>
    e.op("Sub", [e.scalar(1, d), e.op("Pow", [e.scalar(base, d), tf])]);
  const corrected = e.op("Div", [e.op("Mul", [rate, e.op("Sqrt", [power(beta)])]), power(alpha)]);
  const r = e.op("Where", [later, corrected, rate]);
  const vNew = e.op("Add", [
    e.op("Mul", [v, e.scalar(alpha, d)]),
    e.op("Mul", [g, e.scalar(1 - alpha, d)]),
  ]);
  const hNew = e.op("Add", [
    e.op("Mul", [h, e.scalar(beta, d)]),
    e.op("Mul", [e.op("Mul", [g, g]), e.scalar(1 - beta, d)]),
  ]);
  const eps = (a.epsilon as number | undefined) ?? 1e-6;
  const moved = e.op("Sub", [x, e.op("Div", [e.op("Mul", [r, vNew]), denominator(e, hNew, eps)])]);
  return [post ? e.op("Mul", [moved, e.scalar(1 - post, d)]) : moved, vNew, hNew];
}

const trainingOps: OpDef[] = [{
  name: "Adagrad",
  category: "composite",
  arity: [5, 5],
  primitive: false,
  infer: (ctx) => {
    for (const name of ["decay_factor", "epsilon", "norm_coefficient"]) ctx.float(name, 0);
    return updateTypes(ctx, 1);
  },
  decompose: adagrad,
}, {
  name: "Momentum",
  category: "composite",
  arity: [5, 5],
  primitive: false,
  infer: (ctx) => {
    for (const name of ["alpha", "beta", "norm_coefficient"]) ctx.float(name);
    if (!ctx.has("mode")) {
      ctx.fail("no mode", 'give mode "standard" or "nesterov"', "bad-attribute");
    }
    ctx.choice("mode", MOMENTUM_MODES);
    return updateTypes(ctx, 1);
  },
  decompose: momentum,
}, {
  name: "Adam",
  category: "composite",
  arity: [6, 6],
  primitive: false,
  infer: (ctx) => {
    for (const name of ["alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"]) {
      ctx.float(name, 0);
    }
    return updateTypes(ctx, 2);
  },
  decompose: adam,
}];

defineOps(trainingOps);
