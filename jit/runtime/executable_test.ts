import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { KilnError } from "../support/errors.ts";
import { RunHandle } from "./run_handle.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { assertClose, f32, i32, numbers } from "../testing/testing.ts";

function affine() {
  const b = new GraphBuilder();
  const x = b.input("x", [2, 2]);
  const w = b.param("w", [2, 2], "f32", new Float32Array([1, 0, 0, 1]));
  const bias = b.param("bias", [2]);
  const y = b.op("Add", [b.op("MatMul", [x, w]), bias]);
  b.output("y", y);
  b.output("x_again", x);
  b.output("sum", b.op("ReduceSum", [y], { keepdims: 0 }));
  return b.build();
}

const isKiln = (code: string, pattern?: RegExp) => (e: unknown) =>
  e instanceof KilnError && e.code === code && /Fix: /.test(e.message) &&
  (!pattern || pattern.test(e.message));

Deno.test("run handles can be polled and awaited", async () => {
  const exe = await compile(affine());
  exe.setParam("bias", new Float32Array([10, 20]));
  const handle = exe.run({ x: f32([1, 2, 3, 4], [2, 2]) });
  assert.equal(handle.isReady(), false);
  assert.equal(handle.tryGet(), undefined);
  const out = await handle;
  assert.ok(handle.isReady());
  assert.equal(handle.tryGet(), out);
  assertClose(numbers(out.y.data), [11, 22, 13, 24]);
  assertClose(numbers((await handle.result()).sum.data), [70]);
});

Deno.test("outputs never alias the caller's input arrays", async () => {
  const exe = await compile(affine());
  exe.setParam("bias", new Float32Array([0, 0]));
  const x = f32([1, 2, 3, 4], [2, 2]);
  const out = await exe.run({ x });
  assert.notEqual(out.x_again.data, x.data);
  (out.x_again.data as Float32Array)[0] = 42;
  assert.equal(x.data[0], 1);
});

Deno.test("run({ outputs }) reads back only the requested outputs", async () => {
  const exe = await compile(affine());
  exe.setParam("bias", new Float32Array([0, 0]));
  const out = await exe.run({ x: f32([1, 2, 3, 4], [2, 2]) }, { outputs: ["sum"] });
  assert.deepEqual(Object.keys(out), ["sum"]);
  assert.throws(
    () => exe.run({ x: f32([1, 2, 3, 4], [2, 2]) }, { outputs: ["nope"] }),
    isKiln("bad-input", /request some of: y, x_again, sum/),
  );
});

Deno.test("bad inputs give clear errors and leave the executable usable", async () => {
  const exe = await compile(affine());
  assert.throws(
    () => exe.run({ x: f32([1, 2, 3, 4], [2, 2]) }),
    isKiln("bad-input", /Parameter "bias" has no data/),
  );
  exe.setParam("bias", f32([1, 1]));
  assert.throws(() => exe.run({}), isKiln("bad-input", /missing x/));
  assert.throws(
    () => exe.run({ x: f32([1, 2, 3, 4], [2, 2]), z: f32([1]) }),
    isKiln("bad-input", /unknown z/),
  );
  assert.throws(
    () => exe.run({ x: f32([1, 2, 3], [3]) }),
    isKiln("bad-input", /expected shape \[2, 2\], got \[3\]/),
  );
  assert.throws(
    () => exe.run({ x: i32([1, 2, 3, 4], [2, 2]) }),
    isKiln("bad-input", /expected dtype f32, got i32/),
  );
  assert.throws(
    () => exe.run({ x: { data: new Float32Array(3), shape: [2, 2], dtype: "f32" } }),
    isKiln("bad-input", /needs 4 elements, the data has 3/),
  );
  assert.throws(
    () => exe.run({ x: { data: new Int32Array(4), shape: [2, 2], dtype: "f32" } }),
    isKiln("bad-input", /cannot be stored in a Int32Array/),
  );
  assert.throws(() => exe.run(null as unknown as Record<string, never>), isKiln("bad-input"));
  assert.throws(() => exe.setParam("w", new Float32Array(3)), isKiln("bad-input"));
  assert.throws(
    () => exe.setParam("nope", new Float32Array(3)),
    isKiln("bad-input", /use one of: w, bias/),
  );
  const out = await exe.run({ x: f32([1, 2, 3, 4], [2, 2]) });
  assertClose(numbers(out.y.data), [2, 3, 4, 5]);
});

Deno.test("setParam copies: later writes by the caller change nothing", async () => {
  const exe = await compile(affine());
  const bias = new Float32Array([1, 1]);
  exe.setParam("bias", bias);
  bias[0] = 1000;
  const out = await exe.run({ x: f32([0, 0, 0, 0], [2, 2]) });
  assertClose(numbers(out.y.data), [1, 1, 1, 1]);
});

Deno.test("i64 inputs and outputs at the boundary", async () => {
  const b = new GraphBuilder();
  const idx = b.input("idx", [2], "i64");
  b.output("y", b.op("Add", [idx, b.constant(1, [], "i32")]), { dtype: "i64" });
  const exe = await compile(b.build());
  const out = await exe.run({
    idx: { data: new BigInt64Array([5n, -7n]), shape: [2], dtype: "i64" },
  });
  assert.equal(out.y.dtype, "i64");
  assert.deepEqual(Array.from(out.y.data as BigInt64Array), [6n, -6n]);
  assert.throws(
    () => exe.run({ idx: { data: new BigInt64Array([1n << 33n, 0n]), shape: [2], dtype: "i64" } }),
    isKiln("out-of-range", /element 0/),
  );
});

Deno.test("runtime failures reject the handle without leaving an unhandled rejection", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Gather", [b.input("x", [3]), b.input("i", [1], "i32")]));
  const exe = await compile(b.build());
  const handle = exe.run({ x: f32([1, 2, 3]), i: i32([7]) });
  await assert.rejects(handle.result(), isKiln("out-of-range"));
  assert.ok(handle.isReady());
  assert.throws(() => handle.tryGet(), isKiln("out-of-range"));
  const ok = await exe.run({ x: f32([1, 2, 3]), i: i32([-1]) });
  assertClose(numbers(ok.y.data), [3]);
});

Deno.test("disposed executables refuse to run; using disposes", async () => {
  const exe = await compile(affine());
  exe.dispose();
  assert.throws(() => exe.run({ x: f32([1, 2, 3, 4], [2, 2]) }), isKiln("disposed"));
  let outer: typeof exe | undefined;
  {
    using scoped = await compile(affine());
    outer = scoped;
  }
  assert.throws(() => outer!.setParam("bias", f32([1, 1])), isKiln("disposed"));
});

function counter() {
  const b = new GraphBuilder();
  const cache = b.input("cache", [3]);
  const step = b.input("step", [3]);
  const next = b.op("Add", [cache, step]);
  b.output("cache_out", next);
  b.output("doubled", b.op("Mul", [next, b.constant(2)]));
  return b.build();
}

Deno.test("state bindings feed an output back into an input every run (KV-cache pattern)", async () => {
  const exe = await compile(counter(), { state: { cache_out: "cache" } });
  const step = f32([1, 2, 3]);
  const first = await exe.run({ cache: f32([0, 0, 0]), step });
  assertClose(numbers(first.cache_out.data), [1, 2, 3]);
  const second = await exe.run({ step }, { outputs: ["doubled"] });
  assertClose(numbers(second.doubled.data), [4, 8, 12]);
  const third = await exe.run({ step });
  assertClose(numbers(third.cache_out.data), [3, 6, 9]);
  const fresh = await compile(counter(), { state: { cache_out: "cache" } });
  assert.throws(() => fresh.run({ step }), isKiln("bad-input", /missing cache/));
  await assert.rejects(
    () => compile(counter(), { state: { doubled: "step", nope: "cache" } }),
    isKiln("bad-input", /no output "nope"/),
  );
});

Deno.test("clone shares the compiled program but not params or state", async () => {
  const exe = await compile(counter(), { state: { cache_out: "cache" } });
  await exe.run({ cache: f32([10, 10, 10]), step: f32([1, 1, 1]) });
  const copy = exe.clone();
  assert.equal(copy.plan, exe.plan);
  await copy.run({ step: f32([1, 1, 1]) });
  const original = await exe.run({ step: f32([0, 0, 0]) });
  assertClose(numbers(original.cache_out.data), [11, 11, 11]);
});

Deno.test("runPipelined keeps several runs in flight and delivers in order", async () => {
  const exe = await compile(counter(), { state: { cache_out: "cache" } });
  const handles = exe.runPipelined([
    { cache: f32([0, 0, 0]), step: f32([1, 1, 1]) },
    { step: f32([1, 1, 1]) },
    { step: f32([1, 1, 1]) },
  ]);
  assert.equal(handles.length, 3);
  const results = await Promise.all(handles.map((h) => h.result()));
  assert.deepEqual(results.map((r) => numbers(r.cache_out.data)[0]), [1, 2, 3]);
});

Deno.test("stats() exposes stable counters and Prometheus text", async () => {
  const { stats, prometheusText } = await import("./telemetry.ts");
  const before = stats();
  const exe = await compile(affine());
  exe.setParam("bias", f32([0, 0]));
  await exe.run({ x: f32([1, 2, 3, 4], [2, 2]) });
  const after = stats();
  assert.equal(after.kiln_runs_total, before.kiln_runs_total + 1);
  assert.equal(after.kiln_compiles_total, before.kiln_compiles_total + 1);
  assert.ok(after.kiln_dispatches_total > before.kiln_dispatches_total);
  for (const v of Object.values(after)) assert.equal(typeof v, "number");
  assert.match(prometheusText(), /^# TYPE kiln_runs_total counter\nkiln_runs_total \d+$/m);
});

Deno.test("typed I/O: f16, u8 and bool in and out", async () => {
  const b = new GraphBuilder();
  const h = b.input("h", [3], "f16");
  const u = b.input("u", [3], "u8");
  const m = b.input("m", [3], "bool");
  b.output("h2", b.op("Mul", [h, h]));
  b.output("u1", b.op("Add", [u, b.constant(1, [], "u8")]));
  b.output("not", b.op("Not", [m]));
  const exe = await compile(b.build());
  const { toF16Bits } = await import("../ir/dtype.ts");
  const out = await exe.run({
    h: { data: Uint16Array.from([1, 2, 3], (v) => toF16Bits(v)), shape: [3], dtype: "f16" },
    u: { data: Uint8Array.from([1, 254, 255]), shape: [3], dtype: "u8" },
    m: { data: Uint8Array.from([1, 0, 1]), shape: [3], dtype: "bool" },
  });
  assert.equal(out.h2.dtype, "f16");
  assert.deepEqual(numbers(out.h2.data, true), [1, 4, 9]);
  assert.deepEqual(numbers(out.u1.data), [2, 255, 0]);
  assert.equal(out.not.dtype, "bool");
  assert.deepEqual(numbers(out.not.data), [0, 1, 0]);
});

Deno.test("run() snapshots the caller's arrays; dispose() mid-run lets started runs finish", async () => {
  const build = (k: number) => {
    const b = new GraphBuilder();
    const x = b.input("x", [64, 64]);
    b.output("y", b.op("Mul", [b.op("Relu", [b.op("MatMul", [x, x])]), b.constant(k)]));
    return b.build();
  };
  for (const backend of ["reference", "wasm", "webgpu"]) {
    const exe = await compile(build(1), { backend, cache: false });
    const data = new Float32Array(64 * 64).fill(1);
    // A finished run leaves pooled buffers: a run takes one at once and writes its input then.
    await exe.run({ x: { data: new Float32Array(64 * 64), shape: [64, 64], dtype: "f32" } });
    const pending = [0, 1, 2].map(() => exe.run({ x: { data, shape: [64, 64], dtype: "f32" } }));
    // Repetitions read the input again (wasm calls its program once a repetition).
    pending.push(exe.run({ x: { data, shape: [64, 64], dtype: "f32" } }, { repeat: 3 }));
    data.fill(-5); // the caller reuses its array at once
    exe.dispose();
    // Another executable takes pool buffers while the first one's runs are still in flight.
    const other = await compile(build(2), { backend, cache: false });
    const second = other.run({
      x: { data: new Float32Array(64 * 64).fill(1), shape: [64, 64], dtype: "f32" },
    });
    for (const r of await Promise.all(pending)) {
      assert.ok(
        numbers(r.y.data).every((v) => v === 64),
        `${backend}: a run saw the caller's later writes`,
      );
    }
    assert.ok(numbers((await second).y.data).every((v) => v === 128), backend);
    other.dispose();
    assert.throws(() => exe.run({ x: { data, shape: [64, 64], dtype: "f32" } }), KilnError);
  }
});

Deno.test("a graph output that folds to a constant is returned by every backend (a copy)", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [2, 3]);
  b.output("y", b.op("Neg", [x]));
  b.output("mask", b.op("ConstantOfShape", [], { shape: [2, 3], value: 1, dtype: "bool" }));
  const graph = b.build();
  for (const backend of ["reference", "wasm", "webgpu"]) {
    const exe = await compile(graph, { backend, cache: false });
    const first = await exe.run({ x: f32([1, 2, 3, 4, 5, 6], [2, 3]) });
    assert.deepEqual(numbers(first.mask.data), [1, 1, 1, 1, 1, 1], backend);
    (first.mask.data as Uint8Array).fill(0);
    const again = await exe.run({ x: f32([1, 2, 3, 4, 5, 6], [2, 3]) });
    assert.deepEqual(numbers(again.mask.data), [1, 1, 1, 1, 1, 1], `${backend}: a run changed it`);
    exe.dispose();
  }
});

Deno.test("a run's timing splits its wall time into host, wait and output parts", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.input("x", [1024])]));
  const x = { data: new Float32Array(1024).fill(0.5), shape: [1024], dtype: "f32" as const };
  for (const backend of ["reference", "wasm"]) {
    using exe = await compile(b.build(), { backend, cache: false });
    const handle = exe.run({ x });
    const t = await handle.timing();
    for (const part of [t.hostMs, t.waitMs, t.outputMs, t.wallMs]) {
      assert.ok(Number.isFinite(part) && part >= 0, `${backend}: ${JSON.stringify(t)}`);
    }
    assert.ok(Math.abs(t.hostMs + t.waitMs + t.outputMs - t.wallMs) < 1e-6, backend);
    assert.ok((await handle).y.data[0] > 1.6);
  }
  // A handle whose runner timed nothing says so, with a typed error.
  const bad = new RunHandle(Promise.reject(new Error("no")));
  await assert.rejects(bad.timing(), (e: unknown) => e instanceof KilnError);
  await assert.rejects(bad.result());
});
