/**
 * Reference kernels for block-quantized weights (`jit/ops/block_matmul.ts`): each packed value
 * read from its word by its bit offset, as ONNX Runtime's MatMulNBits reads its bytes, without the
 * decomposition's float unpacking; the product sums in float64.
 *
 * @module
 */
import type { Kernel } from "./kernel.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
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

/** Kernels of the block-quantized ops, by op name. */
export const quantKernels: Record<string, Kernel> = {
  BlockDequantize: ({ inputs, outputs, ctx }) => [
    written(outputs[0].dtype, dequantized(inputs, ctx.int("bits"))),
  ],
  BlockMatMul: ({ inputs, outputs, ctx }) => {
    const [a, ...packed] = inputs;
    const k = a.shape.at(-1)!, n = packed[0].shape[0], rows = sizeOf(a.shape) / k;
    const w = dequantized(packed, ctx.int("bits")), size = w.length / n, x = read(a);
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
