/**
 * Ops the later opsets added (18–20), as compositions of kiln ops so they fuse and run on every
 * backend: the bitwise ops on integers, Mish, LpPool (a depthwise all-ones convolution of |x|^p: padding adds nothing to a
 * sum), AffineGrid (a constant base grid times θᵀ), CenterCropPad (Slice, then Pad), and Pad's
 * `wrap` mode (each padded axis as slices of the far side, concatenated).
 *
 * @module
 */
import { isInt } from "../jit/dtype.ts";
import { KilnError } from "../jit/errors.ts";
import { scalar } from "./convert_composite.ts";
import {
  attrs,
  constant,
  constInts,
  type Converter,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  typeOf,
} from "./node_context.ts";

/** Mish: x · tanh(softplus(x)), softplus as x itself past 20 (where exp(x) would overflow). */
function mish(c: NodeContext): Known[] {
  const op = opOf(c), x = c.required(0), t = typeOf(x).dtype;
  const soft = op("Log", [op("Add", [op("Exp", [x]), scalar(1, t)])]);
  const safe = op("Where", [op("Greater", [x, scalar(20, t)]), x, soft]);
  return [op("Mul", [x, op("Tanh", [safe])])];
}

/** LpPool: (Σ over each window of |x|^p)^(1/p), padding counted as zeros. */
function lpPool(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0);
  const shape = typeOf(x).shape, spatial = shape.length - 2;
  const kernel = a.ints("kernel_shape");
  if (!kernel || kernel.length !== spatial || spatial < 1 || spatial > 2) {
    throw new KilnError(`${c.label}: LpPool over ${spatial} axes with kernel [${kernel ?? ""}]`, {
      code: "unsupported",
      fix: "kiln runs LpPool over 1 or 2 spatial axes with a kernel_shape for each",
    });
  }
  const p = a.int("p", 2)!;
  const strides = a.ints("strides") ?? kernel.map(() => 1);
  const dilations = a.ints("dilations") ?? kernel.map(() => 1);
  let pads = a.ints("pads") ?? kernel.map(() => 0).concat(kernel.map(() => 0));
  const autoPad = a.string("auto_pad", "NOTSET")!;
  const reach = kernel.map((k, i) => (k - 1) * dilations[i] + 1);
  if (autoPad === "SAME_UPPER" || autoPad === "SAME_LOWER") {
    const total = shape.slice(2).map((d, i) =>
      Math.max(0, (Math.ceil(d / strides[i]) - 1) * strides[i] + reach[i] - d)
    );
    const small = total.map((t) => Math.floor(t / 2));
    pads = autoPad === "SAME_UPPER"
      ? [...small, ...total.map((t, i) => t - small[i])]
      : [...total.map((t, i) => t - small[i]), ...small];
  } else if (autoPad === "VALID") pads = pads.map(() => 0);
  // Ceil mode's last windows pass the end: more zero padding there, which a sum ignores.
  if (a.int("ceil_mode", 0) === 1) {
    pads = [...pads];
    shape.slice(2).forEach((d, i) => {
      const span = d + pads[i] + pads[i + spatial] - reach[i];
      const out = Math.ceil(span / strides[i]) + 1;
      pads[i + spatial] += Math.max(0, (out - 1) * strides[i] + reach[i] - (span + reach[i]));
    });
  }
  const t = typeOf(x).dtype, channels = shape[1];
  const powered = p === 1
    ? op("Abs", [x])
    : p === 2
    ? op("Mul", [x, x])
    : op("Pow", [op("Abs", [x]), scalar(p, t)]);
  const ones = constant(
    new Float32Array(channels * kernel.reduce((m, k) => m * k, 1)).fill(1),
    [channels, 1, ...kernel],
    "f32",
  );
  const sums = op("Conv", [powered, ones], {
    kernel_shape: kernel,
    strides,
    dilations,
    pads,
    group: channels,
  });
  return [
    p === 1 ? sums : p === 2 ? op("Sqrt", [sums]) : op("Pow", [sums, scalar(1 / p, t)]),
  ];
}

/** Normalized coordinates of `n` points along an axis, as AffineGrid places them. */
function coordinates(n: number, alignCorners: boolean): number[] {
  return [...Array(n).keys()].map((i) =>
    alignCorners ? (n === 1 ? -1 : -1 + (2 * i) / (n - 1)) : (2 * i + 1) / n - 1
  );
}

/** AffineGrid: each output point's (x, y[, z], 1) times θᵀ, θ of [N, 2, 3] or [N, 3, 4]. */
function affineGrid(c: NodeContext): Known[] {
  const op = opOf(c), theta = c.required(0);
  c.required(1); // a typed error when left out
  const size = constInts(c, 1, "size")!;
  const align = attrs(c).int("align_corners", 0) === 1;
  const spatial = size.length - 2, [n] = typeOf(theta).shape;
  const want = spatial === 2 ? [n, 2, 3] : [n, 3, 4];
  if ((spatial !== 2 && spatial !== 3) || typeOf(theta).shape.join() !== want.join()) {
    throw new KilnError(`${c.label}: theta [${typeOf(theta).shape}] for size [${size}]`, {
      code: "shape-mismatch",
      fix: "give size [N, C, H, W] with theta [N, 2, 3], or [N, C, D, H, W] with [N, 3, 4]",
    });
  }
  // Points in row-major order of (D,) H, W; each row x, y(, z), 1 (x along the last axis).
  const dims = size.slice(2), axes = dims.map((d) => coordinates(d, align));
  const count = dims.reduce((p, d) => p * d, 1), width = spatial + 1;
  const base = new Float32Array(count * width);
  for (let i = 0; i < count; i++) {
    let rest = i;
    for (let d = spatial - 1; d >= 0; d--) {
      base[i * width + (spatial - 1 - d)] = axes[d][rest % dims[d]];
      rest = Math.floor(rest / dims[d]);
    }
    base[i * width + spatial] = 1;
  }
  const grid = op("MatMul", [
    constant(base, [count, width], "f32"),
    op("Transpose", [theta], { perm: [0, 2, 1] }),
  ]);
  return [op("Reshape", [grid], { shape: [n, ...dims, spatial] })];
}

/** CenterCropPad: each axis cropped or zero-padded to its target, centred. */
function centerCropPad(c: NodeContext): Known[] {
  const op = opOf(c), x = c.required(0), shape = typeOf(x).shape;
  c.required(1); // a typed error when left out
  const target = constInts(c, 1, "shape")!;
  const axes = (attrs(c).ints("axes") ?? shape.map((_, i) => i)).map((a) =>
    a < 0 ? a + shape.length : a
  );
  if (axes.length !== target.length || axes.some((a) => a < 0 || a >= shape.length)) {
    throw new KilnError(`${c.label}: shape [${target}] for axes [${axes}] of [${shape}]`, {
      code: "bad-input",
      fix: "give one target size per axis",
    });
  }
  let y = x;
  axes.forEach((axis, i) => {
    const d = shape[axis], want = target[i];
    if (want < d) {
      const start = Math.floor((d - want) / 2);
      y = op("Slice", [y], { starts: [start], ends: [start + want], axes: [axis] });
    } else if (want > d) {
      const pads = shape.map(() => 0).concat(shape.map(() => 0));
      pads[axis] = Math.floor((want - d) / 2);
      pads[axis + shape.length] = want - d - pads[axis];
      y = op("Pad", [y], { pads, mode: "constant", value: 0 });
    }
  });
  return [y];
}

/** Pad's `wrap` mode: axis by axis, the far side's slices concatenated around the data. */
export function wrapPad(op: OpFn, x: Known, pads: readonly number[], label: string): Known {
  const shape = typeOf(x).shape, rank = shape.length;
  let y = x;
  for (let axis = 0; axis < rank; axis++) {
    const [before, after] = [pads[axis], pads[axis + rank]], d = shape[axis];
    if (before < 0 || after < 0 || before > d || after > d) {
      throw new KilnError(`${label}: wrap pads ${before} and ${after} on an axis of ${d}`, {
        code: "unsupported",
        fix: "kiln wraps by at most the axis's length, and does not crop with wrap",
      });
    }
    if (!before && !after) continue;
    const slice = (s: number, e: number) =>
      op("Slice", [y], { starts: [s], ends: [e], axes: [axis] });
    const parts = [
      ...(before ? [slice(d - before, d)] : []),
      y,
      ...(after ? [slice(0, after)] : []),
    ];
    y = op("Concat", parts, { axis });
  }
  return y;
}

/** Opset 18's bitwise ops on integers: kiln's And, Or and Not are bitwise there. */
function bitwise(kind: "And" | "Or" | "Xor" | "Not"): Converter<Known> {
  return (c) => {
    const op = opOf(c), xs = kind === "Not" ? [c.required(0)] : [c.required(0), c.required(1)];
    if (xs.some((x) => !isInt(typeOf(x).dtype))) {
      throw new KilnError(`${c.label}: Bitwise${kind} of ${xs.map((x) => typeOf(x).dtype)}`, {
        code: "dtype-mismatch",
        fix: "bitwise ops take integer tensors (use And/Or/Xor/Not for bool)",
      });
    }
    if (kind !== "Xor") return [op(kind, xs)];
    // a ^ b = (a | b) & ~(a & b)
    return [op("And", [op("Or", xs), op("Not", [op("And", xs)])])];
  };
}

/** Converters by ONNX op type. */
export const NEWER_CONVERTERS: Record<string, Converter<Known>> = {
  BitwiseAnd: bitwise("And"),
  BitwiseOr: bitwise("Or"),
  BitwiseXor: bitwise("Xor"),
  BitwiseNot: bitwise("Not"),
  Mish: mish,
  LpPool: lpPool,
  AffineGrid: affineGrid,
  CenterCropPad: centerCropPad,
};
