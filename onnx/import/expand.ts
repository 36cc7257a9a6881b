/**
 * The ops the importer writes out through their one decomposition (`jit/ops/`) as it imports
 * them, rather than leaving them to the compile: their parts on constant weights then fold once,
 * as the model is read. A transposed convolution's flipped, regrouped kernel is computed once,
 * where the op left for fusion re-gathered its weights at every read (unet's upsampling: 0.7 →
 * 7.6 ms on wasm); a quantized weight is dequantized, or shifted by its zero point and split into
 * its exact chunks, once. An op whose inputs are all constant folds whole instead, in one pass of
 * its reference kernel.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { type Attrs, constantElements, type EmitRef, getOp, inferNode } from "../../jit/ops/mod.ts";
import { constant, type Known, typeOf } from "./node_context.ts";

/** The ops expanded at import (see the module's text). */
export const EXPANDED: ReadonlySet<string> = new Set([
  "ConvTranspose",
  "Col2Im",
  "FusedMatMul",
  "QuantizeLinear",
  "DequantizeLinear",
  "MatMulInteger",
  "ConvInteger",
  "QLinearMatMul",
  "QLinearConv",
  "EmbedLayerNormalization",
  "MultiHeadAttention",
  "GroupQueryAttention",
  "QGemm",
  "QLinearAdd",
  "QLinearMul",
  "QLinearSigmoid",
  "QLinearLeakyRelu",
  "QLinearGlobalAveragePool",
  "QLinearConcat",
  "QLinearSoftmax",
]);

/** Emits one op of known inputs, as the importer does. */
export type KnownEmit = (
  op: string,
  ins: readonly Known[],
  attrs: Attrs,
  outputs: number,
) => Known[];

/**
 * Composite `op`'s decomposition run through `emit`, so its parts on constants fold as they are
 * emitted (and its parts that are expanded ops expand in turn); the op's own rule checks the node
 * first.
 */
export function expand(
  emit: KnownEmit,
  [op, ins, attrs, outputs]: [string, readonly Known[], Attrs, number],
  label: string,
): Known[] {
  inferNode(op, ins.map((k) => typeOf(k)), attrs, label);
  const refs: Known[] = [...ins];
  const ref = (k: Known): EmitRef => ({ id: refs.push(k) - 1 });
  const run = (o: string, xs: readonly EmitRef[], a: Attrs = {}, n = 1) =>
    emit(o, xs.map((r) => refs[r.id]), a, n).map(ref);
  const outs = getOp(op).decompose!(
    {
      op: (o, xs, a) => run(o, xs, a)[0],
      opN: (o, xs, a, n) => run(o, xs, a ?? {}, n),
      scalar: (value, dtype) => ref(constant([value], [], dtype)),
      typeOf: (r) => typeOf(refs[r.id]),
      constantOf: (r) => {
        const k = refs[r.id];
        return k.kind === "const" ? constantElements(k.tensor) : undefined;
      },
    },
    ins.map((_, i) => ({ id: i })),
    attrs,
  );
  if (outs.length !== outputs) {
    throw new KilnError(`${label}: ${op} gave ${outs.length} outputs`, {
      code: "internal",
      fix: "report this",
    });
  }
  return outs.map((r) => refs[r.id]);
}
