/**
 * DFT as two real matrix products: with the signal's axis moved last, the real and imaginary
 * parts are multiplied by constant cosine and sine matrices (`dft_length` zero-pads or truncates
 * the signal, `onesided` keeps the first n/2 + 1 bins, `inverse` conjugates and scales by 1/n),
 * then stacked into the trailing [re, im] axis and moved back. STFT is the same over the
 * signal's windowed frames.
 *
 * @module
 */
import { checkBudget } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import {
  attrs,
  constant,
  constInts,
  type Known,
  type NodeContext,
  opOf,
  typeOf,
} from "../import/node_context.ts";

/** Converts a DFT node (opsets 17–19: `axis` an attribute; 20: an input). */
export function dft(c: NodeContext): Known[] {
  const op = opOf(c);
  const x = c.required(0);
  const shape = typeOf(x).shape, rank = shape.length;
  const a = attrs(c);
  const axisGiven = c.opset >= 20 ? constInts(c, 2, "axis")?.[0] : a.int("axis", 1);
  const raw = axisGiven ?? (c.opset >= 20 ? -2 : 1);
  const axis = raw < 0 ? raw + rank : raw;
  const inverse = a.flag("inverse", false), onesided = a.flag("onesided", false);
  if (shape.at(-1) !== 1 && shape.at(-1) !== 2 || axis < 0 || axis >= rank - 1) {
    throw new KilnError(`${c.label}: signal [${shape}] with axis ${raw}`, {
      code: "shape-mismatch",
      fix: "give a signal [..., n, 1] (real) or [..., n, 2] (complex) and an axis before the last",
    });
  }
  const n = shape[axis];
  const length = c.input(1) ? constInts(c, 1, "dft_length")![0] : n;
  const bins = onesided ? Math.floor(length / 2) + 1 : length;
  if (!(Number.isInteger(length) && length > 0)) {
    throw new KilnError(`${c.label}: dft_length ${length}`, {
      code: "bad-attribute",
      fix: "give a positive integer dft_length",
    });
  }
  checkBudget([length, bins], "f32", c.label); // the cosine and sine matrices

  // Real and imaginary parts [..., n] with the signal's axis last.
  const part = (i: number) => {
    if (i === 1 && shape.at(-1) === 1) return undefined;
    const p = op("Squeeze", [op("Slice", [x], { starts: [i], ends: [i + 1], axes: [-1] })], {
      axes: [rank - 1],
    });
    const perm = [...Array(rank - 1).keys()].filter((d) => d !== axis).concat(axis);
    const moved = op("Transpose", [p], { perm });
    // Zero-pad or truncate to dft_length.
    return length === n ? moved : op("Pad", [moved], {
      pads: [0, length - n],
      axes: [-1],
      mode: "constant",
      value: 0,
    });
  };
  const [re, im] = [part(0)!, part(1)];
  const sign = inverse ? 1 : -1, scale = inverse ? 1 / length : 1;
  const cos: number[] = [], sin: number[] = [];
  for (let j = 0; j < length; j++) {
    for (let k = 0; k < bins; k++) {
      const t = (2 * Math.PI * ((j * k) % length)) / length;
      cos.push(Math.cos(t) * scale);
      sin.push(sign * Math.sin(t) * scale);
    }
  }
  const t = typeOf(x).dtype;
  const C = constant(cos, [length, bins], t), S = constant(sin, [length, bins], t);
  // (re + i·im)(cos + i·sin·sign): re·cos − im·sin', re·sin' + im·cos.
  let outRe = op("MatMul", [re, C]), outIm = op("MatMul", [re, S]);
  if (im) {
    outRe = op("Sub", [outRe, op("MatMul", [im, S])]);
    outIm = op("Add", [outIm, op("MatMul", [im, C])]);
  }
  const stacked = op("Concat", [
    op("Unsqueeze", [outRe], { axes: [rank - 1] }),
    op("Unsqueeze", [outIm], { axes: [rank - 1] }),
  ], { axis: rank - 1 });
  // Move the bins axis (now at rank - 2) back to `axis`.
  const order = [...Array(rank - 1).keys()].filter((d) => d !== axis);
  const back: number[] = Array(rank);
  order.forEach((d, i) => (back[d] = i));
  back[axis] = rank - 2;
  back[rank - 1] = rank - 1;
  return [op("Transpose", [stacked], { perm: back })];
}

/**
 * STFT: the signal's frames (a constant gather, `frame_step` apart), each windowed, then the same
 * two matrix products as DFT over the frame (`onesided` by default).
 */
export function stft(c: NodeContext): Known[] {
  const op = opOf(c);
  const x = c.required(0);
  const shape = typeOf(x).shape;
  c.required(1);
  const [step] = constInts(c, 1, "frame_step")!;
  const window = c.input(2);
  const frameLength = c.input(3)
    ? constInts(c, 3, "frame_length")![0]
    : window
    ? typeOf(window).shape[0]
    : undefined;
  const onesided = attrs(c).flag("onesided", true);
  if (shape.length !== 3 || !frameLength || !(step > 0) || frameLength > shape[1]) {
    throw new KilnError(
      `${c.label}: signal [${shape}], frame_step ${step}, frame_length ${frameLength}`,
      {
        code: "shape-mismatch",
        fix:
          "give a signal [batch, length, 1 or 2], a positive frame_step and a frame_length ≤ length",
      },
    );
  }
  const frames = Math.floor((shape[1] - frameLength) / step) + 1;
  const bins = onesided ? Math.floor(frameLength / 2) + 1 : frameLength;
  checkBudget([frameLength, bins], "f32", c.label);
  const picks = Int32Array.from(
    { length: frames * frameLength },
    (_, i) => Math.floor(i / frameLength) * step + (i % frameLength),
  );
  const index = constant(picks, [frames, frameLength], "i32");
  // [batch, frames, frame_length, 1 or 2]
  const framed = op("Gather", [x, index], { axis: 1 });
  const part = (i: number) => {
    if (i === 1 && shape[2] === 1) return undefined;
    let p = op("Squeeze", [op("Slice", [framed], { starts: [i], ends: [i + 1], axes: [3] })], {
      axes: [3],
    });
    if (window) p = op("Mul", [p, window]);
    return p;
  };
  const [re, im] = [part(0)!, part(1)];
  const cos: number[] = [], sin: number[] = [];
  for (let j = 0; j < frameLength; j++) {
    for (let k = 0; k < bins; k++) {
      const t = (2 * Math.PI * ((j * k) % frameLength)) / frameLength;
      cos.push(Math.cos(t));
      sin.push(-Math.sin(t));
    }
  }
  const C = constant(cos, [frameLength, bins], typeOf(x).dtype);
  const S = constant(sin, [frameLength, bins], typeOf(x).dtype);
  let outRe = op("MatMul", [re, C]), outIm = op("MatMul", [re, S]);
  if (im) {
    outRe = op("Sub", [outRe, op("MatMul", [im, S])]);
    outIm = op("Add", [outIm, op("MatMul", [im, C])]);
  }
  return [op("Concat", [
    op("Unsqueeze", [outRe], { axes: [3] }),
    op("Unsqueeze", [outIm], { axes: [3] }),
  ], { axis: 3 })];
}
