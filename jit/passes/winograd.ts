/**
 * 3×3 convolutions of stride 1 as Winograd's F(m×m, 3×3), m = 2 or 4: each m×m block of outputs
 * from an α×α tile of the input (α = m + 2), in α² products of the channels where the direct
 * convolution takes 9·m² (F(2×2): 16 for 36; F(4×4): 36 for 144).
 *
 * For a tile d (α×α of one channel) and a filter g (3×3), the block is Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A,
 * summed over the channels inside the ⊙, so that per position ξ of the α×α transformed tile the
 * sum over channels is a matrix product: M_ξ = V_ξ · U_ξ with V_ξ = (Bᵀ d B)_ξ ([tiles, in]) and
 * U_ξ = (G g Gᵀ)_ξ ([in, out], made once here from the constant weights). Written as the graph's
 * own ops, so that every backend runs it and the reference checks it:
 *
 * - Bᵀ d B as a convolution of each channel alone (group C) by the positions' α×α picks (one
 *   table broadcast to every channel) at a stride of m, padded so that the tiles cover the
 *   output: [N, C·α², tiles], read as [N, α², tiles, C];
 * - one batched MatMul by U on its right (where a CPU's products lay out their constant),
 *   [N, α², tiles, C] · [α², C, M] → [N, α², tiles, M];
 * - Aᵀ m A as an [m², α²] MatMul over the positions, the m×m blocks interleaved back into
 *   [N, M, H, W] and cropped, and the bias added.
 *
 * On wasm (2-core VM, one 128-channel conv at 28×28, F(2×2), kernel by kernel): the picks'
 * convolution 0.7 ms, the product 2.2, the output's transform 0.6, against 4.5 for the direct
 * convolution. Slower forms measured on the way: the 16 taps as strided Slices stacked by a Concat
 * (each element then evaluates the parts: 18 ms for the stack), U on the product's left (twice the
 * product's time), the taps gathered channels-last through four shifted views (6 ms).
 *
 * U rounds the weights once more (G holds fractions), and F(4×4)'s larger points (±2) grow the
 * rounding of its transforms; both stay near the f32 convolution's own (Lavin and Gray, "Fast
 * Algorithms for Convolutional Neural Networks", 2016): ResNet-50 b1's output moved by 1.3e-7 of
 * its largest magnitude under F(4×4) on wasm.
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

/** Which convolutions to rewrite, and how. */
export interface WinogradOptions {
  /**
   * Least input channels (the product's K) and output channels: below, the transforms cost more
   * than they save.
   */
  readonly minChannels: number;
  /** Outputs a tile's side: F(2×2, 3×3) or F(4×4, 3×3) (default 2). */
  readonly tile?: 2 | 4;
}

/** Most of the direct convolution's products a rewritten one may take (see `eligible`). */
const MOST_PRODUCTS = 0.6;

/**
 * A Winograd algorithm F(m×m, 3×3): its transforms Bᵀ ([α, α], α = m + 2, the input tile's), G
 * ([α, 3], the filter's) and Aᵀ ([m, α], the output's).
 */
interface Transforms {
  readonly bt: readonly (readonly number[])[];
  readonly g: readonly (readonly number[])[];
  readonly at: readonly (readonly number[])[];
}

/** F(2×2, 3×3), interpolation points 0, ±1. */
const F2: Transforms = {
  bt: [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
  g: [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
  at: [[1, 1, 1, 0], [0, 1, -1, -1]],
};

/** F(4×4, 3×3), interpolation points 0, ±1, ±2 (Lavin and Gray's). */
const F4: Transforms = {
  bt: [
    [4, 0, -5, 0, 1, 0],
    [0, -4, -4, 1, 1, 0],
    [0, 4, -4, -1, 1, 0],
    [0, -2, -1, 2, 1, 0],
    [0, 2, -1, -2, 1, 0],
    [0, 4, 0, -5, 0, 1],
  ],
  g: [
    [1 / 4, 0, 0],
    [-1 / 6, -1 / 6, -1 / 6],
    [-1 / 6, 1 / 6, -1 / 6],
    [1 / 24, 1 / 12, 1 / 6],
    [1 / 24, -1 / 12, 1 / 6],
    [0, 0, 1],
  ],
  at: [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
};

/**
 * `graph` with each 3×3 convolution of stride 1 (one group, no dilation, explicit pads, constant
 * f32 weights of at least `minChannels` input and output channels, an output its tiles do not
 * pass much) computed as F(m×m, 3×3), m = `tile`; `graph` itself where there is none.
 */
export function winogradConvs(graph: Graph, options: WinogradOptions): Graph {
  const fresh = freshNames(graph);
  const rewrites = new Map<number, NodeSpec[]>();
  const f = options.tile === 4 ? F4 : F2;
  for (const n of graph.nodes) {
    const weights = n.op === "Conv" ? eligible(graph, n, options.minChannels, f) : undefined;
    if (weights) rewrites.set(n.id, rewritten(graph, n, { weights, f }, fresh));
  }
  if (rewrites.size === 0) return graph;
  const nodes = graph.nodes.flatMap((n) => rewrites.get(n.id) ?? [nodeSpecOf(graph, n)]);
  // The weights' params and Constant nodes are left unread: U replaces them.
  return Graph.create({ ...boundaryOf(graph), nodes });
}

/** The weights of Conv `n` where Winograd's `f` computes it (see `winogradConvs`), else none. */
function eligible(
  graph: Graph,
  n: Node,
  minChannels: number,
  f: Transforms,
): Float32Array | undefined {
  const x = graph.values[n.inputs[0]], w = graph.values[n.inputs[1]];
  if (x.shape.length !== 4 || x.dtype !== "f32" || w.shape.length !== 4) return undefined;
  const [m, c, kh, kw] = w.shape;
  if (kh !== 3 || kw !== 3 || c < minChannels || m < minChannels) return undefined;
  const ones = (name: string) =>
    ((n.attrs[name] as number[] | undefined) ?? [1, 1]).every((v) => v === 1);
  if (!ones("strides") || !ones("dilations") || Number(n.attrs.group ?? 1) !== 1) return undefined;
  if ((n.attrs.auto_pad ?? "NOTSET") !== "NOTSET") return undefined;
  // Tiles past a small output's edge: the positions' products must stay well under the direct
  // convolution's 9 an output (ResNet's 7×7 under F(4×4): a third; a 2×2 output: as many).
  const side = f.at.length, [, , ho, wo] = graph.values[n.outputs[0]].shape;
  const products = (side + 2) ** 2 * Math.ceil(ho / side) * Math.ceil(wo / side);
  if (products > MOST_PRODUCTS * 9 * ho * wo) return undefined;
  const data = constantOf(graph, n.inputs[1]);
  return data instanceof Float32Array ? data : undefined;
}

/**
 * U = G g Gᵀ for every filter, laid out [α², C, M] (position ξ = α·a + b first). The outputs
 * innermost, so that each position's row of U is written in order and a filter's nine weights
 * are read once into locals: the products of G's entries one by one, written across the layout,
 * had taken ResNet-50's compile on wasm from 0.4-0.5 to 1.0 s (F(4×4) of 512 × 512 channels: 62-67
 * ms here against 140-224 ms through a filter-major copy).
 */
function filterTransform(
  weights: Float32Array,
  [m, c]: readonly number[],
  { g }: Transforms,
): Float32Array {
  const alpha = g.length, positions = alpha * alpha, step = c * m;
  const gf = Float64Array.from(g.flat()), t = new Float64Array(alpha * 3);
  const u = new Float32Array(positions * m * c);
  for (let i = 0; i < c; i++) {
    for (let o = 0; o < m; o++) {
      const at = (o * c + i) * 9;
      const w0 = weights[at], w1 = weights[at + 1], w2 = weights[at + 2];
      const w3 = weights[at + 3], w4 = weights[at + 4], w5 = weights[at + 5];
      const w6 = weights[at + 6], w7 = weights[at + 7], w8 = weights[at + 8];
      // G g: [α, 3].
      for (let a = 0; a < alpha; a++) {
        const g0 = gf[a * 3], g1 = gf[a * 3 + 1], g2 = gf[a * 3 + 2];
        t[a * 3] = g0 * w0 + g1 * w3 + g2 * w6;
        t[a * 3 + 1] = g0 * w1 + g1 * w4 + g2 * w7;
        t[a * 3 + 2] = g0 * w2 + g1 * w5 + g2 * w8;
      }
      // (G g) Gᵀ: [α, α], position by position, a row of U apart.
      let to = i * m + o;
      for (let a = 0; a < alpha; a++) {
        const t0 = t[a * 3], t1 = t[a * 3 + 1], t2 = t[a * 3 + 2];
        for (let b = 0; b < alpha; b++, to += step) {
          u[to] = t0 * gf[b * 3] + t1 * gf[b * 3 + 1] + t2 * gf[b * 3 + 2];
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
function kronecker(t: readonly (readonly number[])[], cols: number): Float32Array {
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

/** The nodes that compute Conv `n` as Winograd's `f` (see the module note). */
function rewritten(
  graph: Graph,
  n: Node,
  { weights, f }: { weights: Float32Array; f: Transforms },
  fresh: (base: string) => string,
): NodeSpec[] {
  const name = (v: number) => graph.values[v].name;
  const out = graph.values[n.outputs[0]];
  const [batch, , height, width] = graph.values[n.inputs[0]].shape;
  const [m, c] = graph.values[n.inputs[1]].shape;
  const [, , ho, wo] = out.shape;
  // Outputs a tile's side (s), its inputs (α) and positions (α²), tiles down and across.
  const s = f.at.length, alpha = s + 2, positions = alpha * alpha;
  const [th, tw] = [Math.ceil(ho / s), Math.ceil(wo / s)];
  const [top = 0, left = 0] = (n.attrs.pads as number[] | undefined) ?? [];
  const nodes: NodeSpec[] = [];
  const add = (op: string, inputs: string[], attrs = {}) => {
    const output = fresh(`${out.name}/winograd`);
    nodes.push({ op, inputs, outputs: [output], attrs });
    return output;
  };
  const constant = (data: Float32Array, shape: number[]) =>
    add("Constant", [], { value: { data: handOver(data), shape, dtype: "f32" } });
  // Bᵀ d B for each channel's tiles: a convolution of each channel alone by the positions' α×α
  // picks at a stride of s, padded so that the tiles cover the output.
  const table = constant(kronecker(f.bt, alpha), [1, positions, 1, alpha, alpha]);
  const spread = add("Expand", [table], { shape: [c, positions, 1, alpha, alpha] });
  const picks = add("Reshape", [spread], {
    shape: [positions * c, 1, alpha, alpha],
  });
  const convolved = add("Conv", [name(n.inputs[0]), picks], {
    pads: [top, left, s * th + 2 - height - top, s * tw + 2 - width - left],
    strides: [s, s],
    group: c,
  });
  // [N, C·α², tiles] read as [N, α², tiles, C].
  const transformed = add("Transpose", [
    add("Reshape", [convolved], { shape: [batch, c, positions, th * tw] }),
  ], { perm: [0, 2, 3, 1] });
  // The channels' product by position, by U (G g Gᵀ) laid out [α², C, M]: [N, α², tiles, M].
  const product = add("MatMul", [
    transformed,
    constant(filterTransform(weights, [m, c], f), [positions, c, m]),
  ]);
  // Aᵀ m A of every tile and output: [s², α²] by the products, the s×s blocks.
  const blocks = add("MatMul", [
    constant(kronecker(f.at, alpha), [s * s, positions]),
    add("Reshape", [product], { shape: [batch, positions, th * tw * m] }),
  ]);
  const image = add("Reshape", [
    add("Transpose", [
      add("Reshape", [blocks], { shape: [batch, s, s, th, tw, m] }),
    ], { perm: [0, 5, 3, 1, 4, 2] }),
  ], { shape: [batch, m, s * th, s * tw] });
  const cropped = ho === s * th && wo === s * tw
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
