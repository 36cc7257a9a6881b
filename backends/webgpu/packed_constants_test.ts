/**
 * 8-bit constants held four bytes to a word on WebGPU (`jit/passes/packed_constants.ts`): the
 * values of every read (byte tiles along K and along their outputs, single elements, a gather,
 * sizes that do not fill the last word) against the reference, and the device memory they take.
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { assertClose, graphEqualsReference, numbers } from "../../jit/testing/testing.ts";
import { rng } from "../../jit/support/random.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";

/** `n` bytes from `seed`: i8 in [-128, 127] or u8 in [0, 255]. */
function bytes(n: number, seed: number, signed: boolean): Int8Array | Uint8Array {
  const next = rng(seed);
  const u = Uint8Array.from({ length: n }, () => Math.floor(next() * 256));
  return signed ? new Int8Array(u.buffer) : u;
}

Deno.test("8-bit constants held as bytes give the reference's values on every read", async () => {
  const g = new GraphBuilder();
  // Byte products large enough to tile: i8 weights [K, N] read along their outputs, a
  // convolution's filters read along K (stored u8 patches by them), and a 1×1 convolution's
  // filters as its A (filters × pixels).
  const x = g.input("x", [128, 512], "u8");
  const w = g.constant(bytes(512 * 260, 1, true), [512, 260], "i8");
  g.output("xw", g.op("MatMulInteger", [x, w], { a_zero: 0, b_zero: 0 }));
  const image = g.input("image", [2, 64, 24, 24], "u8");
  const filters = g.constant(bytes(64 * 64 * 9, 2, true), [64, 64, 3, 3], "i8");
  g.output("conv", g.op("ConvInteger", [image, filters], {}));
  const pixels = g.input("pixels", [4, 64, 32, 32], "u8");
  const pointwise = g.constant(bytes(128 * 64, 3, true), [128, 64, 1, 1], "i8");
  g.output("pointwise", g.op("ConvInteger", [pixels, pointwise], {}));
  // Odd sizes: 15 weights (the last word a quarter empty), and a gathered u8 table of 7.
  const small = g.constant(bytes(15, 4, true), [5, 3], "i8");
  g.output(
    "xs",
    g.op("MatMulInteger", [g.input("s", [2, 5], "u8"), small], { a_zero: 0, b_zero: 0 }),
  );
  const table = g.constant(bytes(7, 5, false), [7], "u8");
  g.output("t", g.op("Gather", [table, g.input("i", [5], "i32")]));
  const u8 = (shape: number[], seed: number) => ({
    data: bytes(shape.reduce((a, b) => a * b), seed, false),
    shape,
    dtype: "u8" as const,
  });
  const feeds = {
    x: u8([128, 512], 6),
    image: u8([2, 64, 24, 24], 7),
    pixels: u8([4, 64, 32, 32], 8),
    s: u8([2, 5], 9),
    i: { data: Int32Array.of(6, 0, 3, 6, 1), shape: [5], dtype: "i32" as const },
  };
  await graphEqualsReference(g.build(), feeds, new WebGpuBackend());
});

Deno.test("8-bit weights take a byte each of device memory", async () => {
  const g = new GraphBuilder();
  const w = g.constant(bytes(512 * 512, 8, true), [512, 512], "i8");
  const y = g.op("MatMulInteger", [g.input("x", [4, 512], "u8"), w], { a_zero: 0, b_zero: 0 });
  const graph = g.output("y", y).build();
  const backend = new WebGpuBackend();
  using exe = await compile(graph, { backend, cache: false });
  const x = { data: bytes(2048, 9, false), shape: [4, 512], dtype: "u8" as const };
  await exe.run({ x });
  // 256 KB of weights: as words they had taken 1 MB.
  const resident = backend.poolStats().residentBytes;
  assert.ok(resident >= 512 * 512 && resident < 2 * 512 * 512, `${resident} bytes resident`);
});

Deno.test("4-bit zero points held eight to a word give the reference's products", async () => {
  // A decode row and a prefill of 5 by 4-bit weights of 37 outputs (zero points not a whole
  // number of words), plain and with A rounded to 8 bits (the integer kernel's reads).
  const n = 37, blocks = 3, k = 32 * blocks;
  const next = rng(11);
  const g = new GraphBuilder();
  const words = Uint32Array.from({ length: n * blocks * 4 }, () => Math.floor(next() * 2 ** 32));
  const tables = [
    g.param("w", [n, blocks * 4], "u32", words),
    g.param("s", [n, blocks], "f32", Float32Array.from({ length: n * blocks }, () => next())),
    g.constant(
      Uint8Array.from({ length: n * blocks }, () => Math.floor(next() * 16)),
      [n, blocks],
      "u8",
    ),
  ];
  for (const rows of [1, 5]) {
    const a = g.input(`a${rows}`, [rows, k]);
    g.output(`y${rows}`, g.op("BlockMatMul", [a, ...tables], { bits: 4, block: 32 }));
    const rounded = g.op("QuantizeRowBlocks", [a], { block: 32 });
    g.output(
      `q${rows}`,
      g.op("BlockMatMul", [rounded, ...tables], { bits: 4, block: 32, int8: 1 }),
    );
  }
  const feed = (rows: number) => ({
    data: Float32Array.from({ length: rows * k }, () => next() - 0.5),
    shape: [rows, k],
    dtype: "f32" as const,
  });
  // Small u8 weights of an integer product: its byte tiles take them four to a word.
  const w = g.constant(Uint8Array.from({ length: 512 * 260 }, () => Math.floor(next() * 16)), [
    512,
    260,
  ], "u8");
  g.output("xw", g.op("MatMulInteger", [g.input("x", [128, 512], "u8"), w], {}));
  // Small u8 values read elementwise (four at a time where the kernel takes vec4s).
  const small = Uint8Array.from({ length: 8 * 16 }, () => Math.floor(next() * 16));
  g.output("cast", g.op("Cast", [g.constant(small, [8, 16], "u8")], { to: "f32" }));
  const backend = new WebGpuBackend(), graph = g.build();
  using exe = await compile(graph, { backend, cache: false });
  const held = exe.plan!.kernels.flatMap((x) => x.inputs.flatMap((b) => b.packed ?? []));
  assert.ok(held.filter((p) => p === "nibbles").length >= 1, held.join());
  assert.ok(held.includes("bytes"), held.join());
  const x = { data: bytes(128 * 512, 12, false), shape: [128, 512], dtype: "u8" as const };
  const feeds = { a1: feed(1), a5: feed(5), x };
  using reference = await compile(graph, { backend: "reference", cache: false });
  const [got, want] = [await exe.run(feeds), await reference.run(feeds)];
  // The products sum blocks in another order than the reference: within f32's rounding.
  for (const name of ["y1", "q1", "y5", "q5"]) {
    assertClose(numbers(got[name].data), numbers(want[name].data), { atol: 1e-4, rtol: 1e-4 });
  }
  assert.deepEqual(got.xw.data, want.xw.data);
  assert.deepEqual(got.cast.data, want.cast.data);
});

Deno.test("a quantized activation held four bytes to a word gives the reference's products", async () => {
  // Its quantizing pass writes a word for four bytes, the products read them as they lie; a
  // second reader casts them back (elements of packed words).
  const g = new GraphBuilder();
  const x = g.input("x", [16, 64]);
  const [q, scale, zero] = g.opN("DynamicQuantizeLinear", [x], {}, 3);
  const w = g.constant(bytes(64 * 24, 5, true), [64, 24], "i8");
  const product = g.op("MatMulInteger", [q, w, zero], { a_zero: 1, b_zero: 0 });
  g.output("y", g.op("Mul", [g.op("Cast", [product], { to: "f32" }), scale]));
  g.output("back", g.op("Mul", [g.op("Cast", [q], { to: "f32" }), scale]));
  const graph = g.build();
  const gpu = new WebGpuBackend();
  using exe = await compile(graph, { backend: gpu, cache: false });
  const stored = exe.plan!.kernels.flatMap((k) => k.outputs.filter((o) => o.packed));
  assert.deepEqual(stored.map((o) => `${o.dtype} ${o.shape}`), ["u8 16,64"]);
  const data = Float32Array.from(bytes(16 * 64, 9, true), (v) => v / 17);
  await graphEqualsReference(graph, { x: { data, shape: [16, 64], dtype: "f32" } }, gpu);
});
