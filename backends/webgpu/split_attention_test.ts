/**
 * Attention of few query rows over many keys (a decode step's) as partials over key splits and
 * their combination, against the reference: masks hiding keys, whole splits and whole rows, a
 * ragged last split, grouped heads read through Expand, an epilogue after the values.
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { assertClose, f32, hashed, numbers } from "../../jit/testing/testing.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { withFusedAttention } from "../../shaders/wgsl/attention.ts";
import { SPLIT_KEYS, SPLIT_ROWS } from "../../shaders/wgsl/split_attention.ts";
import { groupedAttention } from "../../jit/testing/decode_attention.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";

/**
 * One query row for each of `heads` heads over `tokens` keys of `groups` key heads (each read by
 * heads / groups query heads through Expand, as GroupQueryAttention decomposes), an additive mask
 * over the keys, and a bias added to the values' output.
 */
function decodeAttention(tokens: number, heads = 4, groups = 2, d = 16): Graph {
  const b = new GraphBuilder();
  const q = b.input("q", [1, heads, 1, d]);
  const mask = b.input("mask", [1, heads, 1, tokens]);
  const y = groupedAttention(b, q, { tokens, heads, groups, d }, mask);
  b.output("y", b.op("Add", [y, b.input("bias", [d])]));
  return b.build();
}

/** Feeds of {@linkcode decodeAttention}: `hidden(head, key)` says which keys the mask hides. */
function feeds(tokens: number, hidden: (head: number, key: number) => boolean, heads = 4, d = 16) {
  const kv = 2 * tokens * d;
  return {
    q: f32(hashed(heads * d, 7), [1, heads, 1, d]),
    k: f32(hashed(kv, 11).map((x) => 3 * x), [1, 2, tokens, d]),
    v: f32(hashed(kv, 13), [1, 2, tokens, d]),
    mask: f32(
      Array.from(
        { length: heads * tokens },
        (_, i) => hidden(Math.floor(i / tokens), i % tokens) ? -Infinity : 0,
      ),
      [1, heads, 1, tokens],
    ),
    bias: f32(hashed(d, 17), [d]),
  };
}

Deno.test("few rows over many keys run as partials over key splits, then combined", async () => {
  const profiled = new WebGpuBackend({ profile: true });
  await profiled.prepare();
  const hides = [
    // Nothing hidden, then a causal-like tail (a decode step's unused capacity).
    () => false,
    (_h: number, key: number) => key > 70,
    // Head 1 sees only the keys of the last split; head 2 none of the first split's; head 3 none.
    (h: number, key: number) =>
      h === 1 ? key < SPLIT_KEYS * 2 : h === 2 ? key < SPLIT_KEYS : h === 3,
  ];
  for (const tokens of [2 * SPLIT_KEYS + 36, 4 * SPLIT_KEYS]) {
    const graph = decodeAttention(tokens);
    using exe = await compile(graph, { backend: profiled, cache: false });
    using reference = await compile(graph, { backend: "reference" });
    for (const hidden of hides) {
      const input = feeds(tokens, hidden);
      const [got, want] = [await exe.run(input), await reference.run(input)];
      assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-5, rtol: 1e-4 });
    }
    // A row with every key hidden is NaN, as the reference's softmax makes it.
    const none = await reference.run(feeds(tokens, (h) => h === 3));
    assert.ok(Number.isNaN(numbers(none.y.data)[3 * 16]));
    // Kernel times need timestamp queries (Dawn's GL backend has none).
    if (profiled.capabilities().timestampQuery) {
      const names = exe.deviceTimes().map((t) => t.kernel);
      assert.ok(names.includes("attention_0_partials"), names.join(" "));
      assert.ok(names.includes("attention_0"), names.join(" "));
    }
  }
  profiled.dispose();
});

Deno.test("attention splits its keys only for few rows, many keys and the plain softmax in f32", async () => {
  const backend = new WebGpuBackend();
  await backend.prepare();
  const options = { maxInvocations: 256, bindings: 8 };
  const kernelsOf = (g: Graph) => {
    const planned = fuse(g).kernels;
    return withFusedAttention(planned, new Set(g.outputs.map((o) => o.value)), options).kernels
      .map((k) => k.name);
  };
  assert.ok(kernelsOf(decodeAttention(4 * SPLIT_KEYS)).includes("attention_0_partials"));
  // A device with shader-f16 stores f32 tensors as f32: their groups split there too.
  const half = withFusedAttention(fuse(decodeAttention(4 * SPLIT_KEYS)).kernels, new Set(), {
    ...options,
    half: true,
  });
  assert.ok(half.kernels.some((k) => k.name === "attention_0_partials"));
  // One split's keys: the fused kernel alone.
  assert.ok(!kernelsOf(decodeAttention(SPLIT_KEYS)).some((n) => n.endsWith("_partials")));
  // More rows than SPLIT_ROWS fill the GPU a workgroup a row.
  const many = decodeAttention(4 * SPLIT_KEYS, 2 * SPLIT_ROWS, 2, 16);
  assert.ok(!kernelsOf(many).some((n) => n.endsWith("_partials")));
  backend.dispose();
});
