/**
 * Folding a constant elementwise expression in one typed-array pass, for the converters whose
 * weights' transforms are large (a DequantizeLinear of ResNet-50's weights, a zero point's
 * subtraction): folded op by op through the reference kernels, each such [768, 3072] weight
 * took about 150 ms of an import; in one pass, a tenth of that.
 *
 * @module
 */
import { sizeOf } from "../../jit/ir/shape.ts";

/**
 * For each element of `shape` (row-major), the element of `sub` broadcast to it (NumPy rules,
 * `sub` aligned right); `undefined` when `sub` does not broadcast to `shape`.
 */
export function broadcastIndex(
  shape: readonly number[],
  sub: readonly number[],
): ((i: number) => number) | undefined {
  if (sub.length > shape.length) return undefined;
  const aligned = [...Array(shape.length - sub.length).fill(1), ...sub];
  if (aligned.some((d, i) => d !== 1 && d !== shape[i])) return undefined;
  if (sizeOf(aligned) === 1) return () => 0;
  if (aligned.every((d, i) => d === shape[i])) return (i) => i;
  const spread = aligned.flatMap((d, i) => (d === 1 ? [] : [i]));
  if (spread.length === 1) {
    // One axis of its own (a per-channel scale): the common case, one division.
    const [d] = spread, inner = sizeOf(shape.slice(d + 1)), n = shape[d];
    return (i) => Math.floor(i / inner) % n;
  }
  const strides = aligned.map((_, d) => (aligned[d] === 1 ? 0 : sizeOf(aligned.slice(d + 1))));
  return (i) => {
    let at = 0, rest = i;
    for (let d = shape.length - 1; d >= 0; d--) {
      at += (rest % shape[d]) * strides[d];
      rest = Math.floor(rest / shape[d]);
    }
    return at;
  };
}
