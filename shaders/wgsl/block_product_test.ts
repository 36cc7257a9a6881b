import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { blockProduct, matchesReference } from "../../jit/testing/block_product.ts";
import { generateWgsl } from "./codegen.ts";

Deno.test("WebGPU unpacks a few-row BlockMatMul in registers, as the reference computes it", async () => {
  const cases: [number[], number[], boolean][] = [
    [[1], [896, 70, 4, 32], true], // a decoder's token step
    [[1], [40, 9, 4, 32], true], // K past the last whole block
    [[2, 1], [100, 13, 2, 64], false], // a batch of two rows; 2 bits, the middle value
    [[3], [64, 5, 8, 16], true], // 8 bits, three rows
    [[1], [300, 6, 4, 128], true], // blocks of 128
    [[1], [4864, 7, 4, 32], true], // more blocks than a row's threads
  ];
  for (const [lead, form, zeros] of cases) {
    const { graph, feeds } = blockProduct(lead, form, zeros);
    const [kernel] = fuse(graph, { blockProducts: true }).kernels;
    // The packed words are read as vec4s: the generic expression reads them one u32 at a time.
    const wgsl = generateWgsl(kernel, { maxInvocations: 256 });
    assert.match(wgsl, /array<vec4<u32>>/, `${lead} × ${form}: the block kernel`);
    await matchesReference(graph, feeds, "webgpu", `${lead} × ${form}`);
  }
});

Deno.test("a block product whose A rows are not whole vec4s keeps the generic kernel", () => {
  const { graph } = blockProduct([1], [42, 5, 4, 32], true);
  const [kernel] = fuse(graph, { blockProducts: true }).kernels;
  assert.ok(kernel.blockProduct);
  assert.doesNotMatch(generateWgsl(kernel, { maxInvocations: 256 }), /array<vec4<u32>>/);
});
