/**
 * The flash kernel over a softmax guarded as PyTorch's SDPA export writes it,
 * `Where(IsNaN(w), 0, w)`: rows whose weights are NaN (every key masked, a NaN score) weigh
 * their values 0, as the reference does.
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { assertClose, f32, hashed, numbers } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "../../backends/webgpu/webgpu_backend.ts";
import { attentionGroup } from "./attention_group.ts";
import { flashAttention } from "./flash.ts";
import { flashWgsl } from "./flash_kernel.ts";

const QUERIES = 64, KEYS = 80, D = 16;

/**
 * SDPA as `torch.onnx.export` writes it: Q and Kᵀ each scaled by √(1/√D), an added [2, 1, 1, T]
 * mask, the softmax, then (`guard`) `Where(IsNaN(w), 0, w)` before the values.
 */
function sdpa(guard: boolean): Graph {
  const b = new GraphBuilder();
  const q = b.input("q", [2, 2, QUERIES, D]);
  const [k, v] = ["k", "v"].map((n) => b.input(n, [2, 2, KEYS, D]));
  const root = b.constant(Math.sqrt(1 / Math.sqrt(D)));
  const kt = b.op("Mul", [b.op("Transpose", [k], { perm: [0, 1, 3, 2] }), root]);
  const scores = b.op("MatMul", [b.op("Mul", [q, root]), kt]);
  const masked = b.op("Add", [scores, b.input("mask", [2, 1, 1, KEYS])]);
  const weights = b.op("Softmax", [masked], { axis: -1 });
  const guarded = guard
    ? b.op("Where", [b.op("IsNaN", [weights]), b.constant(0), weights])
    : weights;
  b.output("y", b.op("MatMul", [guarded, v]));
  return b.build();
}

Deno.test("the flash kernel takes SDPA's guarded softmax; the plain one is not guarded", () => {
  const options = { maxInvocations: 256, workgroupBytes: 32768 };
  const plan = (guard: boolean) => {
    const graph = sdpa(guard);
    const kernels = fuse(graph).kernels.filter((k) => k.group === "attention_0");
    const group = attentionGroup(kernels, new Set(graph.outputs.map((o) => o.value)))!;
    return flashAttention(group, options);
  };
  const guarded = plan(true);
  assert.equal(guarded?.guarded, true);
  assert.match(flashWgsl(guarded!), /select\(select\(0\.0, o_0_0\.x, total == 0\.0\)/);
  assert.equal(plan(false)?.guarded, undefined);
});

Deno.test("guarded flash attention weighs a fully masked row's values 0, as the reference", async () => {
  const gpu = new WebGpuBackend({ profile: true, flashAttention: true });
  await gpu.prepare();
  const graph = sdpa(true);
  // Batch 0: every third key masked; batch 1: every key masked (its weights NaN, guarded to 0).
  const mask = new Float32Array(2 * KEYS).map((_, i) => i >= KEYS || i % 3 === 0 ? -Infinity : 0);
  const q = hashed(2 * 2 * QUERIES * D, 1);
  // A NaN query in batch 0, head 1, row 5: that row's scores are NaN, its weights guarded to 0.
  q[(QUERIES + 5) * D + 3] = NaN;
  const feeds = {
    q: f32(q, [2, 2, QUERIES, D]),
    k: f32(hashed(2 * 2 * KEYS * D, 2), [2, 2, KEYS, D]),
    v: f32(hashed(2 * 2 * KEYS * D, 3), [2, 2, KEYS, D]),
    mask: f32(mask, [2, 1, 1, KEYS]),
  };
  using exe = await compile(graph, { backend: gpu, cache: false });
  using reference = await compile(graph, { backend: "reference" });
  const [got, want] = [await exe.run(feeds), await reference.run(feeds)];
  const y = numbers(got.y.data);
  assertClose(y, numbers(want.y.data), { atol: 1e-5, rtol: 1e-4 });
  assert.deepEqual(exe.deviceTimes().map((t) => t.kernel), ["attention_0"]);
  const half = y.length / 2;
  assert.ok(y.slice(half).every((x) => x === 0), "batch 1 is all 0");
  const nanRow = y.slice((QUERIES + 5) * D, (QUERIES + 6) * D);
  assert.ok(nanRow.every((x) => x === 0), "the NaN row is 0");
  gpu.dispose();
});
