import assert from "node:assert/strict";
import { compile } from "../../jit/compile.ts";
import { GraphBuilder, type Sym } from "../../jit/frontend/graph_builder.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { uniform } from "../../jit/support/random.ts";
import { assertClose, f32, numbers, runGraph } from "../../jit/testing/testing.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";

/**
 * Rows 21 windows wide, each a whole row of f32x4 steps: the first and last four windows as edge
 * steps whose lanes in the padding read the fill, steps wholly inside between them; and NaNs
 * that must stick.
 */
const X = [2, 3, 10, 21];

function graphOf(build: (g: GraphBuilder, x: Sym) => Sym, shape = X): Graph {
  const g = new GraphBuilder();
  g.output("y", build(g, g.input("x", shape)));
  return g.build();
}

/** `graph` on wasm (one thread, the cache off) against the reference, at `x`. */
async function assertLikeReference(name: string, graph: Graph, x: HostTensor, wasm: WasmBackend) {
  // The kernel cache off: this tests the generator, not what an earlier revision stored.
  using exe = await compile(graph, { backend: wasm, cache: false });
  const [got, want] = await Promise.all([exe.run({ x }), runGraph(graph, { x })]);
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-6, rtol: 1e-6, message: name });
}

Deno.test("runs of four windows give what the reference gives: depthwise convs with a fused epilogue, pools, strides", async () => {
  const x = f32(uniform(X.reduce((a, b) => a * b), 70, -3, 3), X);
  for (const i of [5, 30, 200, 777]) x.data[i] = NaN;
  const w = (g: GraphBuilder, seed: number, k: number) =>
    g.constant(uniform(3 * k * k, seed, -1, 1), [3, 1, k, k]);
  const graphs: [string, Graph][] = [
    [
      "depthwise 3×3 + bias + Relu",
      graphOf((g, x) => {
        const y = g.op("Conv", [x, w(g, 71, 3), g.constant(Float32Array.of(0.5, -0.25, 1))], {
          group: 3,
          pads: [1, 1, 1, 1],
        });
        return g.op("Relu", [y]);
      }),
    ],
    [
      "depthwise 5×5, stride 2 along the row",
      graphOf((g, x) =>
        g.op("Conv", [x, w(g, 72, 5)], { group: 3, pads: [2, 2, 2, 2], strides: [1, 2] })
      ),
    ],
    // Cast has no f32x4 lowering: the run stores its windows one at a time.
    [
      "depthwise 3×3 cast to int32",
      graphOf((g, x) =>
        g.op("Cast", [
          g.op("Mul", [
            g.op("Conv", [x, w(g, 73, 3)], { group: 3, pads: [1, 1, 1, 1] }),
            g.constant(100),
          ]),
        ], { to: "i32" })
      ),
    ],
    [
      "max pool 3×3 + Neg",
      graphOf((g, x) =>
        g.op("Neg", [g.op("MaxPool", [x], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] })])
      ),
    ],
    [
      "average pool 3×3, padding counted",
      graphOf((g, x) =>
        g.op("AveragePool", [x], {
          kernel_shape: [3, 3],
          pads: [1, 1, 1, 1],
          count_include_pad: 1,
        })
      ),
    ],
  ];
  const wasm = new WasmBackend({ threads: 1 });
  for (const [name, graph] of graphs) await assertLikeReference(name, graph, x, wasm);
  wasm.dispose();
});

Deno.test("whole rows of windows: overlapping edge steps, one interior step, padding wider than an edge step", async () => {
  const wasm = new WasmBackend({ threads: 1 });
  const conv = (g: GraphBuilder, x: Sym, k: [number, number], attrs: Attrs) =>
    g.op("Conv", [x, g.constant(uniform(3 * k[0] * k[1], 80, -1, 1), [3, 1, ...k])], {
      group: 3,
      ...attrs,
    });
  const cases: [string, number[], (g: GraphBuilder, x: Sym) => Sym][] = [
    // 6 windows: the edge steps share windows 2 and 3.
    ["3×3 over rows of 6", [1, 3, 5, 6], (g, x) => conv(g, x, [3, 3], { pads: [1, 1, 1, 1] })],
    // 10 windows: one interior step, at window 2.
    ["3×3 over rows of 10", [1, 3, 4, 10], (g, x) => conv(g, x, [3, 3], { pads: [1, 1, 1, 1] })],
    // Stride 2 over 16 columns: 8 windows, only the first reads the padding.
    [
      "3×3 stride 2",
      [2, 3, 6, 16],
      (g, x) => conv(g, x, [3, 3], { pads: [1, 1, 1, 1], strides: [2, 2] }),
    ],
    // ConvNeXt's depthwise 7×7 and an 11×11, unrolled.
    ["7×7 padded by 3", [2, 3, 9, 14], (g, x) => conv(g, x, [7, 7], { pads: [3, 3, 3, 3] })],
    ["11×11 padded by 5", [1, 3, 12, 17], (g, x) => conv(g, x, [11, 11], { pads: [5, 5, 5, 5] })],
    // A 1×11 window padded by 5: windows 4-7 read the padding, so the row takes runs of four
    // between one-window borders instead.
    ["1×11 padded by 5", X, (g, x) => conv(g, x, [1, 11], { pads: [0, 5, 0, 5] })],
    [
      "max pool 3×3 stride 2 over rows of 9",
      [1, 3, 7, 9],
      (g, x) => g.op("MaxPool", [x], { kernel_shape: [3, 3], pads: [1, 1, 1, 1], strides: [2, 2] }),
    ],
  ];
  for (const [name, shape, build] of cases) {
    const x = f32(uniform(shape.reduce((a, b) => a * b), 81, -3, 3), shape);
    x.data[shape.at(-1)! + 1] = NaN;
    await assertLikeReference(name, graphOf(build, shape), x, wasm);
  }
  wasm.dispose();
});

Deno.test("a depthwise conv gives the same bits on two threads as on one: rows split between threads sum as whole rows do", async () => {
  // 2·15·41 rows of 37 windows; threads take multiples of 16 rows, so their shares end mid-row.
  const shape = [2, 15, 41, 37];
  const graph = graphOf(
    (g, x) =>
      g.op("Conv", [x, g.constant(uniform(15 * 9, 82, -1, 1), [15, 1, 3, 3])], {
        group: 15,
        pads: [1, 1, 1, 1],
      }),
    shape,
  );
  const x = f32(uniform(shape.reduce((a, b) => a * b), 83, -3, 3), shape);
  const one = new WasmBackend({ threads: 1 }), two = new WasmBackend({ threads: 2 });
  using single = await compile(graph, { backend: one, cache: false });
  using split = await compile(graph, { backend: two, cache: false });
  const want = (await single.run({ x })).y.data;
  await split.run({ x });
  // Runs alternate between the threads and the calling thread alone until the thread verdict.
  await new Promise((r) => setTimeout(r, 300));
  for (let i = 0; i < 8; i++) assert.deepEqual((await split.run({ x })).y.data, want);
  one.dispose();
  two.dispose();
});
