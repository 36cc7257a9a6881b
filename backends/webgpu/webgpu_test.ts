import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { differentialOn } from "../../jit/testing/differential.ts";
import { explain } from "../../jit/runtime/explain.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { importOnnx } from "../../onnx/import/import.ts";
import { MODEL_NAMES, referenceModel } from "../../onnx/testdata.ts";
import {
  assertClose,
  assertMatchesReference,
  assertRecoversFromLoss,
  f32,
  graphMatchesReference,
  hashed,
  numbers,
  runOp,
  withFastestRates,
} from "../../jit/testing/testing.ts";
import { toF16Bits } from "../../jit/ir/dtype.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { TensorMap } from "../../jit/runtime/executable.ts";
import {
  dispatchSize,
  generateWgsl,
  kernelLayout,
  rowsLayout,
  TILE_THRESHOLD,
  type WgslOptions,
} from "../../shaders/wgsl/codegen.ts";
import { streamedRows } from "../../shaders/wgsl/rows.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { BackendRegistry } from "../registry.ts";
import { WasmBackend } from "../wasm/wasm_backend.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";
import { storageBindings } from "./device_profile.ts";

// CI has no GPU: these run on the software adapter (llvmpipe), slow but exact.
const gpu = new WebGpuBackend();
await gpu.prepare();

Deno.test("the software adapter is real: a profile from its limits", () => {
  const c = gpu.capabilities();
  assert.ok(c.maxWorkgroupSize >= 64 && c.maxStorageBufferBytes > 0 && c.maxBindings >= 8);
  assert.equal(gpu.kind, "gpu");
  // The device takes the adapter's workgroup limit (llvmpipe's 1024 through either WebGPU), not
  // WebGPU's default 256, under which matrix tiles splitting K (512 invocations) never ran.
  assert.ok(c.maxWorkgroupSize >= 512, `maxWorkgroupSize ${c.maxWorkgroupSize}`);
});

/** An f16 vector of `values`. */
const f16 = (values: number[]): HostTensor => ({
  data: Uint16Array.from(values, toF16Bits),
  shape: [values.length],
  dtype: "f16",
});

Deno.test("ops on WebGPU match the reference: broadcasting, NaN/Inf, integers, casts, f16", async () => {
  const cases: [string, HostTensor[], Attrs][] = [
    ["Add", [f32([1, 2, 3, 4, 5, 6], [2, 3]), f32([10, 20, 30], [3])], {}],
    ["Exp", [f32([NaN, Infinity, -Infinity, 0, 1])], {}],
    ["Log", [f32([0, -1, 1, Infinity, NaN])], {}],
    ["Sqrt", [f32([-1, 0, 4, Infinity])], {}],
    ["Div", [f32([1, -1, 0, 1, NaN]), f32([0, 0, 0, -0, 0])], {}],
    // f16 quotients take the f32 division without k_fdiv's residual step (k_hdiv).
    ["Div", [
      f16([1, -1, 0, 1, NaN, Infinity, 3, 1, 65504, 7, -5, 1e-3, 6]),
      f16([0, 0, 0, -0, 0, Infinity, 2, 3, 0.5, 1e-3, 7, 3, Infinity]),
    ], {}],
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

Deno.test("device loss: pending runs reject, auto falls back, recover() restores correct results", async () => {
  const local = new WebGpuBackend();
  await local.prepare();
  await assertRecoversFromLoss(local, () => local.device!.destroy());
  local.dispose();
});

Deno.test("tensors past the binding limit: a clear error on webgpu, the CPU under auto", async () => {
  // A 1 MiB binding, as a small device has: the device's own (2 GiB on an H200) is past the
  // default budget of a tensor, which would refuse the graph first.
  const limit = 2 ** 20;
  const gpu = new WebGpuBackend({ maxStorageBufferBytes: limit, allowSoftware: true });
  await gpu.prepare();
  // Executables go before their backend's device does.
  try {
    const n = limit / 4 + 1024;
    const b = new GraphBuilder();
    b.output("y", b.op("Relu", [b.input("x", [n])]));
    const graph = b.build();
    const tooLarge = (e: unknown) =>
      e instanceof KilnError && e.message.includes(`f32[${n}] tensor of ${4 * n} bytes`) &&
      /auto policy/.test(e.fix ?? "");
    await assert.rejects(compile(graph, { backend: gpu, cache: false }), tooLarge);
    const registry = new BackendRegistry().register(gpu);
    using exe = await compile(graph, { registry, cache: false });
    assert.ok(exe.plan!.schedule.placement.every((p) => p !== "webgpu"));
    const x = new Float32Array(n);
    x[0] = -2;
    x[n - 1] = 3;
    const { y } = await exe.run({ x: f32(x) });
    assert.deepEqual([y.data[0], y.data[n - 1]], [0, 3]);
    // A GPU not prepared yet, with rates that make it look fastest, still has its limits checked:
    // compile prepares every candidate before placing (it once read a binding limit of 0).
    await withFastestRates("webgpu", async () => {
      const fresh = new WebGpuBackend({ allowSoftware: true, maxStorageBufferBytes: limit });
      try {
        const cpu = new BackendRegistry().register(fresh).register(
          new WasmBackend({ threads: 1 }),
        );
        using placed = await compile(graph, { registry: cpu, cache: false });
        assert.deepEqual(placed.plan!.schedule.placement, ["wasm"]);
      } finally {
        fresh.dispose();
      }
    });
  } finally {
    gpu.dispose();
  }
});

/** softmax(q·kᵀ / 4 + mask)·v over [batch, heads, tokens, 16]; `keep` also outputs the scores. */
Deno.test("grids past 65535 workgroups fold into two dimensions with almost none idle", async () => {
  const streamed = rowsLayout(streamedRows(32, 1));
  assert.deepEqual(dispatchSize(streamed, 65535), [65535, 1, 1]);
  assert.deepEqual(dispatchSize(streamed, 65536), [32768, 2, 1]);
  const [x, y] = dispatchSize(streamed, 200_001);
  assert.ok(x <= 65535 && x * y >= 200_001 && x * y - 200_001 < y, `${x} × ${y}`);
  // Short rows are held 256 to a workgroup: 70 001 rows leave the last workgroup part empty.
  assert.deepEqual(dispatchSize(rowsLayout(streamedRows(1, 256)), 70_001), [274, 1, 1]);
  const b = new GraphBuilder();
  b.output("s", b.op("ReduceSum", [b.input("x", [70_001, 3])], { axes: [1] }));
  const graph = b.build();
  assert.deepEqual(kernelLayout(fuse(graph).kernels[0], OPTIONS).rows?.rows, 256);
  await matchesReference(graph, { x: f32(hashed(3 * 70_001, 7), [70_001, 3]) });
});

Deno.test("a WGSL error names the kernel and the offending line", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Neg", [b.input("x", [4])]));
  const [kernel] = fuse(b.build()).kernels;
  const broken = String(await gpu.codegen!.generate(kernel)).replace("(-", "(- -)(");
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
      new URL("../../cli/mod.ts", import.meta.url).pathname,
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

Deno.test("runOp runs a one-node graph on webgpu", async () => {
  const [y] = await runOp("Mul", [f32([1, 2, 3]), f32([2])], {}, { backend: gpu });
  assertClose(numbers(y.data), [2, 4, 6]);
});

/** Runs `graph` on WebGPU and on the reference and compares every output. */
const matchesReference = (graph: Graph, feeds: TensorMap, atol = 1e-5, backend = gpu) =>
  graphMatchesReference(graph, feeds as Record<string, HostTensor>, backend, atol);

const OPTIONS = { maxInvocations: 256 };

Deno.test("elementwise kernels move vec4s along the last axis where every output can", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [6, 40]);
  const row = b.input("row", [40]);
  const col = b.input("col", [6, 1]);
  const t = b.input("t", [40, 6]);
  // x and row are read as vec4s, col once per four lanes, the transposed t lane by lane.
  const y = b.op("Add", [
    b.op("Mul", [b.op("Sigmoid", [x]), row]),
    b.op("Mul", [col, b.op("Transpose", [t], { perm: [1, 0] })]),
  ]);
  b.output("y", y);
  b.output("z", b.op("Sub", [y, b.op("Exp", [col])]));
  const graph = b.build();
  const kernel = fuse(graph).kernels.find((k) => k.outputs.length === 2)!;
  const layout = kernelLayout(kernel, OPTIONS);
  assert.equal(layout.width, 4);
  assert.deepEqual(
    [...layout.vectors].map((i) => kernel.inputs[i].shape.join("x")).sort(),
    ["40", "6x40"],
  );
  assert.match(generateWgsl(kernel, OPTIONS), /array<vec4<f32>>/);
  await matchesReference(graph, {
    x: f32(hashed(240, 7), [6, 40]),
    row: f32(hashed(40, 11), [40]),
    col: f32(hashed(6, 13), [6, 1]),
    t: f32(hashed(240, 17), [40, 6]),
  });

  // A last axis that is not a multiple of 4, or a store that is not aligned, stays scalar.
  const odd = new GraphBuilder();
  odd.output("y", odd.op("Relu", [odd.input("x", [3, 5])]));
  assert.equal(kernelLayout(fuse(odd.build()).kernels[0], OPTIONS).width, 1);
  const flipped = new GraphBuilder();
  flipped.output(
    "y",
    flipped.op("Neg", [flipped.op("Slice", [flipped.input("x", [2, 8])], {
      starts: [0, -1],
      ends: [2, -2147483648],
      steps: [1, -1],
    })]),
  );
  const g2 = flipped.build();
  await matchesReference(g2, { x: f32(hashed(16, 3), [2, 8]) });
  // Integer and bool kernels take the same path.
  const ints = new GraphBuilder();
  const i = ints.input("i", [4, 8], "i32");
  ints.output("m", ints.op("Greater", [ints.op("Mul", [i, i]), ints.input("j", [8], "i32")]));
  const g3 = ints.build();
  assert.equal(kernelLayout(fuse(g3).kernels[0], OPTIONS).width, 4);
  await matchesReference(g3, {
    i: { data: Int32Array.from(hashed(32, 5), (v) => v * 9), shape: [4, 8], dtype: "i32" },
    j: { data: Int32Array.from(hashed(8, 3), (v) => v * 20), shape: [8], dtype: "i32" },
  });
});

Deno.test("large matmuls use the tiled kernel (ragged edges, batch, fused epilogue) and stay exact", async () => {
  const b = new GraphBuilder();
  const a = b.input("a", [4, 130, 256]);
  const w = b.input("w", [256, 200]);
  b.output("y", b.op("Relu", [b.op("Add", [b.op("MatMul", [a, w]), b.input("c", [200])])]));
  const graph = b.build();
  const [kernel] = fuse(graph).kernels;
  assert.ok(4 * 130 * 200 * 256 >= TILE_THRESHOLD);
  const { threads, per } = kernelLayout(kernel, OPTIONS).tile!;
  assert.deepEqual([threads, per], [[8, 8], [4, 4]], "w shared: 520 rows, 17×7 tiles of 32×32");
  // w's rows are contiguous and 200 wide: its tile fills load vec4s.
  const w4 = [...kernelLayout(kernel, OPTIONS).vectors].map((i) =>
    kernel.inputs[i].shape.join("x")
  );
  assert.deepEqual(w4, ["256x200"]);
  assert.match(generateWgsl(kernel, OPTIONS), /array<vec4<f32>>/);
  assert.deepEqual(kernelLayout(kernel, { maxInvocations: 128 }).tile?.threads, [8, 8]);
  assert.equal(kernelLayout(kernel, { maxInvocations: 32 }).kind, "rows");
  await matchesReference(graph, {
    a: f32(hashed(4 * 130 * 256, 7919), [4, 130, 256]),
    w: f32(hashed(256 * 200, 104729), [256, 200]),
    c: f32(hashed(200, 31), [200]),
  }, 1e-3);
});

Deno.test("f16 matmuls tile too, summing in f32 and rounding once", async () => {
  const toHalf = (v: readonly number[]) => Uint16Array.from(v, (x) => toF16Bits(x));
  const b = new GraphBuilder();
  b.output(
    "y",
    b.op("Relu", [
      b.op("MatMul", [b.input("a", [4, 130, 256], "f16"), b.input("w", [256, 200], "f16")]),
    ]),
  );
  const graph = b.build();
  const [kernel] = fuse(graph).kernels;
  assert.ok(kernelLayout(kernel, OPTIONS).tile);
  const feeds: TensorMap = {
    a: { data: toHalf(hashed(4 * 130 * 256, 7919)), shape: [4, 130, 256], dtype: "f16" },
    w: { data: toHalf(hashed(256 * 200, 104729)), shape: [256, 200], dtype: "f16" },
  };
  using got = await compile(graph, { backend: gpu, cache: false });
  using want = await compile(graph, { backend: "reference", cache: false });
  const [g, r] = [(await got.run(feeds)).y, (await want.run(feeds)).y];
  // The tile's products are exact in f32 where the reference rounds each to f16: within f16's
  // own rounding of the result.
  assertClose(numbers(g.data, true), numbers(r.data, true), { atol: 1e-2, rtol: 2e-3 });
});

Deno.test("shared weights over batched rows tile as one product of all the rows", async () => {
  // [2, 4, 4, 512] · [512, 1024] + bias: 8 products of 4 rows, tiled as 32 rows (a GELU-style
  // epilogue and the bias reached through the fold's reshape).
  const b = new GraphBuilder();
  const p = b.op("MatMul", [b.input("a", [2, 4, 4, 512]), b.input("w", [512, 1024])]);
  b.output("y", b.op("Tanh", [b.op("Add", [p, b.input("c", [1024])])]));
  const graph = b.build();
  const [kernel] = fuse(graph).kernels;
  const tile = kernelLayout(kernel, OPTIONS).tile!;
  assert.deepEqual([tile.nb, tile.m, tile.n], [0, 32, 1024]);
  await matchesReference(graph, {
    a: f32(hashed(32 * 512, 7919), [2, 4, 4, 512]),
    w: f32(hashed(512 * 1024, 104729), [512, 1024]),
    c: f32(hashed(1024, 31), [1024]),
  }, 1e-4);
});

Deno.test("few tiles split K among slices of a workgroup (ragged M and K, slices past K)", async () => {
  // 60×2048 outputs in 2×64 tiles of 32×32 (64 threads each), far fewer threads than the 256
  // workgroups of 256 wanted: K = 144 splits in four slices of 48 (the last reads 48 past K as
  // zeros), summed through workgroup memory before the fused epilogue.
  const b = new GraphBuilder();
  const p = b.op("MatMul", [b.input("a", [60, 144]), b.input("w", [144, 2048])]);
  b.output("y", b.op("Tanh", [b.op("Add", [p, b.input("c", [2048])])]));
  const graph = b.build();
  const [kernel] = fuse(graph).kernels;
  const layout = (options: WgslOptions) => kernelLayout(kernel, options).tile?.slices;
  assert.equal(layout({ maxInvocations: 256, workgroupBytes: 32768 }), 4);
  assert.equal(layout({ maxInvocations: 256, workgroupBytes: 24576 }), 2, "four need 30 KB");
  assert.equal(layout({ maxInvocations: 256, workgroupBytes: 32768, splitK: false }), 1);
  assert.equal(layout({ maxInvocations: 256, workgroupBytes: 8192 }), 1, "12 KB do not fit");
  assert.equal(layout({ maxInvocations: 64, workgroupBytes: 32768 }), 1, "64 threads at most");
  // Software adapters leave it off (their compiler takes seconds for such a kernel): asked for.
  const split = new WebGpuBackend({ splitK: true });
  try {
    await matchesReference(
      graph,
      {
        a: f32(hashed(60 * 144, 7919), [60, 144]),
        w: f32(hashed(144 * 2048, 104729), [144, 2048]),
        c: f32(hashed(2048, 31), [2048]),
      },
      1e-4,
      split,
    );
  } finally {
    split.dispose();
  }
});

Deno.test("deep products of many small tiles split K too: threads in flight decide, not workgroups", async () => {
  const conv = (n: number, c: number, hw: number, co: number) => {
    const b = new GraphBuilder();
    const x = b.input("x", [n, c, hw, hw]), w = b.input("w", [co, c, 3, 3]);
    b.output("y", b.op("Relu", [b.op("Conv", [x, w], { pads: [1, 1, 1, 1] })]));
    return b.build();
  };
  const slices = (graph: Graph) =>
    kernelLayout(fuse(graph).kernels[0], { maxInvocations: 256, workgroupBytes: 32768 }).tile
      ?.slices;
  // ResNet-50's stage-5 3×3 convolution at batch 8 (49 patches by 512 channels, K = 4608): 256
  // tiles of 32×32 in 64 threads, enough workgroups but 16K threads, split K in four; stage 2's
  // (3136 patches by 64) makes 392 tiles of 256 threads and keeps K whole.
  assert.equal(slices(conv(8, 512, 7, 512)), 4);
  assert.equal(slices(conv(8, 64, 56, 64)), 1);
  // A sliced convolution's patches past K (540 in four slices of 144) read as zeros.
  const small = conv(1, 60, 16, 128);
  assert.equal(slices(small), 4);
  const split = new WebGpuBackend({ splitK: true });
  try {
    await matchesReference(
      small,
      {
        x: f32(hashed(60 * 256, 7919), [1, 60, 16, 16]),
        w: f32(hashed(128 * 540, 31), [128, 60, 3, 3]),
      },
      1e-4,
      split,
    );
  } finally {
    split.dispose();
  }
});

Deno.test("every tile shape: transposed operands, ragged M, N and K, a batch broadcast", async () => {
  // 260×260 outputs a batch item (a transposed A keeps its batch axis): 3×3 tiles of 128×128,
  // 3×5 of 128×64, 5×5 of 64×64, 9×5 of 32×64, 9×9 of 32×32. The largest shape that still yields
  // 256 workgroups is chosen unless its tiles cover over 1.5× what the smallest cover (128×128:
  // 384² against 288²), else the smallest (5 items: 225 tiles of 32×64; K = 64 keeps the product
  // large enough to tile). 250×250 in tiles of 128×128 covers 256², as tiles of 32×32 do.
  const cases = [
    [64, 20, 250, [16, 16], [8, 8]],
    [32, 20, 260, [8, 16], [8, 8]],
    [18, 20, 260, [8, 16], [8, 8]],
    [13, 20, 260, [16, 16], [4, 4]],
    [10, 32, 260, [16, 8], [4, 4]],
    [5, 64, 260, [8, 8], [4, 4]],
  ] as const;
  for (const [batch, k, size, threads, per] of cases) {
    const b = new GraphBuilder();
    const a = b.input("a", [batch, k, size]); // used transposed: [batch, size, k]
    const w = b.input("w", [size, k]); // used transposed: [k, size], shared by the batch
    const p = b.op("MatMul", [
      b.op("Transpose", [a], { perm: [0, 2, 1] }),
      b.op("Transpose", [w], { perm: [1, 0] }),
    ]);
    b.output("y", b.op("Tanh", [p]));
    const graph = b.build();
    const [kernel] = fuse(graph).kernels;
    const tile = kernelLayout(kernel, OPTIONS).tile;
    assert.deepEqual([tile?.threads, tile?.per], [threads, per], `batch ${batch}`);
    await matchesReference(graph, {
      a: f32(hashed(batch * k * size, 7919), [batch, k, size]),
      w: f32(hashed(size * k, 104729), [size, k]),
    }, 1e-4);
  }
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
  const explained = await explain(exe);
  assert.deepEqual(explained.kernels.map((k) => k.deviceMs), times.map((t) => t.ms));
  assert.match(explained.text(), /device \d+\.\d{3} ms/);
  using reference = await compile(graph, { backend: "reference" });
  const want = (await reference.run(input)).y;
  assertClose(numbers(out.y.data), numbers(want.data), { atol: 1e-5, rtol: 1e-5 });
  using plain = await compile(graph, { backend: gpu, cache: false });
  await plain.run(input);
  assert.deepEqual(plain.deviceTimes(), []);
  profiled.dispose();
});

Deno.test("x → ToDevice → Exp → ToHost → Neg runs under every policy and on every named backend", async () => {
  const b = new GraphBuilder();
  const d = b.op("Exp", [b.op("ToDevice", [b.input("x", [64])])]);
  b.output("y", b.op("Neg", [b.op("ToHost", [d])]));
  const graph = b.build();
  const x = f32(new Array(64).fill(1), [64]);
  const { WasmBackend } = await import("../wasm/wasm_backend.ts");
  const registry = new BackendRegistry().register(new WasmBackend({ threads: 1 })).register(gpu);
  const runs: string[][] = [];
  for (
    const options of [
      { policy: "auto" },
      { policy: "local-first" },
      { policy: "min-cost" },
      { backend: "reference" },
      { backend: "wasm" },
      { backend: "webgpu" },
    ] as const
  ) {
    const exe = await compile(graph, { ...options, registry, cache: false });
    assertClose(numbers((await exe.run({ x })).y.data), new Array(64).fill(-Math.E), {
      atol: 1e-6,
      message: JSON.stringify(options),
    });
    runs.push([...exe.plan!.schedule.placement]);
    exe.dispose();
  }
  // The copy to the device runs on the GPU whenever a policy decides; local-first keeps the
  // host side off the reference interpreter.
  for (const placed of runs.slice(0, 3)) assert.equal(placed[0], "webgpu");
  assert.ok(!runs[1].includes("reference"), String(runs[1]));
});

Deno.test("a kernel binds at most what both the stage and the bind group allow", () => {
  const limits = (stage: number, group: number) =>
    ({
      maxStorageBuffersPerShaderStage: stage,
      maxBindingsPerBindGroup: group,
    }) as GPUSupportedLimits;
  // wgpu on an H200: a million storage buffers a stage, 1000 binding indices a group.
  assert.equal(storageBindings(limits(1_000_000, 1000)), 64);
  assert.equal(storageBindings(limits(1_000_000, 40)), 32);
  assert.equal(storageBindings(limits(8, 1000)), 8);
});
