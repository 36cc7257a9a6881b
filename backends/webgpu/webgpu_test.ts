import assert from "node:assert/strict";
import { compile } from "../../jit/compile.ts";
import { differentialOn } from "../../jit/differential.ts";
import { KilnError } from "../../jit/errors.ts";
import { fuse } from "../../jit/fuse.ts";
import { GraphBuilder } from "../../jit/graph_builder.ts";
import { importOnnx } from "../../onnx/import.ts";
import { MODEL_NAMES, referenceModel } from "../../onnx/testdata.ts";
import { assertClose, assertMatchesReference, f32, numbers } from "../../jit/testing.ts";
import type { HostTensor } from "../../jit/host_tensor.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { BackendRegistry } from "../registry.ts";
import { BufferPool } from "./buffer_pool.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";

// CI has no GPU: these run on the software adapter (llvmpipe), slow but exact.
const gpu = new WebGpuBackend();
await gpu.prepare();

Deno.test("the software adapter is real: a profile from its limits", () => {
  const c = gpu.capabilities();
  assert.ok(c.maxWorkgroupSize >= 64 && c.maxStorageBufferBytes > 0 && c.maxBindings >= 8);
  assert.equal(gpu.kind, "gpu");
});

Deno.test("ops on WebGPU match the reference: broadcasting, NaN/Inf, integers, casts, f16", async () => {
  const cases: [string, HostTensor[], Attrs][] = [
    ["Add", [f32([1, 2, 3, 4, 5, 6], [2, 3]), f32([10, 20, 30], [3])], {}],
    ["Exp", [f32([NaN, Infinity, -Infinity, 0, 1])], {}],
    ["Log", [f32([0, -1, 1, Infinity, NaN])], {}],
    ["Sqrt", [f32([-1, 0, 4, Infinity])], {}],
    ["Div", [f32([1, -1, 0, 1, NaN]), f32([0, 0, 0, -0, 0])], {}],
    ["Pow", [f32([-2, 2, 0, 0, -8]), f32([3, 0.5, -1, 0, 1 / 3])], {}],
    ["Erf", [f32([-3, -0.5, 0, 0.3, 2.5, NaN])], {}],
    ["Div", [{ data: Int32Array.of(7, -7, 5), shape: [3], dtype: "i32" }, {
      data: Int32Array.of(2, 2, 0),
      shape: [3],
      dtype: "i32",
    }], {}],
    ["Mod", [{ data: Int32Array.of(-7, 7), shape: [2], dtype: "i32" }, {
      data: Int32Array.of(3, -3),
      shape: [2],
      dtype: "i32",
    }], {}],
    ["Cast", [f32([1.9, -1.9, 300, -300, NaN, 3e9])], { to: "i8" }],
    ["Cast", [f32([1.9, -1.9, 300, -300, NaN, 3e9])], { to: "i32" }],
    ["Cast", [f32([1, 65504, 1e6, 1e-8])], { to: "f16" }],
    ["Round", [f32([0.5, 1.5, 2.5, -0.5, -2.5])], {}],
    ["Max", [f32([NaN, 1, 2]), f32([1, NaN, 3])], {}],
    ["Where", [
      { data: Uint8Array.of(1, 0), shape: [2, 1], dtype: "bool" },
      f32([1, 2, 3]),
      f32([-1]),
    ], {}],
    ["Softmax", [f32([1000, 1001, 1002, -1, 0, 1], [2, 3])], { axis: -1 }],
    ["ReduceMax", [f32([], [2, 0])], { axes: [1] }],
    ["ReduceMean", [f32([], [2, 0])], { axes: [1] }],
    ["MaxPool", [f32([...Array(25).keys()], [1, 1, 5, 5])], {
      kernel_shape: [2, 2],
      strides: [2, 2],
      ceil_mode: 1,
    }],
    ["Conv", [
      f32([...Array(2 * 4 * 25).keys()].map((v) => (v % 7) - 3), [2, 4, 5, 5]),
      f32([...Array(4 * 2 * 9).keys()].map((v) => (v % 5) - 2), [4, 2, 3, 3]),
    ], { group: 2, pads: [1, 1, 1, 1] }],
  ];
  for (const [op, ins, attrs] of cases) {
    await assertMatchesReference(gpu, op, ins, attrs, { atol: 1e-5, rtol: 1e-5 });
  }
});

Deno.test("differential: 200 random graphs on WebGPU (whole-op kernels on the CPU beside it)", async () => {
  const onGpu = await differentialOn(gpu, 200);
  assert.ok(onGpu > 100, `${onGpu} graphs wholly on the GPU`);
});

for (const name of MODEL_NAMES) {
  Deno.test(`${name} on WebGPU matches ONNX Runtime within 1e-4`, async () => {
    const m = await referenceModel(name);
    const exe = await compile(importOnnx(m.bytes), { backend: gpu, cache: false });
    assert.ok(exe.plan!.kernels.length > 0);
    const out = await exe.run({ x: m.x });
    assertClose(numbers(out.y.data), m.y, { atol: 1e-4, rtol: 0, message: name });
  });
}

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
  const t0 = performance.now();
  for (let i = 0; i < 20; i++) await exe.run(feeds, { outputs: i % 2 ? ["y"] : ["s", "y"] });
  const perRun = (performance.now() - t0) / 20;
  const after = gpu.poolStats();
  assert.equal(after.inUseBytes, base.inUseBytes);
  assert.equal(after.allocations, base.allocations, "steady-state runs reuse pooled buffers");
  // One ~10 ms device poll per run on Deno, not one per kernel.
  assert.ok(perRun < 40, `${perRun} ms per run`);
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

Deno.test("device loss: pending runs reject, auto falls back, recover() restores correct results", async () => {
  const local = new WebGpuBackend();
  await local.prepare();
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.input("x", [256])]));
  const graph = b.build();
  const exe = await compile(graph, { backend: local, cache: false });
  const feeds = { x: f32(new Float32Array(256).fill(1)) };
  assertClose(numbers((await exe.run(feeds)).y.data), new Array(256).fill(Math.E), { rtol: 1e-6 });
  const pending = exe.run(feeds);
  local.device!.destroy();
  await assert.rejects(
    pending.result(),
    (e: unknown) =>
      e instanceof KilnError && /lost/.test(e.message) && /recover\(\)/.test(e.message),
  );
  await new Promise((r) => setTimeout(r, 50));
  assert.ok(local.deviceLost);
  const registry = new BackendRegistry().register(local);
  const fallback = await compile(graph, { registry, cache: false });
  assert.ok(fallback.plan!.schedule.placement.every((p) => p !== "webgpu"));
  await local.recover();
  assert.equal(local.deviceLost, false);
  await assert.rejects(
    exe.run(feeds).result(),
    (e: unknown) => e instanceof KilnError && /compile again/.test(e.message),
  );
  const again = await compile(graph, { backend: local, cache: false });
  assertClose(numbers((await again.run(feeds)).y.data), new Array(256).fill(Math.E), {
    rtol: 1e-6,
  });
  local.dispose();
});

Deno.test("a WGSL error names the kernel and the offending line", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Neg", [b.input("x", [4])]));
  const [kernel] = fuse(b.build()).kernels;
  const broken = gpu.codegen!.generate(kernel).toString().replace("(-", "(- -)(");
  await assert.rejects(
    async () => await gpu.codegen!.load(kernel, broken),
    (e: unknown) =>
      e instanceof KilnError && /elementwise_0/.test(e.message) && /at line \d+/.test(e.message),
  );
});

Deno.test("kiln run --backend webgpu --json works on the software adapter", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("../../cli.ts", import.meta.url).pathname,
      "run",
      "--backend",
      "webgpu",
      "--json",
      "--runs",
      "2",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const report = JSON.parse(new TextDecoder().decode(out.stdout));
  assert.equal(report.backend, "webgpu");
  assert.ok(report.kernels.every((k: { backend: string }) => k.backend === "webgpu"));
  assert.ok(Math.abs(report.outputs.y.mean - 0.1) < 1e-6);
});

Deno.test("the per-op entry runs a one-node graph", async () => {
  const [y] = await gpu.op("Mul", [f32([1, 2, 3]), f32([2])]);
  assertClose(numbers(y.data), [2, 4, 6]);
});

Deno.test("large matmuls use the tiled kernel (ragged edges, batch, fused epilogue) and stay exact", async () => {
  const { TILE_THRESHOLD, tiledMatmul } = await import("../../shaders/wgsl.ts");
  const b = new GraphBuilder();
  const a = b.input("a", [4, 130, 256]);
  const w = b.input("w", [256, 200]);
  b.output("y", b.op("Relu", [b.op("Add", [b.op("MatMul", [a, w]), b.input("c", [200])])]));
  const graph = b.build();
  const [kernel] = fuse(graph).kernels;
  assert.ok(4 * 130 * 200 * 256 >= TILE_THRESHOLD && tiledMatmul(kernel));
  const feeds = {
    a: f32([...Array(4 * 130 * 256).keys()].map((i) => ((i * 7919) % 200) / 100 - 1), [
      4,
      130,
      256,
    ]),
    w: f32([...Array(256 * 200).keys()].map((i) => ((i * 104729) % 200) / 100 - 1), [256, 200]),
    c: f32([...Array(200).keys()].map((i) => i / 200 - 0.5)),
  };
  const got = await (await compile(graph, { backend: gpu, cache: false })).run(feeds);
  const want = await (await compile(graph, { backend: "reference", cache: false })).run(feeds);
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-3, rtol: 1e-4 });
});

Deno.test("profile: true times every kernel with timestamp queries in the run's one readback", async () => {
  const profiled = new WebGpuBackend({ profile: true });
  await profiled.prepare();
  assert.ok(profiled.capabilities().timestampQuery, "llvmpipe offers timestamp-query");
  const b = new GraphBuilder();
  const x = b.input("x", [64, 256]);
  const h = b.op("Relu", [
    b.op("MatMul", [x, b.constant(new Float32Array(256 * 32).fill(0.01), [256, 32])]),
  ]);
  b.output("y", b.op("Softmax", [h], { axis: -1 }));
  const graph = b.build();
  const kernels = fuse(graph).kernels.map((k) => k.name);
  const input = { x: f32(Array.from({ length: 64 * 256 }, (_, i) => Math.sin(i)), [64, 256]) };
  using exe = await compile(graph, { backend: profiled, cache: false });
  assert.deepEqual(exe.deviceTimes(), []);
  const out = await exe.run(input);
  const times = exe.deviceTimes();
  assert.deepEqual(times.map((t) => t.kernel), kernels);
  assert.ok(times.every((t) => t.ms >= 0) && times.some((t) => t.ms > 0), JSON.stringify(times));
  using reference = await compile(graph, { backend: "reference" });
  const want = (await reference.run(input)).y;
  assertClose(numbers(out.y.data), numbers(want.data), { atol: 1e-5, rtol: 1e-5 });
  using plain = await compile(graph, { backend: gpu, cache: false });
  await plain.run(input);
  assert.deepEqual(plain.deviceTimes(), []);
  profiled.dispose();
});
