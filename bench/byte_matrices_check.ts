/**
 * Quantized products over bytes on the GPU's matrix units (`shaders/wgsl/matrix_matmul.ts` with
 * i8 subgroup matrices), checked to the bit against the reference: u8 by i8 and i8 by u8, ragged
 * M, N and K, a batch, transposed and constant (packed) weights, and a whole dynamically quantized
 * linear layer (DynamicQuantizeLinear, MatMulInteger with zero points, the scales). Each case runs
 * on the default WebGPU backend and on one without matrix units (`dot4I8Packed` tiles), and counts
 * the kernel-cache records that multiply i8 matrices, so that a case which fell back is seen.
 * CI's software adapter has no subgroup matrices; this runs on the GPU machine:
 *
 *   KILN_CACHE_DIR=$(mktemp -d) deno run -A --config deno.json bench/byte_matrices_check.ts
 *
 * Prints one JSON line a case and exits 1 on any difference.
 *
 * @module
 */
import { compile } from "../mod.ts";
import { WebGpuBackend } from "../backends/webgpu/webgpu_backend.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import type { Graph } from "../jit/ir/graph.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { rng } from "../jit/support/random.ts";
import { randomBytes } from "../jit/testing/testing.ts";

interface Case {
  readonly id: string;
  readonly graph: Graph;
  readonly feeds: Record<string, HostTensor>;
}

/** An i32 product of `a` [..., m, k] by `w` [k, n] (given as [n, k] where `transposed`). */
function product(
  id: string,
  a: number[],
  n: number,
  o: { unsigned?: "a" | "b"; transposed?: boolean; constant?: boolean } = {},
): Case {
  const k = a[a.length - 1];
  const [ta, tw] = o.unsigned === "b" ? ["i8", "u8"] as const : ["u8", "i8"] as const;
  const g = new GraphBuilder();
  const wShape = o.transposed ? [n, k] : [k, n];
  const weights = randomBytes(tw, wShape, 2);
  let w = o.constant ? g.constant(weights.data, wShape, tw) : g.input("w", wShape, tw);
  if (o.transposed) w = g.op("Transpose", [w], { perm: [1, 0] });
  g.output("y", g.op("IntegerMatMul", [g.input("a", a, ta), w]));
  const feeds: Record<string, HostTensor> = { a: randomBytes(ta, a, 1) };
  if (!o.constant) feeds.w = weights;
  return { id, graph: g.build(), feeds };
}

/** A linear layer as `quantize_dynamic` writes it: u8 activations, constant i8 weights. */
function dynamicLinear(m: number, k: number, n: number): Case {
  const g = new GraphBuilder();
  const next = rng(3);
  const x = Float32Array.from({ length: m * k }, () => 4 * next() - 2);
  const [q, scale, zero] = g.opN("DynamicQuantizeLinear", [g.input("x", [m, k])], undefined, 3);
  const w = g.constant(randomBytes("i8", [k, n], 4).data, [k, n], "i8");
  // The weights' zero point as ONNX Runtime's symmetric int8 weights have it: a constant 0.
  const wZero = g.constant(new Int8Array([0]), [], "i8");
  const sums = g.op("MatMulInteger", [q, w, zero, wZero], { a_zero: 1, b_zero: 1 });
  const scales = g.op("Mul", [scale, g.constant(new Float32Array([0.0123]), [])]);
  g.output("y", g.op("Mul", [g.op("Cast", [sums], { to: "f32" }), scales]));
  return {
    id: `dynamic-linear-${m}x${k}x${n}`,
    graph: g.build(),
    feeds: { x: { data: x, shape: [m, k], dtype: "f32" } },
  };
}

const CASES: readonly Case[] = [
  product("u8·i8 512x768x3072", [512, 768], 3072),
  product("u8·i8 ragged 1777x516x1900", [1777, 516], 1900),
  product("i8·u8 ragged 2000x1000x1202", [2000, 1000], 1202, { unsigned: "b" }),
  product("u8·i8 batch 3x700x256x1500", [3, 700, 256], 1500),
  product("u8·i8 transposed 1024x768x2304", [1024, 768], 2304, { transposed: true }),
  product("u8·i8 constant 1024x768x2304", [1024, 768], 2304, { constant: true }),
  product("u8·i8 constant ragged 1600x1000x1202", [1600, 1000], 1202, { constant: true }),
  dynamicLinear(1024, 768, 3072),
  // Products whose tiles are too few or too small for the units: the byte tiles (no record).
  product("u8·i8 128x768x3072", [128, 768], 3072),
  dynamicLinear(512, 3072, 768),
];

/** Kernel-cache records under `KILN_CACHE_DIR` whose WGSL multiplies i8 matrices. */
async function byteMatrixRecords(): Promise<number> {
  const dir = Deno.env.get("KILN_CACHE_DIR");
  if (!dir) return NaN;
  let count = 0;
  const walk = async (d: string): Promise<void> => {
    for await (const e of Deno.readDir(d)) {
      const path = `${d}/${e.name}`;
      if (e.isDirectory) await walk(path);
      else if ((await Deno.readTextFile(path)).includes("subgroup_matrix_left<i8")) count++;
    }
  };
  await walk(dir).catch(() => {});
  return count;
}

const units = new WebGpuBackend();
const dots = new WebGpuBackend({ matrixUnits: false });
let failed = 0;
for (const c of CASES) {
  using want = await compile(c.graph, { backend: "reference", cache: false });
  const expected = (await want.run(c.feeds)).y.data;
  const before = await byteMatrixRecords();
  const row: Record<string, unknown> = { id: c.id };
  for (const [name, backend] of [["units", units], ["dots", dots]] as const) {
    // The default cache (under `KILN_CACHE_DIR`) keeps the units' WGSL to count; none for the dots.
    using exe = await compile(c.graph, { backend, ...(name === "dots" && { cache: false }) });
    const got = (await exe.run(c.feeds)).y.data;
    let wrong = 0;
    for (let i = 0; i < expected.length; i++) if (!Object.is(got[i], expected[i])) wrong++;
    row[name] = wrong;
    failed += wrong;
  }
  row.byteMatrixKernels = (await byteMatrixRecords()) - before;
  console.log(JSON.stringify(row));
}
units.dispose();
dots.dispose();
console.log(failed ? `FAILED: ${failed} elements differ` : "all cases exact");
if (failed) Deno.exit(1);
