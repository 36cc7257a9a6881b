import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";
import { generateWasm } from "./codegen.ts";
import { wasm as encoder } from "./encoder.ts";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { f32 } from "../../jit/testing/testing.ts";
import {
  blockProduct as product,
  FEW_ROW_CASES,
  matchesReference,
} from "../../jit/testing/block_product.ts";

Deno.test("wasm unpacks a few-row BlockMatMul in registers, as the reference computes it", async () => {
  const wasm = new WasmBackend({ threads: 2, warmUpMs: 0 });
  for (const [lead, form, zeros] of FEW_ROW_CASES) {
    const { graph, feeds } = product(lead, form, zeros);
    const tagged = fuse(graph, { blockProducts: true }).kernels.filter((k) => k.blockProduct);
    assert.equal(tagged.length, 1, `${lead} × ${form}: one tagged product`);
    await matchesReference(graph, feeds, wasm, `${lead} × ${form}`);
  }
  wasm.dispose();
});

Deno.test("wasm's block products add a column alone as they add it among four", async () => {
  // Columns go four at a time where a thread's range holds them, one at a time at its ends: of
  // five columns whose first and last weight rows are the same, the two sums must be the same
  // bits, so where the threads' ranges fall changes no output.
  const [k, n, words, blocks] = [96, 5, 12, 3];
  const row = Uint32Array.from({ length: words }, (_, i) => (i * 2654435761) >>> 0);
  const q = new Uint32Array(n * words), s = new Float32Array(n * blocks);
  const z = new Float32Array(n * blocks);
  for (let c = 0; c < n; c++) {
    q.set(c % 4 === 0 ? row : row.map((w) => (w ^ (c * 0x9e3779b9)) >>> 0), c * words);
    for (let j = 0; j < blocks; j++) {
      s[c * blocks + j] = c % 4 === 0 ? 0.02 + j / 100 : 0.01 * (c + j);
      z[c * blocks + j] = c % 4 === 0 ? 7 : (c + j) % 16;
    }
  }
  const b = new GraphBuilder();
  const inputs = [
    b.input("a", [1, k]),
    b.param("q", [n, words], "u32", q),
    b.param("s", [n, blocks], "f32", s),
    b.param("z", [n, blocks], "f32", z),
  ];
  b.output("y", b.op("BlockMatMul", inputs, { bits: 4, block: 32 }));
  const wasm = new WasmBackend({ threads: 1, warmUpMs: 0 });
  const exe = await compile(b.build(), { backend: wasm, cache: false });
  // The first of the four lanes (values 0-7 of every 32) far larger than the others, so that
  // another order of adds shows.
  const big = (i: number) => (i % 32 < 8 ? 1e7 : 1);
  const a = f32(Float32Array.from({ length: k }, (_, i) => Math.sin(i) * big(i)), [1, k]);
  const y = (await exe.run({ a })).y.data as Float32Array;
  wasm.dispose();
  assert.equal(y[4], y[0]);
});

Deno.test("wasm unpacks the weight of a BlockMatMul of more rows once, in registers, then tiles", async () => {
  const cases: [number[], number[], boolean][] = [
    [[8], [896, 70, 4, 32], true], // a prompt's rows
    [[8], [40, 9, 4, 32], true], // K past the last whole block
    [[2, 3], [100, 13, 2, 64], false], // 2 bits, the middle value
    [[5], [64, 5, 8, 16], true], // 8 bits
  ];
  const wasm = new WasmBackend({ threads: 2, warmUpMs: 0 });
  for (const [lead, form, zeros] of cases) {
    const { graph, feeds } = product(lead, form, zeros);
    const kernels = fuse(graph, { blockProducts: true, blockUnpacks: true }).kernels;
    assert.ok(kernels.every((k) => !k.blockProduct), `${lead} × ${form}: no product tag`);
    const unpack = kernels.filter((k) => k.blockUnpack);
    assert.equal(unpack.length, 1, `${lead} × ${form}: one unpacking`);
    assert.deepEqual(unpack[0].outputs[0].shape, [form[0], form[1]]);
    await matchesReference(graph, feeds, wasm, `${lead} × ${form}`);
  }
  wasm.dispose();
});

Deno.test("a BlockMatMul of blocks narrower than a vector of words is the product of its weight unpacked", () => {
  const kernels =
    fuse(product([1], [64, 16, 4, 16], true).graph, { blockProducts: true, blockUnpacks: true })
      .kernels;
  assert.ok(kernels.every((k) => !k.blockProduct && !k.blockUnpack));
});

Deno.test("wasm sums a block product of A rounded to 8 bits in integers, as the reference computes it", async () => {
  // MatMulNBits of accuracy_level 4: 4-bit weights in blocks of whole 32s covering K.
  const cases: [number[], number[], boolean | "f32"][] = [
    [[1], [896, 70, 4, 32], true], // a decoder's token step
    [[2], [256, 9, 4, 64], false], // two rows, blocks of 64, the middle value
    [[1], [4864, 7, 4, 32], "f32"], // more blocks than a column group's registers; float zero points
    [[16], [256, 9, 4, 32], true], // a short prompt's rows, split among the threads
    [[128], [256, 9, 4, 32], true], // a prompt's rows
  ];
  const wasm = new WasmBackend({ threads: 2, warmUpMs: 0 });
  for (const [lead, form, zeros] of cases) {
    const { graph, feeds } = product(lead, form, zeros, { int8: true });
    const fused = fuse(graph, { blockProducts: true, integerBlockRows: 512 });
    const [kernel] = fused.kernels.filter((k) => k.blockProduct);
    assert.equal(kernel.blockProduct?.int8, true, `${form}: the product knows its A is rounded`);
    // More than four rows are a block product only where integer products are asked for them.
    const few = fuse(graph, { blockProducts: true }).kernels.some((k) => k.blockProduct);
    assert.equal(few, lead[0] <= 4, `${lead} rows`);
    // The integer form's byte dot product (relaxed SIMD, 0xfd 0x113) is in the module.
    const bytes = generateWasm(encoder, kernel, { fma: true });
    const dots = bytes.findIndex((x, i) =>
      x === 0xfd && bytes[i + 1] === 0x93 && bytes[i + 2] === 2
    );
    assert.ok(dots >= 0, `${form}: summed in integers`);
    await matchesReference(graph, feeds, wasm, `${lead} × ${form} in integers`);
    // The wasm backend asks for them (where the engine has relaxed SIMD).
    if ((wasm.capabilities().integerBlockRows ?? 4) >= lead[0]) {
      using exe = await compile(graph, { backend: wasm, cache: false });
      assert.ok(exe.plan!.kernels.some((k) => k.blockProduct?.int8), `${lead} rows on wasm`);
    }
  }
  wasm.dispose();
});
