import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { packedRows } from "../../jit/passes/packed_rows.ts";
import { blockProduct, FEW_ROW_CASES, matchesReference } from "../../jit/testing/block_product.ts";
import { generateWgsl, kernelLayout } from "./codegen.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { uniform } from "../../jit/support/random.ts";
import { f32 } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "../../backends/webgpu/webgpu_backend.ts";

Deno.test("WebGPU unpacks a few-row BlockMatMul in registers, as the reference computes it", async () => {
  for (const [lead, form, zeros] of FEW_ROW_CASES) {
    const { graph, feeds } = blockProduct(lead, form, zeros);
    const [kernel] = fuse(graph, { blockProducts: true }).kernels;
    // The packed words are read as vec4s: the generic expression reads them one u32 at a time.
    const wgsl = generateWgsl(kernel, { maxInvocations: 256 });
    assert.match(wgsl, /array<vec4<u32>>/, `${lead} × ${form}: the block kernel`);
    // One row of A (or one a workgroup) goes through workgroup memory; a vocabulary's many
    // outputs are taken four to a group of threads.
    const shares = lead.length === 1 && (lead[0] === 1 || form[1] % 32 === 0);
    assert.equal(/sh_a\[/.test(wgsl), shares, `${lead} × ${form}: A staged`);
    assert.equal(/part3/.test(wgsl), form[1] > 65536, `${lead} × ${form}: outputs a group`);
    await matchesReference(graph, feeds, "webgpu", `${lead} × ${form}`);
  }
});

Deno.test("WebGPU computes a block product's elementwise A as it reads it, one kernel", async () => {
  for (
    const [[lead, form, zeros], a] of FEW_ROW_CASES.flatMap((c) =>
      [[c, "gated"], [c, "scaled"], [c, "normed"], [c, "centred"]] as const
    )
  ) {
    const { graph, feeds } = blockProduct(lead, form, zeros, { a });
    const options = { blockProducts: true, blockPrologues: true };
    const kernels = fuse(graph, options).kernels;
    // The SiLU · up product (or the gain, or the normalization with its row's mean square) is
    // the product kernel's prologue, not a kernel of its own.
    assert.equal(kernels.length, 1, `${lead} × ${form}`);
    const [kernel] = kernels;
    assert.ok(kernel.blockProduct?.prologue && kernel.blockProduct.a === undefined);
    const normed = a === "normed" || a === "centred";
    assert.equal(kernel.reductions.length, a === "centred" ? 3 : normed ? 2 : 1);
    // The block kernel (words read as vec4s) computes A where it reads it: into the stage where
    // A is staged (as in the test above), else as each block reads it. A normalization's mean
    // square is the workgroup's, over the row it stages: unstaged, the generic kernel takes it.
    const wgsl = generateWgsl(kernel, { maxInvocations: 256 });
    const shares = lead.length === 1 && (lead[0] === 1 || form[1] % 32 === 0);
    const block = !normed || shares;
    assert.equal(/array<vec4<u32>>/.test(wgsl), block, `${lead} × ${form}: the block kernel`);
    const staged = /sh_a\[.*\] = select\(vec4<f32>\(0\.0\), vec4<f32>\(/.test(wgsl);
    assert.equal(staged, shares && block, `${lead} × ${form}: prologue staged`);
    // Without the option, A is stored by a kernel of its own first.
    assert.equal(fuse(graph, { blockProducts: true }).kernels.length, 2);
    await matchesReference(graph, feeds, "webgpu", `${a} ${lead} × ${form}`);
  }
});

Deno.test("a block product whose A rows are not whole vec4s keeps the generic kernel", () => {
  const { graph } = blockProduct([1], [42, 5, 4, 32], true);
  const [kernel] = fuse(graph, { blockProducts: true }).kernels;
  assert.ok(kernel.blockProduct);
  assert.doesNotMatch(generateWgsl(kernel, { maxInvocations: 256 }), /array<vec4<u32>>/);
});

Deno.test("WebGPU takes each layer's normalization into the next block product, layer by layer", async () => {
  // Three layers of a decoder's step: h + product(norm(h)), the sum the next layer's A. Each
  // normalization's reduction is its product's, none a kernel of its own (the second layer's had
  // joined the first's absorbed reduction and then run alone).
  const k = 64;
  const b = new GraphBuilder();
  let h = b.input("a", [1, k]);
  for (let layer = 0; layer < 3; layer++) {
    const q = b.param(
      `q${layer}`,
      [k, k / 8],
      "u32",
      Uint32Array.from({ length: k * k / 8 }, (_, i) => (i + layer) * 2654435761),
    );
    const s = b.param(`s${layer}`, [k, 2], "f32", uniform(2 * k, 7 + layer, 0.01, 0.03));
    const mean = b.op("ReduceMean", [b.op("Mul", [h, h])], { axes: [-1], keepdims: 1 });
    const root = b.op("Sqrt", [b.op("Add", [mean, b.constant(1e-6)])]);
    const normed = b.op("Mul", [h, b.op("Reciprocal", [root])]);
    const product = b.op("BlockMatMul", [normed, q, s], { bits: 4, block: 32 });
    h = layer < 2 ? b.op("Add", [h, product]) : product;
  }
  b.output("y", h);
  const graph = b.build();
  const kernels = fuse(graph, { blockProducts: true, blockPrologues: true }).kernels;
  assert.deepEqual(kernels.map((x) => x.pattern), ["matmul", "matmul", "matmul"]);
  assert.ok(kernels.every((x) => x.blockProduct?.prologue && x.reductions.length === 2));
  const feeds = { a: f32(uniform(k, 9, -2, 2), [1, k]) };
  await matchesReference(graph, feeds, "webgpu", "three layers");
});

Deno.test("WebGPU sums a staged block product of A rounded to 8 bits in packed byte dots", async () => {
  // MatMulNBits of accuracy_level 4: 4-bit weights in blocks of whole 32s covering K, outputs
  // many enough for a group of threads to take two or more (packing A costs one output's sums).
  const cases: [number[], number[], boolean | "f32"][] = [
    [[1], [896, 8192, 4, 32], true], // a decoder's token step
    [[1], [256, 32768, 4, 64], false], // blocks of 64, the middle value
    [[1], [384, 32768, 4, 128], "f32"], // blocks of 128: four groups of 32 a block; float zero points
    [[1], [4864, 4096, 4, 32], true], // more blocks than a row's threads: chunks, the last short
    [[1], [128, 65544, 4, 32], true], // a vocabulary's many outputs, four to a group
    [[2], [64, 32768, 4, 32], false], // two rows of A, each workgroup's outputs on one
  ];
  const gpu = new WebGpuBackend();
  for (const [lead, form, zeros] of cases) {
    const { graph, feeds } = blockProduct(lead, form, zeros, { int8: true });
    const [kernel] = fuse(graph, { blockProducts: true }).kernels.filter((k) => k.blockProduct);
    assert.equal(kernel.blockProduct?.int8, true, `${form}: the product knows its A is rounded`);
    const packed = generateWgsl(kernel, { maxInvocations: 256, packedDots: true });
    assert.match(packed, /dot4I8Packed/, `${lead} × ${form}: summed in integers`);
    // Without the language feature the f32 form runs.
    const plain = generateWgsl(kernel, { maxInvocations: 256 });
    assert.doesNotMatch(plain, /dot4I8Packed/);
    await matchesReference(graph, feeds, gpu, `${lead} × ${form} in integers`);
  }
  // The backend generated them so where its WGSL has the language feature (Deno's and Dawn's).
  const features = (navigator as { gpu?: { wgslLanguageFeatures?: Set<string> } }).gpu
    ?.wgslLanguageFeatures;
  if (features?.has("packed_4x8_integer_dot_product")) assert.match(gpu.codegen.format, /-d4$/);
  // One output a group of threads, or K past the last whole block, keeps the f32 form.
  for (const form of [[896, 70, 4, 32], [80, 8192, 4, 32]]) {
    const { graph } = blockProduct([1], form, true, { int8: true });
    const [kernel] = fuse(graph, { blockProducts: true }).kernels.filter((k) => k.blockProduct);
    const wgsl = generateWgsl(kernel, { maxInvocations: 256, packedDots: true });
    assert.doesNotMatch(wgsl, /dot4I8Packed/, `${form}`);
  }
  gpu.dispose();
});

Deno.test("WebGPU reads A packed by its producer as it lies, summed in packed byte dots", async () => {
  const cases: [number[], number[], boolean | "f32"][] = [
    [[1], [896, 2048, 4, 32], true], // a decoder's token step, outputs a group
    [[1], [256, 1000, 4, 64], false], // blocks of 64, the middle value
    [[1], [384, 512, 4, 128], "f32"], // blocks of 128: four groups of 32 a block; float zeros
    [[1], [4864, 300, 4, 32], true], // more blocks than a row's threads: chunks, the last short
    [[2], [64, 1024, 4, 32], false], // two rows of A, each workgroup's outputs on one
  ];
  const gpu = new WebGpuBackend();
  for (const [lead, form, zeros] of cases) {
    const { graph, feeds } = blockProduct(lead, form, zeros, { int8: true });
    const packed = packedRows(graph, { roundsUpTo: 0 });
    const kernels = fuse(packed, { blockProducts: true }).kernels;
    const [kernel] = kernels.filter((k) => k.blockProduct);
    assert.ok(kernel.blockProduct?.packedA, `${form}: the product knows its A is packed`);
    // A's few blocks are packed by threads sharing each block, not a thread a block: a thread a
    // word for blocks of 8 or 16 words.
    const packing = kernels.find((k) => k.name !== kernel.name)!;
    const rows = kernelLayout(packing, { maxInvocations: 256 }).rows;
    assert.ok(!rows?.serial && rows!.threads > 1, `${form}: threads share a block`);
    if (form[3] <= 64) assert.equal(rows?.threads, form[3] / 4, `${form}: a thread a word`);
    const wgsl = generateWgsl(kernel, { maxInvocations: 256, packedDots: true });
    assert.match(wgsl, /dot4I8Packed/, `${lead} × ${form}: summed in integers`);
    // Each lane reads its block's words where they lie: nothing staged or packed again.
    assert.doesNotMatch(wgsl, /sh_q|sh_a|pack4xI8/, `${lead} × ${form}`);
    // Without the language feature the generic kernel unpacks A and the weight.
    assert.doesNotMatch(generateWgsl(kernel, { maxInvocations: 256 }), /dot4I8Packed/);
    await matchesReference(packed, feeds, gpu, `${lead} × ${form} packed`);
  }
  // The backend's compile packs A itself where its WGSL has the byte dots (Deno's and Dawn's).
  const { graph, feeds } = blockProduct([1], [896, 300, 4, 32], true, { int8: true });
  const plan = (await compile(graph, { backend: gpu, cache: false })).plan;
  const features = (navigator as { gpu?: { wgslLanguageFeatures?: Set<string> } }).gpu
    ?.wgslLanguageFeatures;
  const dots = features?.has("packed_4x8_integer_dot_product") ?? false;
  // Of one row and few outputs the product rounds A itself (next test); the vocabulary's packs.
  assert.equal(plan?.kernels.some((k) => k.blockProduct?.roundsA) ?? false, dots);
  await matchesReference(graph, feeds, gpu, "896 × 300 compiled by the backend");
  gpu.dispose();
});

Deno.test("WebGPU rounds A where its product packs it: A stored, normalized or gated inside, blocks of 32 to 128", async () => {
  const cases: [number[], "normed" | "gated" | undefined][] = [
    [[896, 1152, 4, 32], "normed"], // a decode layer's attention projections after its norm
    [[4864, 300, 4, 32], "gated"], // its down projection: chunks of A, the last short
    [[256, 100, 4, 64], undefined], // A stored (an attention's output)
    [[384, 64, 4, 128], "normed"], // four groups of 32 a block
  ];
  const gpu = new WebGpuBackend();
  const features = (navigator as { gpu?: { wgslLanguageFeatures?: Set<string> } }).gpu
    ?.wgslLanguageFeatures;
  const dots = features?.has("packed_4x8_integer_dot_product") ?? false;
  for (const [form, a] of cases) {
    const { graph, feeds } = blockProduct([1], form, true, { int8: true, a });
    const plan = (await compile(graph, { backend: gpu, cache: false })).plan!;
    if (dots) {
      // One kernel: the norm or the gate, the rounding and the product.
      assert.deepEqual(plan.kernels.map((k) => k.blockProduct?.roundsA), [true], `${form} ${a}`);
      const [kernel] = plan.kernels;
      const wgsl = generateWgsl(kernel, { maxInvocations: 256, packedDots: true });
      // Rounded as QuantizeRowBlocks rounds, by IEEE divisions, then summed in integers.
      assert.match(wgsl, /k_fdiv\(127\.0, largest\)/);
      assert.match(wgsl, /dot4I8Packed/);
      // Its expressions read A unrounded: without byte dots no kernel computes it.
      assert.throws(() => generateWgsl(kernel, { maxInvocations: 256 }), /rounds its A/);
    }
    await matchesReference(graph, feeds, gpu, `${form} ${a}: rounded in the product`);
  }
  gpu.dispose();
});

Deno.test("a block product's group combines its outputs at once: a butterfly in a subgroup, else memory", () => {
  // A vocabulary's product: 28 blocks a row (32 threads), eight outputs a group.
  const { graph } = blockProduct([1], [896, 151936, 4, 32], true);
  const [kernel] = fuse(graph, { blockProducts: true }).kernels;
  const options = { maxInvocations: 256, workgroupBytes: 32768 };
  const shuffled = generateWgsl(kernel, { ...options, subgroupSize: 32 });
  // log2(32) steps, the first three halving eight outputs to one: 4 + 2 + 1 + 1 + 1 exchanges.
  assert.equal(shuffled.match(/subgroupShuffleXor\(/g)?.length, 9);
  assert.doesNotMatch(shuffled, /subgroupShuffleDown|sh_p\[/);
  // Lanes 0, 4, …, 28 store outputs 0 … 7.
  assert.match(shuffled, /lane % 4u == 0u/);
  const memory = generateWgsl(kernel, options);
  assert.doesNotMatch(memory, /subgroup/);
  assert.match(memory, /if \(lane < 8u\)/);
});

Deno.test("WebGPU's integer block products take a fractional float zero point off in floats", async () => {
  // MatMulNBits may give its zero points as floats of any value: i32(zero) truncated them.
  const k = 256, n = 64, blocks = k / 32, gpu = new WebGpuBackend();
  for (const roundsUpTo of [undefined, 0]) {
    const b = new GraphBuilder();
    const q = b.param("q", [n, k / 8], "u32", Uint32Array.from(uniform(n * k / 8, 3, 0, 2 ** 32)));
    const s = b.param("s", [n, blocks], "f32", uniform(n * blocks, 4, 0.01, 0.03));
    const z = b.param("z", [n, blocks], "f32", uniform(n * blocks, 5, 0, 15));
    const x = b.input("a", [1, k]);
    const a = b.op("QuantizeRowBlocks", [x], { block: 32 });
    b.output("y", b.op("BlockMatMul", [a, q, s, z], { bits: 4, block: 32, int8: 1 }));
    const graph = b.build(), feeds = { a: f32(uniform(k, 9, -2, 2), [1, k]) };
    // The product rounding A, and (as the vocabulary's) reading it packed.
    const rewritten = packedRows(graph, { roundsUpTo });
    await matchesReference(rewritten, feeds, gpu, `fractional zero points, ${roundsUpTo}`);
  }
  gpu.dispose();
});
