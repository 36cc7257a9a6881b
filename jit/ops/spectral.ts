/**
 * Discrete Fourier transforms as kiln ops. `DFT` transforms a signal [..., n, 1 | 2] (real, or
 * complex as [re, im]) along `axis`, over `length` points (zero-padded or cut), keeping the first
 * length / 2 + 1 bins where `onesided`, conjugated and scaled by 1 / length where `inverse`.
 * `STFT` transforms a signal [batch, length, 1 | 2] in frames of `frame` points `step` apart,
 * each times the optional window [frame] (onesided by default). Both output [..., bins, 2].
 *
 * Both decompose into two real matrix products by constant cosine and sine matrices, the
 * signal's axis moved last (STFT's frames a constant gather first), then the real and imaginary
 * results stacked into the trailing axis.
 *
 * @module
 */
import type { DType } from "../ir/dtype.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  type ValueType,
} from "./registry.ts";

/** Bins of a transform over `length` points. */
export function binCount(length: number, onesided: boolean): number {
  return onesided ? Math.floor(length / 2) + 1 : length;
}

/**
 * `(re + i·im)` times the transform matrix of `length` points and `bins` bins (sign −1 forward,
 * +1 inverse, scaled by `scale`), as [re, im] along a new last axis.
 */
function transform(
  e: Emitter,
  [re, im]: readonly [EmitRef, EmitRef | undefined],
  { length, bins, inverse }: { length: number; bins: number; inverse: boolean },
): EmitRef {
  const sign = inverse ? 1 : -1, scale = inverse ? 1 / length : 1, dtype = e.typeOf(re).dtype;
  const cos: number[] = [], sin: number[] = [];
  for (let j = 0; j < length; j++) {
    for (let k = 0; k < bins; k++) {
      const t = (2 * Math.PI * ((j * k) % length)) / length;
      cos.push(Math.cos(t) * scale);
      sin.push(sign * Math.sin(t) * scale);
    }
  }
  const matrix = (values: number[]) => constantOf(e, values, [length, bins], dtype);
  const [C, S] = [matrix(cos), matrix(sin)];
  // (re + i·im)(cos + i·sin'): re·cos − im·sin', re·sin' + im·cos.
  let outRe = e.op("MatMul", [re, C]), outIm = e.op("MatMul", [re, S]);
  if (im) {
    outRe = e.op("Sub", [outRe, e.op("MatMul", [im, S])]);
    outIm = e.op("Add", [outIm, e.op("MatMul", [im, C])]);
  }
  const last = e.typeOf(outRe).shape.length;
  const [a, b] = [outRe, outIm].map((p) => e.op("Unsqueeze", [p], { axes: [last] }));
  return e.op("Concat", [a, b], { axis: last });
}

/** A constant of `values` in `dtype`. */
function constantOf(e: Emitter, values: number[], shape: number[], dtype: DType): EmitRef {
  const data = dtype === "f64" ? Float64Array.from(values) : Float32Array.from(values);
  const c = e.op("Constant", [], {
    value: { data, shape, dtype: dtype === "f64" ? "f64" : "f32" },
  });
  return dtype === "f64" || dtype === "f32" ? c : e.op("Cast", [c], { to: dtype });
}

/** Part `i` (0 real, 1 imaginary: absent for a real signal) of `x` [..., 1 | 2], squeezed. */
function part(e: Emitter, x: EmitRef, i: number): EmitRef | undefined {
  const shape = e.typeOf(x).shape, rank = shape.length;
  if (i === 1 && shape.at(-1) === 1) return undefined;
  const slice = e.op("Slice", [x], { starts: [i], ends: [i + 1], axes: [rank - 1] });
  return e.op("Squeeze", [slice], { axes: [rank - 1] });
}

/** DFT's output type, its attributes checked. */
function dftType(ctx: InferContext): ValueType {
  const dtype = ctx.requireFloat(0), shape = ctx.input(0).shape, rank = shape.length;
  const axis = ctx.int("axis"), length = ctx.int("length");
  if ((shape.at(-1) !== 1 && shape.at(-1) !== 2) || axis < 0 || axis >= rank - 1) {
    ctx.fail(
      `a signal [${shape}] along axis ${axis}`,
      "give a signal [..., n, 1] (real) or [..., n, 2] (complex) and an axis before the last",
      "shape-mismatch",
    );
  }
  if (!(length > 0)) ctx.fail(`a length of ${length}`, "give a positive length", "bad-attribute");
  const out = [...shape];
  out[axis] = binCount(length, ctx.int("onesided", 0) === 1);
  out[rank - 1] = 2;
  return { shape: out, dtype };
}

/** DFT's decomposition. */
function dft(e: Emitter, x: EmitRef, a: Attrs): EmitRef {
  const shape = e.typeOf(x).shape, rank = shape.length, axis = a.axis as number;
  const length = a.length as number, n = shape[axis];
  const bins = binCount(length, a.onesided === 1);
  // Each part with the signal's axis last, zero-padded or cut to the length.
  const perm = [...Array(rank - 1).keys()].filter((d) => d !== axis).concat(axis);
  const moved = (p: EmitRef | undefined) => {
    if (!p) return undefined;
    const t = e.op("Transpose", [p], { perm });
    return length === n
      ? t
      : e.op("Pad", [t], { pads: [0, length - n], axes: [rank - 2], mode: "constant", value: 0 });
  };
  const parts = [moved(part(e, x, 0))!, moved(part(e, x, 1))] as const;
  const stacked = transform(e, parts, { length, bins, inverse: a.inverse === 1 });
  // The bins (now at rank − 2) back to `axis`.
  const back: number[] = Array(rank);
  [...Array(rank - 1).keys()].filter((d) => d !== axis).forEach((d, i) => (back[d] = i));
  back[axis] = rank - 2;
  back[rank - 1] = rank - 1;
  return e.op("Transpose", [stacked], { perm: back });
}

/** STFT's output type, its attributes and window checked. */
function stftType(ctx: InferContext): ValueType {
  const dtype = ctx.requireFloat(0), shape = ctx.input(0).shape;
  const step = ctx.int("step"), frame = ctx.int("frame");
  const window = ctx.inputs[1];
  if (
    shape.length !== 3 || (shape[2] !== 1 && shape[2] !== 2) || !(step > 0) || !(frame > 0) ||
    frame > shape[1] || (window && window.shape.join() !== `${frame}`)
  ) {
    ctx.fail(
      `a signal [${shape}] in frames of ${frame} every ${step}`,
      "give a signal [batch, length, 1 or 2], a positive step, a frame ≤ length and a window [frame]",
      "shape-mismatch",
    );
  }
  const frames = Math.floor((shape[1] - frame) / step) + 1;
  return { shape: [shape[0], frames, binCount(frame, ctx.int("onesided", 1) === 1), 2], dtype };
}

/** STFT's decomposition: the frames gathered, windowed, each transformed. */
function stft(e: Emitter, [x, window]: readonly EmitRef[], a: Attrs): EmitRef {
  const shape = e.typeOf(x).shape, step = a.step as number, frame = a.frame as number;
  const frames = Math.floor((shape[1] - frame) / step) + 1;
  const picks = Int32Array.from(
    { length: frames * frame },
    (_, i) => Math.floor(i / frame) * step + (i % frame),
  );
  const index = e.op("Constant", [], {
    value: { data: picks, shape: [frames, frame], dtype: "i32" },
  });
  // [batch, frames, frame, 1 or 2]
  const framed = e.op("Gather", [x, index], { axis: 1 });
  const windowed = (p: EmitRef | undefined) => (p && window ? e.op("Mul", [p, window]) : p);
  const parts = [windowed(part(e, framed, 0))!, windowed(part(e, framed, 1))] as const;
  const bins = binCount(frame, (a.onesided ?? 1) === 1);
  return transform(e, parts, { length: frame, bins, inverse: false });
}

const spectralOps: OpDef[] = [{
  name: "DFT",
  category: "composite",
  arity: [1, 1],
  primitive: false,
  infer: (ctx) => {
    ctx.int("inverse", 0);
    return [dftType(ctx)];
  },
  decompose: (e, [x], a) => [dft(e, x, a)],
}, {
  name: "STFT",
  category: "composite",
  arity: [1, 2],
  primitive: false,
  infer: (ctx) => [stftType(ctx)],
  decompose: (e, ins, a) => [stft(e, ins, a)],
}];

defineOps(spectralOps);
