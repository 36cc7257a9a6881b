import assert from "node:assert/strict";
import { compile, ReferenceBackend, stats } from "../../mod.ts";
import { DeviceTensor } from "../../jit/runtime/device_tensor.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { assertClose, f32, numbers } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";
import type { GpuStorage } from "./gpu_storage.ts";

// CI has no GPU: these run on the software adapter (llvmpipe), slow but exact.
const gpu = new WebGpuBackend();
await gpu.prepare();

/** y = relu(x·2 − 1), z = sum over the last axis of x. */
function scaled() {
  const b = new GraphBuilder();
  const x = b.input("x", [4, 8]);
  b.output("y", b.op("Relu", [b.op("Sub", [b.op("Mul", [x, b.constant(2)]), b.constant(1)])]));
  b.output("z", b.op("ReduceSum", [x], { axes: [1] }));
  return b.build();
}

/** One step of a recurrence: h' = tanh(h·0.5 + u), with the state binding h' → h. */
function recurrence() {
  const b = new GraphBuilder();
  const h = b.input("h", [2, 8]);
  const u = b.input("u", [2, 8]);
  b.output("next", b.op("Tanh", [b.op("Add", [b.op("Mul", [h, b.constant(0.5)]), u])]));
  b.output("mean", b.op("ReduceMean", [h], { axes: [1] }));
  return b.build();
}

const ramp = (n: number, scale = 1) => Array.from({ length: n }, (_, i) => ((i % 9) - 4) * scale);

Deno.test("outputs stay on the device, feed the next run, and read back whole or by range", async () => {
  using first = await compile(scaled(), { backend: gpu, cache: false });
  using second = await compile(scaled(), { backend: gpu, cache: false });
  using reference = await compile(scaled(), { backend: "reference" });
  const x = f32(ramp(32, 0.25), [4, 8]);
  const { y, z } = await first.runOnDevice({ x });
  assert.ok(y instanceof DeviceTensor && z instanceof DeviceTensor);
  assert.deepEqual([y.shape, y.dtype, y.backend], [[4, 8], "f32", "webgpu"]);
  // y (still on the device) is the next executable's input: no host round trip between them.
  const chained = await second.run({ x: y });
  const want1 = await reference.run({ x });
  const want2 = await reference.run({ x: want1.y });
  assertClose(numbers(chained.y.data), numbers(want2.y.data));
  assertClose(numbers(chained.z.data), numbers(want2.z.data));
  assertClose(numbers((await y.read()).data), numbers(want1.y.data));
  const part = await y.read({ offset: 5, length: 10 });
  assert.deepEqual(part.shape, [10]);
  assertClose(numbers(part.data), numbers(want1.y.data).slice(5, 15));
  // A ranged write lands before later runs; the caller's array is not kept.
  const patch = new Float32Array([9, 9, 9]);
  y.write(patch, 8);
  patch.fill(0);
  const patched = numbers(want1.y.data);
  patched.splice(8, 3, 9, 9, 9);
  assertClose(
    numbers((await second.run({ x: y })).z.data),
    numbers((await reference.run({ x: f32(patched, [4, 8]) })).z.data),
  );
  const held = gpu.poolStats().inUseBytes;
  y.dispose();
  z.dispose();
  assert.ok(y.disposed);
  assert.equal(held - gpu.poolStats().inUseBytes, 2 * 256, "both buffers back in the pool");
  assert.throws(
    () => y.read(),
    (e: unknown) => e instanceof KilnError && /disposed/.test(e.message),
  );
  assert.throws(() => second.run({ x: y }), /disposed/);
});

Deno.test("device tensors: bad ranges, shapes and backends get clear errors", async () => {
  using exe = await compile(scaled(), { backend: gpu, cache: false });
  const { y, z } = await exe.runOnDevice({ x: f32(ramp(32), [4, 8]) });
  assert.throws(() => y.read({ offset: 30, length: 5 }), /elements \[30, 35\) of a tensor of 32/);
  assert.throws(() => y.write(new Float32Array(4), 30), /Fix: use a whole-number offset/);
  assert.throws(() => y.write(new Int32Array(2)), /f32 cannot be stored in a Int32Array/);
  assert.throws(() => exe.run({ x: z }), /expected f32\[4,8\], got a device tensor f32\[4,1\]/);
  using cpu = await compile(scaled(), { backend: "reference" });
  assert.throws(() => cpu.runOnDevice({ x: f32(ramp(32), [4, 8]) }), /runOnDevice needs a backend/);
  assert.throws(() => exe.run({ x: y }, { repeat: 0 }), /repeat must be a whole number/);
  y.dispose();
  z.dispose();
});

Deno.test("a device tensor given to a wasm or reference executable is transferred, counted", async () => {
  using exe = await compile(scaled(), { backend: gpu, cache: false });
  const x = f32(ramp(32), [4, 8]);
  const { y } = await exe.runOnDevice({ x });
  const want = await (await compile(scaled(), { backend: "reference" })).run({
    x: await y.read(),
  });
  for (const backend of ["wasm", "reference"]) {
    using cpu = await compile(scaled(), { backend, cache: false });
    const before = stats().kiln_transfers_total ?? 0;
    const got = await cpu.run({ x: y });
    assert.equal((stats().kiln_transfers_total ?? 0) - before, 1, backend);
    assertClose(numbers(got.y.data), numbers(want.y.data), { message: backend });
    assertClose(numbers(got.z.data), numbers(want.z.data), { message: backend });
  }
  y.dispose();
});

Deno.test("repeat: state feeds back on the device, one readback, same as the steps one by one", async () => {
  const state = { next: "h" };
  const h = f32(ramp(16, 0.3), [2, 8]);
  const u = f32(ramp(16, -0.1), [2, 8]);
  using onGpu = await compile(recurrence(), { backend: gpu, cache: false, state });
  using stepwise = await compile(recurrence(), { backend: "reference", state });
  let want;
  for (let i = 0; i < 7; i++) want = await stepwise.run(i === 0 ? { h, u } : { u });
  const got = await onGpu.run({ h, u }, { repeat: 7 });
  assertClose(numbers(got.next.data), numbers(want!.next.data));
  assertClose(numbers(got.mean.data), numbers(want!.mean.data));
  // The state carries on from the last repetition, on every backend (the CPU loops on the host).
  using onCpu = await compile(recurrence(), { backend: "wasm", state });
  const cpu = await onCpu.run({ h, u }, { repeat: 7 });
  assertClose(numbers(cpu.next.data), numbers(want!.next.data));
  const more = await stepwise.run({ u }, { repeat: 3 });
  assertClose(numbers((await onGpu.run({ u }, { repeat: 3 })).next.data), numbers(more.next.data));
  assertClose(numbers((await onCpu.run({ u }, { repeat: 3 })).next.data), numbers(more.next.data));
});

Deno.test("runOnDevice keeps state on the device; clones share it safely", async () => {
  const state = { next: "h" };
  const h = f32(ramp(16, 0.3), [2, 8]);
  const u = f32(ramp(16, -0.1), [2, 8]);
  using stepwise = await compile(recurrence(), { backend: "reference", state });
  const exe = await compile(recurrence(), { backend: gpu, cache: false, state });
  const first = await exe.runOnDevice({ h, u }, { repeat: 2 });
  const copy = exe.clone();
  const second = await exe.runOnDevice({ u });
  const want = [await stepwise.run({ h, u }, { repeat: 2 }), await stepwise.run({ u })];
  assertClose(numbers((await first.next.read()).data), numbers(want[0].next.data));
  assertClose(numbers((await second.next.read()).data), numbers(want[1].next.data));
  // The user's outputs are theirs: disposing them leaves the executable's state intact.
  for (const t of [...Object.values(first), ...Object.values(second)]) t.dispose();
  exe.dispose();
  // The clone still holds the state of the first run (three steps in, it matches step four).
  const fromClone = await copy.run({ u });
  assertClose(numbers(fromClone.next.data), numbers(want[1].next.data));
  copy.dispose();
});

Deno.test("pipelined runs are in flight together, each with its own buffers, results in order", async () => {
  const fresh = new WebGpuBackend();
  await fresh.prepare();
  using exe = await compile(scaled(), { backend: fresh, cache: false });
  using reference = await compile(scaled(), { backend: "reference" });
  const sets = Array.from({ length: 6 }, (_, i) => ({ x: f32(ramp(32, i + 1), [4, 8]) }));
  await exe.run(sets[0]);
  const one = fresh.poolStats();
  const handles = exe.runPipelined(sets);
  const results = await Promise.all(handles);
  // Run after run on one set of buffers would allocate nothing new.
  assert.ok(fresh.poolStats().allocations > one.allocations, "overlapping runs took more buffers");
  assert.equal(fresh.poolStats().inUseBytes, one.inUseBytes);
  for (const [i, r] of results.entries()) {
    assertClose(numbers(r.y.data), numbers((await reference.run(sets[i])).y.data));
  }
  fresh.dispose();
});

Deno.test("device tensors of an i64 graph read back as i64 and feed i64 inputs", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [3], "i64");
  const sum = b.op("Add", [x, b.constant(new BigInt64Array([5n, 6n, 7n]), [3], "i64")]);
  b.output("y", sum, { dtype: "i64" });
  using exe = await compile(b.build(), { backend: gpu, cache: false });
  const { y } = await exe.runOnDevice({
    x: { data: BigInt64Array.of(1n, -2n, 3n), shape: [3], dtype: "i64" },
  });
  assert.equal(y.dtype, "i64");
  assert.deepEqual([...(await y.read()).data as BigInt64Array], [6n, 4n, 10n]);
  y.write(BigInt64Array.of(-100n), 1);
  const again = await exe.run({ x: y });
  assert.deepEqual([...again.y.data as BigInt64Array], [11n, -94n, 17n]);
  y.dispose();
});

Deno.test("a parameter upload that fails is retried by the next run, not cached", async () => {
  const fresh = new WebGpuBackend();
  await fresh.prepare();
  const b = new GraphBuilder();
  const w = b.param("w", [64, 4], "f32", new Float32Array(256).fill(0.5));
  b.output("y", b.op("MatMul", [b.input("x", [2, 64]), w]));
  using exe = await compile(b.build(), { backend: fresh, cache: false });
  const device = fresh.device!;
  const create = device.createBuffer;
  let failed = false;
  // The parameter's buffer (1 KiB; the input's is 512 B) fails once.
  device.createBuffer = (d) => {
    if (!failed && d.size === 1024) {
      failed = true;
      throw new Error("simulated allocation failure");
    }
    return create.call(device, d);
  };
  const x = f32(ramp(128), [2, 64]);
  await assert.rejects(exe.run({ x }).result(), /simulated allocation failure/);
  device.createBuffer = create;
  const { y } = await exe.run({ x });
  const sums = [0, 1].map((r) => ramp(128).slice(64 * r, 64 * r + 64).reduce((s, v) => s + v, 0));
  assertClose(numbers(y.data), [...Array(8).keys()].map((i) => 0.5 * sums[i >> 2]));
  fresh.dispose();
});

Deno.test("host outputs are the caller's: later runs and reads through the same staging buffers leave them as they were", async () => {
  // One output (handed over whole where the runtime's mapped range is a copy) and two (copied
  // out of one staging buffer), read from runs and from a device tensor.
  const one = new GraphBuilder();
  one.output("y", one.op("Neg", [one.input("x", [4, 8])]));
  using single = await compile(one.build(), { backend: gpu, cache: false });
  using pair = await compile(scaled(), { backend: gpu, cache: false });
  const runs = [ramp(32, 0.25), ramp(32, -3), ramp(32, 7)].map((v) => f32(v, [4, 8]));
  const kept = [];
  for (const x of runs) {
    const { y } = await single.run({ x });
    const both = await pair.run({ x });
    const device = (await pair.runOnDevice({ x })).z as DeviceTensor;
    const read = await device.read();
    device.dispose();
    kept.push({ x, y, both, read });
    // The single output owns its buffer: nothing else lives in it.
    assert.equal((y.data as Float32Array).buffer.byteLength, 32 * 4);
  }
  using reference = await compile(scaled(), { backend: "reference" });
  for (const { x, y, both, read } of kept) {
    assert.deepEqual(numbers(y.data), numbers(x.data).map((v) => -v));
    const want = await reference.run({ x });
    assertClose(numbers(both.y.data), numbers(want.y.data));
    assertClose(numbers(both.z.data), numbers(want.z.data));
    assertClose(numbers(read.data), numbers(want.z.data));
  }
});

Deno.test("transfer metrics count what moved: nothing read back on the device, a read's bytes", async () => {
  using exe = await compile(scaled(), { backend: gpu, cache: false });
  const x = f32(ramp(32), [4, 8]);
  const down = () => stats().kiln_bytes_downloaded_total;
  const before = down();
  const { y, z } = await exe.runOnDevice({ x });
  assert.equal(down() - before, 0, "runOnDevice read nothing back");
  await y.read();
  assert.equal(down() - before, 4 * 32, "a read counts its bytes");
  const host = down();
  await exe.run({ x }, { outputs: ["z"] });
  assert.equal(down() - host, 4 * 4, "only the requested output comes back");
  y.dispose();
  z.dispose();
});

Deno.test("device tensors allocate by shape and dtype, zero-filled, and read back in one batch", async () => {
  const gpu = new WebGpuBackend({ allowSoftware: true });
  try {
    await gpu.prepare();
  } catch {
    return; // no WebGPU adapter here
  }
  try {
    const a = await DeviceTensor.allocate(gpu, [2, 3]);
    const b = await DeviceTensor.allocate(gpu, [5], "i32");
    assert.deepEqual(numbers((await a.read()).data), [0, 0, 0, 0, 0, 0], "zero-filled");
    a.write(new Float32Array([1, 2, 3, 4, 5, 6]));
    b.write(new Int32Array([7, 8, 9, 10, 11]));
    // A buffer the pool hands out again is cleared: a fresh tensor reads zeros, not old data.
    a.dispose();
    const again = await DeviceTensor.allocate(gpu, [2, 3]);
    const c = await DeviceTensor.allocate(gpu, [4], "f32");
    c.write(new Float32Array([1.5, 2.5, 3.5, 4.5]));
    const [r0, r1, r2] = await DeviceTensor.readAll([again, b, c], [{}, { offset: 1, length: 3 }]);
    assert.deepEqual(numbers(r0.data), [0, 0, 0, 0, 0, 0]);
    assert.deepEqual(r0.shape, [2, 3]);
    assert.deepEqual(numbers(r1.data), [8, 9, 10]);
    assert.deepEqual(r1.shape, [3]);
    assert.ok(r1.data instanceof Int32Array);
    assert.deepEqual(numbers(r2.data), [1.5, 2.5, 3.5, 4.5]);
    for (const t of [again, b, c]) t.dispose();
    await assert.rejects(DeviceTensor.allocate(gpu, [2, -1]), KilnError);
    await assert.rejects(DeviceTensor.allocate(gpu, [2], "f80" as "f32"), KilnError);
  } finally {
    gpu.dispose();
  }
});

Deno.test("a backend without device memory refuses to allocate, with a Fix", async () => {
  await assert.rejects(
    DeviceTensor.allocate(new ReferenceBackend(), [4]),
    (e: unknown) => e instanceof KilnError && e.code === "unsupported" && /Fix:/.test(e.message),
  );
});

Deno.test("programs of one graph's weights share their upload until the last is disposed", async () => {
  const fresh = new WebGpuBackend();
  await fresh.prepare();
  const b = new GraphBuilder();
  const w = b.param("w", [256, 256], "f32", new Float32Array(65536).fill(0.25));
  b.output("y", b.op("MatMul", [b.input("x", [2, 256]), w]));
  const graph = b.build();
  const x = f32(ramp(512), [2, 256]);
  const first = await compile(graph, { backend: fresh, cache: false });
  const second = await compile(graph, { backend: fresh, cache: false });
  const want = numbers((await first.run({ x })).y.data);
  assert.equal(fresh.poolStats().residentBytes, 262144, "the weight, once");
  assertClose(numbers((await second.run({ x })).y.data), want);
  assert.equal(fresh.poolStats().residentBytes, 262144, "still once: the second program's run");
  first.dispose();
  assertClose(numbers((await second.run({ x })).y.data), want, { message: "after the first went" });
  second.dispose();
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(fresh.poolStats().residentBytes, 0, "freed with the last");
  fresh.dispose();
});

Deno.test("warmUp runs a GPU program once on zeros: its weights are up before its first run", async () => {
  const fresh = new WebGpuBackend();
  await fresh.prepare();
  const b = new GraphBuilder();
  const w = b.param("w", [64, 64], "f32", new Float32Array(4096).fill(0.5));
  b.output("y", b.op("MatMul", [b.input("x", [2, 64]), w]));
  using exe = await compile(b.build(), { backend: fresh, cache: false });
  assert.equal(fresh.poolStats().residentBytes, 0);
  await exe.warmUp();
  assert.equal(fresh.poolStats().residentBytes, 16384);
  const { y } = await exe.run({ x: f32(new Array(128).fill(1), [2, 64]) });
  assertClose(numbers(y.data), new Array(128).fill(32));
  fresh.dispose();
});

Deno.test("a device run returns before its checks are read; a failed check surfaces where its outputs are read", async () => {
  // a·a in int64, held in 32 bits on WebGPU: a product past 2^31 fails the run's wrap check.
  const b = new GraphBuilder();
  const a = b.input("a", [1], "i64");
  b.output("y", b.op("Mul", [a, a]), { dtype: "i64" });
  using exe = await compile(b.build(), { backend: gpu, cache: false });
  assert.ok(exe.graph.outputs.some((o) => o.name.startsWith("kiln.check:")), "a check output");
  const i64 = (v: bigint) => ({ data: BigInt64Array.of(v), shape: [1], dtype: "i64" as const });
  const ok = await exe.runOnDevice({ a: i64(3n) });
  assert.deepEqual(Array.from((await ok.y.read()).data as BigInt64Array), [9n]);
  const again = await exe.runOnDevice({ a: ok.y });
  assert.deepEqual(Array.from((await again.y.read()).data as BigInt64Array), [81n]);
  const bad = await exe.runOnDevice({ a: i64(100000n) });
  const outOfRange = (e: unknown) => e instanceof KilnError && e.code === "out-of-range";
  await assert.rejects(bad.y.read(), outOfRange);
  await assert.rejects(DeviceTensor.readAll([bad.y]), outOfRange);
  // Runs that take the failed output fail where their outputs are read, or at once on the host.
  const next = await exe.runOnDevice({ a: bad.y });
  await assert.rejects(next.y.read(), outOfRange);
  await assert.rejects(exe.run({ a: bad.y }).result(), outOfRange);
  for (const t of [ok.y, again.y, bad.y, next.y]) t.dispose();
});

Deno.test("two outputs of one value are buffers of their own: disposing one spares the other", async () => {
  // y and y reshaped: a later run, taking the freed buffer, must not write over the other.
  const b = new GraphBuilder();
  const y = b.op("Mul", [b.input("x", [4]), b.constant(2)]);
  b.output("y", y);
  b.output("flat", b.op("Reshape", [y], { shape: [2, 2] }));
  using exe = await compile(b.build(), { backend: gpu, cache: false });
  const first = await exe.runOnDevice({ x: f32([1, 2, 3, 4]) });
  first.flat.dispose();
  const later = await exe.runOnDevice({ x: f32([10, 20, 30, 40]) });
  assertClose(numbers((await first.y.read()).data), [2, 4, 6, 8]);
  assertClose(numbers((await later.flat.read()).data), [20, 40, 60, 80]);
  for (const t of [first.y, later.y, later.flat]) t.dispose();
});

Deno.test("a donated input's device tensor is the run's: disposed by it, the step fed back right", async () => {
  // next = h · 0.5 + u where the slot is at or after `at`, else h as it was (a cache's shape).
  const b = new GraphBuilder();
  const h = b.input("h", [2, 8]), u = b.input("u", [2, 8]), at = b.input("at", [1], "i32");
  const slots = b.constant(Int32Array.from([0, 1]), [2, 1], "i32");
  const moved = b.op("Add", [b.op("Mul", [h, b.constant(0.5)]), u]);
  b.output("next", b.op("Where", [b.op("Less", [slots, at]), h, moved]));
  using exe = await compile(b.build(), { backend: gpu, cache: false, donate: ["h"] });
  using reference = await compile(b.build(), { backend: "reference" });
  const u0 = f32(ramp(16, 0.5), [2, 8]),
    at1 = { data: Int32Array.of(1), shape: [1], dtype: "i32" as const };
  const start = f32(ramp(16), [2, 8]);
  let h0: DeviceTensor = (await exe.runOnDevice({ h: start, u: u0, at: at1 })).next;
  let expected = (await reference.run({ h: start, u: u0, at: at1 })).next;
  for (let step = 0; step < 3; step++) {
    const buffer = (h0.storage() as GpuStorage).buffer;
    const out = await exe.runOnDevice({ h: h0, u: u0, at: at1 });
    assert.ok(h0.disposed, `step ${step}: the donated tensor went with the run`);
    assert.equal((out.next.storage() as GpuStorage).buffer, buffer, "stored over its input");
    expected = (await reference.run({ h: expected, u: u0, at: at1 })).next;
    assertClose(numbers((await out.next.read()).data), numbers(expected.data));
    h0 = out.next;
  }
  assert.deepEqual(numbers(start.data), ramp(16), "a host array is never written");
  h0.dispose();
});

Deno.test("outputs stored over donated inputs: repeated, shared or large arguments stay right", async () => {
  // Two caches stepped as a decode step steps them: one new entry where the slot is `at`. Past
  // the program's own small buffers (256 KB), a host argument's upload is pooled.
  const b = new GraphBuilder();
  const k = b.input("k", [2, 640, 64]), v = b.input("v", [2, 640, 64]);
  const e = b.input("e", [2, 1, 64]), at = b.input("at", [1], "i32");
  const slots = b.constant(Int32Array.from({ length: 640 }, (_, i) => i), [1, 640, 1], "i32");
  const keep = b.op("Not", [b.op("Equal", [slots, at])]);
  b.output("nk", b.op("Where", [keep, k, e]));
  b.output("nv", b.op("Where", [keep, v, b.op("Neg", [e])]));
  const graph = b.build();
  using exe = await compile(graph, { backend: gpu, cache: false, donate: ["k", "v"] });
  using reference = await compile(graph, { backend: "reference" });
  const cache = f32(ramp(81920, 0.25), [2, 640, 64]), entry = f32(ramp(128, 2), [2, 1, 64]);
  const slot = (n: number) => ({ data: Int32Array.of(n), shape: [1], dtype: "i32" as const });
  const expected = await reference.run({ k: cache, v: cache, e: entry, at: slot(5) });
  // Host arguments once: the run's uploads are the outputs' buffers.
  const once = await exe.run({ k: cache, v: cache, e: entry, at: slot(5) });
  assertClose(numbers(once.nk.data), numbers(expected.nk.data));
  assertClose(numbers(once.nv.data), numbers(expected.nv.data));
  // Host arguments, repeated: each repetition reads them as given.
  const repeated = await exe.run({ k: cache, v: cache, e: entry, at: slot(5) }, { repeat: 3 });
  assertClose(numbers(repeated.nk.data), numbers(expected.nk.data));
  assertClose(numbers(repeated.nv.data), numbers(expected.nv.data));
  assert.deepEqual(numbers(cache.data), ramp(81920, 0.25), "a host array is never written");
  // One device tensor for both caches: each output has a buffer of its own, filled by a copy.
  const shared = (await exe.runOnDevice({ k: cache, v: cache, e: entry, at: slot(5) })).nk;
  const both = await exe.runOnDevice({ k: shared, v: shared, e: entry, at: slot(6) });
  assert.ok(shared.disposed);
  assert.notEqual(
    (both.nk.storage() as GpuStorage).buffer,
    (both.nv.storage() as GpuStorage).buffer,
  );
  const again = await reference.run({ k: expected.nk, v: expected.nk, e: entry, at: slot(6) });
  assertClose(numbers((await both.nk.read()).data), numbers(again.nk.data));
  assertClose(numbers((await both.nv.read()).data), numbers(again.nv.data));
  both.nk.dispose();
  both.nv.dispose();
});

Deno.test("caches stored over their pasts: a step takes no buffer of a cache's size", async () => {
  const b = new GraphBuilder();
  const past = b.input("past", [4, 1024, 64]), e = b.input("e", [4, 1, 64]);
  const at = b.input("at", [1], "i32");
  const slots = b.constant(Int32Array.from({ length: 1024 }, (_, i) => i), [1, 1024, 1], "i32");
  b.output("present", b.op("Where", [b.op("Not", [b.op("Equal", [slots, at])]), past, e]));
  using exe = await compile(b.build(), { backend: gpu, cache: false, donate: ["past"] });
  const entry = f32(ramp(256), [4, 1, 64]);
  const slot = (n: number) => ({ data: Int32Array.of(n), shape: [1], dtype: "i32" as const });
  let cache = (await exe.runOnDevice({
    past: f32(new Array(4 * 1024 * 64).fill(0), [4, 1024, 64]),
    e: entry,
    at: slot(0),
  })).present;
  // The upload of the zeros became the cache's buffer, and each step writes into it.
  const home = (cache.storage() as GpuStorage).buffer, before = gpu.poolStats();
  for (let step = 1; step < 6; step++) {
    cache = (await exe.runOnDevice({ past: cache, e: entry, at: slot(step) })).present;
    assert.equal((cache.storage() as GpuStorage).buffer, home, `step ${step}`);
  }
  assert.equal(gpu.poolStats().allocations, before.allocations, "no buffer was made");
  const data = numbers((await cache.read()).data);
  for (let s = 0; s < 8; s++) {
    assert.deepEqual(data.slice(s * 64, s * 64 + 4), s < 6 ? ramp(4) : [0, 0, 0, 0], `slot ${s}`);
  }
  cache.dispose();
});

Deno.test("an output stored over its donated input as vec4s reads it from its own buffer", async () => {
  // next = h · 0.5 + u: every point written, h read as vec4s from the buffer the output takes.
  const b = new GraphBuilder();
  const h = b.input("h", [4, 8]), u = b.input("u", [4, 8]);
  b.output("next", b.op("Add", [b.op("Mul", [h, b.constant(0.5)]), u]));
  using exe = await compile(b.build(), { backend: gpu, cache: false, donate: ["h"] });
  const u0 = f32(ramp(32, 0.5), [4, 8]);
  let state = (await exe.runOnDevice({ h: f32(ramp(32), [4, 8]), u: u0 })).next;
  let expected = ramp(32).map((x, i) => x * 0.5 + ramp(32, 0.5)[i]);
  for (let step = 0; step < 3; step++) {
    const buffer = (state.storage() as GpuStorage).buffer;
    state = (await exe.runOnDevice({ h: state, u: u0 })).next;
    assert.equal((state.storage() as GpuStorage).buffer, buffer, `step ${step}`);
    expected = expected.map((x, i) => x * 0.5 + ramp(32, 0.5)[i]);
  }
  assertClose(numbers((await state.read()).data), expected);
  state.dispose();
});
