/**
 * Linear algebra and spatial ops: `MatMul` (NumPy semantics: batched, broadcast batch dims, 1-D
 * operands), `Gemm` (decomposes to MatMul), `Conv` (2-D with groups, strides, pads, dilations,
 * auto_pad), `MaxPool` and `AveragePool`. {@linkcode resolveWindow} computes window geometry once
 * for inference and every kernel.
 *
 * @module
 */
import { formatShape, type Shape, tryBroadcast } from "../ir/shape.ts";
import { FLOATS, NUMERIC } from "./elementwise.ts";
import { defineOps, type EmitRef, type InferContext, type OpDef } from "./registry.ts";

/** Output shape of `MatMul(a, b)` under NumPy rules, or a located error. */
export function matmulShape(ctx: InferContext, a: Shape, b: Shape): number[] {
  if (a.length === 0 || b.length === 0) {
    ctx.fail("MatMul operands must have rank ≥ 1", "reshape scalars to [1]", "shape-mismatch");
  }
  const a2 = a.length === 1 ? [1, a[0]] : a;
  const b2 = b.length === 1 ? [b[0], 1] : b;
  const k = a2[a2.length - 1];
  if (b2[b2.length - 2] !== k) {
    ctx.fail(
      `inner dimensions differ: ${formatShape(a)} · ${formatShape(b)}`,
      "make the last axis of A equal the second-to-last of B (transpose one?)",
      "shape-mismatch",
    );
  }
  const batch = tryBroadcast([a2.slice(0, -2), b2.slice(0, -2)]);
  if (!batch) {
    ctx.fail(
      `batch dimensions of ${formatShape(a)} and ${formatShape(b)} do not broadcast`,
      "make batch dimensions equal or 1",
      "shape-mismatch",
    );
  }
  const out = [...batch, a2[a2.length - 2], b2[b2.length - 1]];
  if (a.length === 1) out.splice(out.length - 2, 1);
  if (b.length === 1) out.splice(out.length - 1, 1);
  return out;
}

/** Window geometry of a Conv/pool node over its spatial axes. */
export interface Window {
  /** Kernel extent per spatial axis. */
  kernel: number[];
  /** Stride per spatial axis. */
  strides: number[];
  /** Dilation per spatial axis. */
  dilations: number[];
  /** Padding before each spatial axis. */
  padsBegin: number[];
  /** Padding after each spatial axis. */
  padsEnd: number[];
  /** Output extent per spatial axis. */
  out: number[];
}

/**
 * A convolution's output shape, its inputs checked: data [N, C, …] (input `data`), kernel
 * [M, C/group, …] (input `kernel`) and a bias [M] where `bias` names one; window attributes as
 * Conv's.
 */
export function convShape(
  ctx: InferContext,
  [data, kernel, bias]: readonly number[],
): number[] {
  const x = ctx.input(data).shape, w = ctx.input(kernel).shape;
  if (x.length < 3 || x.length > 5 || w.length !== x.length) {
    ctx.fail(
      `data ${formatShape(x)} and kernel ${formatShape(w)}`,
      "convolve over 1 to 3 spatial axes: data [N, C, …], kernel [M, C/group, …] of its rank",
      "shape-mismatch",
    );
  }
  const group = ctx.int("group", 1);
  if (group < 1 || x[1] % group !== 0 || w[0] % group !== 0) {
    ctx.fail(
      `group ${group} does not divide channels (${x[1]} in, ${w[0]} out)`,
      "use a group count that divides both channel counts",
      "shape-mismatch",
    );
  }
  if (w[1] * group !== x[1]) {
    ctx.fail(
      `weight expects ${w[1] * group} input channels, input has ${x[1]}`,
      "pass weights of shape [M, C/group, kH, kW]",
      "shape-mismatch",
    );
  }
  const taps = ctx.ints("kernel_shape", w.slice(2));
  if (taps.some((k, i) => k !== w[2 + i])) {
    ctx.fail(
      "kernel_shape differs from the weight's spatial shape",
      "drop kernel_shape or make it match",
      "shape-mismatch",
    );
  }
  if (
    bias !== undefined &&
    (ctx.input(bias).shape.length !== 1 || ctx.input(bias).shape[0] !== w[0])
  ) {
    ctx.fail(
      `bias must have shape [${w[0]}]`,
      "pass one bias per output channel",
      "shape-mismatch",
    );
  }
  const win = resolveWindow(ctx, x.slice(2), taps);
  return [x[0], w[0], ...win.out];
}

/** Most window taps a windowed op (pool, conv) may read per channel over all its outputs. */
export const MAX_WINDOW_READS = 2 ** 31;

/** Resolves kernel, strides, dilations and pads (incl. `auto_pad`, `ceil_mode`) for `spatial`. */
export function resolveWindow(
  ctx: InferContext,
  spatial: Shape,
  kernel: readonly number[],
): Window {
  const n = spatial.length;
  const strides = [...ctx.ints("strides", kernel.map(() => 1))];
  const dilations = [...ctx.ints("dilations", kernel.map(() => 1))];
  const pads = ctx.ints("pads", kernel.map(() => 0).concat(kernel.map(() => 0)));
  const autoPad = ctx.choice("auto_pad", ["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]);
  const ceil = ctx.int("ceil_mode", 0) !== 0;
  if (
    kernel.length !== n || strides.length !== n || dilations.length !== n || pads.length !== 2 * n
  ) {
    ctx.fail(
      `kernel_shape/strides/dilations/pads do not match ${n} spatial axes`,
      `give ${n} values each (${2 * n} for pads)`,
      "bad-attribute",
    );
  }
  if ([...kernel, ...strides, ...dilations].some((v) => v < 1) || pads.some((p) => p < 0)) {
    ctx.fail(
      "kernel, strides and dilations must be ≥ 1 and pads ≥ 0",
      "fix the attribute values",
      "bad-attribute",
    );
  }
  const padsBegin = pads.slice(0, n);
  const padsEnd = pads.slice(n);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const extent = (kernel[i] - 1) * dilations[i] + 1;
    if (autoPad === "VALID") {
      padsBegin[i] = padsEnd[i] = 0;
    } else if (autoPad !== "NOTSET") {
      const o = Math.ceil(spatial[i] / strides[i]);
      const total = Math.max(0, (o - 1) * strides[i] + extent - spatial[i]);
      padsBegin[i] = autoPad === "SAME_UPPER" ? Math.floor(total / 2) : Math.ceil(total / 2);
      padsEnd[i] = total - padsBegin[i];
    }
    const span = spatial[i] + padsBegin[i] + padsEnd[i] - extent;
    if (span < 0) {
      ctx.fail(
        `the window (extent ${extent}) is larger than the padded input ${formatShape(spatial)}`,
        "use a smaller kernel or more padding",
        "shape-mismatch",
      );
    }
    let o = (ceil ? Math.ceil(span / strides[i]) : Math.floor(span / strides[i])) + 1;
    // With ceil_mode a window may not start inside the end padding (ONNX/PyTorch rule).
    if (ceil && (o - 1) * strides[i] >= spatial[i] + padsBegin[i]) o--;
    out.push(o);
  }
  // Every output reads every tap of its window: a kernel of 2^30 with SAME padding keeps the
  // output small and asks for 2^60 reads (a hang, not an error, without this bound).
  const reads = kernel.reduce((a, b) => a * b, 1) * out.reduce((a, b) => a * b, 1);
  if (reads > MAX_WINDOW_READS) {
    ctx.fail(
      `the window of ${kernel.join("×")} over ${formatShape(out)} outputs reads ${
        reads.toExponential(2)
      } taps a channel, over ${MAX_WINDOW_READS.toExponential(2)}`,
      "use a kernel no larger than the input",
      "limit",
    );
  }
  return { kernel: [...kernel], strides, dilations, padsBegin, padsEnd, out };
}

/**
 * LRN: x over (bias + alpha/size · Σ x² over a window of `size` channels around its own)^beta,
 * the window clipped to the channels there are. Composed of an average pool over [C, rest]
 * (times the window, so a sum) and elementwise ops.
 */
const lrn: OpDef = {
  name: "LRN",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape;
    if (shape.length < 2) {
      ctx.fail("input must be N×C×…", "give LRN an input of rank 2 or more", "shape-mismatch");
    }
    const size = ctx.int("size");
    if (size < 1) ctx.fail(`size is ${size}`, "give a window size of 1 or more", "bad-attribute");
    for (const [name, fallback] of [["alpha", 1e-4], ["beta", 0.75], ["bias", 1]] as const) {
      ctx.float(name, fallback);
    }
    return [{ shape, dtype }];
  },
  decompose: (e, [x], a) => {
    const { shape, dtype } = e.typeOf(x);
    const size = a.size as number, alpha = (a.alpha as number | undefined) ?? 1e-4;
    const beta = (a.beta as number | undefined) ?? 0.75, bias = (a.bias as number | undefined) ?? 1;
    const [n, ch] = shape, rest = shape.slice(2).reduce((p, d) => p * d, 1);
    const squares = e.op("Reshape", [e.op("Mul", [x, x])], { shape: [n, 1, ch, rest] });
    // Channels past either end add nothing: the window is clipped to the channels there are
    // (a size of 2^30 made a pool of 2^30 taps), the mean scaled back to a sum over `size`.
    const lo = Math.min(Math.floor((size - 1) / 2), ch - 1);
    const hi = Math.min(Math.ceil((size - 1) / 2), ch - 1);
    const window = lo + hi + 1;
    const mean = e.op("AveragePool", [squares], {
      kernel_shape: [window, 1],
      pads: [lo, 0, hi, 0],
      count_include_pad: 1,
    });
    const sum = e.op("Reshape", [mean], { shape: [...shape] });
    const weight = e.scalar((alpha * window) / size, dtype);
    const scaled = e.op("Add", [e.scalar(bias, dtype), e.op("Mul", [sum, weight])]);
    return [e.op("Div", [x, e.op("Pow", [scaled, e.scalar(beta, dtype)])])];
  },
};

/**
 * GroupNormalization: the channels of x [N, C, …] in `num_groups` groups, each normalized by its
 * own mean and variance, then scaled and shifted per channel (scale and bias [C], as ONNX's from
 * opset 21; the importer spreads opset 18's per-group ones). With `stash_type` 1 (the default)
 * f16 data's moments are taken in f32 and the normalized values cast back before the scale.
 */
const groupNormalization: OpDef = {
  name: "GroupNormalization",
  category: "composite",
  arity: [3, 3],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.requireDType(0, FLOATS), shape = ctx.input(0).shape;
    const groups = ctx.int("num_groups"), channels = shape[1] ?? 0;
    ctx.float("epsilon", 1e-5);
    ctx.int("stash_type", 1);
    if (shape.length < 2 || groups < 1 || channels % groups !== 0) {
      ctx.fail(
        `${groups} groups of the channels of ${formatShape(shape)}`,
        "give x as N×C×… and num_groups dividing C",
        "shape-mismatch",
      );
    }
    for (const i of [1, 2]) {
      const t = ctx.input(i);
      if (t.shape.join() !== `${channels}` || t.dtype !== dtype) {
        ctx.fail(
          `input ${i} is ${t.dtype}${formatShape(t.shape)}`,
          `give scale and bias as ${dtype}[${channels}]`,
          "shape-mismatch",
        );
      }
    }
    return [{ shape, dtype }];
  },
  decompose: (e, [x, scale, bias], a) => {
    const { shape, dtype } = e.typeOf(x);
    const groups = a.num_groups as number, stash = (a.stash_type as number | undefined) ?? 1;
    const wide = dtype === "f16" && stash === 1 ? e.op("Cast", [x], { to: "f32" }) : x;
    const t = e.typeOf(wide).dtype, per = shape.slice(1).reduce((p, d) => p * d, 1) / groups;
    const grouped = e.op("Reshape", [wide], { shape: [shape[0], groups, per] });
    const keep = { axes: [2], keepdims: 1 };
    const d = e.op("Sub", [grouped, e.op("ReduceMean", [grouped], keep)]);
    const variance = e.op("ReduceMean", [e.op("Mul", [d, d])], keep);
    const eps = e.scalar((a.epsilon as number | undefined) ?? 1e-5, t);
    let y = e.op("Div", [d, e.op("Sqrt", [e.op("Add", [variance, eps])])]);
    if (wide !== x) y = e.op("Cast", [y], { to: dtype });
    // Scale and bias as [C, 1, …] against [N, C, spatial…].
    const spread = (k: EmitRef) =>
      e.op("Reshape", [k], { shape: [shape[1], ...shape.slice(2).map(() => 1)] });
    y = e.op("Reshape", [y], { shape: [...shape] });
    return [e.op("Add", [e.op("Mul", [y, spread(scale)]), spread(bias)])];
  },
};

/** `shape` with its last two axes swapped where `on` (rank 2 or more). */
export function swapLast(shape: Shape, on: boolean): Shape {
  if (!on || shape.length < 2) return shape;
  return [...shape.slice(0, -2), shape.at(-1)!, shape.at(-2)!];
}

/**
 * FusedMatMul (ONNX Runtime's): alpha · A·B with either operand's last two axes swapped first
 * (`transA`, `transB`; its batch transposes are not taken).
 */
const fusedMatMul: OpDef = {
  name: "FusedMatMul",
  category: "composite",
  arity: [2, 2],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.sameDType();
    ctx.requireDType(0, FLOATS);
    ctx.float("alpha", 1);
    if (ctx.int("transBatchA", 0) || ctx.int("transBatchB", 0)) {
      ctx.fail(
        "transBatchA or transBatchB",
        "re-export without the batch transposes",
        "unsupported",
      );
    }
    const [a, b] = [0, 1].map((i) =>
      swapLast(ctx.input(i).shape, ctx.int(i ? "transB" : "transA", 0) === 1)
    );
    return [{ shape: matmulShape(ctx, a, b), dtype }];
  },
  decompose: (e, [a, b], attrs) => {
    const swap = (k: EmitRef, on: unknown) => {
      const rank = e.typeOf(k).shape.length;
      if (on !== 1 || rank < 2) return k;
      const perm = [...Array(rank).keys()];
      [perm[rank - 2], perm[rank - 1]] = [perm[rank - 1], perm[rank - 2]];
      return e.op("Transpose", [k], { perm });
    };
    const y = e.op("MatMul", [swap(a, attrs.transA), swap(b, attrs.transB)]);
    const alpha = (attrs.alpha as number | undefined) ?? 1;
    return [alpha === 1 ? y : e.op("Mul", [y, e.scalar(alpha, e.typeOf(y).dtype)])];
  },
};

const nnOps: OpDef[] = [
  lrn,
  groupNormalization,
  fusedMatMul,
  {
    name: "MatMul",
    category: "matmul",
    arity: [2, 2],
    primitive: true,
    infer: (ctx) => {
      const dtype = ctx.sameDType();
      ctx.requireDType(0, NUMERIC);
      return [{ shape: matmulShape(ctx, ctx.input(0).shape, ctx.input(1).shape), dtype }];
    },
  },
  {
    name: "Gemm",
    category: "matmul",
    arity: [2, 3],
    primitive: false,
    infer: (ctx) => {
      const dtype = ctx.sameDType();
      ctx.requireDType(0, NUMERIC);
      const a = ctx.requireRank(0, 2);
      const b = ctx.requireRank(1, 2);
      const ta = ctx.int("transA", 0) !== 0;
      const tb = ctx.int("transB", 0) !== 0;
      ctx.float("alpha", 1);
      ctx.float("beta", 1);
      const [m, k] = ta ? [a[1], a[0]] : a;
      const [k2, n] = tb ? [b[1], b[0]] : b;
      if (k !== k2) {
        ctx.fail(
          `inner dimensions differ (${k} vs ${k2}) with transA=${+ta} transB=${+tb}`,
          "check transA/transB or the operand shapes",
          "shape-mismatch",
        );
      }
      if (
        ctx.inputs.length === 3 &&
        !tryBroadcast([ctx.input(2).shape, [m, n]])?.every((d, i) => d === [m, n][i])
      ) {
        ctx.fail(
          `C of shape ${formatShape(ctx.input(2).shape)} does not broadcast to [${m}, ${n}]`,
          "pass C broadcastable to M×N",
          "shape-mismatch",
        );
      }
      return [{ shape: [m, n], dtype }];
    },
    decompose: (e, [a, b, c], attrs) => {
      const tr = (x: typeof a) => e.op("Transpose", [x], { perm: [1, 0] });
      const alpha = (attrs.alpha as number | undefined) ?? 1;
      const beta = (attrs.beta as number | undefined) ?? 1;
      const dtype = e.typeOf(a).dtype;
      let y = e.op("MatMul", [attrs.transA ? tr(a) : a, attrs.transB ? tr(b) : b]);
      if (alpha !== 1) y = e.op("Mul", [y, e.scalar(alpha, dtype)]);
      if (!c) return [y];
      const bias = beta === 1 ? c : e.op("Mul", [c, e.scalar(beta, dtype)]);
      return [e.op("Add", [y, bias])];
    },
  },
  {
    name: "Conv",
    category: "conv",
    arity: [2, 3],
    primitive: true,
    infer: (ctx) => {
      const dtype = ctx.sameDType();
      ctx.requireDType(0, FLOATS);
      return [{ shape: convShape(ctx, [0, 1, ...(ctx.inputs.length === 3 ? [2] : [])]), dtype }];
    },
  },
  ...["MaxPool", "AveragePool"].map((name): OpDef => ({
    name,
    category: "pool",
    arity: [1, 1],
    primitive: true,
    infer: (ctx) => {
      const dtype = ctx.requireDType(0, FLOATS);
      const x = ctx.input(0).shape;
      if (x.length < 3) {
        ctx.fail("input must be N×C×spatial", "reshape the input to N×C×H×W", "shape-mismatch");
      }
      const kernel = ctx.ints("kernel_shape");
      if (name === "AveragePool") ctx.int("count_include_pad", 0);
      if (name === "MaxPool" && ctx.int("storage_order", 0) !== 0) {
        ctx.fail(
          "storage_order 1 is not supported",
          "use the default row-major order",
          "unsupported",
        );
      }
      const win = resolveWindow(ctx, x.slice(2), kernel);
      return [{ shape: [x[0], x[1], ...win.out], dtype }];
    },
  })),
];

defineOps(nnOps);
