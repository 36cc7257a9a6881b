import assert from "node:assert/strict";
import { compile, stats } from "../../mod.ts";
import { differentialOn } from "../../jit/testing/differential.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import {
  assertClose,
  assertMatchesReference,
  compileAndWarm,
  f32,
  numbers,
  runOp,
} from "../../jit/testing/testing.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { importOnnx } from "../../onnx/import/import.ts";
import { MODEL_NAMES, referenceModel } from "../../onnx/testdata.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { BackendRegistry } from "../registry.ts";
import { threadsFor, WasmBackend } from "./wasm_backend.ts";
import { warmUpBudget } from "./warm_up.ts";
import { ThreadTuner } from "./thread_tuner.ts";
import { WorkerPool } from "./worker_crew.ts";
import { denoWorkers } from "./web_workers.ts";
import { KernelCache } from "../../jit/runtime/kernel_cache.ts";

const wasm = new WasmBackend();
await wasm.prepare();

Deno.test("ops on wasm match the reference exactly where the reference is exact", async () => {
  const i32 = (v: number[]) => ({
    data: Int32Array.from(v),
    shape: [v.length],
    dtype: "i32" as const,
  });
  const cases: [string, HostTensor[], Attrs][] = [
    ["Add", [f32([1, 2, 3, 4, 5, 6], [2, 3]), f32([10, 20, 30], [3])], {}],
    ["Exp", [f32([NaN, Infinity, -Infinity, 0, 1])], {}],
    ["Log", [f32([0, -1, 1, Infinity, NaN])], {}],
    ["Pow", [f32([-2, 2, 0, 0, -8]), f32([3, 0.5, -1, 0, 1 / 3])], {}],
    ["Erf", [f32([-3, -0.5, 0, 0.3, 2.5, NaN])], {}],
    ["Div", [f32([1, -1, 0, 1]), f32([0, 0, 0, -0])], {}],
    ["Div", [i32([7, -7, 5, -2147483648]), i32([2, 2, 0, -1])], {}],
    ["Mod", [i32([-7, 7, 7]), i32([3, -3, 0])], {}],
    ["Mod", [f32([-7, 7.5]), f32([3, 2])], { fmod: 1 }],
    ["Cast", [f32([1.9, -1.9, 300, -300, NaN, 3e9])], { to: "i8" }],
    ["Cast", [f32([1.9, -1.9, 300, -300, NaN, 3e9])], { to: "u32" }],
    ["Cast", [f32([1, 65504, 1e6, 1e-8])], { to: "f16" }],
    ["Round", [f32([0.5, 1.5, 2.5, -0.5, -2.5])], {}],
    ["Max", [f32([NaN, 1, 2]), f32([1, NaN, 3])], {}],
    ["Softmax", [f32([1000, 1001, 1002, -1, 0, 1], [2, 3])], { axis: -1 }],
    ["ReduceMean", [f32([], [2, 0])], { axes: [1] }],
    ["ReduceSum", [f32(new Float32Array(1 << 16).fill(0.1))], { keepdims: 0 }],
    ["MaxPool", [f32([...Array(25).keys()], [1, 1, 5, 5])], {
      kernel_shape: [2, 2],
      strides: [2, 2],
      ceil_mode: 1,
    }],
    ["MatMul", [f32([...Array(24).keys()], [2, 3, 4]), f32([...Array(20).keys()], [4, 5])], {}],
  ];
  for (const [op, ins, attrs] of cases) {
    await assertMatchesReference(wasm, op, ins, attrs, { atol: 1e-6, rtol: 1e-6 });
  }
});

Deno.test("differential: 500 random graphs on wasm (whole-op kernels on the reference beside it)", async () => {
  const whole = await differentialOn(wasm, 500);
  assert.ok(whole > 250, `${whole} graphs wholly on wasm`);
});

for (const name of MODEL_NAMES) {
  Deno.test(`${name} on wasm matches ONNX Runtime within 1e-4`, async () => {
    const m = await referenceModel(name);
    const exe = await compile(importOnnx(m.bytes), { backend: wasm, cache: false });
    const out = await exe.run({ x: m.x });
    assertClose(numbers(out.y.data), m.y, { atol: 1e-4, rtol: 0, message: name });
  });
}

Deno.test("wasm honours shape buckets and re-runs with new inputs without stale data", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Softmax", [b.op("Mul", [b.input("x", [8, 5]), b.constant(2)])]));
  const exe = await compile(b.build(), { backend: wasm, buckets: ["x"], cache: false });
  const x1 = f32([...Array(40).keys()].map((v) => v / 10), [8, 5]);
  const full = await exe.run({ x: x1 });
  const part = await exe.run({ x: { ...x1, data: x1.data.slice(0, 15), shape: [3, 5] } });
  assert.deepEqual(part.y.shape, [3, 5]);
  assertClose(numbers(part.y.data), numbers(full.y.data).slice(0, 15));
  const x2 = f32(new Float32Array(40).fill(1), [8, 5]);
  assertClose(numbers((await exe.run({ x: x2 })).y.data), new Array(40).fill(0.2), { rtol: 1e-6 });
});

Deno.test("kiln run --backend wasm --json works", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("../../cli/mod.ts", import.meta.url).pathname,
      "run",
      "--backend",
      "wasm",
      "--json",
      "--runs",
      "2",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const report = JSON.parse(new TextDecoder().decode(out.stdout));
  assert.equal(report.backend, "wasm");
  assert.ok(Math.abs(report.outputs.y.mean - 0.1) < 1e-6);
});

Deno.test("a second process compiles from the disk cache without generating code", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const script = `${dir}/run.ts`;
    await Deno.writeTextFile(
      script,
      `import { compile, GraphBuilder } from ${
        JSON.stringify(new URL("../../mod.ts", import.meta.url).href)
      };
const b = new GraphBuilder();
b.output("y", b.op("Sigmoid", [b.input("x", [9])]));
const exe = await compile(b.build(), { backend: "wasm" });
const { y } = await exe.run({ x: { data: new Float32Array(9), shape: [9], dtype: "f32" } });
console.log(JSON.stringify({ y: Array.from(y.data), sources: exe.plan?.sources }));
exe.dispose();`,
    );
    const run = async () => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", script],
        env: { KILN_CACHE_DIR: `${dir}/cache` },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const err = new TextDecoder().decode(out.stderr);
      return {
        code: out.code,
        err,
        report: out.code ? undefined : JSON.parse(new TextDecoder().decode(out.stdout)),
      };
    };
    const first = await run();
    assert.equal(first.code, 0, first.err);
    assert.deepEqual(first.report.sources, { memory: 0, disk: 0, generated: 1 });
    const warm = await run();
    assert.equal(warm.code, 0, warm.err);
    assert.deepEqual(warm.report, {
      y: new Array(9).fill(0.5),
      sources: { memory: 0, disk: 1, generated: 0 },
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("withDefaults includes wasm", () => {
  assert.ok(BackendRegistry.withDefaults().list().some((b) => b.id === "wasm"));
});

Deno.test("runOp runs a one-node graph on wasm", async () => {
  const [sum] = await runOp("Add", [f32([1, 2]), f32([10, 20])], {}, { backend: wasm });
  assertClose(numbers(sum.data), [11, 22]);
  const exps = await runOp("Exp", [f32([0, 1])], {}, { backend: wasm });
  assertClose(numbers(exps[0].data), [1, Math.E], { rtol: 1e-6 });
});

Deno.test("profile: true times every kernel of a run, and explain shows the times", async () => {
  const profiled = new WasmBackend({ threads: 1, profile: true, warmUpMs: 0 });
  await profiled.prepare();
  const b = new GraphBuilder();
  const x = b.input("x", [64, 32]);
  b.output(
    "y",
    b.op("Softmax", [
      b.op("MatMul", [x, b.constant(new Float32Array(32 * 16).fill(0.5), [32, 16])]),
    ]),
  );
  using exe = await compile(b.build(), { backend: profiled, cache: false });
  assert.deepEqual(exe.deviceTimes(), [], "no run yet");
  await exe.run({ x: f32(new Float32Array(64 * 32).fill(1), [64, 32]) });
  const times = exe.deviceTimes();
  assert.deepEqual(times.map((t) => t.kernel), exe.plan!.kernels.map((k) => k.name));
  assert.ok(times.every((t) => t.ms >= 0 && Number.isFinite(t.ms)));
  const { explain } = await import("../../jit/runtime/explain.ts");
  assert.ok((await explain(exe)).kernels.every((k) => k.deviceMs !== undefined));
  // Unprofiled programs record nothing.
  using plain = await compile(b.build(), { backend: wasm, cache: false });
  await plain.run({ x: f32(new Float32Array(64 * 32).fill(1), [64, 32]) });
  assert.deepEqual(plain.deviceTimes(), []);
});

Deno.test("a compiled program is warmed up at its second run, within warmUpMs", async () => {
  assert.throws(() => new WasmBackend({ warmUpMs: -1 }), /warmUpMs must be 0 or more/);
  assert.throws(() => new WasmBackend({ warmUpMs: NaN }), /warmUpMs must be 0 or more/);
  const b = new GraphBuilder();
  b.output("y", b.op("Relu", [b.op("MatMul", [b.input("x", [64, 64]), b.param("w", [64, 64])])]));
  const graph = b.build();
  for (const warmUpMs of [0, 50]) {
    const backend = new WasmBackend({ threads: 1, warmUpMs, profile: true });
    await backend.prepare();
    using exe = await compile(graph, { backend, cache: false });
    assert.deepEqual(exe.deviceTimes(), [], "nothing runs in the compile");
    // The warm-up runs on zeros at the second run; the runs see the caller's data and params.
    const data = new Float32Array(64 * 64).fill(1);
    const x = { data, shape: [64, 64], dtype: "f32" as const };
    exe.setParam("w", f32(new Float32Array(64 * 64).fill(-0.5), [64, 64]));
    assert.deepEqual(numbers((await exe.run({ x })).y.data), new Array(64 * 64).fill(0));
    exe.setParam("w", f32(new Float32Array(64 * 64).fill(0.25), [64, 64]));
    const second = exe.run({ x });
    // The second run waits for the warm-up: it keeps the data as it was when run() was called.
    data.fill(2);
    assert.deepEqual(numbers((await second).y.data), new Array(64 * 64).fill(16));
    assert.deepEqual(numbers((await exe.run({ x })).y.data), new Array(64 * 64).fill(32));
  }
  // A program whose one unoptimized run would outlast the warm-up is not warmed up: 268 MFLOP
  // against 50 ms at 3 GFLOP/s.
  const heavy = new GraphBuilder();
  heavy.output(
    "y",
    heavy.op("MatMul", [heavy.input("x", [512, 512]), heavy.param("w", [512, 512])]),
  );
  assert.equal(warmUpBudget(heavy.build(), 50), 0);
  assert.equal(warmUpBudget(graph, 50), 50);
});

Deno.test("by default wasm uses every core up to 4, and leaves a quarter free beyond", () => {
  assert.deepEqual([1, 2, 4, 6, 8, 16, 64].map(threadsFor), [1, 2, 4, 5, 6, 12, 48]);
});

Deno.test("without a cache, kernels equal in structure are generated and compiled once", async () => {
  const backend = new WasmBackend({ threads: 1, warmUpMs: 0 });
  const generate = backend.codegen.generate.bind(backend.codegen);
  let calls = 0;
  backend.codegen.generate = (k) => (calls++, generate(k));
  const b = new GraphBuilder();
  const h = b.op("MatMul", [b.input("x", [8, 8]), b.param("w1", [8, 8])]);
  b.output("y", b.op("MatMul", [h, b.param("w2", [8, 8])]));
  const graph = b.build();
  using exe = await compile(graph, { backend, cache: false });
  assert.equal(exe.plan?.kernels.length, 2);
  assert.equal(calls, 1, "two equal matmuls, one generation");
  const x = f32(numbers(new Float32Array(64).map((_, i) => i % 7 - 3)), [8, 8]);
  const w1 = f32(new Float32Array(64).map((_, i) => (i % 5) / 4), [8, 8]);
  const w2 = f32(new Float32Array(64).map((_, i) => (i % 3) - 1), [8, 8]);
  exe.setParam("w1", w1);
  exe.setParam("w2", w2);
  using ref = await compile(graph, { backend: "reference" });
  ref.setParam("w1", w1);
  ref.setParam("w2", w2);
  assertClose(numbers((await exe.run({ x })).y.data), numbers((await ref.run({ x })).y.data), {
    atol: 1e-5,
  });
});

Deno.test("a program's thread verdict is kept beside the kernel cache for the next compile", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const b = new GraphBuilder();
    const x = b.input("x", [256, 256]);
    b.output("y", b.op("Tanh", [b.op("Exp", [b.op("Sin", [x])])]));
    const graph = b.build();
    const notes = async () =>
      (await Array.fromAsync(Deno.readDir(dir))).filter((e) => e.name.startsWith("tuning-"));
    const backend = new WasmBackend({ threads: 2, warmUpMs: 2000 });
    await compileAndWarm(graph, { backend, cache: new KernelCache({ dir }) });
    // Stored by the end of the second run, whose warm-up reached it.
    const [note] = await notes();
    assert.ok(note, "the verdict was stored");
    const verdict = await Deno.readTextFile(`${dir}/${note.name}`);
    assert.match(verdict, /^(threads|alone) 2$/);
    // The next compile starts from it (nothing to store anew) and still computes right.
    await Deno.writeTextFile(
      `${dir}/${note.name}`,
      verdict === "alone 2" ? "threads 2" : "alone 2",
    );
    using exe = await compile(graph, { backend, cache: new KernelCache({ dir }) });
    assert.notEqual(await Deno.readTextFile(`${dir}/${note.name}`), verdict, "the seed was used");
    // A verdict for another thread count (another machine, another setting) is timed anew.
    await Deno.writeTextFile(`${dir}/${note.name}`, "threads 7");
    await compileAndWarm(graph, { backend, cache: new KernelCache({ dir }) });
    assert.match(await Deno.readTextFile(`${dir}/${note.name}`), /^(threads|alone) 2$/);
    const data = new Float32Array(256 * 256).map((_, i) => (i % 13) / 7);
    const got = numbers((await exe.run({ x: f32(data, [256, 256]) })).y.data);
    assert.ok(got.every((v, i) => Math.abs(v - Math.tanh(Math.exp(Math.sin(data[i])))) < 1e-5));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a compile from the disk cache with a verdict of threads spawns the workers after its first result", async () => {
  const dir = await Deno.makeTempDir();
  // A thread count no other test uses: the pool is process-wide, one per count.
  const pool = () => WorkerPool.of({ threads: 3, ...denoWorkers()! });
  try {
    const b = new GraphBuilder();
    b.output("y", b.op("Tanh", [b.op("Exp", [b.op("Sin", [b.input("x", [256, 256])])])]));
    const graph = b.build();
    const x = { x: f32(new Float32Array(65536).fill(0.5), [256, 256]) };
    const backend = new WasmBackend({ threads: 3, warmUpMs: 2000 });
    await compileAndWarm(graph, { backend, cache: new KernelCache({ dir }) });
    const [note] = (await Array.fromAsync(Deno.readDir(dir))).filter((e) =>
      e.name.startsWith("tuning-")
    );
    for (const verdict of ["alone", "threads"]) {
      pool().close();
      await Deno.writeTextFile(`${dir}/${note.name}`, `${verdict} 3`);
      const warm = new WasmBackend({ threads: 3, warmUpMs: 0 });
      using exe = await compile(graph, { backend: warm, cache: new KernelCache({ dir }) });
      assert.equal(exe.plan?.sources.disk, 1, "served from the disk cache");
      // Nothing spawned before the first result: each spawn blocks this thread (Deno).
      assert.equal(pool().spawned, 0, `${verdict}: spawned by the compile`);
      await exe.run(x);
      assert.equal(pool().spawned, 0, `${verdict}: spawned by the first run`);
      await exe.run(x);
      assert.equal(pool().spawned, verdict === "threads" ? 2 : 0, `${verdict}: second run`);
      for (let t = 0; t < (verdict === "threads" ? 250 : 25) && pool().ready() < 2; t++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(pool().ready(), verdict === "threads" ? 2 : 0, verdict);
    }
  } finally {
    pool().close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a thread tuner seeded with a verdict takes it at once and probes later", () => {
  for (const seed of [true, false]) {
    const tuner = new ThreadTuner(seed);
    assert.equal(tuner.choice, seed);
    const ways: boolean[] = [];
    for (let i = 0; i < ThreadTuner.CLEAR_PROBE + 8 && ways.every((w) => w === seed); i++) {
      const threads = tuner.next();
      ways.push(threads);
      tuner.record(threads, 1, true);
    }
    assert.ok(ways.length > ThreadTuner.CLEAR_PROBE, `probed after ${ways.length} runs`);
  }
});

Deno.test("an attention group runs threaded as one chain and computes what its kernels compute alone", async () => {
  const b = new GraphBuilder();
  const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, [1, 4, 64, 32], "f32"));
  const t = b.op("Transpose", [k], { perm: [0, 1, 3, 2] });
  const scores = b.op("Mul", [b.op("MatMul", [q, t]), b.constant(0.125)]);
  const attention = b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]);
  // Read by a kernel after the group, the weighted values are an intermediate: its place must
  // not be the scores' while other threads' shares still read them.
  const heads = b.op("Reshape", [b.op("Transpose", [attention], { perm: [0, 2, 1, 3] })], {
    shape: [64, 128],
  });
  const w = Float32Array.from({ length: 128 * 128 }, (_, i) => Math.cos(i * 0.37) / 16);
  b.output("y", b.op("MatMul", [heads, b.constant(w, [128, 128])]));
  const graph = b.build();
  const ramp = (s: number) => Float32Array.from({ length: 8192 }, (_, i) => Math.sin(i * s));
  const inputs = {
    q: f32(ramp(0.1), [1, 4, 64, 32]),
    k: f32(ramp(0.2), [1, 4, 64, 32]),
    v: f32(ramp(0.3), [1, 4, 64, 32]),
  };
  const want = numbers((await (await compile(graph, { backend: "reference" })).run(inputs)).y.data);
  using exe = await compile(graph, {
    backend: new WasmBackend({ threads: 2, warmUpMs: 0 }),
    cache: false,
  });
  const pieces = () => stats().kiln_worker_pieces_total;
  const before = pieces();
  // The thread tuner's first runs alternate between the threads and one thread; a worker takes
  // a share only where it wakes before the caller has done them all, which a busy machine can
  // delay for many runs (CI once saw none in 40): runs until one has, or 400.
  for (let i = 0; i < 400 && pieces() === before; i++) {
    assertClose(numbers((await exe.run(inputs)).y.data), want, { rtol: 1e-5, atol: 1e-6 });
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.ok(pieces() > before, "a worker ran a share of the chain");
  assertClose(numbers((await exe.run(inputs)).y.data), want, { rtol: 1e-5, atol: 1e-6 });
});
