/**
 * A decode step's attention as GroupQueryAttention decomposes it, for tests of the attention
 * kernels: query rows over cached keys and values of fewer heads, each key head read by several
 * query heads through Expand.
 *
 * @module
 */
import type { GraphBuilder, Sym } from "../frontend/graph_builder.ts";

/** The sizes of {@linkcode groupedAttention}. */
export interface GroupedAttentionSizes {
  /** Cached keys. */
  readonly tokens: number;
  /** Query heads. */
  readonly heads: number;
  /** Key and value heads (each read by heads / groups query heads). */
  readonly groups: number;
  /** Head width. */
  readonly d: number;
}

/**
 * `softmax(q · kᵀ / √d [+ mask]) · v` over inputs `k` and `v` of shape [1, groups, tokens, d]
 * that `b` declares, `q` of shape [1, heads, rows, d]; `mask` is added to the scaled scores.
 */
export function groupedAttention(
  b: GraphBuilder,
  q: Sym,
  { tokens, heads, groups, d }: GroupedAttentionSizes,
  mask?: Sym,
): Sym {
  const expand = (name: string) =>
    b.op("Reshape", [
      b.op("Expand", [
        b.op("Reshape", [b.input(name, [1, groups, tokens, d])], {
          shape: [1, groups, 1, tokens, d],
        }),
      ], { shape: [1, groups, heads / groups, tokens, d] }),
    ], { shape: [1, heads, tokens, d] });
  const k = b.op("Transpose", [expand("k")], { perm: [0, 1, 3, 2] });
  const scaled = b.op("Mul", [b.op("MatMul", [q, k]), b.constant(1 / Math.sqrt(d))]);
  const scores = mask ? b.op("Add", [scaled, mask]) : scaled;
  return b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), expand("v")]);
}
