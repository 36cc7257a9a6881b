import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";
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
