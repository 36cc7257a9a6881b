import assert from "node:assert/strict";
import { compile, GraphBuilder, KilnError } from "../../mod.ts";
import { counterValues } from "../../jit/runtime/counters.ts";
import { uniform } from "../../jit/support/random.ts";
import { OptimizingTier, type Swappable } from "./optimizing_tier.ts";
import { WasmBackend } from "./wasm_backend.ts";

/** y = softmax(gelu(x·W)): a matmul, an elementwise kernel with erf and a row kernel. */
function model() {
  const b = new GraphBuilder();
  const w = b.param("w", [64, 48], "f32", uniform(64 * 48, 3));
  const h = b.op("Gelu", [b.op("MatMul", [b.input("x", [32, 64]), w])]);
  b.output("y", b.op("Softmax", [h], { axis: -1 }));
  return b.build();
}

const bitsOf = (t: { data: unknown }) =>
  new Uint32Array(Float32Array.from(t.data as Float32Array).buffer);

Deno.test("wasm tier: a program's modules are swapped for Binaryen's, with the same bits", async () => {
  const x = { data: uniform(32 * 64, 5), shape: [32, 64], dtype: "f32" as const };
  const backend = new WasmBackend({ threads: 1, optimizingTier: { after: 3, level: 3 } });
  await using exe = await compile(model(), { backend, cache: false });
  const want = bitsOf((await exe.run({ x })).y);
  const before = counterValues().kiln_wasm_tier_swaps_total;
  // The modules are asked for at the third run and taken at the first run after they are ready;
  // the pauses let the worker (which loads Binaryen first) get on.
  const until = performance.now() + 60_000;
  while (counterValues().kiln_wasm_tier_swaps_total === before && performance.now() < until) {
    assert.deepEqual(bitsOf((await exe.run({ x })).y), want);
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(counterValues().kiln_wasm_tier_swaps_total > before, "no module was swapped in");
  for (let i = 0; i < 5; i++) assert.deepEqual(bitsOf((await exe.run({ x })).y), want);
});

Deno.test("wasm tier: options out of range are typed errors with a Fix", () => {
  const bad = (options: { after?: number; level?: number }) =>
    assert.throws(
      () => new WasmBackend({ optimizingTier: options }),
      (e) => e instanceof KilnError && e.code === "out-of-range" && /Fix: /.test(e.message),
    );
  bad({ after: 0 });
  bad({ after: 2.5 });
  bad({ level: 7 });
});

Deno.test("wasm tier: a failed optimization stops the tier once, saying why, and runs go on", () => {
  // A tier whose worker reports a failure for every module, as a missing Binaryen would.
  class Failing extends OptimizingTier {
    override request(old: WebAssembly.Module) {
      const shared = new SharedArrayBuffer(64);
      const reason = new TextEncoder().encode("no binaryen here");
      new Uint8Array(shared, 8).set(reason);
      new Int32Array(shared, 0, 2).set([2, reason.length]);
      return { old, shared };
    }
  }
  const tier = new Failing({ after: 1 });
  const module = new WebAssembly.Module(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]));
  const swaps: unknown[] = [];
  const program: Swappable = { replaceModule: (...a) => void swaps.push(a) };
  const warn = console.warn, warned: string[] = [];
  console.warn = (m: string) => void warned.push(m);
  try {
    const one = tier.forProgram(new Map([[module, new Uint8Array(8)]]));
    for (let i = 0; i < 3; i++) one.step(program);
    tier.forProgram(new Map([[module, new Uint8Array(8)]])).step(program);
  } finally {
    console.warn = warn;
  }
  assert.deepEqual(swaps, []);
  assert.equal(tier.failure, "no binaryen here");
  assert.equal(warned.length, 1);
  assert.match(warned[0], /optimizing tier stopped: no binaryen here\. Fix: /);
});
