import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { uniform } from "../support/random.ts";
import { assertClose, numbers } from "../testing/testing.ts";
import { rowsFirst } from "./rows_first.ts";

/** The last position's logits of h [2, 6, 8] through a head of `n` columns, as a step reads them. */
function head(
  options: { keep?: boolean; axis?: number; block?: boolean; slice?: boolean } = {},
) {
  const b = new GraphBuilder();
  const h = b.input("h", [2, 6, 32]);
  const logits = options.block
    ? b.op("BlockMatMul", [
      h,
      b.param("words", [5, 4], "u32", Uint32Array.from({ length: 20 }, (_, i) => i * 2654435761)),
      b.param("scales", [5, 1], "f32", uniform(5, 3)),
    ], { bits: 4, block: 32 })
    : b.op("MatMul", [h, b.param("w", [32, 5], "f32", uniform(160, 2))]);
  const axis = options.axis ?? 1;
  const size = axis === 2 || axis === -1 ? 5 : 6;
  // As the importer reads Gather(logits, -1): an Identity, a Slice of the last row, a Squeeze.
  const last = options.slice
    ? b.op("Squeeze", [
      b.op("Slice", [b.op("Identity", [logits])], {
        starts: [size - 1],
        ends: [size],
        axes: [axis],
      }),
    ], { axes: [axis] })
    : b.op("Gather", [logits, b.constant(-1, [], "i32")], { axis });
  b.output("last", last);
  if (options.keep) b.output("logits", logits);
  return b.build();
}

Deno.test("a Gather of a product's rows gathers its left operand: one row multiplied", async () => {
  const h = { data: uniform(2 * 6 * 32, 4), shape: [2, 6, 32], dtype: "f32" as const };
  for (const [block, slice] of [[false, false], [true, false], [true, true]]) {
    const graph = head({ block, slice });
    const moved = rowsFirst(graph);
    const product = moved.nodes.find((n) => n.op === (block ? "BlockMatMul" : "MatMul"))!;
    // Two rows of 12 (a Slice keeps the axis, of one).
    assert.deepEqual(moved.values[product.outputs[0]].shape, slice ? [2, 1, 5] : [2, 5]);
    assert.deepEqual(moved.values[product.inputs[0]].shape, slice ? [2, 1, 32] : [2, 32]);
    const want = await (await compile(graph, { backend: "reference", fuse: false })).run({ h });
    for (const backend of ["reference", "wasm", "webgpu"]) {
      const exe = await compile(graph, { backend, cache: false });
      // The compile multiplies the picked rows only: no kernel spans the six positions.
      const spans = (exe.plan?.kernels ?? []).map((k) => k.space);
      assert.ok(spans.every((space) => !space.includes(6)), `${backend}: ${JSON.stringify(spans)}`);
      // The picked rows of a 4-bit product read the packed weight (no unpacking kernel): on wasm
      // stored first (the kernel reads A plainly), on webgpu picked by the product's own kernel
      // as it stages A (a prologue).
      if (block && exe.plan) {
        const kernels = exe.plan.kernels;
        const picks = backend === "webgpu" ? [] : ["elementwise"];
        assert.deepEqual(kernels.map((k) => k.pattern), [...picks, "matmul"], backend);
        const tag = kernels.at(-1)!.blockProduct!;
        assert.equal(tag.prologue !== undefined, backend === "webgpu", backend);
      }
      const got = await exe.run({ h });
      assert.deepEqual(got.last.shape, [2, 5]);
      assertClose(numbers(got.last.data), numbers(want.last.data), { rtol: 1e-5, atol: 1e-5 });
    }
  }
});

Deno.test("rows stay where the product has other readers or the axis is its columns", () => {
  const unmoved = [
    head({ keep: true }),
    head({ axis: 2 }),
    head({ axis: -1 }),
    head({ axis: 2, slice: true }),
  ];
  for (const graph of unmoved) {
    assert.equal(rowsFirst(graph), graph);
  }
  // axis −2 is the rows' axis (the same as 1 here).
  assert.notEqual(rowsFirst(head({ axis: -2 })), head({ axis: -2 }));
});
