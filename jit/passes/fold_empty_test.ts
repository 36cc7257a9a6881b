import assert from "node:assert/strict";
import { compile, GraphBuilder } from "../../mod.ts";
import { foldEmpty } from "./fold_empty.ts";
import { numbers } from "../testing/testing.ts";

const ones = (shape: number[]) => ({
  data: new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(1),
  shape,
  dtype: "f32" as const,
});

Deno.test("empty batches, rows and contractions run on every backend", async () => {
  const cases: [number[], number[]][] = [
    [[0, 3, 4], [4, 5]],
    [[2, 0, 4], [4, 5]],
    [[2, 3, 0], [0, 5]],
    [[0, 2, 3, 4], [0, 2, 4, 5]],
    [[0], [0, 3]],
  ];
  for (const [sa, sb] of cases) {
    const b = new GraphBuilder();
    const a = b.input("a", sa), w = b.input("w", sb);
    b.output("y", b.op("Relu", [b.op("MatMul", [a, w])]));
    b.output("max", b.op("ReduceMax", [a], { axes: [-1] }));
    b.output("min", b.op("ReduceMin", [a], { axes: [-1] }));
    const graph = b.build();
    for (const backend of ["reference", "wasm", "webgpu"]) {
      const exe = await compile(graph, { backend, cache: false });
      const r = await exe.run({ a: ones(sa), w: ones(sb) });
      exe.dispose();
      const at = `${backend} ${JSON.stringify([sa, sb])}`;
      assert.deepEqual(r.y.shape, [...sa.slice(0, -1), sb.at(-1)!], at);
      // An empty contraction sums nothing; max/min over an empty axis are -inf/+inf (ONNX).
      const k = sa.at(-1)!;
      if (r.y.data.length) assert.ok(numbers(r.y.data).every((v) => v === k), at);
      if (r.max.data.length && k === 0) {
        assert.ok(numbers(r.max.data).every((v) => v === -Infinity), at);
        assert.ok(numbers(r.min.data).every((v) => v === Infinity), at);
      }
    }
  }
});

Deno.test("foldEmpty turns all-empty nodes into empty params and leaves others alone", () => {
  const b = new GraphBuilder();
  const x = b.input("x", [0, 4]);
  b.output("y", b.op("Exp", [x]));
  const g = b.build();
  const folded = foldEmpty(g);
  assert.equal(folded.nodes.length, 0);
  assert.equal(folded.params.length, 1);
  const full = new GraphBuilder();
  full.output("y", full.op("Exp", [full.input("x", [1, 4])]));
  const kept = full.build();
  assert.equal(foldEmpty(kept), kept);
});
