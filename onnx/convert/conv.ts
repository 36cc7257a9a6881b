/**
 * The windowed ops, their attributes mapped onto kiln's: Conv, MaxPool and AveragePool (over 1 to
 * 3 spatial axes; fusion runs the 1-D and 3-D ones through 2-D forms, `jit/ops/window_lowering.ts`;
 * MaxPool's Indices from its taps' ArgMax), ConvTranspose with its pads resolved from
 * `output_shape` or `auto_pad` and expanded at import, so its kernel's transform folds
 * (`jit/ops/conv_transpose.ts`, Col2Im likewise), MaxUnpool and LpPool
 * (`jit/ops/pool_composites.ts`), InstanceNormalization, GlobalMaxPool as a reduction and
 * GlobalLpPool.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import {
  attrs,
  constInts,
  type Converter,
  type Known,
  type NodeContext,
  type NodeView,
  typeOf,
} from "../import/node_context.ts";

/**
 * A window op's attributes as kiln takes them: a convolution's, and with `pool` those of a max
 * or an average pool (others are then not read, so the importer reports them as unknown).
 */
export function window(c: NodeView, options: { pool?: "max" | "average" } = {}): Attrs {
  const a = attrs(c);
  const { pool } = options;
  return {
    kernel_shape: a.ints("kernel_shape"),
    strides: a.ints("strides"),
    pads: a.ints("pads"),
    dilations: a.ints("dilations"),
    auto_pad: a.string("auto_pad"),
    ...(pool ? { ceil_mode: a.int("ceil_mode") } : {}),
    ...(pool === "average" ? { count_include_pad: +a.flag("count_include_pad", false) } : {}),
    ...(pool === "max" ? { storage_order: a.int("storage_order") } : {}),
    group: a.int("group"),
  };
}

/** MaxUnpool (kiln's op, `jit/ops/pool_composites.ts`): the output shape as an attribute. */
function maxUnpool(c: NodeContext): Known[] {
  const a = attrs(c);
  const output_shape = c.input(2) ? constInts(c, 2, "output_shape") : undefined;
  return c.emit("MaxUnpool", [c.required(0), c.required(1)], {
    kernel_shape: a.ints("kernel_shape"),
    strides: a.ints("strides"),
    pads: a.ints("pads"),
    output_shape,
  });
}

/** ConvTranspose over 1 to 3 spatial axes (the 3-D one through `conv3d`). */
function convTranspose(c: NodeContext): Known[] {
  const a = attrs(c);
  const x = c.required(0), w = c.required(1);
  const bias = c.input(2);
  const xs = typeOf(x).shape, ws = typeOf(w).shape;
  const spatial = xs.length - 2;
  if (spatial < 1 || spatial > 3 || ws.length !== xs.length) {
    throw new KilnError(
      `${c.label}: ConvTranspose of data [${xs}] with a kernel [${ws}] (kiln runs 1-D to 3-D)`,
      { code: "unsupported", fix: "use a 1-D, 2-D or 3-D transposed convolution" },
    );
  }
  const group = a.int("group", 1)!;
  const kernel = a.ints("kernel_shape") ?? ws.slice(2);
  const strides = a.ints("strides") ?? kernel.map(() => 1);
  const dilations = a.ints("dilations") ?? kernel.map(() => 1);
  const outputPadding = a.ints("output_padding") ?? kernel.map(() => 0);
  const autoPad = a.string("auto_pad", "NOTSET")!;
  const outputShape = a.ints("output_shape");
  let pads = a.ints("pads") ?? kernel.map(() => 0).concat(kernel.map(() => 0));
  const cin = xs[1];
  if (cin !== ws[0] || cin % group !== 0 || kernel.some((k, i) => k !== ws[2 + i])) {
    throw new KilnError(`${c.label}: data [${xs}] and kernel [${ws}] with group ${group}`, {
      code: "shape-mismatch",
      fix: "the kernel must be [C_in, C_out / group, k…] with C_in the data's channels",
    });
  }
  // Output shape or SAME padding decide the pads (ONNX's formula; SAME_UPPER puts the odd one
  // at the end, SAME_LOWER and an explicit output_shape at the start).
  const natural = (i: number) =>
    strides[i] * (xs[2 + i] - 1) + outputPadding[i] + (kernel[i] - 1) * dilations[i] + 1;
  const target = outputShape?.slice(-spatial) ??
    (autoPad.startsWith("SAME") ? xs.slice(2).map((d, i) => d * strides[i]) : undefined);
  if (target) {
    const total = target.map((t, i) => natural(i) - t);
    // Floor division, as ONNX's reference: a negative total (output_shape past the natural
    // size) extends the tail.
    const small = total.map((t) => Math.floor(t / 2));
    pads = autoPad === "SAME_UPPER"
      ? [...small, ...total.map((t, i) => t - small[i])]
      : [...total.map((t, i) => t - small[i]), ...small];
  } else if (autoPad === "VALID") pads = pads.map(() => 0);
  return c.emit("ConvTranspose", bias ? [x, w, bias] : [x, w], {
    group,
    strides,
    dilations,
    output_padding: outputPadding,
    pads,
  });
}

/** LpPool (kiln's op): auto_pad and ceil_mode resolved into pads (zeros add nothing to a sum). */
function lpPool(c: NodeContext): Known[] {
  const a = attrs(c), x = c.required(0);
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
  return c.emit("LpPool", [x], { kernel_shape: kernel, strides, dilations, pads, p });
}

/** Col2Im (kiln's op, `jit/ops/conv_transpose.ts`): the image and block shapes as attributes. */
function col2Im(c: NodeContext): Known[] {
  const a = attrs(c);
  // Typed errors when left out.
  c.required(1);
  c.required(2);
  return c.emit("Col2Im", [c.required(0)], {
    image_shape: constInts(c, 1, "image_shape"),
    block_shape: constInts(c, 2, "block_shape"),
    strides: a.ints("strides"),
    dilations: a.ints("dilations"),
    pads: a.ints("pads"),
  });
}

/** Converters by ONNX op type. */
export const CONV_CONVERTERS: Record<string, Converter<Known>> = {
  LpPool: lpPool,
  GlobalLpPool: (c) => c.emit("GlobalLpPool", [c.required(0)], { p: attrs(c).int("p", 2) }),
  Col2Im: col2Im,
  Conv: (c) => c.emit("Conv", c.inputs(), window(c)),
  AveragePool: (c) => c.emit("AveragePool", [c.required(0)], window(c, { pool: "average" })),
  MaxPool: (c) => {
    const x = c.required(0), w = window(c, { pool: "max" });
    // storage_order orders the Indices output only; 8-bit integers pool exactly as f32.
    const values = { ...w, storage_order: undefined };
    const dtype = typeOf(x).dtype;
    const small = dtype === "u8" || dtype === "i8";
    const pooled = (k: Known) => c.emit("MaxPool", [k], values)[0];
    const y = small
      ? c.emit("Cast", [pooled(c.emit("Cast", [x], { to: "f32" })[0])], { to: dtype })[0]
      : pooled(x);
    if (!c.node.output[1]) return [y];
    const [indices] = c.emit("MaxPoolIndices", [x], w);
    return [y, { ...indices, i64: true }];
  },
  ConvTranspose: convTranspose,
  MaxUnpool: maxUnpool,
  GlobalMaxPool: (c) => {
    const x = c.required(0);
    const axes = typeOf(x).shape.slice(2).map((_, i) => 2 + i);
    return c.emit("ReduceMax", [x], { axes, keepdims: 1 });
  },
  InstanceNormalization: (c) =>
    c.emit("InstanceNormalization", [c.required(0), c.required(1), c.required(2)], {
      epsilon: attrs(c).float("epsilon", 1e-5),
    }),
};
