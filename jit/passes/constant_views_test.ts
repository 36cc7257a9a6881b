import assert from "node:assert/strict";
import { compile, type Graph, GraphBuilder } from "../../mod.ts";
import { uniform } from "../support/random.ts";
import { foldConstantViews } from "./constant_views.ts";

Deno.test("views of constants fold into constants; the source goes where nothing else reads it", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [2, 4]);
  const w = b.constant(uniform(12, 1), [4, 3], "f32");
  // wᵀ (a Transpose), then its rows sliced and reshaped: one constant [1, 2, 4] at the end.
  const t = b.op("Transpose", [w], { perm: [1, 0] });
  const s = b.op("Slice", [t], { starts: [1], ends: [3], axes: [0] });
  b.output("y", b.op("Mul", [b.op("Reshape", [s], { shape: [1, 2, 4] }), x]));
  // A constant read elsewhere too stays; its broadcast to 4× its bytes is not folded.
  const k = b.constant(uniform(4, 2), [4], "f32");
  b.output("z", b.op("Add", [b.op("Expand", [k], { shape: [4, 4] }), k]));
  const graph = b.build();
  const folded = foldConstantViews(graph);
  const ops = folded.nodes.map((n) => n.op);
  assert.deepEqual(ops.filter((o) => o !== "Constant").sort(), ["Add", "Expand", "Mul"]);
  assert.equal(ops.filter((o) => o === "Constant").length, 2);
  const data = { data: uniform(8, 3), shape: [2, 4], dtype: "f32" as const };
  const want = await (await compile(graph, { backend: "reference", fuse: false })).run({ x: data });
  const got = await (await compile(folded, { backend: "reference", fuse: false })).run({ x: data });
  assert.deepEqual(got.y.data, want.y.data);
  assert.deepEqual(got.z.data, want.z.data);
  // Nothing to fold: the same graph.
  assert.equal(foldConstantViews(folded), folded);
});

/**
 * Compiles `graph` (input `x` [1, c, 5, 5], output `y`) on wasm and webgpu: its kernels read the
 * filters as a constant [m, c, 3, 3] and never the [c, m, 3, 3] they were made from; `y` as the
 * reference's.
 */
async function readsFilters(graph: Graph, [c, m]: [number, number], seed: number) {
  const x = { data: uniform(c * 25, seed), shape: [1, c, 5, 5], dtype: "f32" as const };
  const want = await (await compile(graph, { backend: "reference", fuse: false })).run({ x });
  for (const backend of ["wasm", "webgpu"]) {
    const exe = await compile(graph, { backend, cache: false });
    const inputs = exe.plan!.kernels.flatMap((k) => k.inputs.map((i) => i.shape.join()));
    assert.ok(inputs.includes([m, c, 3, 3].join()), `${backend}: ${inputs.join(" | ")}`);
    assert.ok(!inputs.includes([c, m, 3, 3].join()), backend);
    const got = (await exe.run({ x })).y;
    const ref = want.y.data as Float32Array;
    assert.deepEqual(got.shape, want.y.shape);
    assert.ok((got.data as Float32Array).every((v, i) => Math.abs(v - ref[i]) <= 1e-5), backend);
    exe.dispose();
  }
}

Deno.test("a convolution's filters given transposed reach its kernel as a constant in its layout", async () => {
  // Read through the Transpose, a conv of 512 → 256 channels took 260 ms on one wasm thread
  // against 17 with its filters as a constant.
  const [c, m] = [6, 4];
  const b = new GraphBuilder();
  const filters = b.constant(uniform(c * m * 9, 4), [c, m, 3, 3], "f32");
  const w = b.op("Transpose", [filters], { perm: [1, 0, 2, 3] });
  const y = b.op("Conv", [b.input("x", [1, c, 5, 5]), w], {
    kernel_shape: [3, 3],
    pads: [1, 1, 1, 1],
  });
  await readsFilters(b.output("y", y).build(), [c, m], 5);
});

Deno.test("a transposed convolution's flipped, regrouped kernel is a constant its conv reads", async () => {
  // Expanded in fusion, each run gathered the kernel anew (1.4 s on one wasm thread for 128 → 64
  // channels at 28×28); now the conv reads [M, C, 3, 3], flipped, as a constant.
  const [c, m] = [8, 4];
  const b = new GraphBuilder();
  const w = b.constant(uniform(c * m * 9, 6), [c, m, 3, 3], "f32");
  const y = b.op("ConvTranspose", [b.input("x", [1, c, 5, 5]), w], {
    kernel_shape: [3, 3],
    strides: [2, 2],
    pads: [1, 1, 0, 0],
  });
  await readsFilters(b.output("y", y).build(), [c, m], 7);
});

Deno.test("views whose elements lie in order share the constant's data; others copy", () => {
  const b = new GraphBuilder();
  const x = b.input("x", [3, 4]);
  const w = b.constant(uniform(24, 4), [6, 4], "f32");
  // Rows 1-3 of w: its own elements in order. Columns 1-3 (rows of 3 copied) and wᵀ (elements).
  const rows = b.op("Slice", [w], { starts: [1], ends: [4], axes: [0] });
  const cols = b.op("Slice", [w], { starts: [1], ends: [4], axes: [1] });
  b.output("y", b.op("Add", [rows, x]));
  b.output("z", b.op("MatMul", [x, b.op("Transpose", [w], { perm: [1, 0] })]));
  b.output("c", b.op("Add", [cols, b.constant(0)]));
  const graph = b.build();
  const tensor = (v: unknown) => v as { data: Float32Array; shape: number[] };
  const source = tensor(graph.nodes.find((n) => n.op === "Constant")!.attrs.value).data;
  const folded = foldConstantViews(graph).nodes.filter((n) => n.op === "Constant")
    .map((n) => tensor(n.attrs.value));
  const of = (shape: number[]) => folded.find((t) => t.shape.join() === shape.join())!;
  const w6 = Array.from(source), at = (r: number, c: number) => w6[r * 4 + c];
  assert.equal(of([3, 4]).data.buffer, source.buffer);
  assert.deepEqual(Array.from(of([3, 4]).data), w6.slice(4, 16));
  assert.notEqual(of([6, 3]).data.buffer, source.buffer);
  assert.deepEqual(
    Array.from(of([6, 3]).data),
    [0, 1, 2, 3, 4, 5].flatMap((r) => [1, 2, 3].map((c) => at(r, c))),
  );
  assert.deepEqual(
    Array.from(of([4, 6]).data),
    [0, 1, 2, 3].flatMap((c) => [0, 1, 2, 3, 4, 5].map((r) => at(r, c))),
  );
});
