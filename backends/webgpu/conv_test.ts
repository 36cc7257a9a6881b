/**
 * Convolutions on WebGPU as matmuls: implicit GEMM whose tiles gather their patches, and patches
 * stored first (im2col) where that pays, each against the reference.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { fusionFor } from "../../jit/compile.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { f32, graphMatchesReference, hashed } from "../../jit/testing/testing.ts";
import { kernelLayout } from "../../shaders/wgsl/codegen.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";

// CI has no GPU: these run on the software adapter (llvmpipe), slow but exact.
const gpu = new WebGpuBackend();
await gpu.prepare();
const OPTIONS = { maxInvocations: 256 };

Deno.test("a large convolution runs the tiled matmul as implicit GEMM (padding through the fill)", async () => {
  const b = new GraphBuilder();
  const conv = b.op("Conv", [b.input("x", [2, 16, 34, 34]), b.input("w", [64, 16, 3, 3])], {
    pads: [1, 1, 1, 1],
  });
  b.output("y", b.op("Relu", [b.op("Add", [conv, b.input("c", [64, 1, 1])])]));
  const graph = b.build();
  const [kernel] = fuse(graph).kernels;
  assert.equal(kernel.pattern, "conv");
  assert.equal(kernelLayout(kernel, OPTIONS).kind, "tiles");
  // Its patches gathered as the tiles fill: a backend that never stores them (the next test).
  await graphMatchesReference(
    graph,
    {
      x: f32(hashed(2 * 16 * 34 * 34, 7919), [2, 16, 34, 34]),
      w: f32(hashed(64 * 16 * 9, 104729), [64, 16, 3, 3]),
      c: f32(hashed(64, 31), [64, 1, 1]),
    },
    new WebGpuBackend({ storedPatches: Infinity }),
    1e-4,
  );
});

Deno.test("a large convolution stores its patches first (im2col): the product folds its batch", async () => {
  // Two images on a ragged 35×35 into 128 channels: 2·1225·128·144 = 45M multiply-adds (past the
  // profile's 2^24) for 314K outputs; the product reads [2450, 144] patches as a plain matrix.
  const b = new GraphBuilder();
  const conv = b.op("Conv", [b.input("x", [2, 16, 35, 35]), b.input("w", [128, 16, 3, 3])], {
    pads: [1, 1, 1, 1],
  });
  b.output("y", b.op("Relu", [b.op("Add", [conv, b.input("c", [128, 1, 1])])]));
  const graph = b.build();
  const kernels = fuse(graph, fusionFor([gpu.capabilities()])).kernels;
  assert.deepEqual(kernels.map((k) => [k.pattern, k.space]), [
    ["elementwise", [2, 1, 1225, 144]],
    ["conv", [2, 1, 1225, 128, 144]],
  ]);
  const tile = kernelLayout(kernels[1], OPTIONS).tile!;
  assert.deepEqual([tile.nb, tile.m, tile.n, tile.k], [0, 2450, 128, 144]);
  // Fewer multiply-adds than the profile stores from, or outputs enough that gathering pays.
  assert.equal(fuse(graph, { patchesFrom: 2 ** 26 }).kernels.length, 1);
  const more = new GraphBuilder();
  more.output(
    "y",
    more.op("Conv", [more.input("x", [4, 16, 35, 35]), more.input("w", [128, 16, 3, 3])]),
  );
  assert.equal(fuse(more.build(), { patchesFrom: 1 }).kernels.length, 1);
  const narrow = new GraphBuilder();
  narrow.output(
    "y",
    narrow.op("Conv", [narrow.input("x", [2, 16, 35, 35]), narrow.input("w", [64, 16, 3, 3])]),
  );
  assert.equal(fuse(narrow.build(), { patchesFrom: 1 }).kernels.length, 1);
  // Channels enough that the patches cost little beside the product: stored at any size (a
  // strided 1×1 conv's patches are its input's picked pixels).
  const wide = new GraphBuilder();
  const [wx, ww] = [wide.input("x", [4, 64, 70, 70]), wide.input("w", [512, 64, 1, 1])];
  wide.output("y", wide.op("Conv", [wx, ww], { strides: [2, 2] }));
  assert.deepEqual(fuse(wide.build(), { patchesFrom: 1 }).kernels.map((k) => k.space), [
    [4, 1, 1225, 64],
    [4, 1, 1225, 512, 64],
  ]);
  await graphMatchesReference(
    graph,
    {
      x: f32(hashed(2 * 16 * 35 * 35, 7919), [2, 16, 35, 35]),
      w: f32(hashed(128 * 16 * 9, 104729), [128, 16, 3, 3]),
      c: f32(hashed(128, 31), [128, 1, 1]),
    },
    gpu,
    1e-4,
  );
});
