/**
 * Reductions that share a kernel: over one iteration space and the same axes, a min beside a
 * max of one value, sums of different expressions of the same buffers, a DynamicQuantizeLinear's
 * range; one pass over their inputs instead of one a reduction.
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { fuse } from "./fuse.ts";
import { uniform } from "../support/random.ts";
import { f32, numbers } from "../testing/testing.ts";

Deno.test("reductions of one value over the same axes share a kernel (a min beside a max)", async () => {
  // DynamicQuantizeLinear's range: max and min of x, then its scale from both.
  const b = new GraphBuilder();
  const x = b.input("x", [4, 6]);
  const whole = { axes: [0, 1], keepdims: 0 };
  const max = b.op("ReduceMax", [x], whole), min = b.op("ReduceMin", [x], whole);
  b.output("range", b.op("Sub", [max, min]));
  // The same value over other axes stays a kernel of its own.
  b.output("rows", b.op("ReduceMin", [x], { axes: [1], keepdims: 0 }));
  const kernels = fuse(b.build()).kernels;
  assert.deepEqual(kernels.map((k) => k.reductions.map((r) => r.op).join()), ["max,min", "min"]);
  const data = uniform(24, 3, -5, 5);
  for (const backend of ["reference", "wasm"]) {
    const out = await (await compile(b.build(), { backend })).run({
      x: { data, shape: [4, 6], dtype: "f32" },
    });
    assert.deepEqual(numbers(out.range.data), [Math.fround(Math.max(...data) - Math.min(...data))]);
  }
});

Deno.test("reductions of different expressions of the same buffers share a kernel", async () => {
  // An int64 sum held in 32 bits beside its f32 shadow (the importer's wrap check): both read the
  // mask, and the check compares them in the kernel's epilogue; a sum over the mask less the
  // shadow's rows then joins as a later phase, as a softmax's sum joins its maximum.
  const b = new GraphBuilder();
  const mask = b.input("mask", [2, 5], "i32");
  const rows = { axes: [1], keepdims: 0 };
  const sum = b.op("ReduceSum", [mask], rows);
  const cast = b.op("Cast", [mask], { to: "f32" });
  const shadow = b.op("ReduceSum", [cast], rows);
  b.output("sum", sum);
  b.output("drift", b.op("Abs", [b.op("Sub", [b.op("Cast", [sum], { to: "f32" }), shadow])]));
  const less = b.op("Sub", [cast, b.op("Unsqueeze", [shadow], { axes: [1] })]);
  b.output("rest", b.op("ReduceSum", [less], rows));
  // Over other axes, the same mask stays a kernel of its own.
  b.output("columns", b.op("ReduceSum", [mask], { axes: [0], keepdims: 0 }));
  const kernels = fuse(b.build()).kernels;
  assert.deepEqual(kernels.map((k) => k.reductions.map((r) => r.op).join()), [
    "sum,sum,sum",
    "sum",
  ]);
  const data = Int32Array.of(1, 1, 1, 0, 0, 1, 1, 1, 1, 1);
  for (const backend of ["reference", "wasm", "webgpu"]) {
    using exe = await compile(b.build(), { backend, cache: false });
    const out = await exe.run({ mask: { data, shape: [2, 5], dtype: "i32" } });
    assert.deepEqual([...out.sum.data], [3, 5], backend);
    assert.deepEqual([...out.drift.data], [0, 0], backend);
    assert.deepEqual([...out.rest.data], [-12, -20], backend);
    assert.deepEqual([...out.columns.data], [2, 2, 2, 1, 1], backend);
  }
});

Deno.test("a large DynamicQuantizeLinear takes its rows' range in one kernel, or none on a GPU", async () => {
  // Of an activation's output, as BERT's second MLP product quantizes its GELU's: on wasm the
  // rows' two reductions read one expression (one stored value), then one kernel takes the whole
  // range; WebGPU's kernel computing the square combines the range as it stores it. (A square:
  // rounded alike everywhere, so the 8-bit results compare exactly.)
  const b = new GraphBuilder();
  const x = b.input("x", [128, 768]);
  const [q, scale, zero] = b.opN("DynamicQuantizeLinear", [b.op("Mul", [x, x])], {}, 3);
  b.output("q", q).output("scale", scale).output("zero", zero);
  const graph = b.build();
  const feeds = { x: f32(uniform(128 * 768, 9), [128, 768]) };
  const want = await (await compile(graph, { backend: "reference", fuse: false })).run(feeds);
  const reductions = { wasm: ["128x768:max,min", "128x1:max,min"], webgpu: [] };
  for (const backend of ["wasm", "webgpu"] as const) {
    const exe = await compile(graph, { backend, cache: false });
    const kernels = exe.plan!.kernels;
    const ops = kernels.filter((k) => k.reductions.length > 0)
      .map((k) => `${k.space.join("x")}:${k.reductions.map((r) => r.op).join()}`);
    assert.deepEqual(ops, reductions[backend], backend);
    const combined = kernels.map((k) => k.outputs.filter((o) => o.combine).length);
    assert.deepEqual(combined.filter((n) => n > 0), backend === "webgpu" ? [2] : [], backend);
    const got = await exe.run(feeds);
    for (const name of ["q", "scale", "zero"]) assert.deepEqual(got[name].data, want[name].data);
    exe.dispose();
  }
});
