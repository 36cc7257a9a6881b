import { compile } from "../../jit/compile.ts";
import { GraphBuilder, type Sym } from "../../jit/graph_builder.ts";
import type { Graph } from "../../jit/graph.ts";
import { uniform } from "../../jit/random.ts";
import { assertClose, f32, numbers, runGraph } from "../../jit/testing.ts";
import { WasmBackend } from "./wasm_backend.ts";

/**
 * Rows 21 windows wide: runs of four windows inside the padding (several per row, the last ending
 * where a 3×3 window stops fitting, not at the row's end), the
 * one-window path at the borders and for the last windows of a row, and NaNs that must stick.
 */
const X = [2, 3, 10, 21];

function graphOf(build: (g: GraphBuilder, x: Sym) => Sym): Graph {
  const g = new GraphBuilder();
  g.output("y", build(g, g.input("x", X)));
  return g.build();
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
  for (const [name, graph] of graphs) {
    // The kernel cache off: this tests the generator, not what an earlier revision stored.
    using exe = await compile(graph, { backend: wasm, cache: false });
    const [got, want] = await Promise.all([exe.run({ x }), runGraph(graph, { x })]);
    assertClose(numbers(got.y.data), numbers(want.y.data), {
      atol: 1e-6,
      rtol: 1e-6,
      message: name,
    });
  }
  wasm.dispose();
});
