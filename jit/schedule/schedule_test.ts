import assert from "node:assert/strict";
import {
  BackendBase,
  BackendRegistry,
  compile,
  type CompileOptions,
  ReferenceBackend,
} from "../../mod.ts";
import type { Cost, DeviceProfile, KernelCodegen, Program, Workload } from "../runtime/backend.ts";
import type { Graph } from "../ir/graph.ts";
import { type BackendRates, knownRates, setBackendRates } from "./cost_model.ts";
import { explain } from "../runtime/explain.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { KilnError } from "../support/errors.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import { keepElidedTogether, schedule } from "./schedule.ts";
import { fuse } from "../passes/fuse.ts";
import { uniform } from "../support/random.ts";
import { assertClose, delayed, numbers } from "../testing/testing.ts";
import { registerOp } from "../runtime/custom_op.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";

/** A "GPU" that runs the reference kernels but is costed like a discrete GPU under Deno. */
class FakeGpu extends ReferenceBackend {
  override readonly id = "fake-gpu";
  override readonly kind = "gpu";
  lose(): void {
    this.setDeviceLost(true);
  }
}

/** A SIMD CPU costed slower than the GPU for large work, and measured so too (40 ms a kernel). */
class FakeSimd extends ReferenceBackend {
  override readonly id = "fake-simd";
  override readonly kind = "cpu-simd";
  override readonly codegen: KernelCodegen = delayed(new ReferenceBackend().codegen!, 40);
}

/** A SIMD CPU that runs as fast as the reference. */
class QuickSimd extends ReferenceBackend {
  override readonly id = "quick-simd";
  override readonly kind = "cpu-simd";
}

/** A GPU whose estimate wins but whose runs pay a real 25 ms per kernel (a slow readback). */
class SlowSyncGpu extends ReferenceBackend {
  override readonly id = "sync-gpu";
  override readonly kind = "gpu";
  override readonly codegen: KernelCodegen = delayed(new ReferenceBackend().codegen!, 25);
}

const cpu: BackendRates = {
  bytesPerMs: 2e6,
  flopsPerMs: 5e6,
  dispatchMs: 0.001,
  syncMs: 0,
  transferBytesPerMs: Infinity,
};
const gpu: BackendRates = {
  bytesPerMs: 2e9,
  flopsPerMs: 2e10,
  dispatchMs: 0.005,
  syncMs: 11,
  transferBytesPerMs: 1e7,
};

function setup() {
  const registry = new BackendRegistry();
  const fakeGpu = new FakeGpu();
  registry.register(fakeGpu).register(new FakeSimd());
  setBackendRates("reference", cpu);
  setBackendRates("fake-simd", { ...cpu, bytesPerMs: 4e6, flopsPerMs: 2e7 });
  setBackendRates("fake-gpu", gpu);
  return { registry, fakeGpu };
}

function elementwise(n: number) {
  const b = new GraphBuilder();
  b.output("y", b.op("Add", [b.op("Mul", [b.input("x", [n]), b.constant(2)]), b.constant(1)]));
  return b.build();
}

function matmuls(n: number) {
  const b = new GraphBuilder();
  const a = b.input("a", [n, n]);
  const h = b.op("Sigmoid", [b.op("MatMul", [a, b.input("w1", [n, n])])]);
  const s = b.op("Softmax", [h]);
  b.output("y", b.op("MatMul", [s, b.input("w2", [n, n])]));
  return b.build();
}

Deno.test("auto keeps a tiny graph off the GPU and sends a large one to it", async () => {
  const { registry } = setup();
  const tiny = await compile(elementwise(16), { registry, cache: false });
  assert.deepEqual(tiny.plan!.schedule.placement, ["fake-simd"]);
  const big = await compile(matmuls(256), { registry, cache: false });
  assert.deepEqual(big.plan!.schedule.placement, ["fake-gpu", "fake-gpu", "fake-gpu"]);
  assert.ok(big.plan!.schedule.transfers.some((t) => t.from === "host" && t.to === "fake-gpu"));
  assert.ok(big.plan!.schedule.transfers.some((t) => t.from === "fake-gpu" && t.to === "host"));
  const out = await tiny.run({
    x: { data: new Float32Array(16).fill(1), shape: [16], dtype: "f32" },
  });
  assertClose(numbers(out.y.data), new Array(16).fill(3));
});

Deno.test("the middle of a GPU chain stays on the GPU (no ping-pong)", async () => {
  const { registry } = setup();
  const exe = await compile(matmuls(256), { registry, cache: false });
  const p = exe.plan!.schedule.placement;
  assert.ok(p.every((b) => b === p[0]), `placement ${p}`);
  assert.equal(
    exe.plan!.schedule.transfers.filter((t) => t.from !== "host" && t.to !== "host").length,
    0,
  );
});

Deno.test("a copy back to the host costs the device's sync: no trip out and back for one cheap kernel", () => {
  const graph = matmuls(256);
  const { kernels, constants } = fuse(graph);
  assert.equal(kernels.length, 3);
  // The GPU streams slowly and multiplies fast; the host the other way round: the softmax alone
  // is cheaper on the host (0.1 ms against 5), but its trip there waits out the GPU's 11 ms.
  const rates = [
    { ...gpu, bytesPerMs: 1e5, flopsPerMs: 2e10, transferBytesPerMs: 1e7, syncMs: 11 },
    { ...cpu, bytesPerMs: 4e6, flopsPerMs: 1e6 },
  ];
  const placed = schedule({
    kernels,
    hostValues: new Set(
      [...graph.inputs, ...graph.params].map((b) => b.value).concat([...constants.keys()]),
    ),
    outputs: new Set(graph.outputs.map((o) => o.value)),
    backends: [new FakeGpu(), new QuickSimd()],
    policy: { kind: "auto" },
    rates,
  });
  assert.deepEqual(placed.placement, ["fake-gpu", "fake-gpu", "fake-gpu"]);
});

Deno.test("named, prefer, local-first and min-cost policies", async () => {
  const { registry } = setup();
  const g = elementwise(1 << 12);
  assert.deepEqual(
    (await compile(g, { registry, backend: "fake-gpu", cache: false })).plan!.schedule.placement,
    ["fake-gpu"],
  );
  assert.deepEqual(
    (await compile(g, { registry, policy: { kind: "prefer", backendKind: "gpu" }, cache: false }))
      .plan!.schedule.placement,
    ["fake-gpu"],
  );
  assert.deepEqual(
    // Host inputs go to the fastest CPU backend, not the first registered (the reference).
    (await compile(g, { registry, policy: "local-first", cache: false })).plan!.schedule.placement,
    ["fake-simd"],
  );
  assert.deepEqual(
    (await compile(g, { registry, policy: "min-cost", cache: false })).plan!.schedule.placement,
    ["fake-simd"],
  );
  await assert.rejects(
    () => compile(g, { registry, policy: "named" }),
    (e: unknown) => e instanceof KilnError && /needs a target/.test(e.message),
  );
});

Deno.test("auto falls back off a lost GPU", async () => {
  const { registry, fakeGpu } = setup();
  fakeGpu.lose();
  const exe = await compile(matmuls(512), { registry, cache: false });
  assert.ok(exe.plan!.schedule.placement.every((b) => b !== "fake-gpu"));
});

Deno.test("explain shows each kernel's backend, its cost estimate and the transfers", async () => {
  const { registry } = setup();
  const e = await explain(matmuls(256), { registry, cache: false });
  assert.ok(
    e.kernels.every((k) =>
      k.backend === "fake-gpu" && typeof k.estimatedMs === "number" && k.estimatedMs > 0
    ),
  );
  assert.ok(e.transfers.length >= 3);
  assert.match(e.text(), /placement: auto: /);
  const feeds = {
    a: { data: uniform(256 * 256, 1), shape: [256, 256], dtype: "f32" as const },
    w1: { data: uniform(256 * 256, 2), shape: [256, 256], dtype: "f32" as const },
    w2: { data: uniform(256 * 256, 3), shape: [256, 256], dtype: "f32" as const },
  };
  const placed = await (await compile(matmuls(256), { registry, cache: false })).run(feeds);
  const plain = await (await compile(matmuls(256), { fuse: false })).run(feeds);
  assertClose(numbers(placed.y.data), numbers(plain.y.data), { atol: 1e-5 });
});

Deno.test("toDevice/toHost pin placement with explicit transfers; no device is a clear error", async () => {
  const { registry } = setup();
  const b = new GraphBuilder();
  const onDevice = b.op("Exp", [b.op("ToDevice", [b.input("x", [64])])]);
  b.output("y", b.op("Neg", [b.op("ToHost", [onDevice])]));
  const graph = b.build();
  const exe = await compile(graph, { registry, cache: false });
  const placement = exe.plan!.schedule.placement;
  const kernels = exe.plan!.kernels.map((k) => k.placement ?? k.pattern);
  assert.equal(placement[kernels.indexOf("ToDevice")], "fake-gpu");
  assert.notEqual(placement[kernels.indexOf("ToHost")], "fake-gpu");
  assert.ok(exe.plan!.schedule.transfers.some((t) => t.from === "host" && t.to === "fake-gpu"));
  const out = await exe.run({
    x: { data: new Float32Array(64).fill(0), shape: [64], dtype: "f32" },
  });
  assertClose(numbers(out.y.data), new Array(64).fill(-1));
  await assert.rejects(
    () => compile(graph, { registry: new BackendRegistry(), cache: false }),
    (e: unknown) => e instanceof KilnError && /ToDevice/.test(e.message) && /Fix:/.test(e.message),
  );
});

Deno.test("a value copied to the device once is mirrored there, not copied again", async () => {
  const { registry } = setup();
  const b = new GraphBuilder();
  const x = b.input("x", [512, 512]);
  const w = b.input("w", [512, 512]);
  // A Gather of the product's columns (of its rows, it would be picked before the product).
  const reversed = Int32Array.from({ length: 512 }, (_, i) => 511 - i);
  const h = b.op("Gather", [b.op("MatMul", [x, w]), b.constant(reversed)], { axis: 1 });
  b.output("y", b.op("MatMul", [h, w]));
  // The estimate's own plan (auto would time it against the all-host plan).
  const exe = await compile(b.build(), { registry, cache: false, policy: "min-cost" });
  const copies = exe.plan!.schedule.transfers.filter((t) => t.to === "fake-gpu");
  const wValue = exe.graph.inputs[1].value;
  assert.equal(
    copies.filter((t) => t.value === wValue).length,
    1,
    JSON.stringify(exe.plan!.schedule),
  );
});

/** A GPU that reports itself as a software adapter (llvmpipe) and is costed as infinitely fast. */
class FakeSoftwareGpu extends ReferenceBackend {
  override readonly id = "soft-gpu";
  override readonly kind = "gpu";
  override capabilities(): DeviceProfile {
    return { ...super.capabilities(), software: true };
  }
}

Deno.test("no policy but naming it places work on a software GPU, however fast it is costed", async () => {
  const registry = new BackendRegistry().register(new FakeSoftwareGpu()).register(new FakeSimd());
  setBackendRates("soft-gpu", { ...gpu, flopsPerMs: 1e15, bytesPerMs: 1e15, syncMs: 0 });
  setBackendRates("fake-simd", cpu);
  for (const policy of ["auto", "min-cost", "local-first"] as const) {
    const exe = await compile(matmuls(64), { registry, policy, cache: false });
    assert.ok(!exe.plan!.schedule.placement.includes("soft-gpu"), policy);
  }
  const gpuKind = await compile(matmuls(64), {
    registry,
    policy: { kind: "prefer", backendKind: "gpu" },
    cache: false,
  });
  assert.ok(!gpuKind.plan!.schedule.placement.includes("soft-gpu"));
  const named = await compile(matmuls(64), { registry, backend: "soft-gpu", cache: false });
  assert.ok(named.plan!.schedule.placement.every((id) => id === "soft-gpu"));
});

Deno.test("auto times a device plan against the all-host plan when estimates are close", async () => {
  const registry = new BackendRegistry().register(new SlowSyncGpu()).register(new QuickSimd());
  setBackendRates("reference", { ...cpu, flopsPerMs: 1, bytesPerMs: 1 });
  // Estimated: the GPU finishes sooner than the host...
  setBackendRates("sync-gpu", { ...gpu, syncMs: 0.1 });
  setBackendRates("quick-simd", { ...cpu, flopsPerMs: 1e6 });
  // ...but each of its kernels waits 25 ms: the host wins when timed, as the estimate is within
  // the trial ratio.
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.op("MatMul", [b.input("a", [64, 64]), b.input("w", [64, 64])])]));
  const exe = await compile(b.build(), { registry, cache: false });
  assert.deepEqual(exe.plan!.schedule.placement, ["quick-simd"]);
  setBackendRates("quick-simd", { ...cpu, flopsPerMs: 1 });
  const far = await compile(b.build(), { registry, cache: false });
  assert.deepEqual(far.plan!.schedule.placement, ["sync-gpu"], "beyond the ratio, no trial");
  for (const id of ["reference", "sync-gpu", "quick-simd"]) setBackendRates(id, undefined);
});

Deno.test("auto times the device's plan against an all-host estimate too, and keeps the faster", async () => {
  const { registry } = setup();
  // Estimated: the host's SIMD backend is faster (a GPU calibrated slow)...
  setBackendRates("fake-simd", { ...cpu, flopsPerMs: 1e7, bytesPerMs: 1e7 });
  setBackendRates("fake-gpu", { ...gpu, flopsPerMs: 5e6, bytesPerMs: 5e6, syncMs: 0.1 });
  // ...but each of its kernels takes 40 ms, the GPU's none: timed, the GPU's plan wins.
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.op("MatMul", [b.input("a", [64, 64]), b.input("w", [64, 64])])]));
  const exe = await compile(b.build(), { registry, cache: false });
  assert.deepEqual(exe.plan!.schedule.placement, ["fake-gpu"]);
  // Beyond the trial ratio the estimate stands, untimed.
  setBackendRates("fake-gpu", { ...gpu, flopsPerMs: 1e3, bytesPerMs: 1e3, syncMs: 0.1 });
  const far = await compile(b.build(), { registry, cache: false });
  assert.deepEqual(far.plan!.schedule.placement, ["fake-simd"]);
  for (const id of ["reference", "fake-simd", "fake-gpu"]) setBackendRates(id, undefined);
});

Deno.test("auto with one backend for every kernel calibrates nothing: there is nothing to weigh", async () => {
  class Lone extends ReferenceBackend {
    override readonly id = "lone-simd";
    override readonly kind = "cpu-simd";
    override capabilities(): DeviceProfile {
      return { ...super.capabilities(), interpreter: false };
    }
  }
  const lone = new Lone();
  const registry = new BackendRegistry().register(lone);
  const exe = await compile(elementwise(16), { registry, cache: false });
  assert.deepEqual(exe.plan!.schedule.placement, ["lone-simd"]);
  assert.match((await explain(exe)).text(), /placement: auto: only "lone-simd"/);
  assert.equal(knownRates(lone), undefined, "its probes were not compiled and run");
});

/** A SIMD CPU that states its own cost: `ms` per kernel, whatever its rates say. */
class Priced extends ReferenceBackend {
  override readonly kind = "cpu-simd";
  constructor(override readonly id: string, readonly ms: number) {
    super();
  }
  estimateCost(_graph: Graph, work: Workload): Cost {
    assert.ok(work.flops > 0 && work.bytes > 0);
    return { compute: this.ms, transfer: 0 };
  }
}

Deno.test("a backend's own estimateCost replaces its rates under every cost-driven policy", async () => {
  const registry = new BackendRegistry().register(new Priced("cheap", 1e-6))
    .register(new Priced("dear", 1e6)).register(new FakeGpu());
  // By their rates "dear" is the fastest and "cheap" the slowest of all.
  setBackendRates("cheap", { ...cpu, flopsPerMs: 1, bytesPerMs: 1 });
  setBackendRates("dear", { ...cpu, flopsPerMs: 1e12, bytesPerMs: 1e12 });
  setBackendRates("fake-gpu", gpu);
  for (const policy of ["auto", "min-cost", "local-first"] as const) {
    for (const g of [elementwise(1 << 12), matmuls(256)]) {
      const exe = await compile(g, { registry, policy, cache: false });
      assert.ok(exe.plan!.schedule.placement.every((id) => id === "cheap"), policy);
      const e = await explain(exe);
      assert.ok(e.kernels.every((k) => k.estimatedMs === 1e-6), policy);
    }
  }
  for (const id of ["cheap", "dear", "fake-gpu"]) setBackendRates(id, undefined);
});

/** A custom backend that compiles whole graphs only (no kernel codegen), of a chosen kind. */
class WholeGraph extends BackendBase {
  readonly version = "1";
  protected readonly nativeOps: ReadonlySet<string> = new Set([
    "Constant",
    "Add",
    "Mul",
    "MatMul",
    "Exp",
  ]);
  compiled = 0;
  /** Its own estimate, when it was given one. */
  readonly estimateCost?: (graph: Graph, work: Workload) => Cost;
  constructor(readonly id: string, readonly kind: "cpu" | "gpu", ms: number | undefined) {
    super();
    if (ms === undefined) return;
    this.estimateCost = (graph, work) => {
      assert.ok(graph.nodes.length > 0 && work.flops > 0);
      return { compute: ms, transfer: 0 };
    };
  }
  capabilities(): DeviceProfile {
    return { ...new ReferenceBackend().capabilities(), name: this.id };
  }
  override async compile(graph: Graph): Promise<Program> {
    this.compiled++;
    return await new ReferenceBackend().compile(graph);
  }
}

Deno.test("a graph-level custom backend takes part in every policy, as a whole-graph plan", async () => {
  const feeds = { x: { data: uniform(1 << 12, 4), shape: [1 << 12], dtype: "f32" as const } };
  const want = numbers(
    (await (await compile(elementwise(1 << 12), { fuse: false })).run(feeds)).y.data,
  );
  const place = async (backend: WholeGraph, policy: CompileOptions["policy"]) => {
    const registry = new BackendRegistry().register(new QuickSimd()).register(backend);
    setBackendRates("quick-simd", { ...cpu, bytesPerMs: 4e6, flopsPerMs: 2e7 });
    setBackendRates("reference", cpu);
    const exe = await compile(elementwise(1 << 12), { registry, policy, cache: false });
    assertClose(numbers((await exe.run(feeds)).y.data), want);
    return exe;
  };
  for (const policy of ["auto", "min-cost", "local-first"] as const) {
    const fast = new WholeGraph("whole-fast", "cpu", 1e-6);
    const exe = await place(fast, policy);
    assert.equal(exe.backend.id, "whole-fast", policy);
    assert.equal(fast.compiled, 1);
    assert.match((await explain(exe)).text(), /whole-fast runs the whole graph \(est\./);
    // A dearer estimate keeps the kernel plan.
    const slow = await place(new WholeGraph("whole-slow", "cpu", 1e6), policy);
    assert.equal(slow.plan!.schedule.placement[0], "quick-simd", policy);
  }
  // Without its own estimate, it is costed by its calibrated rates.
  setBackendRates("whole-rated", { ...cpu, flopsPerMs: 1e15, bytesPerMs: 1e15 });
  assert.equal(
    (await place(new WholeGraph("whole-rated", "cpu", undefined), "auto")).backend.id,
    "whole-rated",
  );
  setBackendRates("whole-rated", undefined);
  // prefer: the preferred kind runs the graph when no kernel backend of that kind can.
  const gpuKind = await place(new WholeGraph("whole-gpu", "gpu", 1e6), {
    kind: "prefer",
    backendKind: "gpu",
  });
  assert.equal(gpuKind.backend.id, "whole-gpu");
  assert.match((await explain(gpuKind)).placement, /prefer gpu: whole-gpu runs the whole graph/);
  // A graph it cannot run (Sigmoid is not among its ops, nor decomposes into them) stays on kernels.
  const registry = new BackendRegistry().register(new QuickSimd())
    .register(new WholeGraph("whole-partial", "cpu", 1e-6));
  const b = new GraphBuilder();
  b.output("y", b.op("Sigmoid", [b.input("x", [8])]));
  const exe = await compile(b.build(), { registry, cache: false });
  assert.equal(exe.plan!.schedule.placement[0], "quick-simd");
  for (const id of ["quick-simd", "reference"]) setBackendRates(id, undefined);
});

Deno.test("kernels touching a value a backend elides move there together, and only then", () => {
  const kernel = (name: string, inputs: number[], outputs: number[]): KernelIR => ({
    name,
    pattern: "elementwise",
    ops: [],
    space: [1],
    reduced: [],
    inputs: inputs.map((value) => ({ value, shape: [1], dtype: "f32" })),
    reductions: [],
    outputs: outputs.map((value) => ({
      value,
      shape: [1],
      dtype: "f32",
      expr: { kind: "const", value: 0, dtype: "f32" },
      steps: [],
      level: "full",
    })),
  });
  // 0 → a → 1 → b → 2 → c → 3 → d → 4; backend 1 elides values 2 and 3 (b, c, d's group).
  const ks = [
    kernel("a", [0], [1]),
    kernel("b", [1], [2]),
    kernel("c", [2], [3]),
    kernel("d", [3], [4]),
  ];
  const elided = [new Set<number>(), new Set([2, 3])];
  assert.deepEqual(keepElidedTogether(ks, [0, 0, 1, 0], elided), [0, 1, 1, 1]);
  assert.deepEqual(keepElidedTogether(ks, [1, 0, 0, 0], elided), [1, 0, 0, 0]);
  assert.deepEqual(keepElidedTogether(ks, [0, 1, 1, 1], elided), [0, 1, 1, 1]);
});

Deno.test("auto with a GPU and no SIMD CPU backend places and times without one", async () => {
  const registry = new BackendRegistry().register(new FakeGpu());
  setBackendRates("reference", cpu);
  setBackendRates("fake-gpu", gpu);
  using exe = await compile(matmuls(256), { registry, cache: false });
  assert.ok(exe.plan!.schedule.placement.includes("fake-gpu"), exe.plan!.schedule.placement.join());
  const n = 256 * 256;
  const feed = (seed: number) => ({
    data: uniform(n, seed),
    shape: [256, 256],
    dtype: "f32" as const,
  });
  const inputs = { a: feed(1), w1: feed(2), w2: feed(3) };
  using reference = await compile(matmuls(256), { backend: "reference" });
  assertClose(
    numbers((await exe.run(inputs)).y.data),
    numbers((await reference.run(inputs)).y.data),
    {
      atol: 1e-5,
      rtol: 1e-4,
    },
  );
});

Deno.test("local-first: after a kernel only the reference runs, host data goes back to wasm", async () => {
  registerOp({
    name: "test.refOnlyTwice",
    inferShape: ([x]) => x,
    reference: ([x]) => (x.data as Float32Array).map((v) => 2 * v),
  });
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.op("test.refOnlyTwice", [b.input("x", [65536])])]));
  const registry = new BackendRegistry().register(new WasmBackend({ threads: 1 }));
  using exe = await compile(b.build(), { registry, policy: "local-first", cache: false });
  // Both live in host memory: no copy between them, so the Exp runs on the faster one.
  assert.deepEqual(exe.plan!.schedule.placement, ["reference", "wasm"]);
  assert.deepEqual(exe.plan!.schedule.transfers, []);
  const x = { data: new Float32Array(65536).fill(0.5), shape: [65536], dtype: "f32" as const };
  assertClose(numbers((await exe.run({ x })).y.data).slice(0, 2), [Math.E, Math.E]);
});
