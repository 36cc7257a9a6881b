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
import { graphEqualsReference } from "../../jit/testing/testing.ts";
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
