/**
 * The matrix-unit matmul's choice and code (the kernels run on the H200's tensor cores through
 * `bench/gpu_kernels.ts`; CI's software adapter has no subgroup matrices).
 *
 * @module
 */
import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { applyPrecision, type Precision } from "../../jit/passes/precision.ts";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import { generateWgsl, kernelLayout, type WgslOptions } from "./codegen.ts";
import { tileOf } from "./tile_shapes.ts";

const H200: WgslOptions = { maxInvocations: 1024, half: true, matrix: true, workgroupBytes: 49152 };

/** The matmul kernel of relu(x·w) with x [m, k], w [k, n] under `precision`. */
function product(m: number, k: number, n: number, precision: Precision = "f16"): KernelIR {
  const b = new GraphBuilder();
  b.output("y", b.op("Relu", [b.op("MatMul", [b.input("x", [m, k]), b.input("w", [k, n])])]));
  const { graph } = applyPrecision(b.build(), precision);
  return fuse(graph).kernels.find((x) => x.pattern === "matmul")!;
}

/** The matmul kernel of f16 inputs, A given as [k, m] (`tn`) or B as [n, k] (`nt`), transposed. */
function transposed(form: "tn" | "nt", m: number, k: number, n: number): KernelIR {
  const b = new GraphBuilder();
  const t = (x: ReturnType<typeof b.input>) => b.op("Transpose", [x], { perm: [1, 0] });
  const x = form === "tn" ? t(b.input("x", [k, m], "f16")) : b.input("x", [m, k], "f16");
  const w = form === "nt" ? t(b.input("w", [n, k], "f16")) : b.input("w", [k, n], "f16");
  b.output("y", b.op("MatMul", [x, w]));
  const { graph } = applyPrecision(b.build(), "f16");
  return fuse(graph).kernels.find((x) => x.pattern === "matmul")!;
}

Deno.test("f16 matmuls take matrix tiles where the device has matrix units, sized to fill it", () => {
  const layout = (k: KernelIR, o = H200) => kernelLayout(k, o);
  // 16 × 16 tiles of 32×32: the smallest shape that yields 256 workgroups.
  const small = layout(product(512, 256, 512));
  assert.deepEqual(small.tile?.matrix, { sm: 2, sn: 2, fm: 1, fn: 1, tk: 32 });
  // Both operands aligned along their contiguous axis (x along K, w along N): read as vec4s.
  assert.deepEqual([...small.vectors].sort(), [0, 1]);
  // K = 301 leaves x's rows unaligned: x an element at a time, w still four at a time.
  assert.deepEqual([...layout(product(600, 301, 500)).vectors], [1]);
  assert.equal(small.workgroup, 128);
  // Dawn requires the x size of a kernel with subgroup matrices to be a multiple of 32.
  assert.equal(small.tile!.threads[0], 32);
  // 4096² makes 1024 tiles of 128×128: the largest shape fills the GPU.
  const large = layout(product(4096, 4096, 4096));
  assert.deepEqual(tileOf(large.tile!), [128, 128]);
  assert.equal(large.workgroup, 256);
  assert.deepEqual(layout(product(1024, 1024, 1024)).tile?.matrix, {
    sm: 2,
    sn: 2,
    fm: 2,
    fn: 2,
    tk: 32,
  });
  // 128×128 takes 28 KB of workgroup memory: past a device's 16 KB, the 64×64 shape.
  assert.deepEqual(
    layout(product(4096, 4096, 4096), { ...H200, workgroupBytes: 16384 }).tile?.matrix,
    { sm: 2, sn: 2, fm: 2, fn: 2, tk: 32 },
  );
  // A product of few rows (BERT's 128 tokens by 768 → 3072) steps 64 of K on its 32×32 tiles;
  // ViT-B/16's 197 tokens step 32 (64 measured slower there).
  const few = layout(product(128, 768, 3072));
  assert.deepEqual(few.tile?.matrix, { sm: 2, sn: 2, fm: 1, fn: 1, tk: 64 });
  assert.equal(layout(product(197, 768, 2304)).tile?.matrix?.tk, 32);
  const wgsl = generateWgsl(product(128, 768, 3072), H200);
  assert.match(wgsl, /for \(var k0 = 0; k0 < 768; k0 \+= 64\)/);
  assert.ok(wgsl.includes(`var<workgroup> tileA: array<f16, ${32 * (64 + 8)}>;`), wgsl);
  // A shallow K (ResNet's 64 → 256 1×1 convolutions) takes the smallest shape that fills the GPU.
  assert.deepEqual(tileOf(layout(product(4096, 64, 4096)).tile!), [32, 32]);
  assert.deepEqual(tileOf(layout(product(4096, 128, 4096)).tile!), [128, 128]);
  // 64 columns (ResNet's stem: 64 channels, K = 147) take 64×64 tiles, not 128×128 half past
  // the product's edge.
  assert.deepEqual(tileOf(layout(product(100352, 147, 64)).tile!), [64, 64]);
  // The f32 tiled kernel alike: 128×64, not 128×128.
  assert.deepEqual(tileOf(layout(product(100352, 147, 64, "f32")).tile!), [128, 64]);
  // Not without the units, not without f16 storage, not for f32, not past the workgroup limit.
  assert.equal(layout(product(256, 512, 384), { ...H200, matrix: false }).tile?.matrix, undefined);
  assert.equal(layout(product(256, 512, 384), { ...H200, half: false }).tile?.matrix, undefined);
  assert.equal(layout(product(256, 512, 384, "f32")).tile?.matrix, undefined);
  assert.equal(
    layout(product(256, 512, 384), { ...H200, maxInvocations: 64 }).tile?.matrix,
    undefined,
  );
});

Deno.test("a matrix kernel fills f16 tiles, multiplies on subgroup matrices, and runs the epilogue four outputs a call", () => {
  for (const [m, k, n] of [[4096, 4096, 4096], [600, 300, 500]]) {
    const kernel = product(m, k, n);
    const wgsl = generateWgsl(kernel, H200);
    const { sm, sn, fm, fn } = kernelLayout(kernel, H200).tile!.matrix!;
    assert.match(
      wgsl,
      /^enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;/,
    );
    assert.match(
      wgsl,
      /@builtin\(subgroup_id\) sg: u32, @builtin\(subgroup_invocation_id\) lane: u32/,
    );
    const [TM, TN] = [sm * fm * 16, sn * fn * 16];
    // Each tile laid out as its operand: x's as TM rows of 32 K (its K contiguous), w's as 32
    // rows of TN; each row padded by 8 halves; a 16×16 f32 slice of `stage` per subgroup.
    assert.ok(wgsl.includes(`var<workgroup> tileA: array<f16, ${TM * (32 + 8)}>;`), wgsl);
    assert.ok(wgsl.includes(`var<workgroup> tileB: array<f16, ${32 * (TN + 8)}>;`));
    assert.ok(wgsl.includes(`var<workgroup> stage: array<f32, ${sm * sn * 256}>;`));
    // Two K steps of 16 a tile step, each fm·fn products.
    assert.equal(wgsl.match(/subgroupMatrixMultiplyAccumulate/g)!.length, 2 * fm * fn);
    assert.equal(wgsl.match(/subgroupMatrixStore<row_major>/g)!.length, fm * fn);
    // Both layouts read row-major: the left matrices' rows are M, the right ones' K.
    assert.equal(wgsl.match(/row_major>\(&tileA, u32\(\(sgm \+ \d+\) \* 40 \+ /g)!.length, 2 * fm);
    assert.equal(wgsl.match(/row_major>\(&tileB, u32\(\d+ \+ sgn \+ /g)!.length, 2 * fn);
    // Four halves a load from vec4 bindings, stored as four halves into the tile.
    assert.match(wgsl, /var<storage, read> in0: array<vec4<f16>>;/);
    assert.match(wgsl, /tileA_0 = (select\(vec4<f16>\(0\.0\), )?in0\[u32\(/);
    assert.match(wgsl, /tileA\[tileA_r0 \* 40 \+ tileA_k0 \+ 3\] = tileA_0\[3\];/);
    // Ragged shapes fill zeros past M, N and K; whole ones need no guard.
    assert.equal(
      wgsl.includes("select(vec4<f16>(0.0), "),
      m % TM !== 0 || k % 32 !== 0 || n % TN !== 0,
    );
    // Each of four sums rounds once to f16, then the epilogue (Relu, the cast to the caller's
    // f32), the four outputs stored as one vec4.
    assert.match(wgsl, /fn epilogue\(x0: i32, x1: i32, x2: i32, sums: vec4<f32>\)/);
    assert.match(wgsl, /let acc_3 = k_f16\(sums\[3\]\);/);
    assert.match(wgsl, /var<storage, read_write> out0: array<vec4<f32>>;/);
    assert.match(wgsl, /vec4<f32>\(stage\[at \+ 0u\], stage\[at \+ 1u\]/);
  }
});

Deno.test("transposed operands fill tiles of their own layout, read column-major", () => {
  // B given as [n, k] (a Linear layer's weight): its tile TN rows of K, the right matrices
  // column-major (their K runs along the tile's rows).
  const nt = generateWgsl(transposed("nt", 600, 300, 500), H200);
  assert.match(nt, /var<workgroup> tileB: array<f16, 1280>;/);
  assert.match(nt, /col_major>\(&tileB, u32\(\(sgn \+ 0\) \* 40 \+ 16\), 40u\)/);
  assert.match(nt, /row_major>\(&tileA, /);
  // A given as [k, m]: its tile 32 rows of M, the left matrices column-major.
  const tn = generateWgsl(transposed("tn", 600, 300, 500), H200);
  assert.match(tn, /var<workgroup> tileA: array<f16, 1280>;/);
  assert.match(tn, /col_major>\(&tileA, u32\(640 \+ sgm \+ 0\), 40u\)/);
  assert.match(tn, /row_major>\(&tileB, /);
  // Unaligned (K = 301 along both operands' rows): an element at a time, from scalar bindings.
  const odd = transposed("nt", 600, 301, 500);
  assert.equal(kernelLayout(odd, H200).vectors.size, 0);
  assert.match(generateWgsl(odd, H200), /var<storage, read> in1: array<f16>;/);
});

Deno.test("an f16 convolution's gathered patches stay on the tiled kernel", () => {
  const b = new GraphBuilder();
  const x = b.input("x", [8, 64, 28, 28]);
  const w = b.param("w", [128, 64, 3, 3], "f32", new Float32Array(128 * 64 * 9));
  b.output("y", b.op("Conv", [x, w], { pads: [1, 1, 1, 1] }));
  const { graph } = applyPrecision(b.build(), "f16");
  const conv = fuse(graph).kernels.find((k) => k.pattern === "conv")!;
  const layout = kernelLayout(conv, H200);
  assert.ok(layout.tile && !layout.tile.matrix, JSON.stringify(layout.tile));
  assert.doesNotMatch(generateWgsl(conv, H200), /subgroupMatrix/);
});

Deno.test("a matrix kernel writes out a short epilogue's calls a result matrix, and loops a long one", () => {
  const count = (wgsl: string, re: RegExp) => wgsl.match(re)?.length ?? 0;
  // relu(x·w): a short epilogue, each of a thread's two fours of outputs a call of its own.
  const short = product(4096, 4096, 4096);
  const { fm, fn } = kernelLayout(short, H200).tile!.matrix!;
  const quads = generateWgsl(short, H200);
  assert.equal(count(quads, /for \(var q = lane;/g), 0);
  assert.equal(count(quads, /let q = lane \+ \d+u;/g), 2 * fm * fn);
  assert.match(quads, /let q = lane \+ 32u;/);
  // 4094 columns are no whole fours: each of a thread's eight elements a call.
  const odd = product(4096, 4096, 4094);
  const unrolled = generateWgsl(odd, H200);
  assert.equal(kernelLayout(odd, H200).width, 1);
  assert.equal(count(unrolled, /let q = lane \+ \d+u;/g), 8 * fm * fn);
  assert.match(unrolled, /let q = lane \+ 224u;/);
  // A long chain after the product (past LOOPED_EPILOGUE lines) stays in one loop a matrix.
  const b = new GraphBuilder();
  let y = b.op("MatMul", [b.input("x", [4096, 4096]), b.input("w", [4096, 4096])]);
  for (let i = 0; i < 12; i++) y = b.op("Erf", [b.op("Sigmoid", [y])]);
  b.output("y", y);
  const long = fuse(applyPrecision(b.build(), "f16").graph).kernels.find((k) =>
    k.pattern === "matmul"
  )!;
  const looped = generateWgsl(long, H200);
  assert.ok(kernelLayout(long, H200).tile?.matrix, "a matrix tile");
  assert.equal(count(looped, /let q = lane \+/g), 0);
  assert.equal(count(looped, /for \(var q = lane; q < 256u; q \+= 32u\)/g), fm * fn);
});

Deno.test("an f16 product of too few tiles splits K among the subgroups of a 32×32 matrix tile", () => {
  // BERT-base's attention output at 128 tokens: 96 tiles of 32×32, too few to fill the GPU.
  const kernel = product(128, 768, 768);
  const layout = kernelLayout(kernel, H200);
  assert.deepEqual(layout.tile?.matrix, { sm: 2, sn: 2, fm: 1, fn: 1, tk: 32 });
  assert.equal(layout.tile?.slices, 4);
  assert.equal(layout.workgroup, 512);
  const wgsl = generateWgsl(kernel, H200);
  assert.match(wgsl, /@workgroup_size\(32, 16\)/);
  // Each step 128 of K, each subgroup's quarter of it at `sgk`.
  assert.match(wgsl, /let sgk = i32\(sg\) \/ 4 \* 32;/);
  assert.match(wgsl, /for \(var k0 = 0; k0 < 768; k0 \+= 128\)/);
  assert.match(wgsl, /&tileA, u32\(\(sgm \+ 0\) \* 136 \+ sgk \+ 16\), 136u\)/);
  // Every subgroup's results kept in `stage`, the four parts of an output summed.
  assert.match(wgsl, /var<workgroup> stage: array<f32, 4096>;/);
  assert.equal(wgsl.match(/sum \+= stage\[/g)?.length, 4);
  // Not where the device's workgroups hold fewer than 512 invocations, nor for a K of fewer
  // than two steps, nor in f32.
  assert.equal(kernelLayout(kernel, { ...H200, maxInvocations: 256 }).tile?.matrix, undefined);
  assert.equal(kernelLayout(product(128, 192, 768), H200).tile?.matrix, undefined);
  assert.equal(kernelLayout(product(128, 768, 768, "f32"), H200).tile?.matrix, undefined);
});

/** The matrix kernel of an f16 3×3 convolution whose patches are stored: rows are pixels. */
function patchedConv(batch: number, c: number, size: number): KernelIR {
  const b = new GraphBuilder();
  const x = b.input("x", [batch, c, size, size]);
  const w = b.param("w", [c, c, 3, 3], "f32", new Float32Array(c * c * 9));
  b.output("y", b.op("Relu", [b.op("Conv", [x, w], { pads: [1, 1, 1, 1] })]));
  const { graph } = applyPrecision(b.build(), "f16");
  const fused = fuse(graph, { patchesFrom: 1, halfPatches: true });
  return fused.kernels.find((k) => k.pattern === "conv")!;
}

Deno.test("a matrix kernel whose outputs run down its rows hands consecutive threads consecutive rows", () => {
  // ResNet's stage-2 3×3 at batch 8: rows are the 3136 pixels of an image, stored NCHW.
  const conv = patchedConv(8, 64, 56);
  const { fm, fn } = kernelLayout(conv, H200).tile!.matrix!;
  const wgsl = generateWgsl(conv, H200);
  assert.equal(wgsl.match(/subgroupMatrixStore<col_major>\(&stage/g)?.length, fm * fn);
  assert.doesNotMatch(wgsl, /subgroupMatrixStore<row_major>/);
  // Four rows a call (the outputs run down them in fours): a column's 16 rows in four lanes.
  assert.match(
    wgsl,
    /epilogue\(x0, x1, m0 \+ sgm \+ 0 \+ i32\(q % 4u\) \* 4, n0 \+ sgn \+ 0 \+ i32\(q \/ 4u\)/,
  );
  assert.match(wgsl, /var<storage, read_write> out0: array<vec4<f32>>;/);
  // A plain product's outputs run along its columns: row-major, as before.
  const plain = generateWgsl(product(4096, 4096, 4096), H200);
  assert.doesNotMatch(plain, /col_major>\(&stage/);
  assert.match(plain, /i32\(q \/ 4u\), n0 \+ sgn \+ 0 \+ i32\(q % 4u\) \* 4/);
  // Stage 5 at batch 1 (49 pixels, K = 4608) splits K: its threads walk the tile down its rows.
  const split = patchedConv(1, 512, 7);
  assert.equal(kernelLayout(split, H200).tile?.slices, 4);
  const splitWgsl = generateWgsl(split, H200);
  assert.match(splitWgsl, /let r = o % 32;\n\s*let c = o \/ 32;/);
  assert.match(splitWgsl, /let q = \(c % 16\) \* 16 \+ r % 16;/);
  assert.match(splitWgsl, /subgroupMatrixStore<col_major>\(&stage, \(sg \* 1u \+ 0u\) \* 256u/);
});

Deno.test("a 1×1 convolution's epilogue loads its residual and stores its outputs four pixels at once", () => {
  // ResNet's stage-2 expansion at batch 8: 64 → 256 channels over 3136 pixels, the residual
  // added: filters × pixels, its outputs NCHW planes along N.
  const b = new GraphBuilder();
  const x = b.input("x", [8, 64, 56, 56], "f16");
  const w = b.param("w", [256, 64, 1, 1], "f16", new Uint16Array(256 * 64));
  const conv = b.op("Conv", [x, w, b.param("bias", [256], "f16", new Uint16Array(256))]);
  b.output("y", b.op("Relu", [b.op("Add", [conv, b.input("r", [8, 256, 56, 56], "f16")])]));
  const kernel = fuse(b.build()).kernels.find((k) => k.pattern === "conv")!;
  const layout = kernelLayout(kernel, H200);
  const residual = kernel.inputs.findIndex((i) => i.shape.length === 4 && i.shape[1] === 256);
  const bias = kernel.inputs.findIndex((i) => i.shape.length === 1);
  assert.equal(layout.width, 4);
  assert.ok(layout.vectors.has(residual) && !layout.vectors.has(bias));
  const wgsl = generateWgsl(kernel, H200);
  assert.match(wgsl, new RegExp(`in${residual}: array<vec4<f16>>;`));
  assert.match(wgsl, /var<storage, read_write> out0: array<vec4<f16>>;/);
  // One vec4 of the residual a call, the channel's bias read once for its four pixels.
  assert.equal(wgsl.match(new RegExp(`in${residual}\\[`, "g"))?.length, 1);
  assert.equal(wgsl.match(new RegExp(`in${bias}\\[`, "g"))?.length, 1);
  assert.match(wgsl, /out0\[u32\([^\n]*\) \/ 4u\] = vec4<f16>\(vec4<f32>\(/);
  // A 3×3's outputs run down its rows (its stored patches' pixels): fours along M.
  assert.equal(kernelLayout(patchedConv(8, 64, 56), H200).width, 4);
});

Deno.test("64×32 matrix tiles fill the GPU where they cover little more than the least", () => {
  // ResNet's stage-3 3×3 at batch 8 (784 pixels an image, 128 channels): 64×64 tiles are too
  // few (208), 64×32 fill it (416) covering 1.04× what 32×32 would.
  const stage3 = kernelLayout(patchedConv(8, 128, 28), H200).tile!;
  assert.deepEqual(tileOf(stage3), [64, 32]);
  assert.deepEqual(stage3.matrix, { sm: 2, sn: 2, fm: 2, fn: 1, tk: 32 });
  // ViT's Q, K and V product: 197 rows in tiles of 64 cover 1.14× the least, so 32×32.
  assert.deepEqual(tileOf(kernelLayout(product(197, 768, 2304), H200).tile!), [32, 32]);
});
