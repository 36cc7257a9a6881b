import assert from "node:assert/strict";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { assertClose, f32, numbers, runGraph } from "../../jit/testing/testing.ts";
import { generateWgsl, kernelLayout } from "./codegen.ts";
import { allOf, anyOf } from "./prelude.ts";

/** DynamicQuantizeLinear's arithmetic over one row of 2048: a scale from the row's range. */
function quantizing() {
  const b = new GraphBuilder();
  const x = b.input("x", [2048]);
  const lo = b.op("Min", [b.op("ReduceMin", [x], { keepdims: 0 }), b.constant(0)]);
  const hi = b.op("Max", [b.op("ReduceMax", [x], { keepdims: 0 }), b.constant(0)]);
  const scale = b.op("Div", [b.op("Sub", [hi, lo]), b.constant(255)]);
  b.output("y", b.op("Round", [b.op("Div", [x, scale])]));
  return b.build();
}

Deno.test("a held row computes its row-wide values once, not at each of a thread's points", async () => {
  const graph = quantizing();
  // The range's second reduction and the quantizing epilogue over the row (its first reduction is a
  // kernel before, read as a scalar).
  const kernel = fuse(graph).kernels.find((k) => k.outputs.some((o) => o.level === "full"))!;
  const options = { maxInvocations: 256 };
  const rows = kernelLayout(kernel, options).rows!;
  const points = rows.slots * rows.width;
  assert.ok(points >= 8, `a thread holds ${points} points`);
  // One exact division a point (x / scale) and one for the scale, not two a point: each division
  // costs NVIDIA's compiler about 30 ms.
  const divisions = generateWgsl(kernel, options).match(/k_fdiv\(/g)!.length - 1;
  assert.equal(divisions, points + 1);
  const x = f32(Array.from({ length: 2048 }, (_, i) => Math.sin(i * 0.37) * 3 + (i % 7) * 0.1));
  const expected = await runGraph(graph, { x });
  const got = await runGraph(graph, { x }, "webgpu");
  assertClose(numbers(got.y.data), numbers(expected.y.data), { atol: 0, rtol: 0 });
});

Deno.test("generated WGSL never short-circuits: && and || are & and | on parenthesized operands", async () => {
  // NaN-aware max and min, bounds-checked gathers and pads, a masked softmax, boolean And/Or.
  const b = new GraphBuilder();
  const x = b.input("x", [4, 64]);
  const ids = b.input("ids", [4], "i64");
  const m = b.op("ReduceMax", [x], { axes: [1] });
  const n = b.op("ReduceMin", [x], { axes: [1] });
  const g = b.op("Gather", [x, ids], { axis: 0 });
  const p = b.op("Pad", [g], { pads: [0, 1, 0, 1] });
  const on = b.op("And", [b.op("Greater", [x, b.constant(0)]), b.op("Less", [x, b.constant(1)])]);
  const either = b.op("Or", [on, b.op("Equal", [x, b.constant(0.5)])]);
  b.output("m", b.op("Add", [m, n]));
  b.output("p", p);
  b.output("s", b.op("Softmax", [b.op("Where", [either, x, b.constant(-Infinity)])], { axis: 1 }));
  const graph = b.build();
  const options = { maxInvocations: 256 };
  for (const kernel of fuse(graph).kernels) {
    const code = generateWgsl(kernel, options);
    assert.doesNotMatch(code, /&&|\|\|/, kernel.name);
  }
  const feeds = {
    x: f32(
      Array.from({ length: 256 }, (_, i) => [NaN, 0.5, -0, Infinity][i % 29] ?? Math.cos(i)),
      [4, 64],
    ),
    ids: { data: BigInt64Array.from([3n, 0n, -1n, 2n]), shape: [4], dtype: "i64" as const },
  };
  const [want, got] = await Promise.all([runGraph(graph, feeds), runGraph(graph, feeds, "webgpu")]);
  for (const k of ["m", "p", "s"]) {
    assertClose(numbers(got[k].data), numbers(want[k].data), {
      atol: 1e-6,
      rtol: 1e-5,
      message: k,
    });
  }
});

Deno.test("allOf and anyOf parenthesize what & and | need, and only that", () => {
  assert.equal(allOf(), "true");
  assert.equal(anyOf(), "false");
  assert.equal(allOf("a < b"), "((a < b))");
  assert.equal(allOf("ok1", "!ok2", "(x == y)"), "(ok1 & !ok2 & (x == y))");
  assert.equal(anyOf("k_isnan(a)", "(a) + (b) > c"), "((k_isnan(a)) | ((a) + (b) > c))");
});

Deno.test("with subgroups of one size, rows combine their last steps by shuffles in the memory steps' order", () => {
  // A decode step's one-row products (28 blocks: 32 threads a row) and an RMSNorm-like row of 896
  // (64 threads: one step through memory, then five shuffles).
  const b = new GraphBuilder();
  const x = b.input("x", [1, 896]);
  const blocks = 28, width = blocks * 4, n = 64;
  const w = b.param("q", [n, width], "u32", new Uint32Array(n * width));
  const s = b.param("s", [n, blocks], "f32", new Float32Array(n * blocks));
  const z = b.param("z", [n, blocks], "f32", new Float32Array(n * blocks));
  b.output("y", b.op("BlockMatMul", [x, w, s, z], { bits: 4, block: 32 }));
  b.output("m", b.op("ReduceMean", [b.op("Mul", [x, x])], { axes: [1] }));
  const kernels = fuse(b.build(), { blockProducts: true }).kernels;
  const product = kernels.find((k) => k.blockProduct)!, norm = kernels.find((k) => k !== product)!;
  const options = { maxInvocations: 256, subgroupSize: 32 };
  assert.equal(kernelLayout(product, options).rows?.threads, 32);
  const code = generateWgsl(product, options);
  assert.match(code, /^enable subgroups;/);
  // A row of 32 threads combines without a barrier: the two are A's chunk's (block_product.ts).
  assert.equal(code.match(/workgroupBarrier/g)?.length, 2, "a row of 32 threads needs no barrier");
  const downs = [...code.matchAll(/subgroupShuffleDown\(acc0, (\d+)u\)/g)].map((m) => +m[1]);
  assert.deepEqual(downs, [16, 8, 4, 2, 1]);
  // Every lane takes its row's lane 0's sum.
  assert.match(code, /acc0 = subgroupShuffle\(acc0, lid\.x % 32u - lane\);/);
  const rows = generateWgsl(norm, options);
  assert.equal(kernelLayout(norm, options).rows?.threads, 64);
  const steps = [...rows.matchAll(/if \(lane < (\d+)u\)|subgroupShuffleDown\(acc0, (\d+)u\)/g)]
    .map((m) => +(m[1] ?? m[2]));
  assert.deepEqual(steps, [32, 16, 8, 4, 2, 1], "halving distances, memory first");
  assert.match(rows, /if \(lane == 0u\) \{ sh_f32\[lid\.x\] = acc0; \}/);
  // Without a fixed subgroup size the kernels are what they were.
  for (const k of [product, norm]) {
    assert.doesNotMatch(generateWgsl(k, { maxInvocations: 256 }), /subgroup/);
  }
});

/** 3×3 max and 4×4 average pools (padded, strided) of an NCHW input of `shape`. */
function pools(shape: number[]): Graph {
  const b = new GraphBuilder();
  const x = b.input("x", shape);
  const attrs = { kernel_shape: [3, 3], pads: [1, 1, 1, 1], strides: [2, 2] };
  b.output("y", b.op("MaxPool", [x], attrs));
  b.output("z", b.op("AveragePool", [x], { ...attrs, kernel_shape: [4, 4], pads: [1, 2, 1, 2] }));
  return b.build();
}

Deno.test("many rows of at most 16 points are a thread's each; few maxima a thread a point, a NaN and a −∞ in", async () => {
  const options = { maxInvocations: 256 };
  // ResNet-50's pools: a row a thread, not split over threads that meet in workgroup memory
  // behind barriers (three for a row of 9).
  for (const kernel of fuse(pools([8, 64, 112, 112])).kernels.filter((k) => k.reductions.length)) {
    assert.equal(kernelLayout(kernel, options).rows?.serial, true, kernel.name);
  }
  // 180 rows leave the GPU idle: each point of a maximum gets a thread (9 → 16 threads); an
  // average's sum keeps a thread's order (ONNX Runtime's) however few its rows.
  const graph = pools([2, 3, 9, 11]);
  const layouts = fuse(graph).kernels.filter((k) => k.reductions.length)
    .map((k) => kernelLayout(k, options).rows)
    .map((r) => [r?.serial, r?.threads, r?.slots]);
  assert.deepEqual(layouts, [[undefined, 16, 1], [true, 1, 0]]);
  const data = Array.from({ length: 594 }, (_, i) => Math.sin(i * 0.71) * 5);
  data[40] = NaN;
  data[333] = -Infinity;
  const feeds = { x: f32(data, [2, 3, 9, 11]) };
  const [expected, got] = [await runGraph(graph, feeds), await runGraph(graph, feeds, "webgpu")];
  for (const name of ["y", "z"]) {
    assertClose(numbers(got[name].data), numbers(expected[name].data), { atol: 1e-6, rtol: 1e-6 });
  }
});
