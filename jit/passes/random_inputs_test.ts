import assert from "node:assert/strict";
import { compile, GraphBuilder, KilnError } from "../../mod.ts";
import type { TensorData } from "../ir/dtype.ts";
import { assertClose, numbers } from "../testing/testing.ts";

const N = 20000;
const stats = (d: TensorData) => {
  const a = Array.from(d as Float32Array);
  const mean = a.reduce((s, v) => s + v, 0) / a.length;
  const sd = Math.sqrt(a.reduce((s, v) => s + (v - mean) ** 2, 0) / a.length);
  return { mean, sd, min: Math.min(...a), max: Math.max(...a) };
};

/** Uniform [-1, 3), normal (2, 0.5) and Bernoulli(p) draws, seeded or not. */
function draws(seeded: boolean) {
  const b = new GraphBuilder();
  const p = b.input("p", [N]);
  const seed = seeded ? { seed: 5 } : {};
  b.output("u", b.op("RandomUniform", [], { shape: [N], low: -1, high: 3, ...seed }));
  b.output("n", b.op("RandomNormal", [], { shape: [N], mean: 2, scale: 0.5, ...seed }));
  const coin = b.op("Less", [b.op("RandomUniform", [], { shape: [N], ...seed }), p]);
  b.output("bern", b.op("Cast", [coin], { to: "f32" }));
  return b.build();
}
const feeds = { p: { data: new Float32Array(N).fill(0.3), shape: [N], dtype: "f32" as const } };

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: random ops draw per run with the distributions asked for`, async () => {
    const exe = await compile(draws(true), { backend, cache: false });
    assert.deepEqual(exe.inputNames, ["p"], "drawn inputs are the executable's own");
    const first = await exe.run(feeds), second = await exe.run(feeds);
    const u = stats(first.u.data), n = stats(first.n.data), bern = stats(first.bern.data);
    assert.ok(u.min >= -1 && u.max < 3 && Math.abs(u.mean - 1) < 0.03, JSON.stringify(u));
    assert.ok(Math.abs(u.sd - 4 / Math.sqrt(12)) < 0.03, JSON.stringify(u));
    assert.ok(Math.abs(n.mean - 2) < 0.02 && Math.abs(n.sd - 0.5) < 0.02, JSON.stringify(n));
    assert.ok(Math.abs(bern.mean - 0.3) < 0.02, JSON.stringify(bern));
    assert.notDeepEqual(first.u.data, second.u.data, "each run draws anew");
    // A seed fixes the sequence: another executable of the graph (on any backend) repeats it.
    const again = await compile(draws(true), { backend: "reference", cache: false });
    assert.deepEqual((await again.run(feeds)).u.data, first.u.data);
    // The normal transform's log and cos round as each backend rounds them.
    assertClose(numbers((await again.run(feeds)).n.data), numbers(second.n.data), { atol: 1e-5 });
    // Without one, executables draw apart.
    const [a, b] = await Promise.all([0, 1].map(() => compile(draws(false), { backend })));
    assert.notDeepEqual((await a.run(feeds)).u.data, (await b.run(feeds)).u.data);
    for (const e of [exe, again, a, b]) e.dispose();
  });
}

Deno.test("random draws fuse with what consumes them, and bad attributes are typed errors", async () => {
  const exe = await compile(draws(true), { backend: "wasm", cache: false });
  // The normal transform and the Bernoulli comparison read the drawn inputs inside kernels.
  assert.ok(exe.plan!.kernels.length <= 2, `${exe.plan!.kernels.length} kernels`);
  const bad = new GraphBuilder();
  assert.throws(
    () => {
      bad.output("u", bad.op("RandomUniform", [], { shape: [2], low: 1, high: 0 }));
      bad.build();
    },
    (e) => e instanceof KilnError && /low ≤ high/.test(e.message) && /Fix:/.test(e.message),
  );
});

Deno.test("a seeded draw is numpy's np.random.seed(seed) stream, as ONNX's reference draws", async () => {
  const { mt19937 } = await import("../support/random.ts");
  // numpy: np.random.seed(0); np.random.random_sample(3) and np.random.seed(42); random_sample().
  const zero = mt19937(0);
  assert.deepEqual([zero(), zero(), zero()], [
    0.5488135039273248,
    0.7151893663724195,
    0.6027633760716439,
  ]);
  assert.equal(mt19937(42)(), 0.3745401188473625);
  const b = new GraphBuilder();
  b.output("u", b.op("RandomUniform", [], { shape: [2], seed: 0 }));
  using exe = await compile(b.build(), { backend: "wasm", cache: false });
  const { u } = await exe.run({});
  assert.deepEqual(
    Array.from(u.data as Float32Array),
    [0.5488135039273248, 0.7151893663724195].map(Math.fround),
  );
});
