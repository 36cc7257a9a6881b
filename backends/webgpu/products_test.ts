/**
 * Products on WebGPU: convolutions as matmuls (implicit GEMM whose tiles gather their patches, or
 * patches stored first where that pays) and products whose deep K is summed in parts, each
 * against the reference.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { compile } from "../../mod.ts";
import { fusionFor } from "../../jit/compile.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import {
  assertClose,
  f32,
  graphMatchesReference,
  hashed,
  numbers,
} from "../../jit/testing/testing.ts";
import { rng } from "../../jit/support/random.ts";
import { kernelLayout } from "../../shaders/wgsl/codegen.ts";
import { sumsHalfProducts } from "../../jit/ir/kernel_ir.ts";
import { toF16Array } from "../../jit/ir/dtype.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { DeviceProfile } from "../../jit/runtime/backend.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";

// CI has no GPU: these run on the software adapter (llvmpipe), slow but exact.
const gpu = new WebGpuBackend();
await gpu.prepare();
const OPTIONS = { maxInvocations: 256 };

/** An f16 input of `shape`, hashed values from `seed`. */
function half(shape: number[], seed: number) {
  const n = shape.reduce((a, b) => a * b, 1);
  return { data: toF16Array(hashed(n, seed)), shape, dtype: "f16" as const };
}

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

Deno.test("a product of few outputs and a deep K sums its K in parts, its images folded", async () => {
  // [2, 98, 3072] · [3072, 256] + bias, ReLU: 50K outputs, K in 8 parts of 384 as a leading
  // batch axis the tiles keep while they fold the images into 196 rows; a second kernel adds the
  // parts and runs the epilogue.
  const b = new GraphBuilder();
  const y = b.op("MatMul", [b.input("a", [2, 98, 3072]), b.input("w", [3072, 256])]);
  b.output("y", b.op("Relu", [b.op("Add", [y, b.input("c", [256])])]));
  const graph = b.build();
  const kernels = fuse(graph, { splitSums: true }).kernels;
  assert.deepEqual(kernels.map((k) => [k.pattern, k.space, k.reduced]), [
    ["matmul", [8, 2, 98, 256, 384], [4]],
    ["reduce", [2, 98, 256, 8], [3]],
  ]);
  const tile = kernelLayout(kernels[0], OPTIONS).tile!;
  assert.deepEqual([tile.nb, tile.m, tile.n, tile.k], [1, 196, 256, 384]);
  const splitting = new WebGpuBackend({ splitSums: true });
  await graphMatchesReference(
    graph,
    {
      a: f32(hashed(2 * 98 * 3072, 7919), [2, 98, 3072]),
      w: f32(hashed(3072 * 256, 104729), [3072, 256]),
      c: f32(hashed(256, 31), [256]),
    },
    splitting,
    1e-3,
  );
  // Kept whole: off, one row (a decoder's step), a shallow K, a batched B (attention's).
  const product = (a: number[], w: number[], dtype: "f32" | "f16" = "f32") => {
    const g = new GraphBuilder();
    g.output("y", g.op("MatMul", [g.input("a", a, dtype), g.input("w", w, dtype)]));
    return g.build();
  };
  const whole = (g: Graph, options = { splitSums: true }) =>
    assert.equal(fuse(g, options).kernels.length, 1);
  whole(graph, { splitSums: false });
  whole(product([1, 8192], [8192, 4096]));
  whole(product([196, 768], [768, 256]));
  whole(product([4, 98, 3072], [4, 3072, 64]));
});

Deno.test("an f16 product's parts are f32 sums, added in f32 and rounded once", async () => {
  const b = new GraphBuilder();
  const y = b.op("MatMul", [b.input("a", [196, 3072], "f16"), b.input("w", [3072, 256], "f16")]);
  b.output("y", b.op("Cast", [b.op("Relu", [y])], { to: "f32" }));
  const graph = b.build();
  const kernels = fuse(graph, { splitSums: true }).kernels;
  assert.deepEqual(kernels.map((k) => [k.pattern, k.space]), [
    ["matmul", [8, 196, 256, 384]],
    ["reduce", [196, 256, 8]],
  ]);
  // The partial sums stay f32 (so the matrix units still take them: f16 products summed).
  assert.deepEqual(kernels.map((k) => k.reductions[0].dtype), ["f32", "f32"]);
  assert.equal(kernels[0].outputs[0].dtype, "f32");
  assert.ok(sumsHalfProducts(kernels[0]));
  await graphMatchesReference(
    graph,
    { a: half([196, 3072], 7919), w: half([3072, 256], 104729) },
    new WebGpuBackend({ splitSums: true }),
    2e-2,
  );
});

Deno.test("f16 convolutions store their patches where the matrix units would take them", () => {
  // 64 channels over 56×56 gather their patches in f32 (and in f16 without matrix units).
  const b = new GraphBuilder();
  const [x, w] = [b.input("x", [8, 64, 56, 56], "f16"), b.input("w", [64, 64, 3, 3], "f16")];
  b.output("y", b.op("Conv", [x, w], { pads: [1, 1, 1, 1] }));
  const graph = b.build();
  const patterns = (halfPatches: boolean) =>
    fuse(graph, { patchesFrom: 2 ** 24, halfPatches }).kernels.map((k) => k.pattern);
  assert.deepEqual(patterns(false), ["conv"]);
  assert.deepEqual(patterns(true), ["elementwise", "conv"]);
});

/**
 * A WebGPU backend whose profile claims matrix units: its f16 plans store their convolutions'
 * patches as the H200's do, while its kernels stay tiled (the software adapter has none).
 */
class ClaimsMatrixUnits extends WebGpuBackend {
  override capabilities(): DeviceProfile {
    return { ...super.capabilities(), matrixUnits: true };
  }
}

Deno.test("f16 patches stored for the matrix units are K-major and give the convolution's values", async () => {
  const b = new GraphBuilder();
  const [x, w] = [b.input("x", [2, 8, 10, 12], "f16"), b.input("w", [16, 8, 3, 3], "f16")];
  b.output("y", b.op("Conv", [x, w], { pads: [1, 1, 1, 1] }));
  const graph = b.build();
  // [N, G, Cg·KH·KW, OH·OW]: each tap's pixels side by side, as the input lays them out.
  const [patches, conv] = fuse(graph, { patchesFrom: 1, halfPatches: true }).kernels;
  assert.deepEqual(patches.space, [2, 1, 72, 120]);
  assert.deepEqual(conv.space, [2, 1, 120, 16, 72]);
  await graphMatchesReference(
    graph,
    { x: half([2, 8, 10, 12], 7919), w: half([16, 8, 3, 3], 104729) },
    new ClaimsMatrixUnits({ storedPatches: 1 }),
    2e-2,
  );
});

Deno.test("f16 K-major patches summed in parts lay the partial sums out as the outputs lie", async () => {
  // 3 images of 8×12, 256 → 256 channels: 74K outputs, K = 2304 in 8 parts of 288.
  const b = new GraphBuilder();
  const x = b.input("x", [3, 256, 8, 12], "f16");
  const [w, bias] = [b.input("w", [256, 256, 3, 3], "f16"), b.input("b", [256], "f16")];
  b.output("y", b.op("Relu", [b.op("Conv", [x, w, bias], { pads: [1, 1, 1, 1] })]));
  const graph = b.build();
  const kernels = fuse(graph, { splitSums: true, patchesFrom: 1, halfPatches: true }).kernels;
  // The product's rows are one image's pixels: its partial sums [part, N, G, C, P] go down them,
  // and the adding kernel walks the pixels, the outputs' contiguous axis.
  assert.deepEqual(kernels.map((k) => k.space), [
    [3, 1, 2304, 96],
    [8, 3, 1, 96, 256, 288],
    [3, 1, 256, 96, 8],
  ]);
  assert.deepEqual(kernels[1].outputs[0].shape, [8, 3, 1, 256, 96]);
  // Against wasm's f16 (the reference's f16 convolution of 170M multiply-adds takes minutes).
  const feeds = {
    x: half([3, 256, 8, 12], 7919),
    w: half([256, 256, 3, 3], 104729),
    b: half([256], 15485863),
  };
  const backend = new ClaimsMatrixUnits({ storedPatches: 1, splitSums: true });
  using split = await compile(graph, { backend, cache: false });
  using whole = await compile(graph, { backend: "wasm", cache: false });
  const [got, want] = [(await split.run(feeds)).y, (await whole.run(feeds)).y];
  assertClose(numbers(got.data, true), numbers(want.data, true), { atol: 2e-2, rtol: 1e-3 });
});

Deno.test("a convolution's stored patches sum a deep K in parts", async () => {
  // 2 images of 9×13, 256 → 256 channels: 60K outputs, K = 2304 in 8 parts of 288.
  const b = new GraphBuilder();
  const [x, w] = [b.input("x", [2, 256, 9, 13]), b.input("w", [256, 256, 3, 3])];
  b.output("y", b.op("Relu", [b.op("Conv", [x, w], { pads: [1, 1, 1, 1] })]));
  const graph = b.build();
  const kernels = fuse(graph, { splitSums: true, patchesFrom: 1 }).kernels;
  assert.deepEqual(kernels.map((k) => k.space), [
    [2, 1, 117, 2304],
    [8, 2, 1, 117, 256, 288],
    [2, 1, 117, 256, 8],
  ]);
  await graphMatchesReference(
    graph,
    {
      x: f32(hashed(2 * 256 * 117, 7919), [2, 256, 9, 13]),
      w: f32(hashed(256 * 256 * 9, 104729), [256, 256, 3, 3]),
    },
    new WebGpuBackend({ storedPatches: 1, splitSums: true }),
    1e-3,
  );
});

Deno.test("a 1×1 convolution of few outputs sums a deep K in parts; one of many outputs does not", async () => {
  // 3 images of 7×9, 2048 → 512 channels: 97K outputs, K = 2048 in 8 parts of 256.
  const b = new GraphBuilder();
  const [x, w] = [b.input("x", [3, 2048, 7, 9]), b.input("w", [512, 2048, 1, 1])];
  b.output("y", b.op("Relu", [b.op("Conv", [x, w])]));
  const graph = b.build();
  assert.deepEqual(fuse(graph, { splitSums: true }).kernels.map((k) => k.space), [
    [8, 3, 1, 512, 63, 256],
    [3, 1, 512, 63, 8],
  ]);
  await graphMatchesReference(
    graph,
    {
      x: f32(hashed(3 * 2048 * 63, 7919), [3, 2048, 7, 9]),
      w: f32(hashed(512 * 2048, 104729), [512, 2048, 1, 1]),
    },
    new WebGpuBackend({ splitSums: true }),
    1e-3,
  );
  // 8 images of 14×14, 1024 → 256: 401K outputs, tiles enough for the GPU whole.
  const wide = new GraphBuilder();
  const y = wide.op("Conv", [
    wide.input("x", [8, 1024, 14, 14]),
    wide.input("w", [256, 1024, 1, 1]),
  ]);
  wide.output("y", y);
  assert.deepEqual(fuse(wide.build(), { splitSums: true }).kernels.map((k) => k.pattern), ["conv"]);
});

Deno.test("stored patches and split sums over random convolutions match the reference", async () => {
  // Strides, dilations, asymmetric padding, groups and ragged sizes, through both rewrites
  // (patches stored from any size, K split wherever it is deep).
  const next = rng(45);
  const pick = (xs: number[]) => xs[Math.floor(next() * xs.length)];
  const storing = new WebGpuBackend({ storedPatches: 1, splitSums: true });
  const taken = { patches: 0, parts: 0 };
  for (let c = 0; c < 12; c++) {
    // The first three deep enough (K past 1024, 2^27 multiply-adds) to split.
    const deep = c < 3;
    const group = pick([1, 1, 2]), cin = group * (deep ? pick([256, 260]) : pick([3, 16, 130]));
    const cout = group * pick([128, 136]), k = deep ? 3 : pick([1, 2, 3]);
    const stride = deep ? 1 : pick([1, 2]), dilation = pick([1, 2]);
    const size = deep ? 16 : pick([7, 9, 12]), batch = deep ? 4 : pick([1, 2]);
    const pads = [0, 1, 2, 1].map((p) => Math.min(p, k - 1) * pick([0, 1]));
    const wshape = [cout, cin / group, k, k];
    const b = new GraphBuilder();
    const conv = b.op("Conv", [b.input("x", [batch, cin, size, size]), b.input("w", wshape)], {
      pads,
      strides: [stride, stride],
      dilations: [dilation, dilation],
      group,
    });
    b.output("y", b.op("Relu", [conv]));
    const graph = b.build();
    const log = fuse(graph, { patchesFrom: 1, splitSums: true }).log.join("\n");
    taken.patches += +log.includes("im2col");
    taken.parts += +log.includes("parts");
    const what = JSON.stringify({ group, cin, cout, k, stride, dilation, size, batch, pads });
    await graphMatchesReference(
      graph,
      {
        x: f32(hashed(batch * cin * size * size, 7919 + c), [batch, cin, size, size]),
        w: f32(hashed(cout * (cin / group) * k * k, 104729 + c), wshape),
      },
      storing,
      1e-3,
    ).catch((e) => {
      throw new Error(`${what}: ${e.message}`);
    });
  }
  assert.ok(taken.patches >= 6 && taken.parts >= 2, JSON.stringify(taken));
});

Deno.test("split sums are on by default, off by the option or KILN_SPLIT_SUMS=0", async () => {
  const splits = async (options = {}) => {
    const backend = new WebGpuBackend(options);
    await backend.prepare();
    return backend.capabilities().splitSums;
  };
  assert.equal(await splits(), true);
  assert.equal(await splits({ splitSums: false }), false);
  Deno.env.set("KILN_SPLIT_SUMS", "0");
  try {
    assert.equal(await splits(), false);
    assert.equal(await splits({ splitSums: true }), true);
  } finally {
    Deno.env.delete("KILN_SPLIT_SUMS");
  }
});

Deno.test("compile joins products of one A for a GPU, not for a CPU backend", async () => {
  const b = new GraphBuilder();
  const a = b.input("a", [4, 8]);
  for (const [i, n] of [6, 10].entries()) {
    const w = b.param(`w${i}`, [8, n], "f32", new Float32Array(hashed(8 * n, 3 + i)));
    b.output(`y${i}`, b.op("MatMul", [a, w]));
  }
  const graph = b.build();
  const products = async (backend: string | WebGpuBackend) => {
    using exe = await compile(graph, { backend, cache: false });
    return exe.plan!.kernels.filter((k) => k.pattern === "matmul").length;
  };
  assert.equal(await products(gpu), 1);
  assert.equal(await products("wasm"), 2);
  // A second compile of the graph while the first is alive (auto's, and the named compile it
  // places into) joins nothing again: it takes the same rewritten graph.
  using first = await compile(graph, { backend: gpu, cache: false });
  using second = await compile(graph, { backend: gpu, cache: false });
  assert.equal(second.graph, first.graph);
  assert.notEqual(first.graph, graph);
});
