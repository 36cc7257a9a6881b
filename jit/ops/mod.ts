/**
 * The complete op vocabulary: importing this module defines every built-in op.
 *
 * Primitive ops (a backend implements them): the 30 of the backend contract — Add Sub Mul Div
 * Neg Abs Sqrt Pow Exp Log MatMul ReduceSum ReduceMean ReduceMax ReduceMin Reshape Transpose
 * Concat Slice Split Squeeze Unsqueeze Identity Cast Equal Greater Less Where Constant Gather — and
 * the extensions that have no cheaper exact form: Erf Floor Ceil Round Sin Cos Mod Not And Or
 * IsNaN Bitcast Expand Pad GatherElements ArgMax CumSum Conv MaxPool AveragePool, and the placement ops
 * ToDevice ToHost.
 *
 * Decomposed ops (rewritten into primitives when a backend lacks them), one file a family: the
 * activations and elementwise functions (`activations.ts`, `elementwise.ts`), Softmax,
 * LayerNormalization and the sum-defined reductions (`reduce.ts`, `sum_reductions.ts`), the
 * normalizations (`normalization.ts`), Gemm and GroupNormalization (`nn.ts`), IntegerMatMul and
 * IntegerConv (integer kernels where the backends have integer dot products), the quantization
 * ops and integer products (`quantize.ts`, `integer_products.ts`), block-quantized weights
 * (`block_matmul.ts`: read packed), the recurrent layers, Einsum, the Fourier transforms, TopK
 * and Det, Resize, the scatters and gathers, the window ops built of others
 * (`pool_composites.ts`, `conv_transpose.ts`, `sampling.ts`, `roi.ts`), attention and the
 * language-model ops (`attention.ts`, `llm.ts`), the losses and optimizers. `docs/onnx.md` lists
 * them all. The reference backend also runs each of them directly, and the test suite checks that
 * both paths agree.
 *
 * @module
 */
import "./elementwise.ts";
import "./activations.ts";
import "./sum_reductions.ts";
import "./reduce.ts";
import "./normalization.ts";
import "./movement.ts";
import "./nn.ts";
import "./integer_matmul.ts";
import "./integer_conv.ts";
import "./integer_products.ts";
import "./ort_attention.ts";
import "./gqa.ts";
import "./qoperator.ts";
import "./block_matmul.ts";
import "./loss.ts";
import "./training.ts";
import "./einsum.ts";
import "./spectral.ts";
import "./recurrent.ts";
import "./ranking.ts";
import "./resize.ts";
import "./one_hot.ts";
import "./space_depth.ts";
import "./grid_sample.ts";
import "./scatter.ts";
import "./gather_nd.ts";
import "./movement_composites.ts";
import "./pool_composites.ts";
import "./conv_transpose.ts";
import "./llm.ts";
import "./sampling.ts";
import "./roi.ts";
import "./attention.ts";
import "./random_ops.ts";
import "./tfidf.ts";
import "./quantize.ts";
export { blockWeight, nativeBlockMatMul } from "./block_matmul.ts";
export { exactTerms, nativeIntegerMatMul } from "./integer_matmul.ts";
export { integerConvAttrs, nativeIntegerConv } from "./integer_conv.ts";
import "./source.ts";

export * from "./registry.ts";
