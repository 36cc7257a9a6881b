import assert from "node:assert/strict";
import { compile, type DeviceTensor, GraphBuilder, KilnError, WasmBackend } from "../../mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { inPlaceKernels } from "../../jit/schedule/in_place.ts";
import { arenaLayout } from "./arena_layout.ts";

const [HEADS, SLOTS, WIDTH] = [2, 8, 6];

/**
 * A cache as GroupQueryAttention's shared buffer keeps it: `present` is `past` with the new entry
 * at slot `valid` and zeros after, and `total` reads the present (as attention does).
 */
function cacheGraph() {
  const b = new GraphBuilder();
  const past = b.input("past", [1, HEADS, SLOTS, WIDTH]);
  const fresh = b.input("fresh", [1, HEADS, 1, WIDTH]);
  const valid = b.input("valid", [1], "i32");
  const slots = b.constant(
    Int32Array.from({ length: SLOTS }, (_, j) => j),
    [1, 1, SLOTS, 1],
    "i32",
  );
  const at = b.op("Reshape", [valid], { shape: [1, 1, 1, 1] });
  const wide = b.op("Expand", [fresh], { shape: [1, HEADS, SLOTS, WIDTH] });
  const next = b.op("Add", [at, b.constant(1, [], "i32")]);
  const tail = b.op("Where", [b.op("Less", [slots, next]), wide, b.constant(0)]);
  const present = b.op("Where", [b.op("Less", [slots, at]), past, tail]);
  b.output("present", present);
  b.output("total", b.op("ReduceSum", [present], { keepdims: 0 }));
  return b.build();
}

/** The entry step `t` writes: distinct values a head and a channel. */
const entry = (t: number) => ({
  data: Float32Array.from({ length: HEADS * WIDTH }, (_, i) => 100 * (t + 1) + i),
  shape: [1, HEADS, 1, WIDTH],
  dtype: "f32" as const,
});

/** The cache after `steps` entries. */
function expected(steps: number): number[] {
  const out = new Array(HEADS * SLOTS * WIDTH).fill(0);
  for (let t = 0; t < steps; t++) {
    for (let h = 0; h < HEADS; h++) {
      for (let c = 0; c < WIDTH; c++) {
        out[(h * SLOTS + t) * WIDTH + c] = 100 * (t + 1) + h * WIDTH + c;
      }
    }
  }
  return out;
}

const zeros = () => ({
  data: new Float32Array(HEADS * SLOTS * WIDTH),
  shape: [1, HEADS, SLOTS, WIDTH],
  dtype: "f32" as const,
});
const valid = (t: number) => ({ data: Int32Array.of(t), shape: [1], dtype: "i32" as const });

for (const threads of [1, 2]) {
  Deno.test(`a donated cache is written in place, one entry a step, on ${threads} thread(s)`, async () => {
    using exe = await compile(cacheGraph(), {
      backend: new WasmBackend({ threads }),
      cache: false,
      donate: ["past"],
    });
    const marked = exe.plan!.kernels.filter((k) => k.inPlace);
    assert.equal(marked.length, 1, "the present's kernel may store over the past");
    let past: DeviceTensor | undefined;
    for (let t = 0; t < SLOTS; t++) {
      const out = await exe.runOnDevice({
        past: past ?? zeros(),
        fresh: entry(t),
        valid: valid(t),
      });
      if (past) assert.ok(past.disposed, "the run took the donated tensor");
      past = out.present;
      const cache = Array.from((await past.read()).data as Float32Array);
      assert.deepEqual(cache, expected(t + 1), `step ${t}`);
      const sum = expected(t + 1).reduce((a, b) => a + b, 0);
      assert.equal(((await out.total.read()).data as Float32Array)[0], sum);
      out.total.dispose();
    }
    past!.dispose();
  });
}

Deno.test("a donated input given as a host array is read, never written; a fresh past restarts", async () => {
  using exe = await compile(cacheGraph(), { backend: "wasm", cache: false, donate: ["past"] });
  const host = zeros();
  const first = await exe.runOnDevice({ past: host, fresh: entry(0), valid: valid(0) });
  assert.deepEqual(Array.from(host.data), new Array(host.data.length).fill(0));
  const second = await exe.runOnDevice({ past: first.present, fresh: entry(1), valid: valid(1) });
  assert.ok(first.present.disposed);
  // A kept tensor of another run fed as a host copy: the values it had, not the cache after.
  const again = await exe.run({ past: host, fresh: entry(0), valid: valid(0) });
  assert.deepEqual(Array.from(again.present.data as Float32Array), expected(1));
  assert.deepEqual(Array.from((await second.present.read()).data as Float32Array), expected(2));
  second.present.dispose();
  first.total.dispose();
  second.total.dispose();
});

Deno.test("without donate the same graph copies its cache and leaves the past's tensor alone", async () => {
  using exe = await compile(cacheGraph(), { backend: "wasm", cache: false });
  assert.ok(exe.plan!.kernels.every((k) => !k.inPlace));
  const first = await exe.runOnDevice({ past: zeros(), fresh: entry(0), valid: valid(0) });
  const second = await exe.runOnDevice({ past: first.present, fresh: entry(1), valid: valid(1) });
  assert.ok(!first.present.disposed);
  assert.deepEqual(Array.from((await first.present.read()).data as Float32Array), expected(1));
  assert.deepEqual(Array.from((await second.present.read()).data as Float32Array), expected(2));
  for (const t of [first.present, first.total, second.present, second.total]) t.dispose();
});

Deno.test("donate names inputs, not state ones; a donated device tensor feeds one run", async () => {
  const graph = cacheGraph();
  for (const donate of [["nope"], "past"]) {
    await assert.rejects(
      () => compile(graph, { backend: "wasm", cache: false, donate: donate as string[] }),
      (e: unknown) => e instanceof KilnError && e.code === "bad-input" && /Fix:/.test(e.message),
    );
  }
  await assert.rejects(
    () => compile(graph, { backend: "wasm", donate: ["past"], state: { present: "past" } }),
    (e: unknown) => e instanceof KilnError && /state binding/.test(e.message),
  );
  using exe = await compile(graph, { backend: "wasm", cache: false, donate: ["past"] });
  const first = await exe.runOnDevice({ past: zeros(), fresh: entry(0), valid: valid(0) });
  assert.throws(
    () => exe.runOnDevice({ past: first.present, fresh: entry(1), valid: valid(1) }, { repeat: 2 }),
    (e: unknown) => e instanceof KilnError && e.code === "bad-input" && /one run/.test(e.message),
  );
  assert.ok(!first.present.disposed, "a refused run takes nothing");
  first.present.dispose();
  first.total.dispose();
});

Deno.test("the arena places an output stored over an argument at the argument's place, not a param's", () => {
  const graph = cacheGraph();
  const { kernels: fused, constants } = fuse(graph);
  const [past] = graph.inputs, present = graph.outputs[0].value;
  const kernels = inPlaceKernels(fused, new Set([past.value]), new Set([present]));
  const plain = new WebAssembly.Module(Uint8Array.of(0, 0x61, 0x73, 0x6d, 1, 0, 0, 0));
  const layout = (resident: boolean) =>
    arenaLayout({
      bindings: graph.inputs.map((i) => ({ value: i.value, resident: resident && i === past })),
      outputs: graph.outputs.map((o) => o.value),
      kernels,
      modules: kernels.map(() => plain),
      constants,
    });
  const shared = layout(false);
  assert.equal(shared.offsets.get(present), shared.offsets.get(past.value));
  assert.deepEqual([...shared.inPlace], [[present, past.value]]);
  const kept = layout(true);
  assert.notEqual(
    kept.offsets.get(present),
    kept.offsets.get(past.value),
    "a param keeps its data",
  );
  assert.equal(kept.inPlace.size, 0);
});

Deno.test("caches whose entries are gathered, by slot (PyTorch's layout) or by element, are written in place", async () => {
  // The next past as the step model writes it for an appended cache: kept slots as they lie, the
  // others gathered from the new entries by `slots` (a data-dependent index: no affine walk).
  const b = new GraphBuilder();
  const past = b.input("past", [1, HEADS, SLOTS, WIDTH]);
  const fresh = b.input("fresh", [1, HEADS, 1, WIDTH]);
  const kept = b.input("kept", [1, 1, SLOTS, 1], "bool");
  const slots = b.input("slots", [SLOTS], "i32");
  const picked = b.op("Gather", [fresh, slots], { axis: 2 });
  b.output("present", b.op("Where", [kept, past, picked]));
  // The same entries read element by element through a full index: no segment walks it either.
  const table = b.op("Reshape", [fresh], { shape: [HEADS * WIDTH] });
  const at = b.input("at", [1, HEADS, SLOTS, WIDTH], "i32");
  b.output(
    "other",
    b.op("Where", [
      kept,
      b.input("more", [1, HEADS, SLOTS, WIDTH]),
      b.op("Gather", [table, at], { axis: 0 }),
    ]),
  );
  const index = Int32Array.from(
    { length: HEADS * SLOTS * WIDTH },
    (_, i) => Math.floor(i / (SLOTS * WIDTH)) * WIDTH + (i % WIDTH),
  );
  for (const threads of [1, 2]) {
    using exe = await compile(b.build(), {
      backend: new WasmBackend({ threads }),
      cache: false,
      donate: ["past", "more"],
    });
    assert.equal(exe.plan!.kernels.flatMap((k) => k.inPlace ?? []).length, 2);
    let cache: DeviceTensor | undefined, more: DeviceTensor | undefined;
    for (let t = 0; t < SLOTS; t++) {
      const keep = Uint8Array.from({ length: SLOTS }, (_, j) => (j === t ? 0 : 1));
      const out = await exe.runOnDevice({
        past: cache ?? zeros(),
        more: more ?? zeros(),
        fresh: entry(t),
        kept: { data: keep, shape: [1, 1, SLOTS, 1], dtype: "bool" },
        slots: { data: new Int32Array(SLOTS), shape: [SLOTS], dtype: "i32" },
        at: { data: index, shape: [1, HEADS, SLOTS, WIDTH], dtype: "i32" },
      });
      more = out.other;
      assert.deepEqual(Array.from((await more.read()).data as Float32Array), expected(t + 1));
      cache = out.present;
      const got = Array.from((await cache.read()).data as Float32Array);
      assert.deepEqual(got, expected(t + 1), `${threads} thread(s), step ${t}`);
    }
    cache!.dispose();
    more!.dispose();
  }
});
