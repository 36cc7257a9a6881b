/**
 * bfloat16 at the boundary: bits in and out on every backend, held as f32 inside, casts rounding
 * to nearest even, device tensors written and read as bits.
 */
import assert from "node:assert/strict";
import { compile, DeviceTensor, GraphBuilder, tensor, WebGpuBackend } from "../../mod.ts";
import { fromBf16Bits, narrowToBf16, toBf16Bits, widenBf16 } from "../ir/dtype.ts";

Deno.test("bf16 bits: ties to even, NaN quiet, the largest finite rounds to infinity", () => {
  // 1 + 2^-8 ties down to 1 (even); 1 + 3·2^-8 ties up to 1 + 2^-6.
  assert.deepEqual([1.00390625, 1.01171875].map(toBf16Bits), [0x3f80, 0x3f82]);
  assert.equal(toBf16Bits(3.4028234663852886e38), 0x7f80);
  assert.equal(toBf16Bits(NaN), 0x7fc0);
  assert.ok(Number.isNaN(fromBf16Bits(0x7fc1)));
  assert.equal(fromBf16Bits(toBf16Bits(-2.5)), -2.5);
});

Deno.test("a graph takes and gives bf16 bits on every backend, computing in f32", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [3], "bf16");
  // Cast to bf16 inside rounds: 3.3 · 3 (f32) to 9.875, the output's bits.
  const y = b.op("Cast", [b.op("Mul", [x, b.constant(3)])], { to: "bf16" });
  b.output("y", y, { dtype: "bf16" });
  b.output("f", b.op("Mul", [x, b.constant(3)]));
  const graph = b.build();
  const bits = narrowToBf16([1.00390625, -2.5, 3.3]);
  for (const backend of ["reference", "wasm", "webgpu"]) {
    using exe = await compile(graph, { backend, cache: false });
    const out = await exe.run({ x: { data: bits, shape: [3], dtype: "bf16" } });
    assert.equal(out.y.dtype, "bf16", backend);
    assert.deepEqual(Array.from(widenBf16(out.y.data as Uint16Array)), [3, -7.5, 9.875], backend);
    // Inside, bf16 values are f32: the product is not rounded until a cast or an output.
    assert.deepEqual(Array.from(out.f.data as Float32Array), [3, -7.5, 9.890625], backend);
  }
});

Deno.test("tensor() and cast() take bf16: bits as they are, numbers rounded", async () => {
  const t = tensor([1.00390625, 1.01171875, NaN], [3], "bf16");
  assert.equal(t.dtype, "f32");
  const got = Array.from(await t.data() as Float32Array);
  assert.deepEqual(got.slice(0, 2), [1, 1.015625]);
  assert.ok(Number.isNaN(got[2]));
  const fromBits = tensor(Uint16Array.of(0x3f80, 0xc020), [2], "bf16");
  assert.deepEqual(Array.from(await fromBits.data() as Float32Array), [1, -2.5]);
  const cast = tensor([3.3, -0.1]).cast("bf16");
  assert.deepEqual(Array.from(await cast.data() as Float32Array), [3.296875, -0.10009765625]);
});

Deno.test("a bf16 device tensor is written and read as bits", async () => {
  const gpu = new WebGpuBackend();
  const t = await DeviceTensor.allocate(gpu, [2], "bf16");
  t.write(narrowToBf16([1.5, -3]));
  const read = await t.read();
  assert.equal(read.dtype, "bf16");
  assert.deepEqual(Array.from(widenBf16(read.data as Uint16Array)), [1.5, -3]);
  t.dispose();
  gpu.dispose();
});
