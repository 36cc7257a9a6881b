import assert from "node:assert/strict";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { type Attrs, getOp, opNames } from "../jit/ops/mod.ts";
import { uniform } from "../jit/support/random.ts";
import { RANDOM_OPS } from "../jit/passes/random_inputs.ts";
import { assertClose, assertMatchesReference, f32, i32, numbers } from "../jit/testing/testing.ts";
import { compile } from "../jit/compile.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { KilnError } from "../jit/support/errors.ts";
import { ReferenceBackend } from "./reference/reference_backend.ts";
import { WasmBackend } from "./wasm/wasm_backend.ts";
import { WebGpuBackend } from "./webgpu/webgpu_backend.ts";

/**
 * Every op the reference runs also lowers on wasm and webgpu: no op falls back to the
 * interpreter because a fast backend lacks it (random ops reach none: compile draws them). The
 * one documented gap is an average pool whose
 * divisor is not the window (padding excluded from the count, or ceil_mode overhang), which runs
 * whole on the reference.
 */
Deno.test("wasm and webgpu support every op the reference backend runs", () => {
  const reference = new ReferenceBackend();
  const fast = [new WasmBackend({ threads: 1 }), new WebGpuBackend()];
  const x = { shape: [1, 1, 4, 4], dtype: "f32" as const };
  const missing: string[] = [];
  for (const op of opNames()) {
    // Random ops never reach a backend: compile turns them into inputs the executable draws.
    if (getOp(op).category === "custom" || RANDOM_OPS.has(op)) continue;
    const node = {
      op,
      attrs: op === "AveragePool" ? { kernel_shape: [2, 2] } : {},
      inputs: [x, x, x],
      outputs: [x],
      label: op,
    };
    if (!reference.supports(node) && getOp(op).primitive) missing.push(`reference ${op}`);
    for (const b of fast) if (!b.supports(node)) missing.push(`${b.id} ${op}`);
  }
  assert.deepEqual(missing, []);
});

Deno.test("index ops run on wasm and webgpu as the reference runs them", async () => {
  const x = f32(uniform(2 * 3 * 5, 40, -3, 3), [2, 3, 5]);
  const cases: [string, HostTensor[], Attrs][] = [
    ["Concat", [x, f32(uniform(2 * 2 * 5, 41), [2, 2, 5])], { axis: 1 }],
    ["Split", [x], { axis: 2, split: [1, 4] }],
    ["Gather", [x, i32([4, -1, 0, 2], [2, 2])], { axis: 2 }],
    ["Gather", [x, i32([1], [])], { axis: 1 }],
    ["GatherElements", [x, i32([...Array(2 * 3 * 2).keys()].map((i) => (i * 7) % 5), [2, 3, 2])], {
      axis: 2,
    }],
    ["ArgMax", [x], { axis: 2, keepdims: 0 }],
    ["ArgMin", [x], { axis: 1, select_last_index: 1 }],
    ["CumSum", [x], { axis: 2 }],
    ["CumSum", [x], { axis: 0, exclusive: 1, reverse: 1 }],
    ["Pad", [x], { pads: [0, 1, 2, 0, 2, 1], mode: "edge" }],
    // Axis 1 is cropped to 2 first, so it reflects at most 1 (2 was refused: see movement.ts).
    ["Pad", [x], { pads: [0, 1, 4, 0, -1, 3], mode: "reflect" }],
  ];
  for (const backend of ["wasm", "webgpu"]) {
    for (const [op, inputs, attrs] of cases) {
      await assertMatchesReference(backend, op, inputs, attrs, { atol: 1e-5, rtol: 1e-5 });
    }
  }
});

Deno.test("padded windows (depthwise convs, pools, averages of partial windows) run on wasm and webgpu as the reference runs them", async () => {
  const x = f32(uniform(2 * 6 * 9 * 9, 50, -3, 3), [2, 6, 9, 9]);
  x.data[7] = NaN;
  const w = f32(uniform(6 * 3 * 3, 51, -1, 1), [6, 1, 3, 3]);
  const w5 = f32(uniform(6 * 5 * 5, 52, -1, 1), [6, 1, 5, 5]);
  const bias = f32(uniform(6, 53), [6]);
  const cases: [string, HostTensor[], Attrs][] = [
    // Depthwise: a window per channel, not a GEMM (see fuse.ts); strides, pads, dilation, 5×5.
    ["Conv", [x, w, bias], { group: 6, pads: [1, 1, 1, 1] }],
    ["Conv", [x, w], { group: 6, pads: [1, 0, 2, 1], strides: [2, 2] }],
    ["Conv", [x, w], { group: 6, pads: [2, 2, 2, 2], dilations: [2, 2] }],
    ["Conv", [x, w5, bias], { group: 6, pads: [2, 2, 2, 2], strides: [2, 1] }],
    ["MaxPool", [x], { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] }],
    ["AveragePool", [x], { kernel_shape: [3, 3], pads: [1, 1, 1, 1], count_include_pad: 1 }],
    // The divisor changing along the edges: padding left out of the count, ceil-mode overhangs.
    ["AveragePool", [x], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] }],
    ["AveragePool", [x], { kernel_shape: [2, 3], strides: [2, 2], ceil_mode: 1 }],
    ["AveragePool", [x], {
      kernel_shape: [3, 3],
      strides: [2, 2],
      pads: [1, 0, 1, 1],
      ceil_mode: 1,
      count_include_pad: 1,
    }],
  ];
  for (const backend of ["wasm", "webgpu"]) {
    for (const [op, inputs, attrs] of cases) {
      await assertMatchesReference(backend, op, inputs, attrs, { atol: 1e-5, rtol: 1e-5 });
    }
  }
});

Deno.test("a run that asks for some outputs runs only the kernels they need", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [64, 64]);
  // Two branches that do not fuse into one kernel: a row softmax and a matmul.
  b.output("a", b.op("Softmax", [b.op("Exp", [x])], { axis: 1 }));
  b.output("c", b.op("Relu", [b.op("MatMul", [x, b.op("Transpose", [x])])]));
  const graph = b.build();
  const data = f32(uniform(64 * 64, 60, -1, 1), [64, 64]);
  const backends = [
    new WasmBackend({ threads: 1, profile: true, warmUpMs: 0 }),
    new WebGpuBackend({ profile: true }),
  ];
  for (const backend of backends) {
    await backend.prepare();
    using exe = await compile(graph, { backend, cache: false });
    const all = await exe.run({ x: data });
    const kernels = exe.deviceTimes().length;
    assert.ok(kernels >= 2, `${backend.id}: ${kernels} kernels`);
    const a = await exe.run({ x: data }, { outputs: ["a"] });
    assert.deepEqual(Object.keys(a), ["a"]);
    assert.deepEqual(numbers(a.a.data), numbers(all.a.data), backend.id);
    const ran = exe.deviceTimes().map((t) => t.kernel);
    assert.ok(ran.length < kernels, `${backend.id} ran ${ran} for "a" alone`);
    const c = await exe.run({ x: data }, { outputs: ["c"] });
    assert.deepEqual(numbers(c.c.data), numbers(all.c.data), backend.id);
    assert.ok(exe.deviceTimes().every((t) => !ran.includes(t.kernel)), backend.id);
    backend.dispose();
  }
});

Deno.test("ToDevice and ToHost compile and run under every policy and on every backend", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [4]);
  b.output("y", b.op("Neg", [b.op("ToHost", [b.op("Exp", [b.op("ToDevice", [x])])])]));
  const graph = b.build();
  const want = [0, 1, 2, 3].map((v) => -Math.exp(v));
  const choices = [
    {},
    { policy: "local-first" as const },
    { policy: "minimize-cost" as const },
    { backend: "reference" },
    { backend: "wasm" },
    { backend: "webgpu" },
  ];
  for (const options of choices) {
    using exe = await compile(graph, { ...options, cache: false });
    const y = await exe.run({ x: f32([0, 1, 2, 3]) });
    assertClose(numbers(y.y.data), want, { rtol: 1e-6, message: JSON.stringify(options) });
  }
});

Deno.test("an unknown placement policy is a typed error", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.input("x", [4])]));
  for (const policy of ["fastest", { kind: "fastest" }, { kind: "prefer" }]) {
    await assert.rejects(
      () => compile(b.build(), { policy: policy as never, cache: false }),
      (e: unknown) => e instanceof KilnError && /Unknown placement policy/.test(e.message),
      JSON.stringify(policy),
    );
  }
});
