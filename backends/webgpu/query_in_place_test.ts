/**
 * A decode step's queries computed where attention reads them: the elementwise kernel that makes
 * them (here a bias and a factor gathered by position, as a rotation reads its table) folds into
 * the attention kernels of few rows, split over keys or a workgroup a row, against the reference;
 * a query the program also returns keeps its kernel.
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { assertClose, f32, hashed, i32, numbers } from "../../jit/testing/testing.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { groupWgsl, withFusedAttention } from "../../shaders/wgsl/attention.ts";
import { SPLIT_KEYS } from "../../shaders/wgsl/split_attention.ts";
import { groupedAttention } from "../../jit/testing/decode_attention.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";

const HEADS = 4, GROUPS = 2, D = 16, POSITIONS = 8;

/**
 * One query row a head over `tokens` keys of `GROUPS` key heads (read through Expand, as
 * GroupQueryAttention decomposes); the query `(q + bias) · table[pos]`; `returned`: the query
 * is an output of the graph too.
 */
function decodeAttention(tokens: number, returned = false): Graph {
  const b = new GraphBuilder();
  const row = b.op("Gather", [b.input("table", [POSITIONS, D]), b.input("pos", [1], "i32")], {
    axis: 0,
  });
  const q = b.op("Mul", [b.op("Add", [b.input("q", [1, HEADS, 1, D]), b.input("bias", [D])]), row]);
  const sizes = { tokens, heads: HEADS, groups: GROUPS, d: D };
  b.output("y", groupedAttention(b, q, sizes));
  if (returned) b.output("query", q);
  return b.build();
}

/** Feeds of {@linkcode decodeAttention} at position `pos`. */
function feeds(tokens: number, pos: number) {
  const kv = GROUPS * tokens * D;
  return {
    table: f32(hashed(POSITIONS * D, 3), [POSITIONS, D]),
    pos: i32([pos], [1]),
    q: f32(hashed(HEADS * D, 7), [1, HEADS, 1, D]),
    bias: f32(hashed(D, 5), [D]),
    k: f32(hashed(kv, 11).map((x) => 3 * x), [1, GROUPS, tokens, D]),
    v: f32(hashed(kv, 13), [1, GROUPS, tokens, D]),
  };
}

/**
 * The kernel names of `graph` after WebGPU's attention grouping (the default binding limit, the
 * device's workgroup memory `workgroupBytes`).
 */
function kernelsOf(graph: Graph, workgroupBytes = 16384): string[] {
  const options = { maxInvocations: 256, bindings: 8, workgroupBytes };
  const external = new Set(graph.outputs.map((o) => o.value));
  return withFusedAttention(fuse(graph).kernels, external, options).kernels.map((k) => k.name);
}

/** The WGSL of the group kernel of `graph` that computes the scores (partials or one kernel). */
function scoresWgsl(graph: Graph): string {
  const options = { maxInvocations: 256, bindings: 8 };
  const { kernels, fused } = withFusedAttention(fuse(graph).kernels, new Set(), options);
  const group = fused.get(kernels.find((k) => fused.has(k))!)!;
  return groupWgsl(group, options);
}

Deno.test("a query's elementwise producer folds into attention of few rows", () => {
  for (const tokens of [SPLIT_KEYS, 3 * SPLIT_KEYS]) {
    const names = kernelsOf(decodeAttention(tokens));
    assert.ok(!names.some((n) => n.startsWith("elementwise")), names.join(" "));
    assert.ok(names.includes("attention_0"), names.join(" "));
    // The kernel that takes the scores computes the row's query once, then reads it there.
    const wgsl = scoresWgsl(decodeAttention(tokens));
    assert.match(wgsl, /var<workgroup> qs: array<f32, 16>/);
    assert.match(wgsl, /qs\[u32\(t\)\] = /);
  }
  // Returned, the query is stored by its own kernel, which the attention then reads.
  const kept = kernelsOf(decodeAttention(3 * SPLIT_KEYS, true));
  assert.ok(kept.some((n) => n.startsWith("elementwise")), kept.join(" "));
  // Each kernel computes the row's query once into workgroup memory: where the row's scores, the
  // softmax's lanes and the query row do not fit the device's, the query keeps its kernel.
  for (const tokens of [SPLIT_KEYS, 3 * SPLIT_KEYS]) {
    const small = kernelsOf(decodeAttention(tokens), 4 * (tokens + 2 * 64 + D) - 4);
    assert.ok(small.some((n) => n.startsWith("elementwise")), small.join(" "));
    const fits = kernelsOf(decodeAttention(tokens), 4 * (tokens + 2 * 64 + D));
    assert.ok(!fits.some((n) => n.startsWith("elementwise")), fits.join(" "));
  }
});

Deno.test("attention computing its queries gives the reference's values, split or not", async () => {
  const backend = new WebGpuBackend();
  await backend.prepare();
  for (const tokens of [SPLIT_KEYS - 5, 2 * SPLIT_KEYS + 36]) {
    for (const returned of [false, true]) {
      const graph = decodeAttention(tokens, returned);
      using exe = await compile(graph, { backend, cache: false });
      using reference = await compile(graph, { backend: "reference" });
      for (const pos of [0, 5]) {
        const input = feeds(tokens, pos);
        const [got, want] = [await exe.run(input), await reference.run(input)];
        assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-5, rtol: 1e-4 });
      }
    }
  }
  backend.dispose();
});
