import assert from "node:assert/strict";
import { KilnError, type KilnErrorCode } from "../support/errors.ts";
import { Graph } from "./graph.ts";
import { hostTensor } from "./host_tensor.ts";
import { handOver } from "./hand_over.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";

function throwsKiln(fn: () => unknown, code: KilnErrorCode, ...patterns: RegExp[]): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof KilnError, `expected KilnError, got ${e}`);
    assert.equal(e.code, code, e.message);
    assert.match(e.message, /Fix: \S/);
    for (const p of patterns) assert.match(e.message, p);
    return true;
  });
}

Deno.test("a valid graph is typed, topologically ordered and frozen", () => {
  const g = Graph.create({
    inputs: [{ name: "x", shape: [2, 3], dtype: "f32" }],
    nodes: [
      { op: "Relu", inputs: ["h"], outputs: ["y"] },
      { op: "MatMul", inputs: ["x", "w"], outputs: ["h"] },
    ],
    params: [{ name: "w", shape: [3, 4], dtype: "f32" }],
    outputs: [{ name: "y", value: "y" }],
  });
  assert.deepEqual(g.nodes.map((n) => n.op), ["MatMul", "Relu"]);
  assert.deepEqual(g.values[g.outputs[0].value].shape, [2, 4]);
  assert.ok(Object.isFrozen(g.nodes) && Object.isFrozen(g.nodes[0]));
});

Deno.test("nodes no output depends on are dropped", () => {
  const b = new GraphBuilder();
  const x = b.input("x", [2]);
  b.op("Exp", [x]);
  b.output("y", b.op("Neg", [x]));
  assert.deepEqual(b.build().nodes.map((n) => n.op), ["Neg"]);
});

Deno.test("shape mismatch names the node, op and shapes", () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Add", [b.input("a", [2, 3]), b.input("b", [4])], {}, { name: "sum" }));
  throwsKiln(() => b.build(), "shape-mismatch", /"sum" \(Add\)/, /\[2, 3\] and \[4\]/);
  const m = new GraphBuilder();
  m.output("y", m.op("MatMul", [m.input("a", [2, 3]), m.input("b", [4, 5])]));
  throwsKiln(() => m.build(), "shape-mismatch", /inner dimensions/, /\[2, 3\] · \[4, 5\]/);
  const r = new GraphBuilder();
  r.output("y", r.op("Reshape", [r.input("a", [2, 3])], { shape: [4] }));
  throwsKiln(() => r.build(), "shape-mismatch", /element count 6/);
});

Deno.test("bad axes, dtype clashes, bad attributes", () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Softmax", [b.input("x", [2, 3])], { axis: 2 }));
  throwsKiln(
    () => b.build(),
    "bad-axis",
    /axis 2 is out of range for a tensor of rank 2/,
    /\[-2, 1\]/,
  );
  const d = new GraphBuilder();
  d.output("y", d.op("Add", [d.input("a", [2]), d.input("b", [2], "i32")]));
  throwsKiln(() => d.build(), "dtype-mismatch", /Cast/);
  for (const [from, to] of [["f32", "f32"], ["i32", "u32"], ["f16", "i32"]] as const) {
    const c = new GraphBuilder();
    c.output("y", c.op("Bitcast", [c.input("a", [2], from)], { to }));
    throwsKiln(() => c.build(), "dtype-mismatch", /Bitcast between f32 and i32\/u32|Bitcast takes/);
  }
  const f = new GraphBuilder();
  f.output("y", f.op("Exp", [f.input("a", [2], "i32")]));
  throwsKiln(() => f.build(), "dtype-mismatch", /Exp takes f32\/f16/);
  const a = new GraphBuilder();
  a.output("y", a.op("Transpose", [a.input("x", [2, 3])], { perm: [0, 0] }));
  throwsKiln(() => a.build(), "bad-axis", /not a permutation/);
  const s = new GraphBuilder();
  s.output("y", s.op("Concat", [s.input("x", [2, 3])], { axis: "0" as unknown as number }));
  throwsKiln(() => s.build(), "bad-attribute", /axis must be an integer/);
  // The activations' numeric attributes: a string had been taken as unset (the default used).
  const numbers: [string, Record<string, unknown>][] = [
    ["Elu", { alpha: "1" }],
    ["Selu", { gamma: "2" }],
    ["Celu", { alpha: "1" }],
    ["ThresholdedRelu", { alpha: "1" }],
    ["Shrink", { lambd: "0.5" }],
    ["LeakyRelu", { alpha: "0.1" }],
    ["HardSigmoid", { beta: true }],
    ["IsInf", { detect_negative: "0" }],
  ];
  for (const [op, attrs] of numbers) {
    const n = new GraphBuilder();
    n.output("y", n.op(op, [n.input("x", [2])], attrs as never));
    const name = Object.keys(attrs)[0];
    throwsKiln(
      () => n.build(),
      "bad-attribute",
      new RegExp(`${name} must be an? (number|integer)`),
    );
  }
});

Deno.test("an attribute an op does not take is refused, not ignored: a misspelt pads leaves no conv unpadded", () => {
  const conv = new GraphBuilder();
  const [x, w] = [conv.input("x", [1, 2, 5, 5]), conv.input("w", [3, 2, 3, 3])];
  conv.output("y", conv.op("Conv", [x, w], { pad: [1, 1, 1, 1] } as never));
  throwsKiln(() => conv.build(), "bad-attribute", /Conv has no attribute pad\b/, /spelling/);
  const relu = new GraphBuilder();
  relu.output("y", relu.op("Relu", [relu.input("x", [2])], { alpha: 0.1, beta: 1 }));
  throwsKiln(() => relu.build(), "bad-attribute", /Relu has no attributes alpha, beta/);
  // An attribute read only past shape inference is still the op's (MaxPool's storage_order, a
  // GroupQueryAttention's softcap): each shape rule checks all of its op's.
  const pool = (op: string) => {
    const b = new GraphBuilder();
    const attrs = { kernel_shape: [2, 2], count_include_pad: 1 };
    b.output("y", b.op(op, [b.input("x", [1, 1, 4, 4])], attrs));
    return () => b.build();
  };
  throwsKiln(pool("MaxPool"), "bad-attribute", /MaxPool has no attribute count_include_pad/);
  pool("AveragePool")();
  // A ConvTranspose's kernel_shape, which its weight fixes, is checked against the weight.
  const transposed = (kernel: number[]) => {
    const b = new GraphBuilder();
    const [x, w] = [b.input("x", [1, 2, 4, 4]), b.input("w", [2, 3, 2, 2])];
    b.output("y", b.op("ConvTranspose", [x, w], { kernel_shape: kernel }));
    return () => b.build();
  };
  throwsKiln(transposed([3, 3]), "bad-attribute", /kernel_shape \[3,3\]/);
  transposed([2, 2])();
});

Deno.test("unknown ops suggest close names", () => {
  const b = new GraphBuilder();
  b.output("y", b.op("relu", [b.input("x", [2])]));
  throwsKiln(() => b.build(), "unknown-op", /unknown op "relu"/, /Relu/);
});

Deno.test("cycles and dangling inputs are reported with the nodes involved", () => {
  throwsKiln(
    () =>
      Graph.create({
        inputs: [{ name: "x", shape: [2], dtype: "f32" }],
        nodes: [
          { op: "Add", inputs: ["x", "c"], outputs: ["a"], name: "first" },
          { op: "Neg", inputs: ["a"], outputs: ["c"], name: "second" },
        ],
        outputs: [{ name: "y", value: "c" }],
      }),
    "cycle",
    /"first"/,
    /"second"/,
  );
  throwsKiln(
    () =>
      Graph.create({
        inputs: [{ name: "x", shape: [2], dtype: "f32" }],
        nodes: [{ op: "Add", inputs: ["x", "ghost"], outputs: ["y"] }],
        outputs: [{ name: "y", value: "y" }],
      }),
    "dangling-input",
    /"ghost"/,
  );
  throwsKiln(
    () => Graph.create({ inputs: [], nodes: [], outputs: [{ name: "y", value: "nothing" }] }),
    "dangling-input",
  );
});

Deno.test("duplicate names, wrong arity, wrong output count, no outputs", () => {
  throwsKiln(
    () =>
      new GraphBuilder().input("x", [1]) &&
      Graph.create({
        inputs: [{ name: "x", shape: [1], dtype: "f32" }, { name: "x", shape: [1], dtype: "f32" }],
        nodes: [],
        outputs: [{ name: "y", value: "x" }],
      }),
    "duplicate-name",
  );
  const b = new GraphBuilder();
  b.output("y", b.op("Add", [b.input("x", [1])]));
  throwsKiln(() => b.build(), "invalid-graph", /takes 2 inputs, got 1/);
  const s = new GraphBuilder();
  const parts = s.opN("Split", [s.input("x", [4])], { split: [2, 2] }, 3);
  s.output("y", parts[0]);
  throwsKiln(() => s.build(), "invalid-graph", /produces 2 outputs, 3 are named/);
  const n = new GraphBuilder();
  n.input("x", [1]);
  throwsKiln(() => n.build(), "invalid-graph", /no outputs/);
});

Deno.test("i64 at the boundary: narrowed with a range check, widened on output", () => {
  const b = new GraphBuilder();
  b.output("y", b.constant(new BigInt64Array([1n, -2n])), { dtype: "i64" });
  const g = b.build();
  assert.equal(g.values[g.outputs[0].value].dtype, "i32");
  assert.equal(g.outputs[0].dtype, "i64");
  const big = new GraphBuilder();
  big.output("y", big.constant(new BigInt64Array([1n << 40n])));
  throwsKiln(() => big.build(), "out-of-range", /does not fit in i32/);
  const f = new GraphBuilder();
  f.output("y", f.input("x", [1]), { dtype: "i64" });
  throwsKiln(() => f.build(), "dtype-mismatch", /i32 may widen to i64/);
});

Deno.test("constants are copied: later writes by the caller do not change the graph", () => {
  const data = new Float32Array([1, 2]);
  const b = new GraphBuilder();
  b.output("y", b.constant(data));
  const g = b.build();
  const before = g.hash();
  data[0] = 99;
  assert.equal(g.hash(), before);
});

Deno.test("data handed over is kept as it is; a caller's is copied", () => {
  const given = new Float32Array([1, 2]), handed = handOver(new Float32Array([3, 4]));
  const b = new GraphBuilder();
  const x = b.input("x", [2]);
  b.output(
    "y",
    b.op("Add", [b.op("Add", [x, b.param("p", [2], "f32", given)]), b.constant(handed)]),
  );
  const g = b.build();
  const constant = g.nodes.find((n) => n.op === "Constant")!.attrs.value as { data: unknown };
  assert.equal(constant.data, handed);
  assert.notEqual(g.params[0].data, given);
  assert.deepEqual(Array.from(g.params[0].data as Float32Array), [1, 2]);
  // A graph's own copy is never written: a graph built from it (a compile's rewrite) shares it.
  const again = new GraphBuilder();
  again.output("y", again.op("Add", [again.input("x", [2]), again.constant(g.params[0].data!)]));
  const kept = again.build().nodes.find((n) => n.op === "Constant")!.attrs.value as {
    data: unknown;
  };
  assert.equal(kept.data, g.params[0].data);
});

Deno.test("a caller's odd value in an error message: typed, bounded, never a throw of its own", () => {
  const short = /^[^]{0,300}$/;
  // A bigint JSON refuses; a 100K-element array where a shape belongs; an object that refers
  // to itself where a dtype belongs.
  const big = new GraphBuilder();
  big.input("x", [2n as unknown as number]);
  throwsKiln(() => big.build(), "invalid-graph", /input "x": shape \["2n"\] is invalid/, short);
  const long = new GraphBuilder();
  long.param("w", Array.from({ length: 100_000 }, (_, i) => i + 0.5));
  throwsKiln(() => long.build(), "invalid-graph", /param "w": shape \[0\.5,1\.5,.*…/, short);
  const loop: Record<string, unknown> = {};
  loop.self = loop;
  const odd = new GraphBuilder();
  odd.input("x", [2], loop as never);
  throwsKiln(() => odd.build(), "dtype-mismatch", /unknown dtype \[object Object\]/, short);
});

Deno.test("Graph.create, hostTensor and the builder refuse what is not a list or an array as typed errors", () => {
  // Each had failed inside as a TypeError (`spec.inputs.map`, `null.length`, `null.map`).
  throwsKiln(() => Graph.create(null as never), "bad-input", /spec is null/);
  throwsKiln(() => Graph.create({ inputs: 5 } as never), "bad-input", /inputs is 5/);
  throwsKiln(() => Graph.create({ inputs: [], outputs: [] } as never), "bad-input", /nodes is/);
  const bad = { inputs: [], nodes: [], outputs: [], params: 1 } as never;
  throwsKiln(() => Graph.create(bad), "bad-input", /params is 1/);
  throwsKiln(() => hostTensor(null as never), "bad-input", /typed array first, got null/);
  const b = new GraphBuilder();
  throwsKiln(() => b.op("Relu", null as never), "invalid-graph", /Relu's inputs are null/);
  throwsKiln(() => b.opN("Split", "x" as never, {}, 2), "invalid-graph", /not a list/);
  assert.equal(hostTensor(new Float32Array(2)).shape[0], 2);
});
