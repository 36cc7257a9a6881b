/**
 * Resize (opsets 10–19) and Upsample (7–9): kiln's Resize (`jit/ops/resize.ts`), its sizes and
 * scales worked out here for every axis (`axes`, `keep_aspect_ratio_policy`), its rules mapped
 * from the attributes (opset 10 had no choice: asymmetric coordinates, nearest rounding down).
 * Scales and sizes must be known when the model is compiled (`OnnxModel` specialises on them when
 * they are inputs).
 *
 * @module
 */
import type { AxisPlan } from "../../jit/ops/resize_taps.ts";
import { checkBudget } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import {
  attrs,
  type Known,
  NeedsValue,
  type NodeContext,
  typeOf,
  valuesOf,
} from "../import/node_context.ts";

/** Numbers of a constant input, or `undefined` when absent or empty. */
function constNumbers(c: NodeContext, i: number, what: string): number[] | undefined {
  const k = c.input(i);
  if (!k) return undefined;
  if (k.kind !== "const") throw new NeedsValue(c, what);
  const xs = valuesOf(k.tensor);
  return xs.length ? xs : undefined;
}

/** Resize of input `x` to the given scales or sizes (per axis of `axes`). */
function resize(
  c: NodeContext,
  x: Known,
  given: { scales?: number[]; sizes?: number[]; roi?: number[] },
  plan: AxisPlan,
): Known[] {
  const a = attrs(c);
  const shape = typeOf(x).shape, rank = shape.length;
  const axes = (a.ints("axes") ?? [...Array(rank).keys()]).map((d) => (d < 0 ? d + rank : d));
  const policy = a.string("keep_aspect_ratio_policy", "stretch")!;
  const extrapolation = a.float("extrapolation_value", 0)!;
  const scales = shape.map(() => 1), sizes = [...shape];
  if (given.sizes) {
    axes.forEach((d, i) => (sizes[d] = given.sizes![i]));
    axes.forEach((d) => (scales[d] = sizes[d] / shape[d]));
    if (policy !== "stretch") {
      const pickScale = policy === "not_larger" ? Math.min : Math.max;
      const s = pickScale(...axes.map((d) => scales[d]));
      axes.forEach((d) => {
        scales[d] = s;
        sizes[d] = Math.floor(s * shape[d] + 0.5);
      });
    }
  } else if (given.scales) {
    axes.forEach((d, i) => (scales[d] = given.scales![i]));
    shape.forEach((d, i) => (sizes[i] = Math.floor(d * scales[i])));
  } else {
    throw new KilnError(`${c.label}: Resize needs scales or sizes`, {
      code: "invalid-graph",
      fix: "give the node its scales or sizes input",
    });
  }
  if (scales.some((s) => !(s > 0)) || sizes.some((s) => !Number.isInteger(s) || s < 0)) {
    throw new KilnError(`${c.label}: Resize to scales [${scales}], sizes [${sizes}]`, {
      code: "bad-attribute",
      fix: "use positive scales and non-negative sizes",
    });
  }
  checkBudget(sizes, typeOf(x).dtype, c.label);
  // roi per axis ([starts…, ends…]): given for `axes`, the full range elsewhere.
  const roi = given.roi
    ? [0, 1].flatMap((end) =>
      shape.map((
        _,
        d,
      ) => (axes.includes(d) ? given.roi![end * axes.length + axes.indexOf(d)] : end))
    )
    : undefined;
  return c.emit("Resize", [x], {
    sizes,
    scales,
    ...(roi ? { roi } : {}),
    mode: plan.mode,
    coordinates: plan.coordinates,
    nearest: plan.nearest,
    cubic_a: plan.cubicA,
    antialias: plan.antialias ? 1 : 0,
    exclude_outside: plan.excludeOutside ? 1 : 0,
    extrapolation,
  }, 1);
}

/** Converters by ONNX op type. */
export const RESIZE_CONVERTERS: Record<string, (c: NodeContext) => Known[]> = {
  Resize: (c) => {
    const a = attrs(c);
    const mode = a.string("mode", "nearest")!;
    if (!["nearest", "linear", "cubic"].includes(mode)) {
      throw new KilnError(`${c.label}: Resize mode "${mode}"`, {
        code: "bad-attribute",
        fix: 'use mode "nearest", "linear" or "cubic"',
      });
    }
    const plan = {
      mode,
      // Opset 10 had no choice: asymmetric coordinates, nearest rounding down.
      coordinates: c.opset < 11
        ? "asymmetric"
        : a.string("coordinate_transformation_mode", "half_pixel")!,
      nearest: c.opset < 11 ? "floor" : a.string("nearest_mode", "round_prefer_floor")!,
      cubicA: a.float("cubic_coeff_a", -0.75)!,
      antialias: a.int("antialias", 0) === 1,
      excludeOutside: a.int("exclude_outside", 0) !== 0, // any non-zero, as ONNX Runtime reads it
    };
    const x = c.required(0);
    if (c.opset < 11) return resize(c, x, { scales: constNumbers(c, 1, "scales") }, plan);
    return resize(c, x, {
      roi: constNumbers(c, 1, "roi"),
      scales: constNumbers(c, 2, "scales"),
      sizes: constNumbers(c, 3, "sizes"),
    }, plan);
  },
  Upsample: (c) => {
    const a = attrs(c);
    const mode = a.string("mode", "nearest")!;
    const scales = c.opset < 9 ? a.floats("scales") : constNumbers(c, 1, "scales");
    return resize(c, c.required(0), { scales }, {
      mode: mode === "bilinear" ? "linear" : mode,
      coordinates: "asymmetric",
      nearest: "floor",
      cubicA: -0.75,
      antialias: false,
      excludeOutside: false,
    });
  },
};
