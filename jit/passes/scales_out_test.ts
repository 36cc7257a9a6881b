import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder, type Sym } from "../frontend/graph_builder.ts";
import { uniform } from "../support/random.ts";
import { assertClose, f32, numbers, runGraph } from "../testing/testing.ts";
import { WebGpuBackend } from "../../backends/webgpu/webgpu_backend.ts";
import { scalesOut } from "./scales_out.ts";

const [T, D] = [64, 16];

/** Attention with its scale where exporters put it: on q, on q and kᵀ (√s each), divided on q. */
function attention(form: "q" | "both" | "divide") {
  const b = new GraphBuilder();
  const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, [2, 3, T, D]));
  const kt = b.op("Transpose", [k], { perm: [0, 1, 3, 2] });
  const root = Math.sqrt(Math.sqrt(1 / D));
  const [a, bt]: Sym[] = form === "q"
    ? [b.op("Mul", [q, b.constant(1 / Math.sqrt(D))]), kt]
    : form === "both"
    ? [b.op("Mul", [q, b.constant(root)]), b.op("Mul", [kt, b.constant(root)])]
    : [b.op("Div", [q, b.constant(Math.sqrt(D))]), kt];
  b.output("y", b.op("MatMul", [b.op("Softmax", [b.op("MatMul", [a, bt])], { axis: -1 }), v]));
  return b.build();
}

const feeds = Object.fromEntries(
  ["q", "k", "v"].map((n, i) => [n, f32(uniform(2 * 3 * T * D, 5 + i, -1, 1), [2, 3, T, D])]),
);

Deno.test("a scale on attention's queries or keys moves onto the scores: the group is one kernel", async () => {
  const gpu = new WebGpuBackend({ profile: true });
  for (const form of ["q", "both", "divide"] as const) {
    const graph = attention(form);
    const moved = scalesOut(graph);
    // The scores' product reads q and kᵀ as they are; one Mul after it.
    const scores = moved.nodes.filter((n) => n.op === "MatMul")[0];
    const producer = (v: number) => moved.nodes.find((n) => n.outputs.includes(v))?.op;
    assert.equal(moved.values[scores.inputs[0]].name, "q", form);
    assert.equal(producer(scores.inputs[1]), "Transpose", form);
    assert.ok(!moved.nodes.some((n) => n.op === "Div"), form);
    const want = await runGraph(graph, feeds);
    using exe = await compile(graph, { backend: gpu, cache: false });
    const got = await exe.run(feeds);
    assertClose(numbers(got.y.data), numbers(want.y.data), {
      atol: 1e-5,
      rtol: 1e-4,
      message: form,
    });
    assert.deepEqual(exe.deviceTimes().map((t) => t.kernel), ["attention_0"], form);
  }
  gpu.dispose();
});

Deno.test("a scale of a power of two moves exactly; a shared or non-scalar scale stays", async () => {
  // y = (x · 0.25) · w on the reference (sums in float64, rounded once): the same bits as the
  // product of x and w scaled, as the scale moved does.
  const b = new GraphBuilder();
  const [x, w] = [uniform(4 * 8, 9, -1, 1), uniform(8 * 3, 10, -1, 1)];
  b.output(
    "y",
    b.op("MatMul", [b.op("Mul", [b.input("x", [4, 8]), b.constant(0.25)]), b.input("w", [8, 3])]),
  );
  const graph = b.build();
  assert.notEqual(scalesOut(graph), graph);
  using exe = await compile(graph, { backend: "reference", fuse: false, cache: false });
  const got = await exe.run({ x: f32(x, [4, 8]), w: f32(w, [8, 3]) });
  const want = Array.from({ length: 12 }, (_, i) => {
    let sum = 0;
    for (let k = 0; k < 8; k++) {
      sum += Math.fround(x[Math.floor(i / 3) * 8 + k] * 0.25) * w[k * 3 + (i % 3)];
    }
    return Math.fround(sum);
  });
  assert.deepEqual(numbers(got.y.data), want);
  // Kept: a scaled value read elsewhere too, a scale along an axis, a scalar divided by x.
  const c = new GraphBuilder();
  const cx = c.input("x", [4, 8]), cw = c.input("w", [8, 4]);
  const shared = c.op("Mul", [cx, c.constant(0.5)]);
  c.output("y", c.op("MatMul", [shared, cw]));
  c.output("z", shared);
  const rows = c.op("Mul", [cx, c.constant(new Float32Array(8).fill(2), [8])]);
  c.output("r", c.op("MatMul", [rows, cw]));
  c.output("d", c.op("MatMul", [c.op("Div", [c.constant(2), cx]), cw]));
  const kept = c.build();
  assert.equal(scalesOut(kept), kept);
});
