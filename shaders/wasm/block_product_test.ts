import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { uniform } from "../../jit/support/random.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { assertClose, f32, numbers } from "../../jit/testing/testing.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";

/** Packed u32 words drawn from a fixed stream, every bit pattern likely. */
const words = (n: number, seed: number): Uint32Array =>
  Uint32Array.from(uniform(n, seed, 0, 2 ** 32), (v) => Math.floor(v) >>> 0);

/**
 * A BlockMatMul of A [...lead, K] by packed weights of N rows (`bits`, blocks of `block`, zero
 * points or the middle value), its buffers weights of the graph, as a decoder's are.
 */
function product(lead: number[], [k, n, bits, block]: number[], zeros: boolean) {
  const per = 32 / bits, blocks = Math.ceil(k / block), width = (blocks * block) / per;
  const b = new GraphBuilder();
  const q = b.param("q", [n, width], "u32", words(n * width, k + n));
  const s = b.param("s", [n, blocks], "f32", uniform(n * blocks, 7, 0.01, 0.03));
  const z = b.param("z", [n, blocks], "f32", uniform(n * blocks, 8, 0, 2 ** bits).map(Math.floor));
  const a = b.input("a", [...lead, k]);
  b.output("y", b.op("BlockMatMul", zeros ? [a, q, s, z] : [a, q, s], { bits, block }));
  const x = f32(uniform(lead.reduce((p, d) => p * d, 1) * k, 9, -1, 1), [...lead, k]);
  return { graph: b.build(), feeds: { a: x } };
}

/** Checks `graph` on `backend` against the reference, to block products' tolerance. */
async function matchesReference(
  graph: Graph,
  feeds: Record<string, HostTensor>,
  backend: WasmBackend,
  message: string,
): Promise<void> {
  const want = await (await compile(graph, { backend: "reference", cache: false })).run(feeds);
  const got = await (await compile(graph, { backend, cache: false })).run(feeds);
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-4, rtol: 1e-4, message });
}

Deno.test("wasm unpacks a few-row BlockMatMul in registers, as the reference computes it", async () => {
  const cases: [number[], number[], boolean][] = [
    [[1], [896, 70, 4, 32], true], // a decoder's token step
    [[1], [40, 9, 4, 32], true], // K past the last whole block
    [[2, 1], [100, 13, 2, 64], false], // a batch of two rows; 2 bits, the middle value
    [[3], [64, 5, 8, 16], true], // 8 bits, three rows
    [[1], [300, 6, 4, 128], true], // blocks of 128
  ];
  const wasm = new WasmBackend({ threads: 2, warmUpMs: 0 });
  for (const [lead, form, zeros] of cases) {
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
