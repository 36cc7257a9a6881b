import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";
import { generateWasm } from "./codegen.ts";
import { wasm as encoder } from "./encoder.ts";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { f32 } from "../../jit/testing/testing.ts";
import { uniform } from "../../jit/support/random.ts";
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

Deno.test("wasm's integer block products sum two rows at once to the bits of one row alone", async () => {
  // Two rows go together where a thread's range holds both whole (`rowPair`), one at a time
  // elsewhere, and each output adds in the same order either way: every row of a 7-row product
  // split among three threads (ranges that start mid-row) is that row's product alone, bit for
  // bit, with a residual read at the row's own coordinates added after.
  const [k, n, blocks] = [256, 12, 8];
  const q = Uint32Array.from(uniform(n * blocks * 4, 3, 0, 2 ** 32), (v) => Math.floor(v) >>> 0);
  const s = uniform(n * blocks, 4, 0.01, 0.03);
  const z = Uint8Array.from(uniform(n * blocks, 5, 0, 16), Math.floor);
  const product = (rows: number) => {
    const b = new GraphBuilder();
    const a = b.op("QuantizeRowBlocks", [b.input("a", [rows, k])], { block: 32 });
    const w = [b.param("q", [n, blocks * 4], "u32", q), b.param("s", [n, blocks], "f32", s)];
    const y = b.op("BlockMatMul", [a, ...w, b.param("z", [n, blocks], "u8", z)], {
      bits: 4,
      block: 32,
      int8: 1,
    });
    b.output("y", b.op("Add", [y, b.input("r", [rows, n])]));
    return b.build();
  };
  const a = uniform(7 * k, 6, -2, 2), r = uniform(7 * n, 7, -1, 1);
  const wasm = new WasmBackend({ threads: 3, warmUpMs: 0 });
  if (!wasm.capabilities().integerBlockRows) return wasm.dispose();
  using all = await compile(product(7), { backend: wasm, cache: false });
  assert.ok(all.plan!.kernels.some((k) => k.blockProduct?.int8), "summed in integers");
  const y = (await all.run({ a: f32(a, [7, k]), r: f32(r, [7, n]) })).y.data as Float32Array;
  using one = await compile(product(1), { backend: wasm, cache: false });
  for (let row = 0; row < 7; row++) {
    const feeds = {
      a: f32(a.subarray(row * k, (row + 1) * k), [1, k]),
      r: f32(r.subarray(row * n, (row + 1) * n), [1, n]),
    };
    const alone = (await one.run(feeds)).y.data as Float32Array;
    assert.deepEqual([...y.subarray(row * n, (row + 1) * n)], [...alone], `row ${row}`);
  }
  await matchesReference(product(7), { a: f32(a, [7, k]), r: f32(r, [7, n]) }, wasm, "7 rows");
  wasm.dispose();
});
