import { compile } from "../../mod.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { uniform } from "../support/random.ts";
import { assertClose, f32, numbers, runGraph } from "../testing/testing.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import type { Attrs } from "./mod.ts";

/** One window op of `inputs` (the first a graph input, the rest constants). */
function windowGraph(op: string, inputs: HostTensor[], attrs: Attrs) {
  const b = new GraphBuilder();
  const ins = inputs.map((t, i) =>
    i === 0 ? b.input("x", t.shape, "f32") : b.constant(t.data as Float32Array, t.shape, "f32")
  );
  b.output("y", b.op(op, ins, attrs));
  return b.build();
}

const CASES: [string, HostTensor[], Attrs][] = [
  // 1-D: strides, dilations, pads, groups, bias.
  ["Conv", [
    f32(uniform(2 * 4 * 9, 1), [2, 4, 9]),
    f32(uniform(6 * 2 * 3, 2), [6, 2, 3]),
    f32(uniform(6, 3)),
  ], {
    strides: [2],
    dilations: [2],
    pads: [2, 1],
    group: 2,
  }],
  // 3-D: strides on depth, SAME padding.
  ["Conv", [
    f32(uniform(3 * 5 * 6 * 4, 4), [1, 3, 5, 6, 4]),
    f32(uniform(2 * 3 * 2 * 3 * 3, 5), [2, 3, 2, 3, 3]),
  ], {
    strides: [2, 1, 1],
    auto_pad: "SAME_UPPER",
  }],
  ["Conv", [
    f32(uniform(2 * 2 * 4 * 4 * 4, 6), [2, 2, 4, 4, 4]),
    f32(uniform(4 * 1 * 3 * 1 * 2, 7), [4, 1, 3, 1, 2]),
    f32(uniform(4, 8)),
  ], {
    dilations: [1, 2, 1],
    pads: [1, 0, 1, 1, 2, 0],
    group: 2,
  }],
  ["MaxPool", [f32(uniform(2 * 3 * 10, 9), [2, 3, 10])], {
    kernel_shape: [3],
    strides: [2],
    pads: [1, 1],
  }],
  ["AveragePool", [f32(uniform(2 * 3 * 10, 10), [2, 3, 10])], {
    kernel_shape: [4],
    count_include_pad: 1,
    pads: [1, 2],
    ceil_mode: 1,
    strides: [3],
  }],
];

Deno.test("1-D and 3-D windows: the reference's own loops, the lowered forms and wasm agree", async () => {
  for (const [op, inputs, attrs] of CASES) {
    const graph = windowGraph(op, inputs, attrs);
    const feeds = { x: inputs[0] };
    using exe = await compile(graph, { backend: "reference", fuse: false, cache: false });
    const want = numbers((await exe.run(feeds)).y.data);
    for (const backend of ["reference", "wasm"]) {
      const got = numbers((await runGraph(graph, feeds, backend)).y.data);
      assertClose(got, want, { atol: 1e-5, message: `${op} ${JSON.stringify(attrs)} ${backend}` });
    }
  }
});
