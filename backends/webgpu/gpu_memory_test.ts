/**
 * WebGPU memory: the buffer pool under its cap, runs that return to the pool's baseline, and
 * intermediates that share buffers as the memory plan says. On the software adapter in CI.
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { f32 } from "../../jit/testing/testing.ts";
import { bucketSize, BufferPool } from "./buffer_pool.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";

const gpu = new WebGpuBackend();

Deno.test("one submit and one readback per run; resident params; the pool returns to its baseline", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [64, 32]);
  const w = b.param("w", [32, 16], "f32", new Float32Array(32 * 16).fill(0.01));
  b.output("y", b.op("Softmax", [b.op("Relu", [b.op("MatMul", [x, w])])]));
  b.output("s", b.op("ReduceSum", [x], { axes: [1] }));
  const exe = await compile(b.build(), { backend: gpu, cache: false });
  const feeds = { x: f32(new Float32Array(64 * 32).fill(1), [64, 32]) };
  await exe.run(feeds);
  await exe.run(feeds, { outputs: ["y"] });
  const base = gpu.poolStats();
  const device = gpu.device!;
  const create = device.createBindGroup;
  let created = 0;
  device.createBindGroup = (d) => (created++, create.call(device, d));
  for (let i = 0; i < 20; i++) await exe.run(feeds, { outputs: i % 2 ? ["y"] : ["s", "y"] });
  device.createBindGroup = create;
  const after = gpu.poolStats();
  assert.equal(after.inUseBytes, base.inUseBytes);
  assert.equal(after.allocations, base.allocations, "steady-state runs reuse pooled buffers");
  assert.equal(created, 0, "and the bind groups cached for those buffers");
});

Deno.test("intermediates share buffers as the memory plan says: a longer chain takes no more", async () => {
  // A chain of matmuls: each product is read by the next one only, so two buffers serve all the
  // intermediates however long the chain is.
  const acquisitions = async (length: number) => {
    const b = new GraphBuilder();
    let y = b.input("x", [16, 16]);
    for (let i = 0; i < length; i++) {
      y = b.op("MatMul", [y, b.param(`w${i}`, [16, 16], "f32", new Float32Array(256).fill(0.1))]);
    }
    b.output("y", y);
    const exe = await compile(b.build(), { backend: gpu, cache: false });
    const feeds = { x: f32(new Float32Array(256).fill(1), [16, 16]) };
    await exe.run(feeds);
    const before = gpu.poolStats();
    await exe.run(feeds);
    const after = gpu.poolStats();
    exe.dispose();
    return after.allocations + after.reuses - before.allocations - before.reuses;
  };
  assert.equal(await acquisitions(9), await acquisitions(3));
});

Deno.test("pool churn: 10 000 mixed acquisitions stay under the cap and return to baseline", async () => {
  const cap = 1 << 20;
  const pool = new BufferPool(gpu.device!, cap);
  const held: GPUBuffer[] = [];
  let seed = 1;
  for (let i = 0; i < 10_000; i++) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    const bytes = 4 + (seed % 60_000);
    held.push(await pool.acquire(bytes, GPUBufferUsage.STORAGE));
    if (held.length > 6 || seed % 3 === 0) pool.release(held.splice(0, held.length > 6 ? 3 : 1));
    assert.ok(
      pool.stats().allocatedBytes <= cap + 6 * 65536,
      `cap exceeded: ${pool.stats().allocatedBytes}`,
    );
  }
  pool.release(held.splice(0));
  const s = pool.stats();
  assert.equal(s.inUseBytes, 0);
  assert.ok(s.reuses > 5000, `${s.reuses} reuses`);
  assert.ok(s.pooledBytes <= cap);
  pool.dispose();
});

Deno.test("resident buffers past the cap do not make the pool evict its working set", async () => {
  const cap = 1 << 20;
  const pool = new BufferPool(gpu.device!, cap);
  // A program's weights, twice the cap, held for its life.
  const weights = await pool.acquire(2 * cap, GPUBufferUsage.STORAGE, true);
  assert.equal(pool.stats().residentBytes, 2 * cap);
  for (let i = 0; i < 10; i++) {
    const step = [
      await pool.acquire(60_000, GPUBufferUsage.STORAGE),
      await pool.acquire(4096, GPUBufferUsage.STORAGE),
    ];
    pool.release(step);
  }
  const s = pool.stats();
  assert.equal(s.allocations, 3, "the working set is created once and reused");
  assert.equal(s.evictions, 0);
  // Released, the weights are an ordinary free buffer again, held to the cap.
  pool.release([weights]);
  assert.equal(pool.stats().residentBytes, 0);
  assert.ok(pool.stats().allocatedBytes <= cap, `${pool.stats().allocatedBytes}`);
  pool.dispose();
});

Deno.test("resident buffers take their data's bytes, not a bucket", async () => {
  const pool = new BufferPool(gpu.device!, 1 << 24);
  // A 0.5B decoder's packed [896, 4864] projection: 2.18 MB, which a bucket made 4 MiB.
  const bytes = (896 * 4864) / 2 + 4 * 3;
  const weight = await pool.acquire(bytes, GPUBufferUsage.STORAGE, true);
  assert.equal(weight.size, bytes);
  assert.equal(pool.stats().residentBytes, bytes);
  // Working buffers keep their buckets (they are reused for other sizes): 2.18 MB in 2.5 MiB.
  const work = await pool.acquire(bytes, GPUBufferUsage.STORAGE);
  assert.equal(work.size, bucketSize(bytes));
  assert.equal(work.size, 2.5 * 2 ** 20);
  pool.release([weight, work]);
  pool.dispose();
});

Deno.test("pool buckets: powers of two up to 1 MiB, then quarter steps (at most 1.25x a request)", () => {
  assert.equal(bucketSize(1), 256);
  assert.equal(bucketSize(300), 512);
  assert.equal(bucketSize(1 << 20), 1 << 20);
  let previous = 0;
  for (let bytes = (1 << 20) + 1; bytes < 2 ** 31; bytes = Math.ceil(bytes * 1.07)) {
    const bucket = bucketSize(bytes);
    assert.ok(bucket >= bytes && bucket <= 1.25 * bytes, `${bytes} -> ${bucket}`);
    assert.ok(bucket >= previous, "monotonic");
    // Each bucket is one of 2^k · {1, 1.25, 1.5, 1.75}: the same sizes recur and are reused.
    const power = 2 ** Math.floor(Math.log2(bucket));
    assert.ok([1, 1.25, 1.5, 1.75].includes(bucket / power), `${bucket}`);
    previous = bucket;
  }
});
