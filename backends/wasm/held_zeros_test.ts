import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { WasmBackend } from "./wasm_backend.ts";
import { readingWords, zeroHoldings } from "./held_zeros.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { uniform } from "../../jit/support/random.ts";
import { assertClose, f32, numbers } from "../../jit/testing/testing.ts";
import { blockProduct, matchesReference } from "../../jit/testing/block_product.ts";

Deno.test("wasm holds a block product's zero points a byte each, as the model holds them", async () => {
  // [rows, [K, N, bits, block], int8]: every one's zero points held as bytes.
  const cases: [number, number[], boolean][] = [
    [1, [896, 70, 4, 32], false], // a decode step's product: 28 blocks a column
    [1, [4864, 7, 4, 32], true], // its down projection, summed in integers
    [1, [160, 9, 8, 32], false], // 8 bits: zero points past 15; 5 blocks, one past 4
    [1, [72, 9, 4, 32], true], // 3 blocks: none a whole four
    [6, [72, 9, 4, 32], false], // a prompt's unpacking
    [5, [64, 5, 8, 16], false], // an 8-bit unpacking
  ];
  const wasm = new WasmBackend({ threads: 2, warmUpMs: 0 });
  for (const [rows, form, int8] of cases) {
    const { graph, feeds } = blockProduct([rows], form, true, { int8 });
    using exe = await compile(graph, { backend: wasm, cache: false });
    const kernels = exe.plan!.kernels, { held, strip } = zeroHoldings(kernels);
    const zeros = kernels.flatMap((k) => {
      const tag = k.blockProduct ?? k.blockUnpack;
      return tag?.zeros === undefined ? [] : [k.inputs[tag.zeros].value];
    });
    assert.deepEqual([...held], zeros, `${rows} × ${form}`);
    assert.equal(zeros.length, 1);
    assert.equal(strip.size, 0);
    await matchesReference(graph, feeds, wasm, `${rows} × ${form}`);
  }
  wasm.dispose();
});

Deno.test("zero points another kernel reads as words stay words for the block product too", async () => {
  // A tied table's zero points: the product reads them, and so does an elementwise kernel.
  const [k, n, blocks] = [64, 8, 2];
  const b = new GraphBuilder();
  const q = b.param("q", [n, 8], "u32", Uint32Array.from({ length: n * 8 }, (_, i) => i * 7919));
  const s = b.param("s", [n, blocks], "f32", uniform(n * blocks, 3, 0.01, 0.03));
  const zeros = Uint8Array.from({ length: n * blocks }, (_, i) => (i * 5) % 16);
  const z = b.constant(zeros, [n, blocks], "u8");
  const a = b.input("a", [1, k]);
  b.output("y", b.op("BlockMatMul", [a, q, s, z], { bits: 4, block: 32 }));
  b.output("t", b.op("Mul", [b.op("Cast", [z], { to: "f32" }), s]));
  const graph = b.build();
  const feeds = { a: f32(uniform(k, 4, -1, 1), [1, k]) };
  const wasm = new WasmBackend({ threads: 1, warmUpMs: 0 });
  using exe = await compile(graph, { backend: wasm, cache: false });
  const { held, strip } = zeroHoldings(exe.plan!.kernels);
  assert.equal(held.size, 0);
  const product = exe.plan!.kernels.findIndex((x) => x.blockProduct);
  assert.deepEqual([...strip], [product]);
  const zerosAt = exe.plan!.kernels[product].blockProduct!.zeros!;
  assert.equal(exe.plan!.kernels[product].inputs[zerosAt].packed, "nibbles");
  assert.equal(readingWords(exe.plan!.kernels[product]).inputs[zerosAt].packed, undefined);
  using want = await compile(graph, { backend: "reference", cache: false });
  const [got, expected] = [await exe.run(feeds), await want.run(feeds)];
  for (const name of ["y", "t"]) {
    assertClose(numbers(got[name].data), numbers(expected[name].data), {
      atol: 1e-4,
      rtol: 1e-4,
      message: name,
    });
  }
  wasm.dispose();
});
