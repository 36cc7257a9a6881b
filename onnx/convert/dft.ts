/**
 * DFT and STFT: kiln's ops of the same names (`jit/ops/spectral.ts`), their constant inputs
 * (opset 20's axis, dft_length, frame_step, frame_length) read here as attributes, and the
 * transform matrices they will hold checked against the budget.
 *
 * @module
 */
import { checkBudget } from "../../jit/runtime/budget.ts";
import { binCount } from "../../jit/ops/spectral.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { attrs, constInts, type Known, type NodeContext, typeOf } from "../import/node_context.ts";

/** Converts a DFT node (opsets 17–19: `axis` an attribute; 20: an input). */
export function dft(c: NodeContext): Known[] {
  const x = c.required(0), rank = typeOf(x).shape.length, a = attrs(c);
  const given = c.opset >= 20 ? constInts(c, 2, "axis")?.[0] : a.int("axis", 1);
  const raw = given ?? (c.opset >= 20 ? -2 : 1);
  const axis = raw < 0 ? raw + rank : raw;
  const length = c.input(1) ? constInts(c, 1, "dft_length")![0] : typeOf(x).shape[axis];
  const inverse = a.flag("inverse", false), onesided = a.flag("onesided", false);
  if (!(Number.isInteger(length) && length > 0)) {
    throw new KilnError(`${c.label}: dft_length ${length}`, {
      code: "bad-attribute",
      fix: "give a positive integer dft_length",
    });
  }
  checkBudget([length, binCount(length, onesided)], "f32", c.label); // the cosine and sine
  const attributes = { axis, length, inverse: inverse ? 1 : 0, onesided: onesided ? 1 : 0 };
  return c.emit("DFT", [x], attributes, 1);
}

/** Converts an STFT node: frames `frame_step` apart, of `frame_length` or the window's. */
export function stft(c: NodeContext): Known[] {
  const x = c.required(0), window = c.input(2);
  c.required(1);
  const [step] = constInts(c, 1, "frame_step")!;
  const frame = c.input(3)
    ? constInts(c, 3, "frame_length")![0]
    : window
    ? typeOf(window).shape[0]
    : undefined;
  if (frame === undefined) {
    throw new KilnError(`${c.label}: STFT without a frame_length or a window`, {
      code: "bad-input",
      fix: "give frame_length or a window",
    });
  }
  const onesided = attrs(c).flag("onesided", true);
  checkBudget([frame, binCount(frame, onesided)], "f32", c.label);
  const attributes = { step, frame, onesided: onesided ? 1 : 0 };
  return c.emit("STFT", window ? [x, window] : [x], attributes, 1);
}
