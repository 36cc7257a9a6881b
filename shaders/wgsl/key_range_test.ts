/**
 * A padding mask over the keys ([B, 1, 1, T] added, as BERT's exports add it) is the same for
 * every query row: the flash kernel decides the key tiles it skips itself, with no summary
 * kernel, and computes those whose skipping would change a bit.
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { assertClose, f32, hashed, numbers } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "../../backends/webgpu/webgpu_backend.ts";
import { withFusedAttention } from "./attention.ts";
import { flashWgsl } from "./flash_kernel.ts";
import type { Flash } from "./flash.ts";

const [batch, heads, tokens, d] = [2, 3, 80, 16];
const shape = [batch, heads, tokens, d];

/**
 * softmax(Q·Kᵀ · 0.25 + mask)·V with mask [B, 1, 1, T] (`added`), or with −∞ selected where a
 * [B, 1, 1, T] bool `keep` is false.
 */
function padded(form: "added" | "selected" = "added"): Graph {
  const b = new GraphBuilder();
  const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, shape));
  const scaled = b.op("Mul", [
    b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 1, 3, 2] })]),
    b.constant(0.25),
  ]);
  const scores = form === "added"
    ? b.op("Add", [scaled, b.input("mask", [batch, 1, 1, tokens])])
    : b.op("Where", [
      b.input("keep", [batch, 1, 1, tokens], "bool"),
      scaled,
      b.constant(-Infinity),
    ]);
  b.output("y", b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]));
  return b.build();
}

const H200 = { maxInvocations: 256, workgroupBytes: 49152, flash: true };

/** Row `key` of head 0 of batch item `item` set to `x`. */
const rowOf = (item: number, key: number, x: number) => (a: number[]) => {
  const from = (item * heads * tokens + key) * d;
  return a.map((y, i) => (i >= from && i < from + d ? x : y));
};

/**
 * `graph` run through the flash kernel and the reference on each case's feeds: the reference's
 * first output of item i NaN as `nans[i]` says, and the flash kernel's outputs the reference's.
 * Returns the kernels each case ran.
 */
async function againstReference(
  graph: Graph,
  cases: readonly [string, Record<string, HostTensor>, readonly boolean[]][],
): Promise<string[][]> {
  const gpu = new WebGpuBackend({ flashAttention: true, profile: true });
  await gpu.prepare();
  using exe = await compile(graph, { backend: gpu, cache: false });
  using reference = await compile(graph, { backend: "reference" });
  const ran: string[][] = [];
  for (const [name, feeds, nans] of cases) {
    const [got, want] = [await exe.run(feeds), await reference.run(feeds)];
    nans.forEach((nan, item) =>
      assert.equal(Number.isNaN(want.y.data[item * heads * tokens * d]), nan, name)
    );
    assertClose(numbers(got.y.data), numbers(want.y.data), {
      atol: 1e-5,
      rtol: 1e-4,
      message: name,
    });
    ran.push(exe.deviceTimes().map((t) => t.kernel));
  }
  gpu.dispose();
  return ran;
}

Deno.test("a padding mask over the keys plans one flash kernel that reads the mask itself", () => {
  const graph = padded();
  const { kernels, fused } = withFusedAttention(fuse(graph).kernels, new Set(), H200);
  assert.deepEqual(kernels.map((k) => k.name), ["attention_0"], "no summary kernel");
  const [flash] = [...fused.values()] as Flash[];
  assert.ok(flash.skip && !flash.skip.summary, "skips tiles without a summary");
  assert.equal(flash.skip.mask.factor, 0.25);
  const wgsl = flashWgsl(flash);
  assert.match(wgsl, /= !masked\(/, "decides from the mask's entries");
  assert.match(wgsl, /value_at\(/, "checks the values behind the mask");
  assert.equal(flash.inputs.length, 4, "q, k, v and the mask, nothing more");
});

Deno.test("a padding mask's key tiles are skipped or computed to the reference's bits", async () => {
  // Key tiles 0-31, 32-63 and 64-79. Item 0 sees keys 0-39 (tile 2 skipped), item 1 keys 33-79
  // (tile 0 skipped).
  const mask = new Float32Array(batch * tokens).map((_, i) => {
    const [item, key] = [Math.floor(i / tokens), i % tokens];
    return (item === 0 ? key >= 40 : key < 33) ? -Infinity : -(key % 7) / 3;
  });
  const n = batch * heads * tokens * d;
  const base = { q: hashed(n, 7), k: hashed(n, 11), v: hashed(n, 13), mask: [...mask] };
  type Data = typeof base;
  const cases: [string, (x: Data) => Data, [boolean, boolean]][] = [
    ["the padding alone", (x) => x, [false, false]],
    // 0 · NaN and 0 · ∞ are NaN: the reference's rows of that head are NaN, so the tile is computed.
    ["a NaN value behind the mask", (x) => ({ ...x, v: rowOf(0, 70, NaN)(x.v) }), [true, false]],
    ["an infinite value behind it", (x) => ({ ...x, v: rowOf(1, 5, Infinity)(x.v) }), [
      false,
      true,
    ]],
    // q·k overflows to ∞ at (item 0, row 0, key 70), and ∞ − ∞ is NaN.
    [
      "a dot past f32 behind the added mask",
      (x) => ({ ...x, q: rowOf(0, 0, 1e30)(x.q), k: rowOf(0, 70, 1e30)(x.k) }),
      [true, false],
    ],
    // No key open to item 1: every row of it is NaN, as the reference's softmax of −∞ alone.
    [
      "an item that sees no key",
      (x) => ({ ...x, mask: x.mask.map((m, i) => (i >= tokens ? -Infinity : m)) }),
      [false, true],
    ],
  ];
  const ran = await againstReference(
    padded(),
    cases.map(([name, make, nans]) => {
      const x = make(base);
      const feeds = {
        q: f32(x.q, shape),
        k: f32(x.k, shape),
        v: f32(x.v, shape),
        mask: f32(x.mask, [batch, 1, 1, tokens]),
      };
      return [name, feeds, nans];
    }),
  );
  ran.forEach((kernels, i) => assert.deepEqual(kernels, ["attention_0"], cases[i][0]));
});

Deno.test("a selected padding mask needs no bound on the dots behind it", async () => {
  // Item 0 sees keys 0-39, item 1 keys 33-79, as above, through a bool `keep`.
  const keep = Uint8Array.from({ length: batch * tokens }, (_, i) => {
    const [item, key] = [Math.floor(i / tokens), i % tokens];
    return +(item === 0 ? key < 40 : key >= 33);
  });
  const graph = padded("selected");
  const { fused } = withFusedAttention(fuse(graph).kernels, new Set(), H200);
  const flash = [...fused.values()].find((f) => "rows" in f) as Flash;
  assert.ok(flash.skip && !flash.skip.summary && flash.skip.mask.factor === undefined);
  assert.doesNotMatch(flashWgsl(flash), /kmax/, "no bound on the keys");
  const n = batch * heads * tokens * d;
  const x = { q: hashed(n, 7), k: hashed(n, 11), v: hashed(n, 13) };
  // A dot past f32 behind the selection changes nothing (−∞ is selected whatever the dot); a NaN
  // value there makes its head's rows NaN.
  const cases: [string, typeof x, boolean][] = [
    ["the padding alone", x, false],
    [
      "a dot past f32 behind it",
      { ...x, q: rowOf(0, 0, 1e30)(x.q), k: rowOf(0, 70, 1e30)(x.k) },
      false,
    ],
    ["a NaN value behind it", { ...x, v: x.v.map((y, i) => (i === 70 * d ? NaN : y)) }, true],
  ];
  const keeps = { data: keep, shape: [batch, 1, 1, tokens], dtype: "bool" as const };
  const ran = await againstReference(
    graph,
    cases.map(([name, data, nan]) => {
      const feeds = {
        q: f32(data.q, shape),
        k: f32(data.k, shape),
        v: f32(data.v, shape),
        keep: keeps,
      };
      return [name, feeds, [nan]];
    }),
  );
  ran.forEach((kernels, i) => assert.ok(kernels.includes("attention_0"), cases[i][0]));
});
