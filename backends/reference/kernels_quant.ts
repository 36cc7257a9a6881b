/**
 * Reference kernels of the quantization ops: QuantizeLinear, DequantizeLinear and
 * DynamicQuantizeLinear element by element in f32 arithmetic as ONNX defines them, and of
 * block-quantized weights (`jit/ops/block_matmul.ts`): each packed value
 * read from its word by its bit offset, as ONNX Runtime's MatMulNBits reads its bytes, without the
 * decomposition's float unpacking; the product sums in float64. QuantizeRowBlocks rounds each
 * block of A's rows to 8 bits in f32 arithmetic, as ONNX Runtime's CPU does for MatMulNBits of
 * `accuracy_level` 4.
 *
 * @module
 */
import type { Kernel } from "./kernel.ts";
import { roundHalfEven } from "./scalar_math.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { broadcastRun, type Shape, sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import type { InferContext } from "../../jit/ops/mod.ts";
import { quantRange } from "../../jit/ops/quantize.ts";
import { read, writer, written } from "./tensor_io.ts";

/** The rows of packed `words` [..., L] dequantized: [rows, blocks · block] in float64. */
function dequantized([words, scales, zeros]: readonly RefTensor[], bits: number): Float64Array {
  const width = words.shape.at(-1)!, rows = sizeOf(words.shape) / width;
  const blocks = scales.shape.at(-1)!, block = (width / blocks) * (32 / bits);
  const q = read(words), s = read(scales), z = zeros && read(zeros);
  const size = blocks * block, mask = (1 << bits) - 1, out = new Float64Array(rows * size);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < size; i++) {
      const bit = i * bits, b = r * blocks + Math.floor(i / block);
      const value = (q[r * width + (bit >> 5)] >>> (bit & 31)) & mask;
      out[r * size + i] = (value - (z ? z[b] : 2 ** (bits - 1))) * s[b];
    }
  }
  return out;
}

/**
 * The block `x[start, end)`'s scale (max |x| / 127) and the factor its values are rounded by
 * (127 / max |x|, MLAS's, not 1 / scale, which rounds differently; 0 for a block of zeros), each
 * rounded to f32.
 */
function blockScale(x: ArrayLike<number>, start: number, end: number) {
  const f = Math.fround;
  let largest = 0;
  for (let i = start; i < end; i++) largest = Math.max(largest, Math.abs(x[i]));
  const scale = f(largest / 127);
  return { scale, inverse: scale === 0 ? 0 : f(127 / largest) };
}

/**
 * `a`'s rows [..., K] rounded to 8 bits per block of `block`, each step rounded to f32:
 * a → round(a · inverse) · scale (see `blockScale`).
 */
function quantizeRows(a: RefTensor, block: number): Float64Array {
  const f = Math.fround, x = read(a), k = a.shape.at(-1)!, out = new Float64Array(x.length);
  for (let row = 0; row < x.length; row += k) {
    for (let start = row; start < row + k; start += block) {
      const end = Math.min(start + block, row + k);
      const { scale, inverse } = blockScale(x, start, end);
      for (let i = start; i < end; i++) out[i] = f(roundHalfEven(f(x[i] * inverse)) * scale);
    }
  }
  return out;
}

/** Value 32g + 8t + 2i + p's place in a packed block's words: word 4p + t, byte i. */
function placeOf(j: number): { word: number; byte: number } {
  const g = j >> 5, t = (j >> 3) & 3, i = (j >> 1) & 3, p = j & 1;
  return { word: g * 8 + p * 4 + t, byte: i };
}

/**
 * `a`'s rows [..., K] packed as PackRowBlocks packs them: rounded as `quantizeRows` rounds, the
 * integers as signed bytes four to a word in each 32 values' nibble order (`placeOf`), and each
 * block's scale.
 */
function packRows(a: RefTensor, block: number): [Float64Array, Float64Array] {
  const f = Math.fround, x = read(a), blocks = x.length / block;
  const words = new Float64Array(x.length / 4), scales = new Float64Array(blocks);
  for (let b = 0; b < blocks; b++) {
    const { scale, inverse } = blockScale(x, b * block, (b + 1) * block);
    scales[b] = scale;
    for (let j = 0; j < block; j++) {
      const q = roundHalfEven(f(x[b * block + j] * inverse)), { word, byte } = placeOf(j);
      words[(b * block) / 4 + word] += (q & 255) * 2 ** (8 * byte);
    }
  }
  return [words, scales];
}

/** PackRowBlocks' words [..., K / 4] and scales back to A's f32 values [..., K]. */
function unpackRows(words: RefTensor, scales: RefTensor): Float64Array {
  const w = read(words), s = read(scales), k = words.shape.at(-1)! * 4;
  const blocks = scales.shape.at(-1)!, block = k / blocks, out = new Float64Array(w.length * 4);
  for (let j = 0; j < out.length; j++) {
    const b = Math.floor(j / block), { word, byte } = placeOf(j % block);
    const unsigned = (w[(b * block) / 4 + word] >>> (8 * byte)) & 255;
    out[j] = Math.fround((unsigned < 128 ? unsigned : unsigned - 256) * s[b]);
  }
  return out;
}

/**
 * The scales (or zero points) of shape `ks` of a tensor of `shape`, in runs of elements that share
 * one: run `r` covers elements `r · run` to `(r + 1) · run` and takes index `at(r)`. Per tensor one
 * run, per axis (1-D along `axis`) runs of the axis's inner size, per block of `block` along
 * `axis` or broadcast as NumPy's runs of one element. Runs keep a weight's dequantization at
 * import a loop without a division an element (ResNet-50's per-channel weights: 270 ms before).
 */
function scaleRuns(
  shape: Shape,
  ks: Shape,
  axis: number,
  block: number,
): { run: number; at: (r: number) => number } {
  const rank = shape.length;
  // Per tensor, or per axis (its length checked at inference): the scales lined up with x's
  // axes as `spread` in jit/ops/quantize.ts lines them up, read in runs.
  const whole = sizeOf(ks) === 1;
  if (whole || (!block && ks.length === 1)) {
    const along = whole ? [] : shape.map((_, i) => (i === axis ? ks[0] : 1));
    return { run: broadcastRun(along, shape)!, at: (r) => r % sizeOf(ks) };
  }
  const aligned = [...Array(rank - ks.length).fill(1), ...ks], strides = stridesOf(aligned);
  const at = (i: number) => {
    let index = 0, rest = i;
    for (let d = rank - 1; d >= 0; d--) {
      const c = rest % shape[d];
      rest = Math.floor(rest / shape[d]);
      const own = aligned[d] === 1 ? 0 : block && d === axis ? Math.floor(c / block) : c;
      index += own * strides[d];
    }
    return index;
  };
  return { run: 1, at };
}

/** A QuantizeLinear's or DequantizeLinear's x, scales and zero points (0 where none), in runs. */
function scaled(inputs: readonly RefTensor[], ctx: InferContext) {
  const [x, s, z] = inputs, rank = x.shape.length, block = ctx.int("block_size", 0);
  const perTensor = !block && sizeOf(s.shape) === 1;
  const axis = rank && !perTensor ? ctx.axis(ctx.int("axis", 1), rank) : 0;
  const { run, at } = scaleRuns(x.shape, s.shape, axis, block);
  return { x: read(x), s: read(s), z: z ? read(z) : [0], zAt: z ? at : () => 0, at, run };
}

/** `[min(0, min v), max(0, max v)]`. */
function rangeWithZero(v: ArrayLike<number>): [number, number] {
  let lo = 0, hi = 0;
  for (let i = 0; i < v.length; i++) [lo, hi] = [Math.min(lo, v[i]), Math.max(hi, v[i])];
  return [lo, hi];
}

/** Kernels of the block-quantized ops, by op name. */
export const quantKernels: Record<string, Kernel> = {
  // The range widened to hold 0, its scale and zero point in f32 arithmetic, as the decomposition.
  DynamicQuantizeLinear: ({ inputs: [x], outputs }) => {
    const v = read(x), f = Math.fround;
    const [lo, hi] = rangeWithZero(v);
    const scale = f(f(hi - lo) / 255);
    const clip = (q: number) => Math.min(255, Math.max(0, q));
    const zp = clip(roundHalfEven(f(0 - f(lo / scale))));
    const y = Array.from(v, (a) => clip(f(roundHalfEven(f(a / scale)) + zp)));
    return [
      written(outputs[0].dtype, y),
      written(outputs[1].dtype, [scale]),
      written(outputs[2].dtype, [zp]),
    ];
  },
  RangeWithZero: ({ inputs: [x], outputs }) =>
    rangeWithZero(read(x)).map((v, k) => written(outputs[k].dtype, [v])),
  // Each step rounded to f32, as the decomposition computes: x / scale, then the zero point added.
  QuantizeLinear: ({ inputs, outputs, ctx }) => {
    const { x, s, z, zAt, at, run } = scaled(inputs, ctx), f = Math.fround;
    const dtype = outputs[0].dtype, [lo, hi] = quantRange(dtype, ctx.int("bits", 8));
    const y = writer(dtype, x.length);
    for (let r = 0, i = 0; i < x.length; r++) {
      const scale = s[at(r)], zero = z[zAt(r)];
      for (const end = i + run; i < end; i++) {
        y.out[i] = Math.min(hi, Math.max(lo, roundHalfEven(f(x[i] / scale)) + zero));
      }
    }
    return [y.finish()];
  },
  DequantizeLinear: ({ inputs, outputs, ctx }) => {
    const { x, s, z, zAt, at, run } = scaled(inputs, ctx), f = Math.fround;
    const y = writer(outputs[0].dtype, x.length);
    for (let r = 0, i = 0; i < x.length; r++) {
      const scale = f(s[at(r)]), zero = f(z[zAt(r)]);
      for (const end = i + run; i < end; i++) y.out[i] = f(f(f(x[i]) - zero) * scale);
    }
    return [y.finish()];
  },
  BlockDequantize: ({ inputs, outputs, ctx }) => [
    written(outputs[0].dtype, dequantized(inputs, ctx.int("bits"))),
  ],
  QuantizeRowBlocks: ({ inputs, outputs, ctx }) => [
    written(outputs[0].dtype, quantizeRows(inputs[0], ctx.int("block"))),
  ],
  PackRowBlocks: ({ inputs, outputs, ctx }) => {
    const [words, scales] = packRows(inputs[0], ctx.int("block"));
    return [written(outputs[0].dtype, words), written(outputs[1].dtype, scales)];
  },
  BlockMatMul: ({ inputs, outputs, ctx }) => {
    // A packed by PackRowBlocks (`packed`) is its words and scales.
    const packedA = ctx.int("packed", 0) === 1;
    const [a, ...packed] = packedA ? [inputs[0], ...inputs.slice(2)] : inputs;
    // A that the product `rounds` is rounded first, as QuantizeRowBlocks rounds it.
    const x = packedA
      ? unpackRows(inputs[0], inputs[1])
      : ctx.int("rounds", 0) === 1
      ? quantizeRows(a, ctx.int("block"))
      : read(a);
    const k = a.shape.at(-1)! * (packedA ? 4 : 1), n = packed[0].shape[0];
    const rows = x.length / k;
    const w = dequantized(packed, ctx.int("bits")), size = w.length / n;
    const y = writer(outputs[0].dtype, rows * n);
    for (let r = 0; r < rows; r++) {
      for (let j = 0; j < n; j++) {
        let sum = 0;
        for (let p = 0; p < k; p++) sum += x[r * k + p] * w[j * size + p];
        y.out[r * n + j] = sum;
      }
    }
    return [y.finish()];
  },
};
