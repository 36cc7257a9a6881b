import assert from "node:assert/strict";
import type { Artifact, Backend, KernelCodegen } from "./backend.ts";
import { compile, ReferenceBackend } from "../mod.ts";
import { Graph } from "./graph.ts";
import { fuse } from "./fuse.ts";
import { GraphBuilder } from "./graph_builder.ts";
import type { KernelIR } from "./kernel_ir.ts";
import { KernelCache } from "./kernel_cache.ts";

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
