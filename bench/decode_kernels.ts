/**
 * A decode step's kernels for `bench/gpu_kernels.ts`: one-row products by 4-bit weights
 * (Qwen2.5-0.5B's shapes, f32 or A rounded to 8 bits) and attention over a cache, beside the
 * case type every kernel of that benchmark has.
 *
 * @module
 */
import type { Graph } from "../jit/ir/graph.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { uniform } from "../jit/support/random.ts";

/** A kernel case of `bench/gpu_kernels.ts`: its graph, inputs and float64 expectation. */
export interface Kernel {
  /** Its name in the report. */
  readonly id: string;
  /** The graph timed. */
  readonly graph: Graph;
  /** Its inputs, uploaded once. */
  readonly inputs: Record<string, { data: Float32Array; shape: number[] }>;
  /** Float64 value of the output at flat index `i`. */
  readonly expect: (i: number) => number;
  /** Output elements. */
  readonly size: number;
  /** FLOPs of one run, for a FLOP rate. */
  readonly flops?: number;
  /** Bytes one run must move at the least (f32), for a bandwidth. */
  readonly bytes?: number;
  /** Whether to time the f16 precisions too (attention's three kernels: not yet). */
  readonly half?: boolean;
  /** Whether the graph's inputs are f16 (timed under `"f16"` only). */
  readonly halfInputs?: boolean;
}

/** `a` rounded to 8 bits a block of `block` (scale = max |a| / 127), as QuantizeRowBlocks does. */
function roundedBlocks(a: Float32Array, block: number): Float32Array {
  const out = new Float32Array(a.length);
  for (let b = 0; b < a.length; b += block) {
    const part = a.subarray(b, b + block);
    const largest = Math.max(...part.map(Math.abs));
    const scale = Math.fround(largest / 127);
    const inverse = scale === 0 ? 0 : Math.fround(127 / largest);
    part.forEach((
      v,
      j,
    ) => (out[b + j] = Math.fround(Math.round(Math.fround(v * inverse)) * scale)));
  }
  return out;
}

/**
 * A one-row product by a 4-bit weight of N rows of K in blocks of 32 with zero points
 * (`BlockMatMul`, as MatMulNBits imports): what a decode step reads, so its bytes are the packed
 * words, the f32 scales and the zero points (nibbles, as the model and a GPU hold them). `form`:
 * `"normed"`, A an RMS normalization of the input (a decode step's), taken into the product;
 * `"int8"`, A rounded to 8 bits a block first (MatMulNBits of `accuracy_level` 4,
 * onnxruntime-genai's default for CPU and WebGPU models).
 */
export function gemv4(
  k: number,
  n: number,
  form?: "normed" | "int8",
  { symmetric = false } = {},
): Kernel {
  const blocks = k / 32, width = blocks * 4;
  const q = Uint32Array.from(uniform(n * width, 11, 0, 2 ** 32), (v) => Math.floor(v) >>> 0);
  const s = uniform(n * blocks, 12, 0.01, 0.03);
  const z = uniform(n * blocks, 13, 0, 16).map(Math.floor);
  const a = uniform(k, 14);
  const b = new GraphBuilder();
  const w = [b.param("q", [n, width], "u32", q), b.param("s", [n, blocks], "f32", s)];
  // Zero points as the import holds a model's: whole values, u8, a constant it made from the
  // nibbles (packed four to a word on a GPU; a param of u8 would take a word each).
  // Symmetric (no zero points: onnxruntime-genai's model builder's default) reads the middle, 8.
  const zeros = symmetric ? [] : [b.constant(Uint8Array.from(z), [n, blocks], "u8")];
  const x = b.input("a", [1, k]);
  const mean = b.op("ReduceMean", [b.op("Mul", [x, x])], { axes: [-1], keepdims: 1 });
  const root = b.op("Sqrt", [b.op("Add", [mean, b.constant(1e-6)])]);
  const normed = form === "normed";
  const rows = normed
    ? b.op("Div", [x, root])
    : form === "int8"
    ? b.op("QuantizeRowBlocks", [x], { block: 32 })
    : x;
  const int8 = form === "int8" ? { int8: 1 } : {};
  b.output("y", b.op("BlockMatMul", [rows, ...w, ...zeros], { bits: 4, block: 32, ...int8 }));
  const scale = normed ? 1 / Math.sqrt(a.reduce((t, v) => t + v * v, 0) / k + 1e-6) : 1;
  const values = form === "int8" ? roundedBlocks(a, 32) : a;
  return {
    id: `gemv4-${k}x${n}${form ? `-${form}` : ""}${symmetric ? "-sym" : ""}`,
    graph: b.build(),
    inputs: { a: { data: a, shape: [1, k] } },
    expect: (j) => {
      let sum = 0;
      for (let i = 0; i < k; i++) {
        const cell = j * blocks + Math.floor(i / 32);
        const v = (q[j * width + (i >> 3)] >>> ((i & 7) * 4)) & 15;
        sum += values[i] * (v - (symmetric ? 8 : z[cell])) * s[cell];
      }
      return sum * scale;
    },
    size: n,
    // The model's bytes: its zero points are nibbles, as a GPU holds them (eight to a word).
    bytes: 4 * (n * width + n * blocks + k + n) + (symmetric ? 0 : n * blocks / 2),
    half: false,
  };
}

/**
 * A decode step's attention: one query row per head over `T` cached keys (a Qwen2.5-0.5B layer:
 * 14 heads of 64), as the fused attention group runs it once a layer a token.
 */
export function decodeAttention(H = 14, T = 257, D = 64): Kernel {
  const b = new GraphBuilder();
  const q = b.input("q", [1, H, 1, D]),
    k = b.input("k", [1, H, T, D]),
    v = b.input("v", [1, H, T, D]);
  const scaled = b.op("Mul", [
    b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 1, 3, 2] })]),
    b.constant(1 / Math.sqrt(D)),
  ]);
  b.output("y", b.op("MatMul", [b.op("Softmax", [scaled], { axis: -1 }), v]));
  const [Q, K, V] = [[H * D, 21], [H * T * D, 22], [H * T * D, 23]].map(([n, s]) => uniform(n, s));
  return {
    id: `decode-attention-H${H}T${T}D${D}`,
    graph: b.build(),
    inputs: {
      q: { data: Q, shape: [1, H, 1, D] },
      k: { data: K, shape: [1, H, T, D] },
      v: { data: V, shape: [1, H, T, D] },
    },
    expect: (i) => {
      const e = i % D, h = Math.floor(i / D);
      const s = Array.from({ length: T }, (_, j) => {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += Q[h * D + d] * K[(h * T + j) * D + d];
        return dot / Math.sqrt(D);
      });
      const m = Math.max(...s);
      let sum = 0, out = 0;
      s.forEach((x, j) => {
        const w = Math.exp(x - m);
        sum += w;
        out += w * V[(h * T + j) * D + e];
      });
      return out / sum;
    },
    size: H * D,
    bytes: 4 * (2 * H * T * D + 2 * H * D),
    half: false,
  };
}
