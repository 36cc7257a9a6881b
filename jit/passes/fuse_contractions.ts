/**
 * The contractions of fusion: MatMul, Conv and pooling, each a reduction group over an index
 * map's space (`index_maps.ts`) whose product reads its operands through the map. The walk
 * (`fuse.ts`) hands them what they need of it as a {@linkcode Walk}.
 *
 * @module
 */
import type { Expr, ReduceOp } from "../ir/kernel_ir.ts";
import { reindex } from "../ir/kernel_ir.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import type { Shape } from "../ir/shape.ts";
import { convMap, matmulMap, poolDivisors, poolMap } from "../ir/index_maps.ts";
import type { Group } from "./fuse_groups.ts";
import { own, type Sym, unique } from "./fuse_values.ts";
import { type Attrs, InferContext, type ValueType } from "../ops/mod.ts";
import { resolveWindow } from "../ops/nn.ts";
import type { KernelPattern } from "../ir/kernel_ir.ts";

/** What a contraction needs of the fusion walk. */
export interface Walk {
  /** An operand read many times by a contraction: bare loads stay inline, the rest is stored. */
  operand(s: Sym, label: string): Sym;
  /** Whether a product by `a` may read `b`'s elementwise expression inline (`inlineOperand`). */
  inline(a: Sym, b: Sym): boolean;
  /** A new group iterating `space`, `reduced` axes reduced. */
  group(space: Shape, reduced: number[], pattern: KernelPattern): Group;
  /** Reduction `op` of `expr` joining `group`: the value it gives. */
  reduction(
    group: Group,
    op: ReduceOp,
    expr: Expr,
    label: string,
    type: ValueType,
    labels: readonly string[],
  ): Sym;
}

/**
 * MatMul as a contraction over K in the space [...batch, M, N, K]; `widen`: an IntegerMatMul,
 * its i16 operands widened to the i32 sum's type; `inlineB`: B's expression read as it is (a
 * block product's unpacking), else inline only where the walk allows; `inlineA`: A's likewise (a
 * block product's prologue), else stored unless a bare load.
 */
export function matmulSym(
  walk: Walk,
  ins: readonly Sym[],
  label: string,
  type: ValueType,
  { widen, inlineB, inlineA }: { widen: boolean; inlineB: boolean; inlineA: boolean },
): Sym {
  const a = inlineA ? ins[0] : walk.operand(ins[0], label);
  const b = inlineB || walk.inline(a, ins[1]) ? ins[1] : walk.operand(ins[1], label);
  const map = matmulMap(a.type.shape, b.type.shape);
  const group = walk.group(map.space, map.reduced, "matmul");
  const read = (e: Expr): Expr =>
    widen ? { kind: "alu", op: "Cast", args: [e], dtype: type.dtype } : e;
  const product: Expr = {
    kind: "alu",
    op: "Mul",
    args: [read(reindex(a.expr, map.operands[0])), read(reindex(b.expr, map.operands[1]))],
    dtype: type.dtype,
  };
  return walk.reduction(group, "sum", product, label, type, [...own(a), ...own(b)]);
}

/**
 * 2-D Conv as a contraction over [Cg, KH, KW] in the space [N, G, Mg, OH, OW, Cg, KH, KW]. With
 * plain operands it is laid out as a matmul (implicit GEMM): [N, G, OH·OW, Mg, Cg·KH·KW], rows
 * of patches times the filters, so backends run it through their matmul kernels.
 */
export function convSym(
  walk: Walk,
  ins: readonly Sym[],
  attrs: Attrs,
  label: string,
  type: ValueType,
): Sym {
  const [x, w, bias] = ins.map((s) => walk.operand(s, label));
  const inputs = ins.map((s) => s.type);
  const ctx = new InferContext({ op: "Conv", where: label, inputs, attrs });
  const win = resolveWindow(ctx, x.type.shape.slice(2), w.type.shape.slice(2));
  const plain = x.expr.kind === "load" && w.expr.kind === "load";
  const map = convMap(x.type.shape, w.type.shape, ctx.int("group", 1), win, plain);
  const group = walk.group(map.space, map.reduced, "conv");
  group.keptOrder = map.keptOrder;
  const factors = [reindex(x.expr, map.operands[0]), reindex(w.expr, map.operands[1])];
  const product: Expr = {
    kind: "alu",
    op: "Mul",
    args: map.swapped ? factors.reverse() : factors,
    dtype: type.dtype,
  };
  const acc = walk.reduction(group, "sum", product, label, type, [...own(x), ...own(w)]);
  if (!bias) return acc;
  const expr: Expr = {
    kind: "alu",
    op: "Add",
    args: [acc.expr, reindex(bias.expr, map.operands[2])],
    dtype: type.dtype,
  };
  return { ...acc, expr, labels: unique([...acc.labels, ...own(bias)]) };
}

/**
 * MaxPool / AveragePool as a reduction over the window in [N, C, ...out, ...kernel], with the
 * divisors an average takes at its edges where they change (padding left out of the count,
 * ONNX's default; a ceil-mode overhang): the mean of the zero-filled window times that map.
 */
export function poolSym(
  walk: Walk,
  op: string,
  s: Sym,
  attrs: Attrs,
  label: string,
  type: ValueType,
): { pooled: Sym; divisors?: HostTensor } {
  const x = walk.operand(s, label);
  const ctx = new InferContext({ op, where: label, inputs: [x.type], attrs });
  const win = resolveWindow(ctx, x.type.shape.slice(2), ctx.ints("kernel_shape"));
  const map = poolMap(x.type.shape, win, op === "MaxPool" ? -Infinity : 0);
  const group = walk.group(map.space, map.reduced, "pool");
  const reduce = op === "MaxPool" ? "max" : "mean", read = reindex(x.expr, map.operands[0]);
  const pooled = walk.reduction(group, reduce, read, label, type, x.labels);
  const inclusive = ctx.int("count_include_pad", 0) === 1;
  const divisors = op === "AveragePool"
    ? poolDivisors(x.type.shape.slice(2), win, inclusive, type.dtype)
    : undefined;
  return { pooled, divisors: divisors || undefined };
}
