/**
 * Attention on WebGPU: the one-row fused kernel and the tiled flash kernel against the reference.
 *
 * @module
 */
import assert from "node:assert/strict";
import { BackendRegistry, compile, KilnError } from "../../mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { assertClose, f32, hashed, numbers } from "../../jit/testing/testing.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { tiledMatmul } from "../../shaders/wgsl/codegen.ts";
import {
  attentionWgsl,
  fusedAttention,
  MAX_KEYS,
  withFusedAttention,
} from "../../shaders/wgsl/attention.ts";
import { flashWgsl } from "../../shaders/wgsl/flash_kernel.ts";
import { applyPrecision } from "../../jit/passes/precision.ts";
import { attentionGroup } from "../../shaders/wgsl/attention_group.ts";
import { flashAttention, flashPays } from "../../shaders/wgsl/flash.ts";
import { flashMask } from "../../shaders/wgsl/masks.ts";
import { WasmBackend } from "../wasm/wasm_backend.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";

function attention(tokens: number, keep = false, batch = 2): Graph {
  const b = new GraphBuilder();
  const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, [batch, 3, tokens, 16]));
  const scores = b.op("Add", [
    b.op("Div", [
      b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 1, 3, 2] })]),
      b.constant(4),
    ]),
    b.input("mask", [tokens, tokens]),
  ]);
  b.output("y", b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]));
  if (keep) b.output("scores", scores);
  return b.build();
}

Deno.test("attention runs as one fused kernel: scores and weights stay in workgroup memory", async () => {
  const profiled = new WebGpuBackend({ profile: true });
  await profiled.prepare();
  for (const [tokens, keep, batch] of [[10, false, 2], [70, false, 1], [10, true, 2]] as const) {
    const graph = attention(tokens, keep, batch);
    const kernels = fuse(graph).kernels;
    if (!keep) assert.ok(kernels.some((k) => k.group === "attention_0"), `tokens ${tokens}`);
    const n = batch * 3 * tokens * 16;
    const feeds = {
      q: f32(hashed(n, 7), [batch, 3, tokens, 16]),
      k: f32(hashed(n, 11), [batch, 3, tokens, 16]),
      v: f32(hashed(n, 13), [batch, 3, tokens, 16]),
      mask: f32(hashed(tokens * tokens, 17).map((x) => (x > 0.8 ? -Infinity : 0)), [
        tokens,
        tokens,
      ]),
    };
    using exe = await compile(graph, { backend: profiled, cache: false });
    using reference = await compile(graph, { backend: "reference" });
    const [got, want] = [await exe.run(feeds), await reference.run(feeds)];
    for (const name of Object.keys(want)) {
      assertClose(numbers(got[name].data), numbers(want[name].data), { atol: 1e-5, rtol: 1e-4 });
    }
    // Scores that are also an output must be stored: then nothing is fused.
    const names = exe.deviceTimes().map((t) => t.kernel);
    assert.equal(names.includes("attention_0"), !keep, names.join(" "));
  }
  const group = fuse(attention(10)).kernels.filter((k) => k.group === "attention_0");
  assert.ok(fusedAttention(group, new Set()));
  const scores = group[0].outputs[0].value;
  assert.equal(fusedAttention(group, new Set([scores])), undefined, "stored scores stay unfused");
  for (const tokens of [600, MAX_KEYS + 1]) {
    // Products large enough for tiled matmuls run as three kernels: the tiles are faster.
    const long = fuse(attention(tokens)).kernels.filter((k) => k.group === "attention_0");
    assert.ok(tiledMatmul(long[0]), `${tokens} tokens tile`);
    assert.equal(fusedAttention(long, new Set()), undefined, `${tokens} tokens stay unfused`);
  }
  profiled.dispose();
});

Deno.test("attention with a selection mask of bools runs fused, the bools its input", async () => {
  // As exports write `masked_fill(mask == 0, -inf)`: a bool tensor selects −∞ over the scores.
  const tokens = 70, shape = [2, 3, tokens, 16];
  const b = new GraphBuilder();
  const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, shape));
  const scaled = b.op("Mul", [
    b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 1, 3, 2] })]),
    b.constant(0.25),
  ]);
  const keep = b.op("Cast", [b.input("keep", [tokens, tokens])], { to: "bool" });
  const scores = b.op("Where", [keep, scaled, b.constant(-Infinity)]);
  b.output("y", b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]));
  const graph = b.build();
  const kernels = fuse(graph).kernels;
  assert.ok(
    kernels.some((k) => k.group === "attention_0" && k.inputs.some((i) => i.dtype === "bool")),
  );
  const profiled = new WebGpuBackend({ profile: true });
  await profiled.prepare();
  const n = 2 * 3 * tokens * 16;
  const feeds = {
    q: f32(hashed(n, 7), shape),
    k: f32(hashed(n, 11), shape),
    v: f32(hashed(n, 13), shape),
    // Causal, and query 0 sees no key at all: its softmax is NaN.
    keep: f32(
      Array.from(
        { length: tokens * tokens },
        (_, i) => i % tokens <= Math.floor(i / tokens) && i >= tokens ? 1 : 0,
      ),
      [tokens, tokens],
    ),
  };
  using exe = await compile(graph, { backend: profiled, cache: false });
  using reference = await compile(graph, { backend: "reference" });
  const [got, want] = [await exe.run(feeds), await reference.run(feeds)];
  assert.ok(Number.isNaN(want.y.data[0]));
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-5, rtol: 1e-4 });
  // The bools are a kernel of their own; scores, softmax and values one kernel.
  assert.deepEqual(exe.deviceTimes().map((t) => t.kernel), ["elementwise_0", "attention_0"]);
  profiled.dispose();
});

/**
 * Attention over `tokens` keys with `rows` queries, heads `d` wide and values `e` wide; with
 * `transposed` the keys come stored key-minor ([…, d, tokens]) and the values [… e, tokens]; with
 * `mask` an additive mask input.
 */
function flashGraph(
  { tokens, rows = tokens, batch = 2, d = 16, e = d, transposed = false, mask = false }: {
    tokens: number;
    mask?: boolean;
    rows?: number;
    batch?: number;
    d?: number;
    e?: number;
    transposed?: boolean;
  },
): Graph {
  const b = new GraphBuilder();
  const q = b.input("q", [batch, 3, rows, d]);
  const k = transposed
    ? b.input("k", [batch, 3, d, tokens])
    : b.op("Transpose", [b.input("k", [batch, 3, tokens, d])], { perm: [0, 1, 3, 2] });
  const v = transposed
    ? b.op("Transpose", [b.input("v", [batch, 3, e, tokens])], { perm: [0, 1, 3, 2] })
    : b.input("v", [batch, 3, tokens, e]);
  const scaled = b.op("Mul", [b.op("MatMul", [q, k]), b.constant(1 / Math.sqrt(d))]);
  const scores = mask ? b.op("Add", [scaled, b.input("mask", [rows, tokens])]) : scaled;
  b.output("y", b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]));
  return b.build();
}

Deno.test("flash attention: tiles of queries, keys and values, masks, ragged key tiles, fully masked rows", async () => {
  // Keys as the graph lays them (the kernel's own key-minor reads are among the cases).
  const flash = new WebGpuBackend({ profile: true, flashAttention: true, storedKeys: Infinity });
  await flash.prepare();
  const wgsl = {
    maxInvocations: 256,
    workgroupBytes: flash.device!.limits.maxComputeWorkgroupStorageSize,
  };
  const plan = (g: Graph) =>
    flashAttention(
      attentionGroup(fuse(g).kernels.filter((k) => k.group === "attention_0"), new Set())!,
      wgsl,
    );
  // Workgroup memory decides the rows a workgroup takes: 64 of 64-wide heads need 34 KB.
  const wide = attentionGroup(
    fuse(flashGraph({ tokens: 1024, d: 64 })).kernels.filter((k) => k.group === "attention_0"),
    new Set(),
  )!;
  assert.equal(flashAttention(wide, { maxInvocations: 256, workgroupBytes: 49152 })?.rows, 64);
  assert.equal(flashAttention(wide, { maxInvocations: 256, workgroupBytes: 32768 })?.rows, 32);
  assert.equal(flashAttention(wide, { maxInvocations: 256 }), undefined, "16 KB fits no tile");
  assert.equal(plan(flashGraph({ tokens: 1024, d: 80 })), undefined, "heads past 64");
  // By default the flash kernel runs where it was measured faster: heads over 32, 128 keys or more, over 256
  // workgroups of 64 rows or more (here batch · 3 heads · tokens / 64).
  const h200 = { maxInvocations: 256, workgroupBytes: 49152 };
  const group = (g: Graph) => fuse(g).kernels.filter((k) => k.group === "attention_0");
  const fusedAs = (g: Graph, flash?: boolean) => [
    ...withFusedAttention(fuse(g).kernels, new Set(), { ...h200, flash }).fused.values(),
  ];
  const measured = [
    { tokens: 1024, batch: 6, pays: true }, // 288 workgroups
    { tokens: 1024, batch: 5, pays: false }, // 240
    { tokens: 128, batch: 43, pays: true }, // 258
    { tokens: 128, batch: 42, pays: false }, // 252
    { tokens: 1024, batch: 6, d: 32, pays: false }, // 288, but heads of 32 (not measured)
    { tokens: 96, batch: 96, pays: false }, // 432, but 96 keys
  ];
  for (const { tokens, batch, d = 64, pays } of measured) {
    const g = flashGraph({ tokens, batch, d });
    const c = { tokens, batch };
    assert.equal(flashPays(flashAttention(attentionGroup(group(g), new Set())!, h200)!), pays);
    assert.equal(fusedAs(g).some((a) => "rows" in a), pays, JSON.stringify(c));
    assert.ok(fusedAs(g, true).some((a) => "rows" in a), "flash: true runs it anyway");
    assert.ok(!fusedAs(g, false).some((a) => "rows" in a), "flash: false does not");
  }
  // llvmpipe compiles these two 16-row kernels in about 60 s together, and one of 64 rows or
  // 64-wide heads (the H200's shapes, timed by `bench/gpu_kernels.ts`) in 25–45 s: CI runs
  // shapes of 16 rows, which take every branch of the generator.
  const cases = [
    // 656 keys: the last key tile half full; 41 workgroups a head; fully masked rows; heads of
    // 24, a chunk of 16 steps and 8 more.
    { tokens: 656, mask: true, d: 24 },
    // Keys and values stored key-minor, values wider than the heads (two column groups); whole
    // key tiles and value columns, so no fill is clamped and no key masked.
    { tokens: 608, rows: 144, d: 16, e: 64, transposed: true },
  ];
  for (const c of cases) {
    const graph = flashGraph(c);
    const { tokens, rows = tokens, d = 16, e = d, transposed = false } = c;
    const batch = 2;
    assert.ok(plan(graph), JSON.stringify(c));
    // Masked keys, and finite ones rising along the keys and jumping by 100 at key 400: later
    // tiles' weights pass e^8 against the maxima so far, so the kernel retakes the exchange of
    // the rows' maxima (a slow tile) after tiles that skipped it.
    const mask = hashed(rows * tokens, 17).map((x, i) =>
      x > 0.8 ? -Infinity : (i % tokens) / 40 + (i % tokens >= 400 ? 100 : 0)
    );
    mask.fill(-Infinity, 0, tokens); // query 0 sees no key: its softmax is NaN
    const feeds = {
      q: f32(hashed(batch * 3 * rows * d, 7), [batch, 3, rows, d]),
      k: f32(
        hashed(batch * 3 * tokens * d, 11),
        transposed ? [batch, 3, d, tokens] : [batch, 3, tokens, d],
      ),
      v: f32(
        hashed(batch * 3 * tokens * e, 13),
        transposed ? [batch, 3, e, tokens] : [batch, 3, tokens, e],
      ),
      ...(c.mask ? { mask: f32(mask, [rows, tokens]) } : {}),
    };
    using exe = await compile(graph, { backend: flash, cache: false });
    using reference = await compile(graph, { backend: "reference" });
    const [got, want] = [await exe.run(feeds), await reference.run(feeds)];
    assert.equal(Number.isNaN(want.y.data[0]), c.mask ?? false);
    assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-5, rtol: 1e-4 });
    // A mask that can hide tiles brings the summary of them (here none is hidden whole).
    const kernels = c.mask ? ["attention_0_tiles", "attention_0"] : ["attention_0"];
    assert.deepEqual(exe.deviceTimes().map((t) => t.kernel), kernels, JSON.stringify(c));
  }
  flash.dispose();
});

Deno.test("flash attention skips the key tiles a mask hides, and computes those it may not skip", async () => {
  // Scores masked twice over, as exports write masks: an added mask of 0 and −∞, then a selection
  // of −∞ where `keep` is 0. 80 tokens: query tiles of 16 rows, key tiles 0-31, 32-63 and 64-79
  // (a ragged one); under a causal mask query tiles 0-3 (rows 0-63) see none of keys 64-79, and
  // tiles 0-1 none of keys 32-79. The added mask is one for every head (its summary's words are
  // the first head's) or one a head, the third head's anti-causal (rows 64-79 see none of keys
  // 0-63): read with the first head's words, its row 0 would lose keys 32-79.
  const [batch, tokens, d] = [1, 80, 16];
  const shape = [batch, 3, tokens, d];
  const causal = new Float32Array(tokens * tokens).map((_, i) =>
    i % tokens > Math.floor(i / tokens) ? -Infinity : 0
  );
  const anti = causal.map((_, i) => i % tokens < Math.floor(i / tokens) ? -Infinity : 0);
  const flash = new WebGpuBackend({ flashAttention: true, profile: true });
  for (const perHead of [false, true]) {
    const maskShape = perHead ? [1, 3, tokens, tokens] : [tokens, tokens];
    const b = new GraphBuilder();
    const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, shape));
    const scaled = b.op("Mul", [
      b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 1, 3, 2] })]),
      b.constant(0.25),
    ]);
    const added = b.op("Add", [scaled, b.input("mask", maskShape)]);
    const keep = b.op("Cast", [b.input("keep", [tokens, tokens])], { to: "bool" });
    const scores = b.op("Where", [keep, added, b.constant(-Infinity)]);
    b.output("y", b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]));
    const graph = b.build();
    const group = attentionGroup(
      fuse(graph).kernels.filter((k) => k.group === "attention_0"),
      new Set(),
    )!;
    assert.equal(flashMask(group)?.factor, 0.25, "the added mask bounds the dot, scaled by 1/4");
    using exe = await compile(graph, { backend: flash, cache: false });
    using reference = await compile(graph, { backend: "reference" });
    const n = batch * 3 * tokens * d;
    const ones = new Float32Array(tokens * tokens).fill(1);
    const heads = (m: Float32Array, third = m) =>
      perHead ? Float32Array.from([...m, ...m, ...third]) : m;
    const base = {
      q: hashed(n, 7),
      k: hashed(n, 11),
      v: hashed(n, 13),
      mask: heads(causal, anti),
      keep: ones,
    };
    type Data = typeof base;
    // Key 70 of the first head is hidden from rows 0-69: its tile, keys 64-79, from query tiles
    // 0-3 whole.
    const at = (key: number, x: number) => (a: number[]) =>
      a.map((y, i) => (i >= key * d && i < (key + 1) * d ? x : y));
    const selected = {
      mask: heads(new Float32Array(tokens * tokens)),
      keep: causal.map((m) => +(m === 0)),
    };
    const cases: [string, (x: Data) => Data, boolean][] = [
      ["an added causal mask", (x) => x, false],
      ["a selected causal mask", (x) => ({ ...x, ...selected }), false],
      // 0 · NaN and 0 · ∞ are NaN: every row of the head is NaN in the reference, so the tile
      // must be computed for rows 0-63 too.
      ["a NaN value behind the mask", (x) => ({ ...x, v: at(70, NaN)(x.v) }), true],
      ["an infinite value behind the mask", (x) => ({ ...x, v: at(70, Infinity)(x.v) }), true],
      // q·k overflows to ∞ at (row 0, key 70), and ∞ − ∞ is NaN: row 0 is NaN in the reference.
      [
        "a dot past f32 behind the added mask",
        (x) => ({ ...x, q: at(0, 1e30)(x.q), k: at(70, 1e30)(x.k) }),
        true,
      ],
      // Where selects −∞ whatever the dot: the same huge dot changes nothing there.
      [
        "a dot past f32 behind the selection",
        (x) => ({ ...x, q: at(0, 1e30)(x.q), k: at(70, 1e30)(x.k), ...selected }),
        false,
      ],
    ];
    for (const [name, make, nan] of cases) {
      const x = make(base);
      const feeds = {
        q: f32(x.q, shape),
        k: f32(x.k, shape),
        v: f32(x.v, shape),
        mask: f32(x.mask, maskShape),
        keep: f32(x.keep, [tokens, tokens]),
      };
      const [got, want] = [await exe.run(feeds), await reference.run(feeds)];
      const label = `${name}${perHead ? ", a mask a head" : ""}`;
      assert.equal(Number.isNaN(want.y.data[0]), nan, label);
      assertClose(numbers(got.y.data), numbers(want.y.data), {
        atol: 1e-5,
        rtol: 1e-4,
        message: label,
      });
      // The bools of `keep` are a kernel of their own, an input of the group's; the summary runs
      // before the flash kernel.
      assert.deepEqual(
        exe.deviceTimes().map((t) => t.kernel),
        ["elementwise_0", "attention_0_tiles", "attention_0"],
        label,
      );
    }
  }
  flash.dispose();
});

Deno.test("attention past the binding limit runs as flash attention, its kernels kept together", async () => {
  // Scores of 2·3·656·656 floats (10.3 MB) past a 2 MB binding; every other buffer fits.
  const small = new WebGpuBackend({
    profile: true,
    maxStorageBufferBytes: 2 ** 21,
    allowSoftware: true,
  });
  await small.prepare();
  const [tokens, rows, d] = [656, 656, 16];
  const graph = flashGraph({ tokens, mask: true });
  const mask = hashed(rows * tokens, 17).map((x) => (x > 0.8 ? -Infinity : 0));
  const feeds = {
    q: f32(hashed(2 * 3 * rows * d, 7), [2, 3, rows, d]),
    k: f32(hashed(2 * 3 * tokens * d, 11), [2, 3, tokens, d]),
    v: f32(hashed(2 * 3 * tokens * d, 13), [2, 3, tokens, d]),
    mask: f32(mask, [rows, tokens]),
  };
  // Executables go before their backend's device does.
  try {
    using reference = await compile(graph, { backend: "reference" });
    const want = await reference.run(feeds);
    // Named: the three kernels would not fit; the flash kernel does.
    using named = await compile(graph, { backend: small, cache: false });
    assertClose(numbers((await named.run(feeds)).y.data), numbers(want.y.data), {
      atol: 1e-5,
      rtol: 1e-4,
    });
    // With the summary of the tiles its mask hides (its 21 KB fit too).
    assert.deepEqual(named.deviceTimes().map((t) => t.kernel), [
      "attention_0_tiles",
      "attention_0",
    ]);
    // Under auto the group stays whole, wherever it goes.
    const registry = new BackendRegistry().register(small).register(
      new WasmBackend({ threads: 1 }),
    );
    using auto = await compile(graph, { registry, cache: false });
    const group = fuse(graph).kernels.flatMap((k, i) => (k.group === "attention_0" ? [i] : []));
    const places = new Set(group.map((i) => auto.plan!.schedule.placement[i]));
    assert.equal(places.size, 1, [...places].join(" "));
    assertClose(numbers((await auto.run(feeds)).y.data), numbers(want.y.data), {
      atol: 1e-5,
      rtol: 1e-4,
    });
    // Stored scores cannot be elided: then the group is too large for this device.
    const keep = new GraphBuilder();
    const [q, k] = ["q", "k"].map((n) => keep.input(n, [2, 3, tokens, d]));
    keep.output("s", keep.op("MatMul", [q, keep.op("Transpose", [k], { perm: [0, 1, 3, 2] })]));
    await assert.rejects(
      compile(keep.build(), { backend: small, cache: false }),
      (e: unknown) => e instanceof KilnError && /largest binding/.test(e.message),
    );
  } finally {
    small.dispose();
  }
});

Deno.test("attention under precision f16 runs as one kernel, fused and flash, its buffers f16", async () => {
  // q, k, v f32 at the caller's boundary, cast to f16 by kernels of their own; the group reads f16.
  const graph = flashGraph({ tokens: 64, rows: 32, mask: true });
  const { graph: half } = applyPrecision(graph, "f16");
  const members = fuse(half).kernels.filter((k) => k.group === "attention_0");
  const group = attentionGroup(members, new Set())!;
  assert.ok(group && group.inputs.some((b) => b.dtype === "f16"));
  // A device with shader-f16 binds them as 16-bit words.
  const h200 = { maxInvocations: 256, workgroupBytes: 49152, half: true };
  const flash = flashAttention(group, h200)!;
  for (const wgsl of [flashWgsl(flash, h200), attentionWgsl(group, h200)]) {
    assert.match(wgsl, /^enable f16;$/m);
    assert.match(wgsl, /var<storage, read> in0: array<f16>;/);
  }
  assert.doesNotMatch(flashWgsl(flash, { ...h200, half: false }), /enable f16|array<f16>/);
  const feeds = {
    q: f32(hashed(2 * 3 * 32 * 16, 7), [2, 3, 32, 16]),
    k: f32(hashed(2 * 3 * 64 * 16, 11), [2, 3, 64, 16]),
    v: f32(hashed(2 * 3 * 64 * 16, 13), [2, 3, 64, 16]),
    mask: f32(hashed(32 * 64, 17).map((x) => (x > 0.8 ? -Infinity : x)), [32, 64]),
  };
  using reference = await compile(graph, { backend: "reference", precision: "f16" });
  const want = await reference.run(feeds);
  for (const flashAttention of [false, true]) {
    const gpu = new WebGpuBackend({ profile: true, flashAttention });
    using exe = await compile(graph, { backend: gpu, cache: false, precision: "f16" });
    const got = await exe.run(feeds);
    // The group keeps scores and weights in f32 where the reference rounds them to f16.
    assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 2e-3, rtol: 4e-3 });
    const names = exe.deviceTimes().map((t) => t.kernel);
    assert.ok(names.includes("attention_0") && !names.some((n) => /softmax/.test(n)), `${names}`);
    gpu.dispose();
  }
});

Deno.test("keys read through a transposing view are stored by head first where they are many, and the result is unchanged", async () => {
  // Q, K and V as projections write them, [batch, tokens, heads · size], split into heads by views.
  const graph = (tokens: number, h = 4) => {
    const b = new GraphBuilder();
    const heads = (name: string) =>
      b.op("Transpose", [b.op("Reshape", [b.input(name, [1, tokens, h * 16])], {
        shape: [1, tokens, h, 16],
      })], { perm: [0, 2, 1, 3] });
    const [q, k, v] = ["q", "k", "v"].map(heads);
    const scores = b.op("Mul", [
      b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 1, 3, 2] })]),
      b.constant(0.25),
    ]);
    b.output("y", b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]));
    return b.build();
  };
  const stores = (tokens: number, keysFrom: number) =>
    fuse(graph(tokens), { keysFrom }).log.some((l) => l.includes("reads it across its columns"));
  assert.ok(stores(64, 4096), "4 heads × 16 × 64 keys from 4096: stored by head");
  assert.ok(!stores(64, Infinity), "never unless asked");
  assert.ok(!stores(8, 4096), "a few keys stay a view");
  // The WebGPU profile asks for it from 2^16 elements: 4 heads × 16 × 1024 tokens.
  const gpu = new WebGpuBackend();
  await gpu.prepare();
  const tokens = 1024, n = tokens * 64;
  const feeds = Object.fromEntries(
    ["q", "k", "v"].map((
      name,
      i,
    ) => [name, f32(hashed(n, i + 1).map((x) => x / 4), [1, tokens, 64])]),
  );
  const want = await (await compile(graph(tokens), { backend: "reference", cache: false })).run(
    feeds,
  );
  using exe = await compile(graph(tokens), { backend: gpu, cache: false });
  assert.ok(
    exe.plan!.kernels.some((k) => k.pattern === "elementwise"),
    "the keys' copy is a kernel of its own",
  );
  const got = await exe.run(feeds);
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-4, rtol: 1e-4 });
  // Under auto a software GPU runs nothing, and asks for nothing: the CPU path keeps its views.
  if (gpu.capabilities().software) {
    using auto = await compile(graph(tokens, 16), { cache: false });
    assert.ok(!auto.plan!.kernels.some((k) => k.pattern === "elementwise"), "auto on the CPU");
  }
  gpu.dispose();
});
