/**
 * Block products for the generators' tests: a BlockMatMul graph of given sizes, and its check
 * against the reference interpreter.
 *
 * @module
 */
import { compile } from "../../mod.ts";
import type { Backend } from "../runtime/backend.ts";
import { GraphBuilder, type Sym } from "../frontend/graph_builder.ts";
import { uniform } from "../support/random.ts";
import type { Graph } from "../ir/graph.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { assertClose, f32, numbers } from "./testing.ts";

/** Packed u32 words drawn from a fixed stream, every bit pattern likely. */
const words = (n: number, seed: number): Uint32Array =>
  Uint32Array.from(uniform(n, seed, 0, 2 ** 32), (v) => Math.floor(v) >>> 0);

/**
 * A BlockMatMul of A [...lead, K] by packed weights of N rows (`bits`, blocks of `block`, zero
 * points, u8 or with `"f32"` an f32 table, or the middle value), its buffers weights of the
 * graph, as a decoder's are. `int8`: A rounded to 8 bits a block first, as MatMulNBits of
 * `accuracy_level` 4 imports. `a`: how A is made of the input, where not as it is: `"gated"`, the
 * input is [...lead, 2K] and A is SiLU of its first half times its second, as a decoder's MLP
 * feeds its down projection; `"scaled"`, the input times a weight of K broadcast over the rows,
 * as a normalization's gain scales it.
 */
export function blockProduct(
  lead: number[],
  [k, n, bits, block]: number[],
  zeros: boolean | "f32",
  { int8 = false, a: form }: {
    int8?: boolean;
    a?: "gated" | "scaled" | "normed" | "centred";
  } = {},
): { graph: Graph; feeds: Record<string, HostTensor> } {
  const per = 32 / bits, blocks = Math.ceil(k / block), width = (blocks * block) / per;
  const b = new GraphBuilder();
  const q = b.param("q", [n, width], "u32", words(n * width, k + n));
  const s = b.param("s", [n, blocks], "f32", uniform(n * blocks, 7, 0.01, 0.03));
  const zero = uniform(n * blocks, 8, 0, 2 ** bits).map(Math.floor);
  // Whole zero points come as the import holds a model's (a u8 constant it made from the
  // nibbles, which backends may hold packed); float ones as an f32 table.
  const z = zeros === "f32"
    ? b.param("z", [n, blocks], "f32", zero)
    : b.constant(Uint8Array.from(zero), [n, blocks], "u8");
  const gated = form === "gated";
  const x0 = b.input("a", [...lead, gated ? 2 * k : k]);
  const gain = () => b.param("gain", [k], "f32", uniform(k, 11, 0.5, 1.5));
  const formed = gated
    ? silu(b, x0)
    : form === "scaled"
    ? b.op("Mul", [x0, gain()])
    : form === "normed"
    ? b.op("Mul", [rmsNormed(b, x0), gain()])
    : form === "centred"
    ? b.op("Mul", [rmsNormed(b, centred(b, x0)), gain()])
    : x0;
  // A rounded to 8 bits a block after its form, as MatMulNBits of accuracy_level 4 rounds it.
  const a = int8 ? b.op("QuantizeRowBlocks", [formed], { block }) : formed;
  const attrs = { bits, block, ...(int8 ? { int8: 1 } : {}) };
  b.output("y", b.op("BlockMatMul", zeros ? [a, q, s, z] : [a, q, s], attrs));
  const row = gated ? 2 * k : k;
  const x = f32(uniform(lead.reduce((p, d) => p * d, 1) * row, 9, -2, 2), [...lead, row]);
  return { graph: b.build(), feeds: { a: x } };
}

/** `x` over the root of its rows' mean square (an RMS normalization, as exporters write it). */
function rmsNormed(b: GraphBuilder, x: Sym): Sym {
  const mean = b.op("ReduceMean", [b.op("Mul", [x, x])], { axes: [-1], keepdims: 1 });
  const root = b.op("Sqrt", [b.op("Add", [mean, b.constant(1e-6)])]);
  return b.op("Mul", [x, b.op("Reciprocal", [root])]);
}

/** `x` less its rows' mean: with `rmsNormed`, a layer norm (its variance reads that mean). */
function centred(b: GraphBuilder, x: Sym): Sym {
  return b.op("Sub", [x, b.op("ReduceMean", [x], { axes: [-1], keepdims: 1 })]);
}

/** SiLU of `x`'s first half times its second: a gated MLP's product before its down projection. */
function silu(b: GraphBuilder, x: Sym): Sym {
  const [g, u] = b.opN("Split", [x], { axis: -1, num_outputs: 2 }, 2);
  return b.op("Mul", [b.op("Mul", [g, b.op("Sigmoid", [g])]), u]);
}

/**
 * Few-row block products every generator checks: `[lead, [K, N, bits, block], zero points]`.
 */
export const FEW_ROW_CASES: readonly [number[], number[], boolean | "f32"][] = [
  [[1], [896, 70, 4, 32], true], // a decoder's token step
  [[1], [40, 9, 4, 32], true], // K past the last whole block
  [[2, 1], [100, 13, 2, 64], false], // a batch of two rows; 2 bits, the middle value
  [[3], [64, 5, 8, 16], "f32"], // 8 bits, three rows, float zero points
  [[1], [300, 6, 4, 128], true], // blocks of 128
  [[1], [4864, 7, 4, 32], true], // more blocks than a row's threads
  [[1], [72, 65541, 4, 32], true], // a vocabulary's many outputs, K cut short
  [[2], [64, 256, 4, 32], false], // two rows of A, each workgroup's outputs on one
];

/** Checks `graph` on `backend` against the reference, to block products' tolerance. */
export async function matchesReference(
  graph: Graph,
  feeds: Record<string, HostTensor>,
  backend: Backend | string,
  message: string,
): Promise<void> {
  const want = await (await compile(graph, { backend: "reference", cache: false })).run(feeds);
  const got = await (await compile(graph, { backend, cache: false })).run(feeds);
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-4, rtol: 1e-4, message });
}
