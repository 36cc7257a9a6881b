/**
 * Quantized products over bytes on the matrix units (`matrix_matmul.ts` with `matrix_fills.ts`'s
 * byte tiles): which kernels take them and the code they get. CI's software adapter has no
 * subgroup matrices: the kernels run, against the reference to the bit, on the H200 through
 * `bench/byte_matrices_check.ts`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import { generateWgsl, kernelLayout, type WgslOptions } from "./codegen.ts";
import { tileOf } from "./tile_shapes.ts";

/** Dawn's H200 as the byte kernels see it: packed dots and an i8 → i32 matrix configuration. */
const H200: WgslOptions = {
  maxInvocations: 1024,
  workgroupBytes: 49152,
  packedDots: true,
  byteMatrix: true,
};

/** The kernel of an i32 product of `a` [m, k] by `w` [k, n], one u8 and the other i8. */
function product(m: number, k: number, n: number, unsigned: "a" | "b" = "a"): KernelIR {
  const b = new GraphBuilder();
  const a = b.input("a", [m, k], unsigned === "a" ? "u8" : "i8");
  const w = b.input("w", [k, n], unsigned === "a" ? "i8" : "u8");
  b.output("y", b.op("IntegerMatMul", [a, w]));
  const { kernels } = fuse(b.build(), { integerDot: "bytes" });
  assert.equal(kernels.length, 1);
  return kernels[0];
}

const count = (wgsl: string, re: RegExp) => wgsl.match(re)?.length ?? 0;

Deno.test("products over bytes take matrix tiles where the device multiplies bytes on its units", () => {
  const layout = (k: KernelIR, o = H200) => kernelLayout(k, o);
  // BERT-base's MLP up at 512 tokens: 64×64 tiles (8 × 48 of them fill the GPU), two multiplies
  // of 32 bytes of K a step.
  const mlp = layout(product(512, 768, 3072)).tile!;
  assert.equal(mlp.bytes, "a");
  assert.deepEqual(mlp.matrix, { sm: 2, sn: 2, fm: 2, fn: 2, tk: 64 });
  assert.deepEqual(tileOf(layout(product(4096, 1024, 4096)).tile!), [128, 128]);
  // 32×32 tiles (one result matrix a subgroup) stay on the byte tiles: each step's multiply by
  // the matrix of ones would double the units' work. BERT's 128 tokens make no larger ones.
  assert.equal(layout(product(128, 768, 3072)).tile?.matrix, undefined);
  assert.equal(layout(product(1024, 3072, 768)).tile?.matrix, undefined);
  // Not without the configuration, nor without packed dots (the byte tiles' form), nor on a
  // device whose units multiply halves only; the byte tiles of dot4I8Packed run them there.
  const off = layout(product(512, 768, 3072), { ...H200, byteMatrix: false }).tile!;
  assert.equal(off.matrix, undefined);
  assert.equal(off.bytes, "a");
  assert.equal(
    layout(product(512, 768, 3072), { ...H200, packedDots: false }).tile?.matrix,
    undefined,
  );
  const halves = { ...H200, byteMatrix: false, matrix: true, half: true };
  assert.equal(layout(product(512, 768, 3072), halves).tile?.matrix, undefined);
  // Too few tiles to fill the GPU: the byte tiles split K instead.
  assert.equal(layout(product(128, 3072, 768)).tile?.matrix, undefined);
});

Deno.test("a byte matrix kernel packs its operands' bytes, multiplies i8 matrices and adds back 128 times the sums", () => {
  const kernel = product(512, 768, 3072);
  const { fm, fn } = kernelLayout(kernel, H200).tile!.matrix!;
  const wgsl = generateWgsl(kernel, H200);
  assert.match(wgsl, /^enable subgroups;\nenable chromium_experimental_subgroup_matrix;/);
  assert.doesNotMatch(wgsl, /enable f16/);
  // Tiles of words holding four bytes: A's 64 rows of 64 K padded by 16 bytes, B's 64 rows of
  // 64 N alike; A's at least as long as `stage`, which it holds after the steps.
  assert.ok(wgsl.includes(`var<workgroup> tileA: array<i32, ${(64 * 80) / 4}>;`), wgsl);
  assert.ok(wgsl.includes(`var<workgroup> tileB: array<i32, ${(64 * 80) / 4}>;`));
  assert.ok(wgsl.includes("var<workgroup> stage: array<i32, 1024>;"));
  // Offsets and strides in words (Tint's count for an array of i32): 80 bytes a row, 20 words.
  const left =
    "subgroup_matrix_left<i8, 32, 16>, row_major>(&tileA, u32(((sgm + 0) * 80 + 0) / 4), 20u)";
  assert.ok(wgsl.includes(left));
  assert.match(wgsl, /subgroup_matrix_right<i8, 16, 32>, row_major>\(&tileB, /);
  assert.match(wgsl, /var acc_0_0 = subgroup_matrix_result<i32, 16, 16>\(\);/);
  // The u8 activation's bytes less 128 (their top bits flipped); the i8 weights as they are.
  assert.match(
    wgsl,
    /tileA_0 = pack4xU8\(in0\[u32\(tileA_o0 \+ 1 \* \(0\)\) \/ 4u\]\) \^ 0x80808080u;/,
  );
  assert.match(wgsl, /tileB_0 = pack4xI8\(in1\[u32\(tileB_o0 \+ 3072 \* \(0\)\) \/ 4u\]\);/);
  // Each step's two multiplies: fm·fn products and, by a matrix of ones, B's column sums.
  assert.match(wgsl, /let ones = subgroup_matrix_left<i8, 32, 16>\(1\);/);
  assert.equal(count(wgsl, /subgroupMatrixMultiplyAccumulate\(ones, b\d+_\d, sums_\d\)/g), 2 * fn);
  assert.equal(
    count(wgsl, /subgroupMatrixMultiplyAccumulate\(a\d+_\d, b\d+_\d, acc_/g),
    2 * fm * fn,
  );
  // Each column block's sums once into tileA, each element of its results plus 128 times them.
  assert.equal(count(wgsl, /subgroupMatrixStore<row_major>\(&tileA, sg \* 256u, sums_/g), fn);
  assert.equal(
    count(wgsl, /stage\[sg \* 256u \+ q\] \+ 128 \* tileA\[sg \* 256u \+ q\]/g),
    8 * fm * fn,
  );
  assert.match(wgsl, /fn epilogue\(x0: i32, x1: i32, x2: i32, sum: i32\)/);
  // Whole tiles read without guards.
  assert.doesNotMatch(wgsl, /tileA_0 = select/);
});

Deno.test("a u8 right operand enters less 128 and the left one's row sums are added back", () => {
  // 2000 × 1202 over K = 1000: partial tiles on every side; B's 1202 columns are not
  // four-aligned, read a byte at a time and packed, each one guarded.
  const kernel = product(2000, 1000, 1202, "b");
  const { tile, vectors } = kernelLayout(kernel, H200);
  assert.equal(tile?.bytes, "b");
  assert.deepEqual([...vectors], [0]);
  const wgsl = generateWgsl(kernel, H200);
  assert.match(wgsl, /let ones = subgroup_matrix_right<i8, 16, 32>\(1\);/);
  assert.match(wgsl, /sums_0 = subgroupMatrixMultiplyAccumulate\(a0_0, ones, sums_0\);/);
  assert.match(wgsl, /tileA_0 = select\(0u, pack4xI8\(in0\[/);
  assert.match(wgsl, /tileB_0 = pack4xU8\(vec4<u32>\(select\(u32\(0\), in1\[/);
  assert.match(wgsl, /n0 \+ tileB_r0 \+ 3 < 1202/);
  assert.match(wgsl, /\) \^ 0x80808080u;/);
  // Its tileA (64 rows of 80 bytes) holds the four subgroups' 16×16 sums after the steps.
  assert.match(wgsl, /var<workgroup> tileA: array<i32, 1280>;/);
  assert.match(wgsl, /var<workgroup> stage: array<i32, 1024>;/);
});

Deno.test("a packed constant's words enter a byte tile as they lie", () => {
  const kernel = product(512, 768, 3072);
  const packed = {
    ...kernel,
    inputs: kernel.inputs.map((b, i) => i === 1 ? { ...b, packed: "bytes" as const } : b),
  };
  const wgsl = generateWgsl(packed, H200);
  assert.match(wgsl, /var<storage, read> in1: array<u32>;/);
  assert.match(wgsl, /tileB_0 = in1\[u32\(tileB_o0 \+ 3072 \* \(0\)\) \/ 4u\];/);
});
