/**
 * The flash kernel over a query axis of no multiple of its workgroup's rows (a prompt of any
 * length): whole workgroups an item, the rows past its queries idle, the values as the
 * reference's on the software adapter.
 *
 * @module
 */
import assert from "node:assert/strict";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { f32, graphMatchesReference, hashed } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "../../backends/webgpu/webgpu_backend.ts";
import { attentionGroup } from "./attention_group.ts";
import { dispatchSize } from "./codegen.ts";
import { withFusedAttention } from "./attention.ts";
import { flashAttention, flashLayout, raggedRows } from "./flash.ts";
import { flashWgsl } from "./flash_kernel.ts";

const QUERIES = 100, KEYS = 90, D = 32;

/** softmax(Q·Kᵀ / √D + mask)·V of two batch items of two heads, the mask [Q, T] if given. */
function attention(masked: boolean): Graph {
  const b = new GraphBuilder();
  const q = b.input("q", [2, 2, QUERIES, D]);
  const [k, v] = ["k", "v"].map((n) => b.input(n, [2, 2, KEYS, D]));
  const kt = b.op("Transpose", [k], { perm: [0, 1, 3, 2] });
  const scores = b.op("Mul", [b.op("MatMul", [q, kt]), b.constant(1 / Math.sqrt(D))]);
  const input = masked ? b.op("Add", [scores, b.input("mask", [QUERIES, KEYS])]) : scores;
  b.output("y", b.op("MatMul", [b.op("Softmax", [input], { axis: -1 }), v]));
  return b.build();
}

Deno.test("a ragged query axis takes whole flash workgroups an item", () => {
  const graph = attention(false);
  const kernels = fuse(graph).kernels.filter((k) => k.group === "attention_0");
  const group = attentionGroup(kernels, new Set(graph.outputs.map((o) => o.value)))!;
  const plan = flashAttention(group, { maxInvocations: 256, workgroupBytes: 32768 })!;
  // 100 queries: no multiple of 16, so the largest tile, 64 rows, two an item.
  assert.equal(plan.rows, 64);
  assert.ok(raggedRows(plan));
  assert.deepEqual(dispatchSize(flashLayout(plan), 4 * QUERIES), [4 * 2, 1, 1]);
  const wgsl = flashWgsl(plan);
  assert.match(wgsl, /if \(g >= 8\) \{ return; \}\n\s*let row0 = g \/ 2 \* 100 \+ g % 2 \* 64;/);
  assert.match(wgsl, /if \(first \+ .* < 100\) \{\n\s*emit\(/);
  assert.match(wgsl, /score\(.*min\(first \+ .*, 99\)/);
  // Under a mask it skips no key tiles: one kernel, no tile summary before it.
  const masked = attention(true);
  const planned = withFusedAttention(
    fuse(masked).kernels,
    new Set(masked.outputs.map((o) => o.value)),
    { maxInvocations: 256, workgroupBytes: 32768, flash: true },
  );
  assert.deepEqual(planned.kernels.map((k) => k.name), ["attention_0"]);
});

Deno.test("flash attention of 100 queries under a causal mask is the reference's", async () => {
  const gpu = new WebGpuBackend({ profile: true, flashAttention: true });
  await gpu.prepare();
  const graph = attention(true);
  // Query i sees keys 0..i (of 90; the last ten queries see them all).
  const mask = new Float32Array(QUERIES * KEYS).map((_, i) =>
    i % KEYS > Math.floor(i / KEYS) ? -Infinity : 0
  );
  const feeds = {
    q: f32(hashed(4 * QUERIES * D, 1), [2, 2, QUERIES, D]),
    k: f32(hashed(4 * KEYS * D, 2), [2, 2, KEYS, D]),
    v: f32(hashed(4 * KEYS * D, 3), [2, 2, KEYS, D]),
    mask: f32(mask, [QUERIES, KEYS]),
  };
  await graphMatchesReference(graph, feeds, gpu);
  gpu.dispose();
});
