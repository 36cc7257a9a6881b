import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { uniform } from "../support/random.ts";
import { assertClose, numbers } from "../testing/testing.ts";
import { fuse } from "./fuse.ts";
import { splitOf } from "../ops/reduce.ts";
import { splitReductions } from "./split_reductions.ts";

Deno.test("a large reduction to a few values splits where its parts are even", () => {
  // BERT's activations reduced whole: the rows (128) first, then the row results.
  assert.deepEqual(splitOf([1, 128, 768], [0, 1, 2]), { first: [2], second: [0, 1, 2] });
  // One long axis: cut at the largest divisor up to its square root.
  assert.deepEqual(splitOf([2, 40000], [1]), {
    view: [2, 200, 200],
    first: [2],
    second: [1, 2],
  });
  // Small inputs, many outputs, an extent without a divisor of use: one step.
  assert.equal(splitOf([128, 256], [0, 1]), undefined);
  assert.equal(splitOf([64, 4096], [1]), undefined);
  assert.equal(splitOf([65537], [0]), undefined);
});

const f32 = (shape: number[], seed: number): HostTensor => ({
  data: uniform(shape.reduce((a, b) => a * b, 1), seed, -4, 4),
  shape,
  dtype: "f32",
});

Deno.test("split reductions give the values of one, on every backend", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [1, 128, 768]), z = b.input("z", [2, 40000]);
  b.output("max", b.op("ReduceMax", [x], { keepdims: 1 }));
  b.output("min", b.op("ReduceMin", [x], { axes: [0, 1, 2], keepdims: 0 }));
  b.output("mean", b.op("ReduceMean", [x], { keepdims: 0 }));
  b.output("sum", b.op("ReduceSum", [z], { axes: [1], keepdims: 1 }));
  const graph = b.build();
  const split = splitReductions(graph);
  assert.equal(split.nodes.filter((n) => n.op.startsWith("Reduce")).length, 8);
  // Two kernels a reduction where one walked the whole tensor.
  assert.ok(fuse(split).kernels.length > fuse(graph).kernels.length);
  const feeds = { x: f32([1, 128, 768], 1), z: f32([2, 40000], 2) };
  // The exact precision keeps one reduction: the values as the reference sums them in order.
  const want = await (await compile(graph, {
    backend: "reference",
    precision: "exact",
    cache: false,
  })).run(feeds);
  for (const backend of ["reference", "wasm", "webgpu"]) {
    const got = await (await compile(graph, { backend, cache: false })).run(feeds);
    for (const name of ["max", "min"]) {
      assert.deepEqual(got[name].shape, want[name].shape, `${backend} ${name}`);
      assert.deepEqual(numbers(got[name].data), numbers(want[name].data), `${backend} ${name}`);
    }
    for (const name of ["mean", "sum"]) {
      assert.deepEqual(got[name].shape, want[name].shape, `${backend} ${name}`);
      assertClose(numbers(got[name].data), numbers(want[name].data), {
        rtol: 1e-4,
        atol: 1e-3,
        message: `${backend} ${name}`,
      });
    }
  }
});

Deno.test("means of integers and reductions to many values keep one step", () => {
  const b = new GraphBuilder();
  b.output("m", b.op("ReduceMean", [b.input("i", [1, 256, 512], "i32")], { keepdims: 0 }));
  b.output("rows", b.op("ReduceSum", [b.input("r", [256, 512])], { axes: [1] }));
  const graph = b.build();
  assert.equal(splitReductions(graph), graph);
});

Deno.test("split reductions over any axes and keepdims give one reduction's values", async () => {
  // Shapes of 2^16 elements or more reduced to at most 32 values: axes not contiguous, negative,
  // absent; size-1 axes among them; one long axis cut in two.
  const cases: { shape: number[]; axes?: number[]; keepdims: number }[] = [
    { shape: [4, 1, 128, 130], axes: [2, 3], keepdims: 1 },
    { shape: [64, 3, 512], axes: [0, -1], keepdims: 0 },
    { shape: [2, 70000], axes: [-1], keepdims: 0 },
    { shape: [30, 4, 1, 600], axes: [0, 2, 3], keepdims: 1 },
    { shape: [1, 96, 1, 768], keepdims: 0 },
  ];
  for (const [i, { shape, axes, keepdims }] of cases.entries()) {
    const b = new GraphBuilder();
    const x = b.input("x", shape);
    for (const op of ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]) {
      b.output(op, b.op(op, [x], { ...(axes && { axes }), keepdims }));
    }
    const graph = b.build();
    assert.notEqual(splitReductions(graph), graph, `case ${i}`);
    const feeds = { x: f32(shape, i + 5) };
    const exact = { backend: "reference", precision: "exact", cache: false } as const;
    const want = await (await compile(graph, exact)).run(feeds);
    const got = await (await compile(graph, { backend: "wasm", cache: false })).run(feeds);
    for (const op of ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]) {
      assert.deepEqual(got[op].shape, want[op].shape, `case ${i} ${op}`);
      assertClose(numbers(got[op].data), numbers(want[op].data), {
        rtol: 1e-4,
        atol: 2e-3,
        message: `case ${i} ${op}`,
      });
    }
  }
});
