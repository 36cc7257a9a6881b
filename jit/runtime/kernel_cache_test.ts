import assert from "node:assert/strict";
import type { Artifact, Backend, DeviceProfile, KernelCodegen } from "./backend.ts";
import { compile, ReferenceBackend } from "../../mod.ts";
import { Graph } from "../ir/graph.ts";
import { fuse } from "../passes/fuse.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import { defaultKernelCache, KernelCache, kernelCacheOf } from "./kernel_cache.ts";
import { KilnError } from "../support/errors.ts";
import { digest } from "../ir/digest.ts";

/** A reference backend that counts code generation. */
class Counting extends ReferenceBackend {
  generated = 0;
  #inner = new ReferenceBackend().codegen;
  override readonly codegen: KernelCodegen = {
    format: "counting-1",
    generate: (k: KernelIR): Artifact | Promise<Artifact> => {
      this.generated++;
      return this.#inner.generate(k);
    },
    load: (k: KernelIR, a: Artifact) => this.#inner.load(k, a),
  };
}

function kernelsOf(n: number): KernelIR[] {
  return [...Array(n).keys()].map((i) => {
    const b = new GraphBuilder();
    b.output("y", b.op("Add", [b.input("x", [i + 1]), b.constant(i)]));
    return fuse(b.build()).kernels[0];
  });
}

Deno.test("memory tier: hits, LRU eviction by entries and bytes", async () => {
  const backend = new Counting();
  const cache = new KernelCache({ dir: false, maxEntries: 3 });
  const ks = kernelsOf(5);
  for (const k of ks) assert.equal((await cache.artifact(k, backend)).source, "generated");
  assert.equal(cache.stats().entries, 3);
  assert.equal(cache.stats().evictions, 2);
  assert.equal((await cache.artifact(ks[4], backend)).source, "memory");
  assert.equal((await cache.artifact(ks[0], backend)).source, "generated");
  const tiny = new KernelCache({ dir: false, maxBytes: 1 });
  for (const k of ks) await tiny.artifact(k, backend);
  assert.equal(tiny.stats().entries, 1);
});

Deno.test("disk tier: a fresh cache (a second process) loads instead of generating", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const backend = new Counting();
    const ks = kernelsOf(3);
    const first = new KernelCache({ dir });
    for (const k of ks) await first.artifact(k, backend);
    assert.equal(backend.generated, 3);
    const second = new KernelCache({ dir });
    for (const k of ks) assert.equal((await second.artifact(k, backend)).source, "disk");
    assert.equal(backend.generated, 3);
    assert.deepEqual([second.stats().diskHits, second.stats().misses], [3, 0]);
    // A record whose canonical text differs (a digest collision, or tampering) is not trusted.
    for await (const e of Deno.readDir(dir)) {
      const path = `${dir}/${e.name}`;
      const record = JSON.parse(await Deno.readTextFile(path));
      await Deno.writeTextFile(path, JSON.stringify({ ...record, text: record.text + " " }));
    }
    const third = new KernelCache({ dir });
    assert.equal((await third.artifact(ks[0], backend)).source, "generated");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** A device whose readback, measured as each process prepares it, took `ms`. */
class Measured extends Counting {
  constructor(readonly ms: number) {
    super();
  }
  override capabilities(): DeviceProfile {
    return { ...super.capabilities(), readbackMs: this.ms };
  }
}

Deno.test("requests for a kernel in flight wait for it: one generation, one disk read", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const backend = new Counting();
    const [k] = kernelsOf(1);
    // A compile asks for every kernel at once; a repeated block asks for the same one again.
    const cold = new KernelCache({ dir });
    const first = await Promise.all([1, 2, 3].map(() => cold.artifact(k, backend)));
    assert.equal(backend.generated, 1);
    assert.deepEqual(first.map((r) => r.source), ["generated", "memory", "memory"]);
    assert.deepEqual(new Set(first.map((r) => r.artifact)).size, 1);
    const warm = new KernelCache({ dir });
    const again = await Promise.all([1, 2, 3].map(() => warm.artifact(k, backend)));
    assert.deepEqual(again.map((r) => r.source), ["disk", "memory", "memory"]);
    assert.deepEqual([warm.stats().diskHits, warm.stats().hits, backend.generated], [1, 2, 1]);
    // A refresh is never served by the request it replaces.
    const fresh = await Promise.all([
      warm.artifact(k, backend),
      warm.artifact(k, backend, { refresh: true }),
    ]);
    assert.deepEqual(fresh.map((r) => r.source), ["memory", "generated"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a device's readback, measured anew in each process, does not key its cached code", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const [k] = kernelsOf(1);
    await new KernelCache({ dir }).artifact(k, new Measured(11.2));
    assert.equal((await new KernelCache({ dir }).artifact(k, new Measured(12.9))).source, "disk");
    // What the device can do still keys it: another profile generates its own code.
    const other = new (class extends Measured {
      override capabilities(): DeviceProfile {
        return { ...super.capabilities(), f16: !super.capabilities().f16 };
      }
    })(11.2);
    assert.equal((await new KernelCache({ dir }).artifact(k, other)).source, "generated");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an unwritable disk tier never fails a compile", async () => {
  const file = await Deno.makeTempFile();
  try {
    const cache = new KernelCache({ dir: `${file}/not-a-dir` });
    const backend = new Counting();
    for (const k of kernelsOf(4)) {
      assert.equal((await cache.artifact(k, backend)).source, "generated");
    }
    assert.ok(cache.stats().diskErrors >= 3);
    assert.equal(cache.dir, false);
  } finally {
    await Deno.remove(file);
  }
});

Deno.test("an isomorphic graph built in another order hits the kernel cache", async () => {
  const cache = new KernelCache({ dir: false });
  const backend: Backend = new Counting();
  const a = Graph.create({
    inputs: [{ name: "x", shape: [4, 8], dtype: "f32" }],
    nodes: [
      { op: "Exp", inputs: ["x"], outputs: ["e"] },
      { op: "Softmax", inputs: ["e"], outputs: ["s"] },
      { op: "Neg", inputs: ["s"], outputs: ["y"] },
    ],
    outputs: [{ name: "y", value: "y" }],
  });
  const b = Graph.create({
    inputs: [{ name: "input", shape: [4, 8], dtype: "f32" }],
    nodes: [
      { op: "Neg", inputs: ["t1"], outputs: ["out"] },
      { op: "Softmax", inputs: ["t0"], outputs: ["t1"] },
      { op: "Exp", inputs: ["input"], outputs: ["t0"] },
    ],
    outputs: [{ name: "out", value: "out" }],
  });
  assert.equal(a.hash(), b.hash());
  await compile(a, { backend, cache });
  const before = cache.stats();
  const exe = await compile(b, { backend, cache });
  assert.equal(cache.stats().misses, before.misses);
  assert.equal(cache.stats().hits, before.hits + exe.plan!.kernels.length);
});

/** A three-kernel graph and its input. */
function mlp() {
  const b = new GraphBuilder();
  const x = b.input("x", [4, 8]);
  const w = b.param("w", [8, 8], "f32", Float32Array.from({ length: 64 }, (_, i) => (i % 7) / 7));
  const h = b.op("Relu", [b.op("MatMul", [x, w])]);
  b.output("y", b.op("Softmax", [b.op("MatMul", [h, w])], { axis: -1 }));
  b.output("s", b.op("ReduceSum", [b.op("Exp", [x])], { axes: [1] }));
  const feeds = {
    x: {
      data: Float32Array.from({ length: 32 }, (_, i) => i / 16 - 1),
      shape: [4, 8],
      dtype: "f32" as const,
    },
  };
  return { graph: b.build(), feeds };
}

Deno.test("damaged disk entries are removed and regenerated, never trusted, never a hang", async () => {
  const dir = await Deno.makeTempDir();
  const warn = console.warn;
  const warnings: string[] = [];
  console.warn = (m: string) => warnings.push(m);
  try {
    const { graph, feeds } = mlp();
    const run = async () => {
      const cache = new KernelCache({ dir });
      const exe = await compile(graph, { backend: "wasm", cache });
      const out = await exe.run(feeds);
      exe.dispose();
      return { out, stats: cache.stats() };
    };
    const want = (await run()).out;
    const files = async () => {
      const names: string[] = [];
      for await (const e of Deno.readDir(dir)) {
        if (e.name.endsWith(".json")) names.push(`${dir}/${e.name}`);
      }
      return names.sort();
    };
    const damages: [string, (paths: string[]) => Promise<void>][] = [
      ["swapped", async ([a, b]) => {
        const [ta, tb] = [await Deno.readTextFile(a), await Deno.readTextFile(b)];
        await Deno.writeTextFile(a, tb);
        await Deno.writeTextFile(b, ta);
      }],
      ["truncated", async ([a]) => {
        const t = await Deno.readTextFile(a);
        await Deno.writeTextFile(a, t.slice(0, t.length >> 1));
      }],
      ["bit-flipped", async ([a]) => {
        const bytes = await Deno.readFile(a);
        const at = bytes.length - 40; // inside the base64 artifact
        bytes[at] = bytes[at] === 65 ? 66 : 65;
        await Deno.writeFile(a, bytes);
      }],
      ["a directory", async ([a]) => {
        await Deno.remove(a);
        await Deno.mkdir(a);
      }],
      ["a FIFO", async ([a]) => {
        await Deno.remove(a);
        const made = await new Deno.Command("mkfifo", { args: [a] }).output().catch(() =>
          undefined
        );
        if (!made?.success) await Deno.mkdir(a);
      }],
      ["a link", async ([a, b]) => {
        await Deno.remove(a);
        await Deno.symlink(b, a);
      }],
    ];
    for (const [what, damage] of damages) {
      await damage(await files());
      warnings.length = 0;
      const { out, stats } = await run();
      assert.ok(stats.rejected >= 1, `${what}: rejected ${stats.rejected}`);
      assert.ok(warnings.some((w) => /damaged kernel cache entry/.test(w)), what);
      for (const name of ["y", "s"]) assert.deepEqual(out[name].data, want[name].data, what);
      // The damaged entry was rewritten: the next process reads everything from disk again.
      const again = await run();
      assert.equal(again.stats.rejected, 0, `${what}: rewritten`);
      assert.equal(again.stats.misses, 0, `${what}: all from disk`);
    }
  } finally {
    console.warn = warn;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("notes beside the kernels: a FIFO, a directory or an oversized note is skipped, never a hang", async () => {
  const dir = await Deno.makeTempDir();
  const warn = console.warn;
  console.warn = () => {};
  try {
    const cache = new KernelCache({ dir });
    await cache.writeNote("n", "threads 2");
    assert.equal(await cache.readNote("n"), "threads 2");
    await Deno.remove(`${dir}/n`);
    const fifo = await new Deno.Command("mkfifo", { args: [`${dir}/n`] }).output().catch(() =>
      undefined
    );
    if (!fifo?.success) await Deno.mkdir(`${dir}/n`);
    assert.equal(await cache.readNote("n"), undefined);
    await Deno.writeTextFile(`${dir}/big`, "x".repeat(1 << 20));
    assert.equal(await cache.readNote("big"), undefined);
    // Both were removed, so the next write lands as a regular file again.
    await cache.writeNote("n", "alone 2");
    assert.equal(await cache.readNote("n"), "alone 2");
    const left = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
    assert.deepEqual(left, ["n"]);
    // A compile whose stored thread verdict is a FIFO still compiles and runs.
    const { graph, feeds } = mlp();
    const first = await compile(graph, { backend: "wasm", cache: new KernelCache({ dir }) });
    await first.run(feeds);
    first.dispose();
    for (const e of Deno.readDirSync(dir)) {
      if (!e.name.startsWith("tuning-")) continue;
      await Deno.remove(`${dir}/${e.name}`);
      await new Deno.Command("mkfifo", { args: [`${dir}/${e.name}`] }).output().catch(() => {});
    }
    const exe = await compile(graph, { backend: "wasm", cache: new KernelCache({ dir }) });
    await exe.run(feeds);
    exe.dispose();
  } finally {
    console.warn = warn;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a verified cached artifact that fails to load is regenerated", async () => {
  const dir = await Deno.makeTempDir();
  const warn = console.warn;
  console.warn = () => {};
  try {
    const { graph, feeds } = mlp();
    const exe = await compile(graph, { backend: "wasm", cache: new KernelCache({ dir }) });
    const want = await exe.run(feeds);
    exe.dispose();
    // A record that passes every check but holds a module the engine refuses.
    for await (const e of Deno.readDir(dir)) {
      if (!e.name.endsWith(".json")) continue;
      const path = `${dir}/${e.name}`;
      const record = JSON.parse(await Deno.readTextFile(path));
      const artifact = btoa("\0asm not really");
      await Deno.writeTextFile(
        path,
        JSON.stringify({ ...record, artifact, digest: digest(artifact) }),
      );
    }
    const cache = new KernelCache({ dir });
    const again = await compile(graph, { backend: "wasm", cache });
    assert.deepEqual((await again.run(feeds)).y.data, want.y.data);
    again.dispose();
    assert.ok(cache.stats().diskHits >= 1 && cache.stats().misses >= 1);
  } finally {
    console.warn = warn;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a compile's cache option is a KernelCache, true or false; anything else is a KilnError", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Relu", [b.input("x", [4])]));
  const graph = b.build();
  const x = { data: new Float32Array([1, -1, 2, -2]), shape: [4], dtype: "f32" as const };
  // `true` is the process-wide cache, as leaving it out is; a cache given is used.
  assert.equal(kernelCacheOf(true), defaultKernelCache());
  assert.equal(kernelCacheOf(undefined), defaultKernelCache());
  assert.equal(kernelCacheOf(false), false);
  const own = new KernelCache({ dir: false });
  assert.equal(kernelCacheOf(own), own);
  for (const cache of [true, false, own]) {
    using exe = await compile(graph, { backend: "wasm", cache });
    assert.deepEqual(Array.from((await exe.run({ x })).y.data as Float32Array), [1, 0, 2, 0]);
  }
  // A string or an object without a cache's methods reached the first lookup as a TypeError.
  for (const bad of ["no", 1, {}, null]) {
    await assert.rejects(
      () => compile(graph, { backend: "wasm", cache: bad as never }),
      (e: unknown) => e instanceof KilnError && /cache option must be/.test(e.message),
      String(bad),
    );
  }
});

Deno.test("KernelCache refuses options it does not have and sizes that are not counts", () => {
  const typed = (pattern: RegExp) => (e: unknown) =>
    e instanceof KilnError && e.code === "bad-input" && pattern.test(e.message);
  // `{ dirr }` had used the default directory without a word; a string size had been kept.
  assert.throws(() => new KernelCache({ dirr: "/tmp" } as never), typed(/no option "dirr"/));
  assert.throws(() => new KernelCache(5 as never), typed(/object of options, got 5/));
  assert.throws(() => new KernelCache({ maxEntries: "9" as never }), typed(/maxEntries/));
  assert.throws(() => new KernelCache({ maxBytes: -1 }), typed(/maxBytes must be/));
  assert.throws(() => new KernelCache({ dir: 3 as never }), typed(/dir must be a path/));
  assert.equal(new KernelCache({ dir: false, maxEntries: 0 }).dir, false);
});
