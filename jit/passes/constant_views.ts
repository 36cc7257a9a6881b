/**
 * Movement ops of constants computed once, at compile: a weight the program transposes,
 * reshapes, slices, expands or gathers by constant indices (x · wᵀ, a convolution's filters given
 * in another layout, a transposed convolution's flipped kernel) becomes a constant in the layout
 * its readers take, as the importer lays out a model's initializers, instead of a view every
 * run's kernels read through. Read through the view, a convolution of 512 → 256 channels at
 * 14×14 whose filters were a Transpose of a constant took 260 ms on one wasm thread against 17 ms
 * for the same filters as a constant: the tiles pack a B they can address as a matrix. Folded
 * only where the view is affine (no padding's fill), the result holds at most 2^24 elements and
 * twice the constant's bytes (an Expand could otherwise multiply a weight's memory); a constant
 * read by nothing else afterwards is dropped.
 *
 * @module
 */
import { affineOffset } from "../ir/access.ts";
import { allocate, byteSize } from "../ir/dtype.ts";
import { boundaryOf, Graph, type Node, type NodeSpec, nodeSpecOf } from "../ir/graph.ts";
import { handOver } from "../ir/hand_over.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { movementSteps } from "../ir/index_maps.ts";
import { decompose } from "./decompose.ts";
import { type Shape, sizeOf } from "../ir/shape.ts";
import { InferContext } from "../ops/mod.ts";

/** The ops whose output is an affine view of their one input (`movementSteps`). */
const VIEWS = new Set([
  "Transpose",
  "Reshape",
  "Squeeze",
  "Unsqueeze",
  "Flatten",
  "Identity",
  "Slice",
  "Expand",
]);

/** Most elements a folded view holds. */
const MOST = 2 ** 24;

/**
 * `graph` with its constants laid out once: where the compile fuses, transposed convolutions
 * written out first, as the importer writes them, then every view of a constant folded (their
 * flipped, regrouped kernels among them). Expanded in fusion, a ConvTranspose of 128 → 64
 * channels at 28×28, stride 2, gathered its kernel anew in every run: 1.4 s on one wasm thread,
 * 5.2 ms laid out. Unfused, the reference runs the op's own kernel. (Gemm's transposed constant
 * B, written out and folded the same way, measured no faster: wasm packs it once.)
 */
export function constantsLaidOut(graph: Graph, fused: boolean): Graph {
  const moves = fused && graph.nodes.some((n) => n.op === "ConvTranspose");
  return foldConstantViews(moves ? decompose(graph, (n) => n.op === "ConvTranspose") : graph);
}

/** `graph` with its constants' views folded (`graph` itself where there is none). */
export function foldConstantViews(graph: Graph): Graph {
  const known = new Map<number, HostTensor>();
  const folded = new Map<Node, HostTensor>();
  for (const n of graph.nodes) {
    if (n.op === "Constant") known.set(n.outputs[0], n.attrs.value as HostTensor);
    const [source, index] = n.inputs.map((v) => known.get(v));
    const view = !source
      ? undefined
      : n.op === "Gather" && index
      ? pickedOf(graph, n, source, index)
      : VIEWS.has(n.op) && n.inputs.length === 1
      ? viewOf(graph, n, source)
      : undefined;
    if (view) {
      folded.set(n, view);
      known.set(n.outputs[0], view);
    }
  }
  if (folded.size === 0) return graph;
  // Constants whose readers all folded are read by nothing now (unless the graph returns them).
  const reads = new Map<number, number>();
  const read = (v: number) => reads.set(v, (reads.get(v) ?? 0) + 1);
  for (const n of graph.nodes) if (!folded.has(n)) n.inputs.forEach(read);
  graph.outputs.forEach((o) => read(o.value));
  const nodes: NodeSpec[] = [];
  for (const n of graph.nodes) {
    const value = folded.get(n);
    const unread = (n.op === "Constant" || value) && !reads.get(n.outputs[0]);
    if (unread) continue;
    const spec = nodeSpecOf(graph, n);
    nodes.push(value ? { ...spec, op: "Constant", inputs: [], attrs: { value } } : spec);
  }
  return Graph.create({ ...boundaryOf(graph), nodes });
}

/** Node `n`'s output, a view of constant `source`, computed; `undefined` where it does not fold. */
function viewOf(graph: Graph, n: Node, source: HostTensor): HostTensor | undefined {
  const { shape, dtype } = graph.values[n.outputs[0]], input = graph.values[n.inputs[0]];
  const size = sizeOf(shape);
  // Only constants held as their graph type (not an i64 or bf16 widened at the boundary).
  if (
    source.dtype !== input.dtype || size > MOST ||
    size * byteSize(dtype) > 2 * Math.max(1, sizeOf(source.shape)) * byteSize(source.dtype)
  ) return undefined;
  const ctx = new InferContext({ op: n.op, where: n.label, inputs: [input], attrs: n.attrs });
  const access = affineOffset(movementSteps(ctx, source.shape, shape), shape, source.shape);
  if (!access) return undefined;
  return { data: gathered(source, shape, access), shape, dtype };
}

/**
 * Node `n`'s output, a Gather of constant `source` by constant indices `index` (a transposed
 * convolution's flip of its kernel), computed; `undefined` where it does not fold.
 */
function pickedOf(graph: Graph, n: Node, source: HostTensor, index: HostTensor) {
  const { shape, dtype } = graph.values[n.outputs[0]];
  const size = sizeOf(shape);
  if (source.dtype !== graph.values[n.inputs[0]].dtype || size > sizeOf(source.shape)) {
    return undefined;
  }
  const rank = source.shape.length, axis = ((Number(n.attrs.axis ?? 0) % rank) + rank) % rank;
  const dim = source.shape[axis], inner = sizeOf(source.shape.slice(axis + 1));
  const picks = Array.from(index.data as ArrayLike<number | bigint>, (i) => Number(i));
  if (picks.some((i) => !(i >= -dim && i < dim))) return undefined;
  const out = allocate(source.dtype, size) as unknown as unknown[];
  const from = source.data as unknown as ArrayLike<unknown>;
  let at = 0;
  for (let o = 0; o < sizeOf(source.shape.slice(0, axis)); o++) {
    for (const i of picks) {
      const start = (o * dim + (i < 0 ? i + dim : i)) * inner;
      for (let j = 0; j < inner; j++) out[at++] = from[start + j];
    }
  }
  return { data: out as unknown as HostTensor["data"], shape, dtype };
}

/** A typed array's `subarray` and `set`, whatever its element type. */
type Run = {
  subarray(start: number, end: number): Run;
  set(from: Run, at: number): void;
};

/**
 * The elements of `source` at `base + Σ weights[d] · i_d` for every index of `shape`, in order:
 * `source`'s own elements where they lie in that order (a Reshape, Squeeze or Slice of leading
 * rows: nothing copied; graphs never write their data), else copied a run of the innermost axis
 * at a time where it is contiguous. Element by element, a 0.5B decoder's Reshapes of its weights
 * took 3.4 s of its 2-core compile.
 */
function gathered(
  source: HostTensor,
  shape: Shape,
  { weights, base }: { weights: readonly number[]; base: number },
): HostTensor["data"] {
  const size = sizeOf(shape), rank = shape.length;
  const from = source.data as unknown as Run;
  const contiguous = (d: number) => weights[d] === sizeOf(shape.slice(d + 1)) || shape[d] === 1;
  if (shape.every((_, d) => contiguous(d))) {
    return handOver(from.subarray(base, base + size) as unknown as HostTensor["data"]);
  }
  // Rows of the innermost axis where it steps by one, else single elements.
  const rows = rank > 0 && weights[rank - 1] === 1;
  const row = rows ? shape[rank - 1] : 1, outer = rows ? shape.slice(0, -1) : shape;
  const out = allocate(source.dtype, size) as unknown as Run & unknown[];
  const elements = source.data as unknown as ArrayLike<unknown>;
  const at = outer.map(() => 0);
  let offset = base;
  for (let i = 0; i < size; i += row) {
    if (rows) out.set(from.subarray(offset, offset + row), i);
    else out[i] = elements[offset];
    // The next row, as an odometer: the offset moves by each axis's weight as it counts.
    for (let d = outer.length - 1; d >= 0; d--) {
      offset += weights[d];
      if (++at[d] < outer[d]) break;
      offset -= weights[d] * outer[d];
      at[d] = 0;
    }
  }
  return out as unknown as HostTensor["data"];
}
