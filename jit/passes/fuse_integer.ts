/**
 * The integer products of fusion, where the backends have integer dot products (the WebAssembly
 * generator's `i32x4.dot_i16x8_s` tiles): an IntegerMatMul is a matmul and an IntegerConv a conv
 * whose i16 operands are widened to the i32 sum, one kernel each. Elsewhere both decompose into
 * exact float products (`jit/ops/integer_matmul.ts`, `integer_conv.ts`).
 *
 * @module
 */
import { convSym, matmulSym, type Walk } from "./fuse_contractions.ts";
import type { Sym } from "./fuse_values.ts";
import {
  type Attrs,
  integerConvAttrs,
  nativeIntegerConv,
  nativeIntegerMatMul,
  type ValueType,
} from "../ops/mod.ts";

/**
 * `op` (IntegerMatMul or IntegerConv) of `ins` as one integer product kernel, where its operands
 * fit the integer tiles; `undefined` otherwise (the op then decomposes).
 */
export function integerProduct(
  walk: Walk,
  op: string,
  ins: readonly Sym[],
  attrs: Attrs,
  { label, type, dots }: { label: string; type: ValueType; dots: true | "bytes" },
): Sym | undefined {
  const [a, b] = ins.map((s) => s.type);
  if (op === "IntegerMatMul" && nativeIntegerMatMul(a, b, dots)) {
    return matmulSym(walk, ins, label, type, { widen: true, inlineB: false, inlineA: false });
  }
  if (op === "IntegerConv" && nativeIntegerConv(a, b, attrs, dots)) {
    return convSym(walk, ins, integerConvAttrs(attrs), label, type, { widen: true });
  }
  return undefined;
}
