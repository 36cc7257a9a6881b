/**
 * The flash kernel reads attention's keys where they lie: the copy fusion makes of keys read
 * through a transposing view (for the one-row kernel) is left out where the flash kernel runs.
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { applyPrecision } from "../../jit/passes/precision.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { assertClose, f32, hashed, numbers } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "../../backends/webgpu/webgpu_backend.ts";
import { withFusedAttention } from "./attention.ts";
import { keysInPlace } from "./flash_keys.ts";

/**
 * 16 queries of 4 heads against `tokens` keys and values as a projection writes them,
 * [1, tokens, 4 · 16], split into heads by views; `keepKeys`: the keys by head are an output too;
 * inputs of `dtype`.
 */
function attention(tokens: number, keepKeys = false, dtype: "f32" | "f16" = "f32"): Graph {
  const b = new GraphBuilder();
  const heads = (name: string) =>
    b.op("Transpose", [b.op("Reshape", [b.input(name, [1, tokens, 64], dtype)], {
      shape: [1, tokens, 4, 16],
    })], { perm: [0, 2, 1, 3] });
  const [k, v] = ["k", "v"].map(heads);
  const kt = b.op("Transpose", [k], { perm: [0, 1, 3, 2] });
  const scores = b.op("Mul", [
    b.op("MatMul", [b.input("q", [1, 4, 16, 16], dtype), kt]),
    b.constant(0.25, [], dtype),
  ]);
  b.output("y", b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]));
  if (keepKeys) b.output("keys", kt);
  return b.build();
}

const H200 = { maxInvocations: 256, workgroupBytes: 49152, flash: true };
const copies = (g: Graph) =>
  fuse(g, { keysFrom: 2 ** 16 }).kernels.filter((k) => k.pattern === "elementwise");

Deno.test("the flash kernel reads keys in place: their copy is left out", () => {
  const graph = attention(4096);
  const kernels = fuse(graph, { keysFrom: 2 ** 16 }).kernels;
  assert.equal(copies(graph).length, 1, "fusion stores the keys by head");
  const outputs = new Set(graph.outputs.map((o) => o.value));
  const { kernels: run, fused } = withFusedAttention(kernels, outputs, H200);
  assert.deepEqual(run.map((k) => k.name), ["attention_0"], "one kernel");
  const [flash] = [...fused.values()];
  const k = graph.inputs.find((i) => i.name === "k")!.value;
  assert.ok("rows" in flash && flash.inputs.some((i) => i.value === k), "reads k itself");
  // Without the flash kernel the keys' copy stays (the three kernels' product reads it).
  const three = withFusedAttention(kernels, outputs, { ...H200, flash: false }).kernels;
  assert.deepEqual(three.map((k) => k.pattern), ["elementwise", "matmul", "softmax", "matmul"]);
});

Deno.test("keys whose copy is needed elsewhere, or computes more, keep it", () => {
  const graph = attention(4096);
  const kernels = fuse(graph, { keysFrom: 2 ** 16 }).kernels;
  const members = kernels.filter((k) => k.group === "attention_0");
  const [copy] = copies(graph), copied = copy.outputs[0].value;
  const none = new Set<number>();
  assert.ok(keysInPlace(kernels, members, none), "the plain case");
  assert.equal(keysInPlace(kernels, members, new Set([copied])), undefined, "needed after");
  const reader = { ...copy, name: "reader", inputs: copy.outputs, outputs: [] };
  assert.equal(keysInPlace([...kernels, reader], members, none), undefined, "read twice");
  // The keys by head also an output: the copy's kernel stores both.
  const both = attention(4096, true), more = fuse(both, { keysFrom: 2 ** 16 }).kernels;
  assert.equal(more[0].outputs.length, 2);
  const group = more.filter((k) => k.group === "attention_0");
  assert.equal(keysInPlace(more, group, none), undefined, "a copy that computes more");
});

Deno.test("flash attention over keys read in place gives the reference's values", async () => {
  const gpu = new WebGpuBackend({ profile: true, flashAttention: true });
  await gpu.prepare();
  const tokens = 4096, graph = attention(tokens);
  const feeds = {
    q: f32(hashed(4 * 16 * 16, 1), [1, 4, 16, 16]),
    k: f32(hashed(tokens * 64, 2), [1, tokens, 64]),
    v: f32(hashed(tokens * 64, 3), [1, tokens, 64]),
  };
  using exe = await compile(graph, { backend: gpu, cache: false });
  using reference = await compile(graph, { backend: "reference" });
  const [got, want] = [await exe.run(feeds), await reference.run(feeds)];
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-5, rtol: 1e-4 });
  assert.deepEqual(exe.deviceTimes().map((t) => t.kernel), ["attention_0"]);
  gpu.dispose();
});

Deno.test("an f16 group's keys are read in place too", () => {
  // f16 inputs, as an f16 model's projections give them; the product's f16 sum is viewed in
  // f32 by the group (`f32SumView`), which must not hide its operands.
  const graph = applyPrecision(attention(4096, false, "f16"), "f16").graph;
  const kernels = fuse(graph, { keysFrom: 2 ** 16 }).kernels;
  assert.equal(copies(graph).length, 1, "fusion stores the keys by head");
  const outputs = new Set(graph.outputs.map((o) => o.value));
  const { kernels: run, fused } = withFusedAttention(kernels, outputs, H200);
  assert.deepEqual(run.map((k) => k.name), ["attention_0"], "one kernel");
  const k = graph.inputs.find((i) => i.name === "k")!.value;
  assert.ok([...fused.values()].some((p) => "rows" in p && p.inputs.some((i) => i.value === k)));
});
