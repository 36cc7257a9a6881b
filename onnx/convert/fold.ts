/**
 * Folding a constant elementwise expression in one typed-array pass ({@linkcode foldedMap}), for
 * the converters whose weights' transforms are large (a DequantizeLinear, a zero point's
 * subtraction): folded op by op through the reference kernels, each [768, 3072] weight took
 * about 150 ms of an import; in one pass, a tenth of that.
 *
 * @module
 */
import { sizeOf } from "../../jit/ir/shape.ts";
import type { Known } from "../import/node_context.ts";

/** The dtypes a one-pass fold writes. */
type Folded = "i16" | "i32" | "f32";

const ARRAYS = { i16: Int16Array, i32: Int32Array, f32: Float32Array } as const;

/**
 * `f(x, a, b)` at every element of a constant `x`, with constants `a` and `b` broadcast to it
 * (an absent one reads 0), as a constant of `dtype` (the typed array's store rounds or wraps
 * as a Cast would); `undefined` where an operand is not constant or does not broadcast.
 */
export function foldedMap(
  x: Known,
  [a, b]: readonly (Known | undefined)[],
  dtype: Folded,
  f: (x: number, a: number, b: number) => number,
): Known | undefined {
  if (x.kind !== "const") return undefined;
  const shape = x.tensor.shape, data = x.tensor.data as ArrayLike<number>;
  const read = (k: Known | undefined) => {
    if (!k) return { values: [0], at: () => 0 };
    if (k.kind !== "const") return undefined;
    const at = broadcastIndex(shape, k.tensor.shape);
    return at && { values: k.tensor.data as ArrayLike<number>, at };
  };
  const [ra, rb] = [read(a), read(b)];
  if (!ra || !rb) return undefined;
  const out = new ARRAYS[dtype](data.length);
  for (let i = 0; i < out.length; i++) {
    out[i] = f(data[i], ra.values[ra.at(i)], rb.values[rb.at(i)]);
  }
  return { kind: "const", tensor: { data: out, shape, dtype }, i64: false };
}

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
