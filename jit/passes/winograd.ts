/**
 * 3×3 convolutions of stride 1 as Winograd's F(2×2, 3×3): each 2×2 block of outputs from a 4×4
 * tile of the input, in 16 products of the channels where the direct convolution takes 36.
 *
 * For a tile d (4×4 of one channel) and a filter g (3×3), the block is Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A,
 * summed over the channels inside the ⊙, so that per position ξ of the 4×4 transformed tile the
 * sum over channels is a matrix product: M_ξ = V_ξ · U_ξ with V_ξ = (Bᵀ d B)_ξ ([tiles, in]) and
 * U_ξ = (G g Gᵀ)_ξ ([in, out], made once here from the constant weights). Written as the graph's
 * own ops, so that every backend runs it and the reference checks it:
 *
 * - Bᵀ d B as a convolution of each channel alone (group C) by the 16 positions' 4×4 picks at a
 *   stride of 2, padded so that the tiles cover the output: [N, C·16, tiles], read as
 *   [N, 16, tiles, C];
 * - one batched MatMul by U on its right (where a CPU's products lay out their constant),
 *   [N, 16, tiles, C] · [16, C, M] → [N, 16, tiles, M];
 * - Aᵀ m A as a [4, 16] MatMul over the positions, the 2×2 blocks interleaved back into
 *   [N, M, H, W] and cropped, and the bias added.
 *
 * On wasm (2-core VM, one 128-channel conv at 28×28, kernel by kernel): the picks' convolution
 * 0.7 ms, the product 2.2, the output's transform 0.6, against 4.5 for the direct convolution.
 * Slower forms measured on the way: the 16 taps as strided Slices stacked by a Concat (each
 * element then evaluates the parts: 18 ms for the stack), U on the product's left (twice the
 * product's time), the taps gathered channels-last through four shifted views (6 ms).
 *
 * The multiply-adds of the product fall to 16/36 of the convolution's (plus the transforms'
 * additions). U rounds the weights once more (G holds halves); F(2×2, 3×3) is the variant whose
 * error stays at the f32 convolution's order (Lavin and Gray, "Fast Algorithms for Convolutional
 * Neural Networks", 2016).
 *
 * @module
 */
import {
  boundaryOf,
  freshNames,
  Graph,
  type Node,
  type NodeSpec,
  nodeSpecOf,
} from "../ir/graph.ts";
import { handOver } from "../ir/hand_over.ts";
import { constantOf } from "./joined_products.ts";

/** Which convolutions to rewrite: the least input and output channels. */
export interface WinogradOptions {
  /** Least input channels (the product's K): below, the transforms cost more than they save. */
  readonly minChannels: number;
}

/** Bᵀ of F(2×2, 3×3): the input tile's transform, [4, 4]. */
const BT = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]];

/** Aᵀ of F(2×2, 3×3): the output's transform, [2, 4]. */
const AT = [[1, 1, 1, 0], [0, 1, -1, -1]];

/**
 * `graph` with each 3×3 convolution of stride 1 (one group, no dilation, explicit pads, constant
 * f32 weights of at least `minChannels` input and output channels) computed as F(2×2, 3×3);
 * `graph` itself where there is none.
 */
export function winogradConvs(graph: Graph, options: WinogradOptions): Graph {
  const fresh = freshNames(graph);
  const rewrites = new Map<number, NodeSpec[]>();
  for (const n of graph.nodes) {
    const weights = n.op === "Conv" ? eligible(graph, n, options) : undefined;
    if (weights) rewrites.set(n.id, rewritten(graph, n, weights, fresh));
  }
  if (rewrites.size === 0) return graph;
  const nodes = graph.nodes.flatMap((n) => rewrites.get(n.id) ?? [nodeSpecOf(graph, n)]);
  // The weights' params and Constant nodes are left unread: U replaces them.
  return Graph.create({ ...boundaryOf(graph), nodes });
}

/** The weights of Conv `n` where F(2×2, 3×3) computes it (see `winogradConvs`), else none. */
function eligible(graph: Graph, n: Node, options: WinogradOptions): Float32Array | undefined {
  const x = graph.values[n.inputs[0]], w = graph.values[n.inputs[1]];
  if (x.shape.length !== 4 || x.dtype !== "f32" || w.shape.length !== 4) return undefined;
  const [m, c, kh, kw] = w.shape;
  if (kh !== 3 || kw !== 3 || c < options.minChannels || m < options.minChannels) return undefined;
  const ones = (name: string) =>
    ((n.attrs[name] as number[] | undefined) ?? [1, 1]).every((v) => v === 1);
  if (!ones("strides") || !ones("dilations") || Number(n.attrs.group ?? 1) !== 1) return undefined;
  if ((n.attrs.auto_pad ?? "NOTSET") !== "NOTSET") return undefined;
  const data = constantOf(graph, n.inputs[1]);
  return data instanceof Float32Array ? data : undefined;
}

/**
 * U = G g Gᵀ for every filter, laid out [16, C, M] (position ξ = 4a + b first). G's rows written
 * out (g0, (g0 + g1 + g2) / 2, (g0 − g1 + g2) / 2, g2), once along the filter's rows and once
 * along its columns: the products of G's entries one by one took ResNet-50's compile on wasm from
 * 0.4-0.5 to 1.0 s.
 */
export function filterTransform(g: Float32Array, m: number, c: number): Float32Array {
  // Each filter's 16 positions side by side ([M, C, 16], read and written in order), then laid
  // out [16, C, M] a block of 32 filters at a time.
  const byFilter = new Float32Array(16 * m * c);
  for (let f = 0; f < m * c; f++) {
    const at = f * 9, to = f * 16;
    for (let l = 0; l < 3; l++) {
      // Column l of G g, then its place in each row of (G g) Gᵀ.
      const a = g[at + l], b = g[at + 3 + l], d = g[at + 6 + l];
      byFilter[to + l] = a;
      byFilter[to + 4 + l] = (a + b + d) / 2;
      byFilter[to + 8 + l] = (a - b + d) / 2;
      byFilter[to + 12 + l] = d;
    }
    for (let r = 0; r < 16; r += 4) {
      const a = byFilter[to + r], b = byFilter[to + r + 1], d = byFilter[to + r + 2];
      byFilter[to + r + 1] = (a + b + d) / 2;
      byFilter[to + r + 2] = (a - b + d) / 2;
      byFilter[to + r + 3] = d;
    }
  }
  const u = new Float32Array(16 * m * c);
  for (let o0 = 0; o0 < m; o0 += 32) {
    for (let i = 0; i < c; i++) {
      for (let xi = 0; xi < 16; xi++) {
        const row = (xi * c + i) * m;
        for (let o = o0; o < Math.min(m, o0 + 32); o++) {
          u[row + o] = byFilter[(o * c + i) * 16 + xi];
        }
      }
    }
  }
  return u;
}

/**
 * T ⊗ T for a transform T of `cols` columns, [rows², cols²]: row (a, b) applies T's row a along a
 * tile's rows and row b along its columns (both sides of T x Tᵀ at once).
 */
function kronecker(t: number[][], cols: number): Float32Array {
  const rows = t.length, out = new Float32Array(rows * rows * cols * cols);
  for (let a = 0; a < rows; a++) {
    for (let b = 0; b < rows; b++) {
      for (let i = 0; i < cols; i++) {
        for (let j = 0; j < cols; j++) {
          out[((a * rows + b) * cols + i) * cols + j] = t[a][i] * t[b][j];
        }
      }
    }
  }
  return out;
}

/** The nodes that compute Conv `n` as F(2×2, 3×3) (see the module note). */
function rewritten(
  graph: Graph,
  n: Node,
  weights: Float32Array,
  fresh: (base: string) => string,
): NodeSpec[] {
  const name = (v: number) => graph.values[v].name;
  const out = graph.values[n.outputs[0]];
  const [batch, , height, width] = graph.values[n.inputs[0]].shape;
  const [m, c] = graph.values[n.inputs[1]].shape;
  const [, , ho, wo] = out.shape;
  const [th, tw] = [Math.ceil(ho / 2), Math.ceil(wo / 2)];
  const [top = 0, left = 0] = (n.attrs.pads as number[] | undefined) ?? [];
  const nodes: NodeSpec[] = [];
  const add = (op: string, inputs: string[], attrs = {}) => {
    const output = fresh(`${out.name}/winograd`);
    nodes.push({ op, inputs, outputs: [output], attrs });
    return output;
  };
  const constant = (data: Float32Array, shape: number[]) =>
    add("Constant", [], { value: { data: handOver(data), shape, dtype: "f32" } });
  // Bᵀ d B for each channel's tiles: a convolution of each channel alone by the 16 positions'
  // 4×4 picks at a stride of 2, padded so that the tiles cover the output.
  const picks = new Float32Array(16 * c * 16);
  for (let i = 0; i < c; i++) picks.set(kronecker(BT, 4), i * 256);
  const convolved = add("Conv", [name(n.inputs[0]), constant(picks, [16 * c, 1, 4, 4])], {
    pads: [top, left, 2 * th + 2 - height - top, 2 * tw + 2 - width - left],
    strides: [2, 2],
    group: c,
  });
  // [N, C·16, tiles] read as [N, 16, tiles, C].
  const transformed = add("Transpose", [
    add("Reshape", [convolved], { shape: [batch, c, 16, th * tw] }),
  ], { perm: [0, 2, 3, 1] });
  // The channels' product by position, by U (G g Gᵀ) laid out [16, C, M]: [N, 16, tiles, M].
  const product = add("MatMul", [
    transformed,
    constant(filterTransform(weights, m, c), [16, c, m]),
  ]);
  // Aᵀ m A of every tile and output: [4, 16] by the products, the 2×2 blocks.
  const blocks = add("MatMul", [
    constant(kronecker(AT, 4), [4, 16]),
    add("Reshape", [product], { shape: [batch, 16, th * tw * m] }),
  ]);
  const image = add("Reshape", [
    add("Transpose", [
      add("Reshape", [blocks], { shape: [batch, 2, 2, th, tw, m] }),
    ], { perm: [0, 5, 3, 1, 4, 2] }),
  ], { shape: [batch, m, 2 * th, 2 * tw] });
  const cropped = ho === 2 * th && wo === 2 * tw
    ? image
    : add("Slice", [image], { starts: [0, 0], ends: [ho, wo], axes: [2, 3] });
  const bias = n.inputs[2] === undefined
    ? undefined
    : add("Reshape", [name(n.inputs[2])], { shape: [m, 1, 1] });
  nodes.push({
    op: bias ? "Add" : "Identity",
    inputs: bias ? [cropped, bias] : [cropped],
    outputs: [out.name],
    name: n.name,
  });
  return nodes;
}
