/**
 * Ops the later opsets added (18–21), and the Lp ops, as compositions of kiln ops so they fuse
 * and run on every backend: the bitwise ops on integers, Mish, LpPool (a depthwise all-ones
 * convolution of |x|^p: padding adds nothing to a sum), GlobalLpPool and LpNormalization (sums of
 * |x|^p), AffineGrid (a constant base grid times θᵀ), CenterCropPad (Slice, then Pad), Pad's
 * `wrap` mode (each padded axis as slices of the far side, concatenated), GroupNormalization
 * (moments over each group's channels) and Col2Im (a transposed convolution with a one-hot
 * kernel: each patch row added at its place in the image).
 *
 * @module
 */
import { isFloat, isInt } from "../../jit/ir/dtype.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { scalar } from "./composite.ts";
import { transposedConv } from "./conv.ts";
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
} from "../import/node_context.ts";

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

/** (Σ |x|^p)^(1/p) over `axes`, kept as size-1 axes. */
function lpNorm(op: OpFn, x: Known, p: number, axes: number[]): Known {
  const t = typeOf(x).dtype, keep = { axes, keepdims: 1 };
  if (p === 1) return op("ReduceSum", [op("Abs", [x])], keep);
  if (p === 2) return op("Sqrt", [op("ReduceSum", [op("Mul", [x, x])], keep)]);
  const sum = op("ReduceSum", [op("Pow", [op("Abs", [x]), scalar(p, t)])], keep);
  return op("Pow", [sum, scalar(1 / p, t)]);
}

/** GlobalLpPool: each channel's (Σ |x|^p)^(1/p) over its spatial axes. */
function globalLpPool(c: NodeContext): Known[] {
  const x = c.required(0), rank = typeOf(x).shape.length;
  const axes = [...Array(Math.max(0, rank - 2)).keys()].map((i) => i + 2);
  return [lpNorm(opOf(c), x, attrs(c).int("p", 2)!, axes)];
}

/** LpNormalization: x over its p-norm along `axis` (p 1 or 2). */
function lpNormalization(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0), rank = typeOf(x).shape.length;
  const p = a.int("p", 2)!, given = a.int("axis", -1)!, axis = given < 0 ? given + rank : given;
  if ((p !== 1 && p !== 2) || axis < 0 || axis >= rank) {
    throw new KilnError(
      `${c.label}: LpNormalization with p ${p} along axis ${given} of rank ${rank}`,
      {
        code: "bad-input",
        fix: "ONNX's LpNormalization takes p 1 or 2 and an axis of the input",
      },
    );
  }
  // A zero norm gives 0, as ONNX's reference has it (not 0 / 0).
  const norm = lpNorm(op, x, p, [axis]), zero = scalar(0, typeOf(x).dtype);
  return [op("Where", [op("Equal", [norm, zero]), zero, op("Div", [x, norm])])];
}

/**
 * GroupNormalization: each group of channels normalized by its own mean and variance, then scaled
 * and shifted per channel (opset 21: scale and bias of [C]) or per group (opset 18: of
 * [num_groups]). At opset 21 the moments of f16 data are taken in f32 (`stash_type` 1, its
 * default; kiln holds bfloat16 data as f32 already) and the normalized values cast back before
 * the scale and bias, as ONNX's function does.
 */
function groupNormalization(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0), scale = c.required(1);
  const bias = c.required(2), shape = typeOf(x).shape, dtype = typeOf(x).dtype;
  const groups = a.int("num_groups"), channels = shape[1] ?? 0;
  const perChannel = c.opset >= 21, width = perChannel ? channels : groups;
  const fits = (k: Known) => typeOf(k).shape.join() === `${width}`;
  if (!groups || shape.length < 2 || channels % groups !== 0 || !fits(scale) || !fits(bias)) {
    throw new KilnError(
      `${c.label}: GroupNormalization of [${shape}] in ${groups} groups, scale [${
        typeOf(scale).shape
      }], bias [${typeOf(bias).shape}]`,
      {
        code: "shape-mismatch",
        fix: `num_groups must divide the channels; scale and bias are [${
          perChannel ? "C" : "num_groups"
        }] at opset ${c.opset}`,
      },
    );
  }
  const stash = a.int("stash_type", 1)!, narrow = dtype === "f16";
  const wide = perChannel && narrow && stash === 1 ? op("Cast", [x], { to: "f32" }) : x;
  const t = typeOf(wide).dtype, per = sizeOf(shape) / shape[0] / groups;
  const grouped = op("Reshape", [wide], { shape: [shape[0], groups, per] });
  const keep = { axes: [2], keepdims: 1 };
  const mean = op("ReduceMean", [grouped], keep);
  const d = op("Sub", [grouped, mean]);
  const variance = op("ReduceMean", [op("Mul", [d, d])], keep);
  const eps = scalar(a.float("epsilon", 1e-5)!, t);
  let y = op("Div", [d, op("Sqrt", [op("Add", [variance, eps])])]);
  if (wide !== x) y = op("Cast", [y], { to: dtype });
  // Scale and bias as [G, 1] against [N, G, per], or as [C, 1, …] against [N, C, spatial…].
  const spread = (k: Known) =>
    op("Reshape", [k], {
      shape: perChannel ? [channels, ...shape.slice(2).map(() => 1)] : [groups, 1],
    });
  if (perChannel) y = op("Reshape", [y], { shape });
  y = op("Add", [op("Mul", [y, spread(scale)]), spread(bias)]);
  return [perChannel ? y : op("Reshape", [y], { shape })];
}

/**
 * Col2Im: the patches of `[N, C·∏block, L]` (L blocks, row-major over the image's axes) added
 * into `[N, C, …image_shape]`. That is a transposed convolution of the blocks' grid with a one-hot
 * kernel in C groups (patch entry o of channel c lands at its offset in the kernel), uncropped,
 * then cut to the image from the start padding.
 */
function col2Im(c: NodeContext): Known[] {
  const op = opOf(c), a = attrs(c), x = c.required(0), shape = typeOf(x).shape;
  c.required(1), c.required(2); // typed errors when left out
  const image = constInts(c, 1, "image_shape")!, block = constInts(c, 2, "block_shape")!;
  const n = image.length, size = block.reduce((p, k) => p * k, 1);
  const strides = a.ints("strides") ?? block.map(() => 1);
  const dilations = a.ints("dilations") ?? block.map(() => 1);
  const pads = a.ints("pads") ?? block.map(() => 0).concat(block.map(() => 0));
  const grid = image.map((d, i) =>
    Math.floor((d + pads[i] + pads[n + i] - dilations[i] * (block[i] - 1) - 1) / strides[i]) + 1
  );
  const blocks = grid.reduce((p, g) => p * g, 1), channels = shape[1] / size;
  if (
    shape.length !== 3 || block.length !== n || n < 1 || n > 3 || !Number.isInteger(channels) ||
    grid.some((g) => g < 1) || blocks !== shape[2] || strides.length !== n ||
    dilations.length !== n || pads.length !== 2 * n || !isFloat(typeOf(x).dtype)
  ) {
    throw new KilnError(
      `${c.label}: Col2Im of ${typeOf(x).dtype} [${shape}] into [${image}] by blocks [${block}]`,
      {
        code: "shape-mismatch",
        fix: `give float data [N, C·${size}, L] with L the ${
          grid.join("×")
        } blocks the image, strides, dilations and pads make (1 to 3 image axes)`,
      },
    );
  }
  // Kernel [C·∏block, 1, …block]: input channel c·∏block + o has a 1 at block offset o.
  const ones = new Float32Array(shape[1] * size);
  for (let ch = 0; ch < shape[1]; ch++) ones[ch * size + (ch % size)] = 1;
  const kernel = constant(ones, [shape[1], 1, ...block], "f32");
  const w = typeOf(x).dtype === "f32" ? kernel : op("Cast", [kernel], { to: typeOf(x).dtype });
  const zeros = block.map(() => 0);
  let y =
    transposedConv(c, op("Reshape", [x], { shape: [shape[0], shape[1], ...grid] }), w, undefined, {
      group: channels,
      kernel: block,
      strides,
      dilations,
      outputPadding: zeros,
      pads: [...zeros, ...zeros],
    })[0];
  // The uncropped image starts at -pads[i]: keep [pads[i], pads[i] + image[i]), zeros past it.
  image.forEach((d, i) => {
    const axis = 2 + i, full = typeOf(y).shape[axis], start = pads[i];
    y = op("Slice", [y], { starts: [start], ends: [Math.min(full, start + d)], axes: [axis] });
    const short = d - (Math.min(full, start + d) - start);
    if (short > 0) {
      y = op("Pad", [y], { pads: [0, short], axes: [axis], mode: "constant", value: 0 });
    }
  });
  return [y];
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
  GlobalLpPool: globalLpPool,
  LpNormalization: lpNormalization,
  GroupNormalization: groupNormalization,
  Col2Im: col2Im,
};
