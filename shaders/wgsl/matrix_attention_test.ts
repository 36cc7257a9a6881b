/**
 * Attention on the matrix units: which groups take the kernel, and its code (it runs on the
 * H200's tensor cores through `bench/gpu_kernels.ts`; CI's software adapter has no subgroup
 * matrices).
 *
 * @module
 */
import assert from "node:assert/strict";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { applyPrecision, type Precision } from "../../jit/passes/precision.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { dispatchSize, type WgslOptions } from "./codegen.ts";
import { groupLayout, groupWgsl, withFusedAttention } from "./attention.ts";

const H200: WgslOptions = { maxInvocations: 1024, half: true, matrix: true, workgroupBytes: 49152 };

/**
 * BERT's attention as the exporters write it: `tokens` queries, keys and values of 12 heads of
 * 64 split from projections [1, tokens, 768] by views, (Q·Kᵀ)·⅛ plus a [1, 1, 1, T] padding
 * mask, the context merged back to [batch, tokens, 768]; f16 inputs under `precision` f16; `batch`
 * such sequences.
 */
function bert(tokens: number, precision: Precision = "f16", batch = 1): Graph {
  const b = new GraphBuilder();
  // As an f16 model's projections give them (f32 inputs would be cast first).
  const dtype = precision === "f16" ? "f16" : "f32";
  const heads = (name: string) =>
    b.op("Transpose", [
      b.op("Reshape", [b.input(name, [batch, tokens, 768], dtype)], {
        shape: [batch, tokens, 12, 64],
      }),
    ], { perm: [0, 2, 1, 3] });
  const [q, k, v] = ["q", "k", "v"].map(heads);
  const kt = b.op("Transpose", [k], { perm: [0, 1, 3, 2] });
  const scaled = b.op("Mul", [b.op("MatMul", [q, kt]), b.constant(0.125, [], dtype)]);
  const scores = b.op("Add", [scaled, b.input("mask", [1, 1, 1, tokens], dtype)]);
  const context = b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]);
  const merged = b.op("Transpose", [context], { perm: [0, 2, 1, 3] });
  b.output("y", b.op("Reshape", [merged], { shape: [batch, tokens, 768] }));
  return applyPrecision(b.build(), precision).graph;
}

/** The kernels of `graph` once its attention groups are fused on a device with `options`. */
function planned(graph: Graph, options: WgslOptions) {
  const kernels = fuse(graph, { keysFrom: 0 }).kernels;
  return withFusedAttention(kernels, new Set(graph.outputs.map((o) => o.value)), options);
}

Deno.test("f16 attention of 128 tokens runs on the matrix units as one kernel, keys in place", () => {
  const graph = bert(128);
  const { kernels, fused } = planned(graph, H200);
  const attention = kernels.find((k) => fused.has(k))!;
  const plan = fused.get(attention)!;
  assert.ok("units" in plan, "the matrix kernel");
  // The keys' copy by head first (for the one-row kernel) is left out: k is read in place.
  const k = graph.inputs.find((i) => i.name === "k")!.value;
  assert.ok(plan.inputs.some((i) => i.value === k), "reads k itself");
  assert.equal(kernels.filter((x) => x.pattern === "elementwise").length, 0, "no copy");
  // 16 query rows a workgroup of 128 threads: 12 heads × 8 query tiles.
  const layout = groupLayout(plan, H200);
  assert.equal(layout.workgroup, 128);
  assert.deepEqual(dispatchSize(layout, 12 * 128), [96, 1, 1]);
  const wgsl = groupWgsl(plan, H200);
  assert.match(
    wgsl,
    /^enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;/m,
  );
  // The scores: four multiplies of the head's 64 for each subgroup's 16 keys of a chunk of 64,
  // stored whole in f32.
  assert.match(wgsl, /for \(var c0 = 0; c0 < 128; c0 \+= 64\)/);
  assert.ok(wgsl.includes("var<workgroup> tileB: array<f16, 4608>;"));
  assert.equal(wgsl.match(/acc = subgroupMatrixMultiplyAccumulate/g)?.length, 4);
  assert.ok(wgsl.includes("var<workgroup> sc: array<f32, 2048>;"), wgsl);
  // The weights in f16 (rows padded by 8 halves), then four multiplies by values a chunk of 64,
  // the first chunk's loads issued before the softmax, the next one's before the multiplies.
  assert.ok(wgsl.includes("var<workgroup> pw: array<f16, 2176>;"));
  assert.equal(wgsl.match(/ov0 = subgroupMatrixMultiplyAccumulate/g)?.length, 4);
  assert.ok(wgsl.indexOf("tileV_0 = in3[u32(tileV_o0 + 768 * (0))];") < wgsl.indexOf("let r = t"));
  assert.match(
    wgsl,
    /if \(c0 \+ 64 < 128\) \{\n\s*tileV_0 = in3\[u32\(tileV_o0 \+ 768 \* \(c0 \+ 64\)\)\];/,
  );
  // The softmax's rows combined by shuffles across eight lanes; the mask and scale in `score`.
  assert.equal(wgsl.match(/subgroupShuffleXor\(mx, [124]u\)/g)?.length, 3);
  assert.match(wgsl, /let y = score\(s0, s1, row0 \+ r, j, sc\[at \+ j\]\);/);
  assert.match(
    wgsl,
    /pw\[r \* 136 \+ j\] = f16\(weight\(s0, s1, row0 \+ r, j, sc\[at \+ j\], mx, sum\)\);/,
  );
  assert.match(wgsl, /emit\(s0, s1, row0 \+ i32\(q \/ 16u\), cb0 \+ i32\(q % 16u\), /);
});

Deno.test("attention the matrix kernel does not take keeps its other kernels", () => {
  const kinds = (graph: Graph, options: WgslOptions = H200) => {
    const { kernels, fused } = planned(graph, options);
    return kernels.filter((k) => fused.has(k)).map((k) => {
      const plan = fused.get(k)!;
      return "units" in plan ? "matrix" : "rows" in plan ? "flash" : "one-row";
    });
  };
  assert.deepEqual(kinds(bert(128)), ["matrix"]);
  // f32 has no matrix units; nor a device without them; the flash kernel where asked for.
  assert.deepEqual(kinds(bert(128, "f32")), ["one-row"]);
  assert.deepEqual(kinds(bert(128), { ...H200, matrix: false }), ["one-row"]);
  assert.deepEqual(kinds(bert(128), { ...H200, flash: true }), ["flash"]);
  // ViT's 197 queries (no multiple of 16) too; in f32 its products are large enough for three
  // kernels. 256 keys take 45 KB of workgroup memory, 512 keys 57 KB, past 48.
  assert.deepEqual(kinds(bert(197)), ["matrix"]);
  assert.deepEqual(kinds(bert(197, "f32")), []);
  assert.deepEqual(kinds(bert(256)), ["matrix"]);
  assert.deepEqual(kinds(bert(256), { ...H200, workgroupBytes: 32768 }), []);
  // Where the flash kernel pays (384 workgroups of 64 query rows), it keeps keys past 128.
  assert.deepEqual(kinds(bert(256, "f16", 8)), ["flash"]);
  assert.deepEqual(kinds(bert(128, "f16", 16)), ["matrix"]);
  assert.notDeepEqual(kinds(bert(512)), ["matrix"]);
});

Deno.test("a softmax guarded against NaN, as PyTorch's SDPA exports it, takes the matrix kernel", () => {
  const b = new GraphBuilder();
  // 64 queries, 40 keys and values, heads of 32.
  const q = b.input("q", [1, 4, 64, 32], "f16");
  const [k, v] = ["k", "v"].map((n) => b.input(n, [1, 4, 40, 32], "f16"));
  const kt = b.op("Transpose", [k], { perm: [0, 1, 3, 2] });
  const weights = b.op("Softmax", [b.op("MatMul", [q, kt])], { axis: -1 });
  // Where(IsNaN(w), 0, w): a row of −∞ weighs its keys 0 instead of NaN.
  const zero = b.constant(0, [], "f16");
  const guarded = b.op("Where", [b.op("IsNaN", [weights]), zero, weights]);
  b.output("y", b.op("MatMul", [guarded, v]));
  const graph = applyPrecision(b.build(), "f16").graph;
  const { kernels, fused } = planned(graph, H200);
  const plan = fused.get(kernels.find((x) => fused.has(x))!)!;
  assert.ok("units" in plan, "the matrix kernel (the flash kernel's online softmax cannot)");
  const wgsl = groupWgsl(plan, H200);
  // The guard is in `weight`, as the softmax kernel wrote it.
  const weight = wgsl.slice(wgsl.indexOf("fn weight("), wgsl.indexOf("fn emit("));
  assert.match(weight, /k_isnan/);
  // 40 keys: one chunk of 64, the padded keys' weights 0.
  assert.match(
    wgsl,
    /for \(var j = 40 \+ t % 8; j < 64; j \+= 8\) \{\n\s*pw\[r \* 72 \+ j\] = 0\.0;/,
  );
});

Deno.test("a query axis of no multiple of 16 takes whole workgroups an item, rows past it idle", () => {
  // ViT-B/16's 197 tokens at batch 2: 13 query tiles an item, the last of 5 rows.
  const { kernels, fused } = planned(bert(197, "f16", 2), H200);
  const plan = fused.get(kernels.find((x) => fused.has(x))!)!;
  assert.ok("units" in plan, "the matrix kernel");
  assert.deepEqual(dispatchSize(groupLayout(plan, H200), 2 * 12 * 197), [2 * 12 * 13, 1, 1]);
  const wgsl = groupWgsl(plan, H200);
  assert.match(
    wgsl,
    /if \(g >= 312\) \{ return; \}\n\s*let row0 = g % 13 \* 16;\n\s*let item = g \/ 13;/,
  );
  // Queries past the item's read as zeros; their rows compute no softmax (weights 0) and store
  // nothing.
  assert.match(wgsl, /tileA_0 = select\(f16\(0\.0\), in\d\[.*row0 \+ tileA_r0 < 197/);
  assert.match(wgsl, /let live = select\(0, 197, row0 \+ r < 197\);/);
  assert.equal(wgsl.match(/; j < live; j \+= 8\)/g)?.length, 3);
  assert.match(wgsl, /for \(var j = live \+ t % 8; j < 256; j \+= 8\)/);
  assert.match(wgsl, /if \(row0 \+ i32\(q \/ 16u\) < 197\) \{\n\s*emit\(/);
  // Whole tiles need no guard.
  const whole = planned(bert(128), H200);
  const wholePlan = whole.fused.get(whole.kernels.find((x) => whole.fused.has(x))!)!;
  const wholeWgsl = groupWgsl(wholePlan, H200);
  assert.doesNotMatch(wholeWgsl, /< 128\) \{\n\s*emit/);
  // Nor a bound computed at run time: the softmax's loops keep T constant.
  assert.doesNotMatch(wholeWgsl, /live/);
  assert.equal(wholeWgsl.match(/; j < 128; j \+= 8\)/g)?.length, 3);
});
