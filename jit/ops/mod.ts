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
 * Decomposed ops (rewritten into primitives when a backend lacks them): Relu LeakyRelu Sigmoid
 * Tanh Gelu Mish HardSigmoid HardSwish Reciprocal Clip Min Max GreaterOrEqual LessOrEqual Softmax
 * LogSoftmax LayerNormalization BatchNormalization MeanVarianceNormalization (`normalization.ts`)
 * GlobalAveragePool Gemm Flatten ConstantOfShape
 * Range IntegerMatMul (which fusion builds as one integer kernel where the backends have integer
 * dot products), BlockDequantize and BlockMatMul (block-quantized weights read packed; fusion
 * builds a product of few rows as one kernel where the generator unpacks in registers), ONNX's function-defined activations (`activations.ts`) and sum-defined
 * reductions (`sum_reductions.ts`), QuantizeRowBlocks (A rounded to 8 bits a block before a
 * block product), the training losses NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
 * (`loss.ts`), the optimizers Adagrad, Momentum and Adam (`training.ts`), Einsum (`einsum.ts`)
 * the Fourier transforms DFT and STFT (`spectral.ts`), the recurrent layers RNN, GRU and LSTM
 * (`recurrent.ts`), TopK and Det (`ranking.ts`), Resize (`resize.ts`), OneHot (`one_hot.ts`), DepthToSpace and SpaceToDepth
 * (`space_depth.ts`), GridSample (`grid_sample.ts`). The reference backend also runs each of them directly, and the test
 * suite checks that both paths agree.
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
import "./integer_products.ts";
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
import "./source.ts";

export * from "./registry.ts";
