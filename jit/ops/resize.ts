/**
 * Resize as a kiln op: `x` resampled to `sizes` (one per axis) at `scales`, each axis by the
 * rules of `resize_taps.ts` (`mode` nearest, linear or cubic, the coordinate transformation,
 * nearest rounding, `cubic_a`, `antialias`, `exclude_outside`, and for tf_crop_and_resize the
 * `roi` [starts…, ends…] of every axis and the `extrapolation` value). Integer data resizes by
 * nearest (or one-hot weights) only.
 *
 * It decomposes as separable interpolation: each resized axis is one 1-D step,
 * `y = Σ_t gather(x, idx_t, axis) · w_t`, from the last axis to the first (the order of ONNX's
 * reference); nearest is one gather per axis and no arithmetic, so integer data stays exact.
 *
 * @module
 */
import { isFloat } from "../ir/dtype.ts";
import { type AxisPlan, type Taps, tapsAt } from "./resize_taps.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** A Resize node's plan: the axes' rules, and per axis its size, scale and roi. */
export interface ResizePlan extends AxisPlan {
  readonly sizes: readonly number[];
  readonly scales: readonly number[];
  /** Axis `d`'s region of interest (tf_crop_and_resize), [0, 1] where none was given. */
  readonly roi: (d: number) => [number, number];
  readonly extrapolation: number;
}

/** The plan of a node's attributes (checked by inference). */
export function resizePlan(a: Attrs): ResizePlan {
  const roi = a.roi as readonly number[] | undefined, sizes = a.sizes as readonly number[];
  return {
    mode: (a.mode as string | undefined) ?? "nearest",
    coordinates: (a.coordinates as string | undefined) ?? "half_pixel",
    nearest: (a.nearest as string | undefined) ?? "round_prefer_floor",
    cubicA: (a.cubic_a as number | undefined) ?? -0.75,
    antialias: a.antialias === 1,
    excludeOutside: a.exclude_outside === 1,
    sizes,
    scales: a.scales as readonly number[],
    roi: (d) => (roi ? [roi[d], roi[sizes.length + d]] : [0, 1]),
    extrapolation: (a.extrapolation as number | undefined) ?? 0,
  };
}

/** Whether axis `d` of `shape` resamples at all under `plan` (else it is left as it is). */
export function resamples(plan: ResizePlan, shape: readonly number[], d: number): boolean {
  return plan.scales[d] !== 1 || plan.sizes[d] !== shape[d] ||
    plan.coordinates === "tf_crop_and_resize" || plan.antialias;
}

/** Every output position's taps along axis `d` of `shape`. */
export function axisTaps(plan: ResizePlan, shape: readonly number[], d: number): Taps[] {
  const out = plan.sizes[d];
  return [...Array(out).keys()].map((i) =>
    tapsAt(i, shape[d], plan.scales[d], out, plan.roi(d), plan)
  );
}

/** Resize's output type, its attributes checked. */
function resizeType(ctx: InferContext): ValueType {
  const { shape, dtype } = ctx.input(0);
  const numbers = (name: string) => {
    const v = ctx.attrs[name];
    return Array.isArray(v) && v.every((x) => typeof x === "number") ? v as number[] : [];
  };
  const sizes = numbers("sizes"), scales = numbers("scales");
  ctx.choice("mode", ["nearest", "linear", "cubic"]);
  if (
    sizes.length !== shape.length || scales.length !== shape.length ||
    scales.some((s) => !(s > 0)) || sizes.some((s) => !Number.isInteger(s) || s < 0)
  ) {
    ctx.fail(
      `Resize of [${shape}] to sizes [${sizes}] at scales [${scales}]`,
      "give a positive scale and a size for every axis",
      "bad-attribute",
    );
  }
  const plan = resizePlan(ctx.attrs);
  // Weights other than 0 and 1 need float data: integers resize by picking only.
  const weighted = (d: number) =>
    resamples(plan, shape, d) &&
    axisTaps(plan, shape, d).some((t) => t.w.some((w) => w !== 0 && w !== 1));
  if (!isFloat(dtype) && plan.mode !== "nearest" && shape.some((_, d) => weighted(d))) {
    ctx.fail(
      `${plan.mode} Resize of ${dtype} data`,
      "cast the data to float before resizing (or use nearest mode)",
      "unsupported",
    );
  }
  return { shape: [...sizes], dtype };
}

/** `x` resampled along `axis` (its taps `taps`), the outside positions extrapolated. */
function resizeAxis(e: Emitter, x: EmitRef, axis: number, taps: Taps[], plan: ResizePlan) {
  const type = e.typeOf(x), out = taps.length, n = Math.max(1, ...taps.map((t) => t.w.length));
  const along = (length: number) => type.shape.map((_, i) => (i === axis ? length : 1));
  const constant = (values: ArrayLike<number>, shape: number[], dtype: "i32" | "bool" | "f32") =>
    e.op("Constant", [], {
      value: {
        data: dtype === "i32"
          ? Int32Array.from(values)
          : dtype === "bool"
          ? Uint8Array.from(values)
          : Float32Array.from(values),
        shape,
        dtype,
      },
    });
  let y: EmitRef;
  const oneHot = taps.every((t) => t.w.every((w) => w === 0 || w === 1));
  if (oneHot || plan.mode === "nearest") {
    const pick = taps.map((t) => (t.outside ? 0 : t.idx[t.w.findIndex((w) => w !== 0)] ?? 0));
    y = e.op("Gather", [x, constant(pick, [out], "i32")], { axis });
  } else {
    let sum: EmitRef | undefined;
    for (let t = 0; t < n; t++) {
      const idx = taps.map((p) => p.idx[t] ?? 0), w = taps.map((p) => p.w[t] ?? 0);
      const weights = constant(w, along(out), "f32");
      const term = e.op("Mul", [
        e.op("Gather", [x, constant(idx, [out], "i32")], { axis }),
        type.dtype === "f32" ? weights : e.op("Cast", [weights], { to: type.dtype }),
      ]);
      sum = sum ? e.op("Add", [sum, term]) : term;
    }
    y = sum!;
  }
  if (taps.some((t) => t.outside)) {
    const mask = constant(taps.map((t) => +t.outside), along(out), "bool");
    y = e.op("Where", [mask, e.scalar(plan.extrapolation, type.dtype), y]);
  }
  return y;
}

/** Resize's decomposition: the resampled axes one after another, the last first. */
function resize(e: Emitter, x: EmitRef, a: Attrs): EmitRef {
  const plan = resizePlan(a), shape = e.typeOf(x).shape;
  let y = x;
  for (let d = shape.length - 1; d >= 0; d--) {
    if (!resamples(plan, shape, d)) continue;
    y = resizeAxis(e, y, d, axisTaps(plan, shape, d), plan);
  }
  return y === x ? e.op("Identity", [x]) : y;
}

const resizeOps: OpDef[] = [{
  name: "Resize",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => [resizeType(ctx)],
  decompose: (e, [x], a) => [resize(e, x, a)],
}];

defineOps(resizeOps);
