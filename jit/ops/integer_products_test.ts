/**
 * MatMulInteger's and ConvInteger's zero points are checked as their products line them up: a
 * wrong dtype or a shape they cannot broadcast is a typed error saying what to give instead; a
 * convolution's constant weights fold, per-channel zero points too, into their exact slices.
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile, GraphBuilder, WasmBackend, WebGpuBackend } from "../../mod.ts";
import { KilnError } from "../support/errors.ts";
import { uniform } from "../support/random.ts";
import { graphEqualsReference } from "../testing/testing.ts";
import { exactTerms, fewestParts } from "./integer_matmul.ts";

/** The graph of a u8 [4, 8] by i8 [8, 3] MatMulInteger with `zeros` (a's, b's), flagged. */
function matmul(zeros: { a?: [number[], "u8" | "f32"]; b?: [number[], "i8" | "u8"] }) {
  const g = new GraphBuilder();
  const ins = [g.input("a", [4, 8], "u8"), g.input("b", [8, 3], "i8")];
  if (zeros.a) ins.push(g.input("az", zeros.a[0], zeros.a[1]));
  if (zeros.b) ins.push(g.input("bz", zeros.b[0], zeros.b[1]));
  const y = g.op("MatMulInteger", ins, { a_zero: zeros.a ? 1 : 0, b_zero: zeros.b ? 1 : 0 });
  return g.output("y", y).build();
}

const refused = (code: string, says: RegExp) => (e: unknown) =>
  e instanceof KilnError && e.code === code && says.test(e.message) && /Fix:/.test(e.message);

Deno.test("MatMulInteger's zero points: one value, one per row of a or column of b, of the operand's dtype", () => {
  // Scalars, a per-row zero point of a (M = 4) and a per-column one of b (N = 3) are accepted.
  matmul({ a: [[], "u8"], b: [[1], "i8"] });
  matmul({ a: [[4], "u8"], b: [[3], "i8"] });
  assert.throws(
    () => matmul({ a: [[], "f32"] }),
    refused("dtype-mismatch", /input 2 has dtype f32/),
  );
  assert.throws(() => matmul({ b: [[3], "u8"] }), refused("dtype-mismatch", /takes i8/));
  assert.throws(
    () => matmul({ a: [[3], "u8"] }),
    refused("shape-mismatch", /zero point 2 has shape \[3\].*one value or 4 \(one per row of a\)/),
  );
  assert.throws(
    () => matmul({ b: [[2, 3], "i8"] }),
    refused("shape-mismatch", /one value or 3 \(one per column of b\)/),
  );
});

Deno.test("ConvInteger's zero points: one for the input, one or one per output channel for the weights", () => {
  const conv = (xz: number[], wz: number[]) => {
    const g = new GraphBuilder();
    const ins = [g.input("x", [1, 2, 5, 5], "u8"), g.input("w", [6, 2, 3, 3], "u8")];
    const y = g.op("ConvInteger", [...ins, g.input("xz", xz, "u8"), g.input("wz", wz, "u8")], {
      a_zero: 1,
      b_zero: 1,
    });
    g.output("y", y).build();
  };
  conv([], [6]);
  conv([1], []);
  assert.throws(() => conv([2], []), refused("shape-mismatch", /one value or 1 \(one per row/));
  assert.throws(() => conv([], [2]), refused("shape-mismatch", /one value or 6/));
});

Deno.test("a QLinearConv of per-channel zero points folds its weights: one integer conv where the backend has integer dots, its channel slices a constant elsewhere", async () => {
  // 256 channels of 3×3 by weights of the full int8 range: the type's bound (258 products a sum)
  // asks for slices of 28 channels; the weights' own magnitudes for fewer, each exact in f32.
  const [c, m, hw] = [256, 8, 5];
  const b = new GraphBuilder();
  const f = (v: number) => b.constant(new Float32Array([v]), [], "f32");
  const w = Int8Array.from(uniform(m * c * 9, 31, -127, 128), Math.floor);
  const y = b.op("QLinearConv", [
    b.input("x", [1, c, hw, hw], "u8"),
    f(0.5),
    b.constant(new Uint8Array([3]), [], "u8"),
    b.constant(w, [m, c, 3, 3], "i8"),
    b.constant(Float32Array.from({ length: m }, (_, i) => 2 ** -(12 + (i % 3))), [m], "f32"),
    b.constant(new Int8Array(m), [m], "i8"),
    f(1),
    b.constant(new Uint8Array([128]), [], "u8"),
  ], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] });
  const graph = b.output("y", y).build();
  const x = {
    data: Uint8Array.from(uniform(c * hw * hw, 32, 0, 256), Math.floor),
    shape: [1, c, hw, hw],
    dtype: "u8" as const,
  };
  const want = await (await compile(graph, { backend: "reference" })).run({ x });
  // wasm's integer tiles take i16 pairs (or bytes where its byte dot is exact); WebGPU's bytes
  // where WGSL has packed byte dots (llvmpipe's does), else the exact float slices.
  const gpu = new WebGpuBackend();
  await gpu.prepare();
  const bytes = {
    wasm: new WasmBackend().capabilities().byteDot === true,
    webgpu: gpu.capabilities().byteDot === true,
  };
  gpu.dispose();
  for (const backend of ["wasm", "webgpu"] as const) {
    const exe = await compile(graph, { backend, cache: false });
    // The shifted weights are constants: no kernel computes them in each run (one did while
    // the per-channel zero points went through a Reshape), and the slices' conv reads them.
    const spaces = (exe.plan?.kernels ?? []).map((k) => k.space.join());
    assert.ok(!spaces.includes([m, c, 3, 3].join()), `${backend}: ${spaces.join(" | ")}`);
    if (backend === "wasm" || bytes.webgpu) {
      // Integer dot products: one group, the shifted weights an i16 constant as they are, or
      // the weights' bytes where the backend's byte dot product is exact (x86 with VNNI; WGSL).
      const conv = exe.plan!.kernels.find((k) => k.space.join() === `1,1,25,8,${c * 9}`);
      assert.equal(conv?.reductions[0].dtype, "i32", spaces.join(" | "));
      const weights = conv.inputs.find((i) => i.shape.join() === [m, c, 3, 3].join());
      assert.equal(weights?.dtype, bytes[backend] ? "i8" : "i16");
      assert.deepEqual((await exe.run({ x })).y.data, want.y.data, backend);
      exe.dispose();
      continue;
    }
    const conv = exe.plan!.kernels.find((k) => /^1,[2-9],25,8,/.test(k.space.join()));
    assert.ok(conv, `${backend}: ${spaces.join(" | ")}`);
    // The slices' weights are a constant of their grouped shape, not [m, c, 3, 3] read through
    // a transposing view (467 ms against 10.6 on one wasm thread at 512 → 256 channels, 14×14).
    const parts = conv.space[1], size = Math.ceil(c / parts);
    const shapes = conv.inputs.map((i) => i.shape.join());
    assert.ok(shapes.includes([parts * m, size, 3, 3].join()), `${backend}: ${shapes.join(" | ")}`);
    assert.deepEqual((await exe.run({ x })).y.data, want.y.data, backend);
    exe.dispose();
  }
});

Deno.test("an integer conv no float slices sum exactly is a product of gathered patches, exact", async () => {
  // A 1-D window of 300 taps (one f32 sum holds 258 products of shifted bytes), and a grouped
  // conv whose 64 channels a group need three slices: wasm's integer tiles take neither (rank 3,
  // two groups), so both decompose, into i32 products of patches.
  const cases = [
    { x: [2, 3, 320], w: [4, 3, 300], attrs: { pads: [2, 1], strides: [3] } },
    {
      x: [1, 128, 9, 9],
      w: [8, 64, 3, 3],
      attrs: { group: 2, pads: [1, 1, 1, 1], dilations: [2, 1] },
    },
  ];
  const wasm = new WasmBackend({ threads: 1 });
  try {
    for (const { x, w, attrs } of cases) {
      const g = new GraphBuilder();
      const y = g.op("IntegerConv", [g.input("x", x, "i16"), g.input("w", w, "i16")], {
        ...attrs,
        bound: 255 * 255,
        max_a: 255,
      });
      const graph = g.output("y", y).build();
      const count = (s: number[]) => s.reduce((a, b) => a * b, 1);
      const feeds = {
        x: {
          data: Int16Array.from(uniform(count(x), 11, -255, 256), Math.floor),
          shape: x,
          dtype: "i16" as const,
        },
        w: {
          data: Int16Array.from(uniform(count(w), 13, -255, 256), Math.floor),
          shape: w,
          dtype: "i16" as const,
        },
      };
      await graphEqualsReference(graph, feeds, wasm);
    }
  } finally {
    wasm.dispose();
  }
});

Deno.test("a MatMulInteger in float chunks takes as few as its weights allow, worked out where it decomposes", async () => {
  // K = 768 and a u8 a (|a| ≤ 255): the bound alone (255 · 128 a product) asks for three chunks;
  // weights of |w| ≤ 2 sum under 2^24 / 255 in one, weights all ±127 in two.
  const k = 768, n = 4;
  const graph = (weight: (i: number) => number) => {
    const g = new GraphBuilder();
    const w = Int8Array.from({ length: k * n }, (_, i) => weight(i));
    const y = g.op("MatMulInteger", [g.input("a", [2, k], "u8"), g.constant(w, [k, n], "i8")]);
    return g.output("y", y).build();
  };
  const a = {
    data: Uint8Array.from({ length: 2 * k }, (_, i) => (i * 37) % 256),
    shape: [2, k],
    dtype: "u8" as const,
  };
  const gpu = new WebGpuBackend({ packedDots: false });
  const small = (i: number) => (i % 5) - 2, large = (i: number) => (i % 2 ? 127 : -127);
  for (const [weight, chunks] of [[small, 1], [large, 2]] as const) {
    const g = graph(weight);
    const exe = await compile(g, { backend: gpu, cache: false });
    const shapes = exe.plan!.kernels.flatMap((kernel) => kernel.inputs)
      .filter((i) => i.dtype === "f32" && i.shape.at(-1) === n).map((i) => i.shape.join());
    const want = chunks === 1 ? [k, n] : [chunks, k / chunks, n];
    assert.ok(shapes.includes(want.join()), `${chunks}: ${shapes.join(" | ")}`);
    const reference = await compile(g, { backend: "reference" });
    assert.deepEqual((await exe.run({ a })).y.data, (await reference.run({ a })).y.data);
    exe.dispose();
  }
  gpu.dispose();
});

Deno.test("fewestParts: the fewest chunks of K whose weights' magnitudes sum under the exact bound", () => {
  // maxA 2^16: a chunk may sum |w| up to 255 (exactTerms(65536)); columns of 4 rows.
  const limit = exactTerms(2 ** 16);
  const column = (values: number[]) => values.flatMap((v) => [v, 1]);
  assert.equal(fewestParts(4, 2, column([60, -60, 60, -60]), 2 ** 16, 8), 1);
  // 100 · 4 is past it, two chunks of 200 are not: 2.
  assert.equal(fewestParts(4, 2, column([100, -100, 100, -100]), 2 ** 16, 8), 2);
  // One row alone past the bound: every split fails, so the most allowed.
  assert.equal(fewestParts(4, 2, column([limit + 1, 0, 0, 0]), 2 ** 16, 3), 3);
});
