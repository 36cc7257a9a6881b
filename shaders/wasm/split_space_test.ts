/**
 * Kernels reading a transposed value through a reshape of their last axis are walked over the
 * reshape's split axes (`split_space.ts`): the same values as the reference, and the split space.
 */
import assert from "node:assert/strict";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { assertClose, f32, numbers, runGraph } from "../../jit/testing/testing.ts";
import { splitLastAxis } from "./split_space.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";

const wasm = new WasmBackend();
await wasm.prepare();

/** Heads [1, 12, 128, 64] read as [1, 128, 768] (BERT's attention output), then `tail` of it. */
function heads(tail: (b: GraphBuilder, t: ReturnType<GraphBuilder["op"]>) => void) {
  const b = new GraphBuilder();
  const x = b.input("x", [1, 12, 128, 64]);
  const transposed = b.op("Transpose", [x], { perm: [0, 2, 1, 3] });
  tail(b, b.op("Reshape", [transposed], { shape: [1, 128, 768] }));
  return b.build();
}

const n = 12 * 128 * 64;
const x = f32(Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37) * 3), [1, 12, 128, 64]);

Deno.test("a quantization of a reshaped transpose is walked over the split axes, as the reference computes it", async () => {
  const graph = heads((b, t) => {
    const [y, , z] = b.opN("DynamicQuantizeLinear", [t], {}, 3);
    const shifted = b.op("Sub", [
      b.op("Cast", [y], { to: "i32" }),
      b.op("Cast", [z], { to: "i32" }),
    ]);
    b.output("q", b.op("Cast", [shifted], { to: "i16" }));
    b.output("mean", b.op("ReduceMean", [t], { axes: [2] }));
  });
  const kernels = fuse(graph).kernels.map(splitLastAxis);
  const split = kernels.filter((k) => k.space.join() === "1,128,12,64");
  // The rows' ranges (min, max) and the mean reduce both parts; the quantization is elementwise.
  assert.ok(split.some((k) => k.reduced.join() === "2,3"), kernels.map((k) => k.space).join(" | "));
  assert.ok(split.some((k) => k.reduced.length === 0), kernels.map((k) => k.space).join(" | "));
  // The generator splits the quantization's space itself: its lanes truncate four at a time
  // (i32x4.trunc_sat_f32x4_s, 0xfd 0xf8 0x01), where the unravelling path went one by one.
  const quantize = fuse(graph).kernels.find((k) => k.reduced.length === 0)!;
  const bytes = await wasm.codegen!.generate(quantize) as Uint8Array;
  assert.ok(bytes.some((v, i) => v === 0xfd && bytes[i + 1] === 0xf8 && bytes[i + 2] === 1));
  const [got, want] = await Promise.all(
    [wasm, "reference"].map((backend) => runGraph(graph, { x }, backend)),
  );
  assert.deepEqual(numbers(got.q.data), numbers(want.q.data));
  assertClose(numbers(got.mean.data), numbers(want.mean.data));
});

Deno.test("a kernel whose reads are affine already keeps its space", () => {
  const b = new GraphBuilder();
  const t = b.op("Reshape", [b.input("x", [1, 5, 3, 8])], { shape: [1, 5, 24] });
  b.output("y", b.op("Mul", [t, b.constant(2)]));
  for (const k of fuse(b.build()).kernels) assert.equal(splitLastAxis(k), k);
});
