import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import type { Graph } from "../ir/graph.ts";
import { GraphBuilder, type Sym } from "../frontend/graph_builder.ts";
import type { HostTensor } from "../ir/host_tensor.ts";
import { fuse } from "./fuse.ts";
import { kernelText } from "../ir/expr_table.ts";
import { uniform } from "../support/random.ts";
import { assertClose, numbers } from "../testing/testing.ts";

const f32 = (shape: number[], seed: number): HostTensor => ({
  data: uniform(shape.reduce((a, b) => a * b, 1), seed),
  shape,
  dtype: "f32",
});

/** Fuses `graph`, checks the kernel count, and compares fused against unfused results. */
async function check(
  graph: Graph,
  feeds: Record<string, HostTensor>,
  kernels: number,
  atol = 1e-5,
) {
  const result = fuse(graph);
  assert.equal(
    result.kernels.length,
    kernels,
    `kernels: ${result.kernels.map((k) => `${k.name}[${k.ops.join(" | ")}]`).join("; ")}\n${
      result.log.join("\n")
    }`,
  );
  const fused = await (await compile(graph, { cache: false })).run(feeds);
  const plain = await (await compile(graph, { fuse: false })).run(feeds);
  for (const name of Object.keys(plain)) {
    assertClose(numbers(fused[name].data), numbers(plain[name].data), {
      atol,
      rtol: 1e-5,
      message: name,
    });
  }
  return result;
}

function w1(b: GraphBuilder, x: Sym): Sym {
  const c = (v: number) => b.constant(v);
  const left = b.op("Mul", [
    b.op("Relu", [b.op("Add", [b.op("Mul", [x, c(1.5)]), c(0.5)])]),
    b.op("Sigmoid", [x]),
  ]);
  return b.op("Sub", [left, b.op("Div", [b.op("Mul", [x, x]), c(8)])]);
}

Deno.test("W1 relu(x*1.5+0.5)*sigmoid(x)-(x*x)/8 is one kernel", async () => {
  const b = new GraphBuilder();
  b.output("y", w1(b, b.input("x", [1000])));
  const r = await check(b.build(), { x: f32([1000], 1) }, 1);
  assert.equal(r.kernels[0].pattern, "elementwise");
});

Deno.test("Softmax, as one op or decomposed, is one row kernel", async () => {
  const one = new GraphBuilder();
  one.output("y", one.op("Softmax", [one.input("x", [6, 33])], { axis: -1 }));
  assert.equal((await check(one.build(), { x: f32([6, 33], 2) }, 1)).kernels[0].pattern, "softmax");
  const d = new GraphBuilder();
  const x = d.input("x", [6, 33]);
  const e = d.op("Exp", [d.op("Sub", [x, d.op("ReduceMax", [x], { axes: [-1], keepdims: 1 })])]);
  d.output("y", d.op("Div", [e, d.op("ReduceSum", [e], { axes: [-1], keepdims: 1 })]));
  assert.equal((await check(d.build(), { x: f32([6, 33], 3) }, 1)).kernels[0].pattern, "softmax");
  const mid = new GraphBuilder();
  mid.output("y", mid.op("Softmax", [mid.input("x", [3, 5, 4])], { axis: 1 }));
  await check(mid.build(), { x: f32([3, 5, 4], 4) }, 1);
});

Deno.test("LayerNormalization, as one op or as PyTorch decomposes it, is one row kernel", async () => {
  const one = new GraphBuilder();
  one.output(
    "y",
    one.op("LayerNormalization", [
      one.input("x", [4, 32]),
      one.input("s", [32]),
      one.input("b", [32]),
    ], { epsilon: 1e-5 }),
  );
  const feeds = { x: f32([4, 32], 5), s: f32([32], 6), b: f32([32], 7) };
  assert.equal((await check(one.build(), feeds, 1)).kernels[0].pattern, "layernorm");
  const d = new GraphBuilder();
  const x = d.input("x", [4, 32]);
  const mean = d.op("ReduceMean", [x], { axes: [-1], keepdims: 1 });
  const diff = d.op("Sub", [x, mean]);
  const variance = d.op("ReduceMean", [d.op("Pow", [diff, d.constant(2)])], {
    axes: [-1],
    keepdims: 1,
  });
  const norm = d.op("Div", [diff, d.op("Sqrt", [d.op("Add", [variance, d.constant(1e-5)])])]);
  d.output("y", d.op("Add", [d.op("Mul", [norm, d.input("s", [32])]), d.input("b", [32])]));
  assert.equal((await check(d.build(), feeds, 1)).kernels[0].pattern, "layernorm");
});

Deno.test("MLP softmax(relu(x·W1+b1)·W2+b2) is at most three kernels", async () => {
  const b = new GraphBuilder();
  const h = b.op("Relu", [
    b.op("Add", [
      b.op("MatMul", [b.input("x", [8, 20]), b.input("w1", [20, 16])]),
      b.input("b1", [16]),
    ]),
  ]);
  b.output(
    "y",
    b.op("Softmax", [
      b.op("Add", [b.op("MatMul", [h, b.input("w2", [16, 10])]), b.input("b2", [10])]),
    ]),
  );
  const r = await check(b.build(), {
    x: f32([8, 20], 1),
    w1: f32([20, 16], 2),
    b1: f32([16], 3),
    w2: f32([16, 10], 4),
    b2: f32([10], 5),
  }, 3);
  assert.deepEqual(r.kernels.map((k) => k.pattern), ["matmul", "matmul", "softmax"]);
});

Deno.test("Gemm with transposed weights, batched MatMul with broadcasting, 1-D operands", async () => {
  const g = new GraphBuilder();
  g.output(
    "y",
    g.op("Relu", [
      g.op("Gemm", [g.input("a", [5, 7]), g.input("w", [3, 7]), g.input("c", [3])], {
        transB: 1,
        alpha: 0.5,
      }),
    ]),
  );
  await check(g.build(), { a: f32([5, 7], 1), w: f32([3, 7], 2), c: f32([3], 3) }, 1);
  const m = new GraphBuilder();
  m.output("y", m.op("MatMul", [m.input("a", [2, 1, 3, 4]), m.input("b", [3, 4, 5])]));
  await check(m.build(), { a: f32([2, 1, 3, 4], 4), b: f32([3, 4, 5], 5) }, 1);
  const v = new GraphBuilder();
  v.output("y", v.op("MatMul", [v.input("a", [4]), v.input("b", [2, 4, 3])]));
  await check(v.build(), { a: f32([4], 6), b: f32([2, 4, 3], 7) }, 1);
});

Deno.test("Conv + bias + relu (+ residual) is one kernel; pools are one kernel", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [2, 4, 9, 8]);
  const conv = b.op("Conv", [x, b.input("w", [6, 2, 3, 3]), b.input("c", [6])], {
    pads: [1, 1, 1, 1],
    strides: [2, 1],
    group: 2,
  });
  b.output("y", b.op("Add", [b.op("Relu", [conv]), b.input("r", [2, 6, 5, 8])]));
  const r = await check(b.build(), {
    x: f32([2, 4, 9, 8], 1),
    w: f32([6, 2, 3, 3], 2),
    c: f32([6], 3),
    r: f32([2, 6, 5, 8], 4),
  }, 1);
  assert.equal(r.kernels[0].pattern, "conv");
  const p = new GraphBuilder();
  p.output(
    "y",
    p.op("MaxPool", [p.input("x", [1, 2, 7, 7])], {
      kernel_shape: [3, 3],
      strides: [2, 2],
      pads: [1, 1, 1, 1],
      ceil_mode: 1,
    }),
  );
  await check(p.build(), { x: f32([1, 2, 7, 7], 5) }, 1);
  const a = new GraphBuilder();
  a.output(
    "y",
    a.op("AveragePool", [a.input("x", [1, 2, 6, 6])], { kernel_shape: [2, 2], strides: [2, 2] }),
  );
  await check(a.build(), { x: f32([1, 2, 6, 6], 6) }, 1);
});

Deno.test("a conv read transposed to its row order is stored in that order (ViT's patch embedding)", async () => {
  // Patches [N, C, P] read as tokens [N, P, C]: the conv stores [N, P, C], its columns (the
  // channels) contiguous, and the LayerNorm after reads rows, not a channel plane apart; so is
  // [P, N, C] (the channels still last, see `keptPermutations`). A transpose that takes the
  // channels off the last axis is stored as the conv lays it out.
  const cases = [[[0, 2, 1], false], [[2, 0, 1], false], [[1, 0, 2], true]] as const;
  for (const [perm, moved] of cases) {
    const b = new GraphBuilder();
    const conv = b.op("Conv", [b.input("x", [2, 3, 8, 8]), b.input("w", [6, 3, 4, 4])], {
      strides: [4, 4],
    });
    const patches = b.op("Reshape", [conv], { shape: [2, 6, 4] });
    const tokens = b.op("Transpose", [patches], { perm: [...perm] });
    const c = [2, 6, 4][perm[2]];
    const g = b.input("g", [c]), beta = b.input("beta", [c]);
    b.output("y", b.op("LayerNormalization", [tokens, g, beta], { axis: -1 }));
    const r = await check(b.build(), {
      x: f32([2, 3, 8, 8], 1),
      w: f32([6, 3, 4, 4], 2),
      g: f32([c], 3),
      beta: f32([c], 4),
    }, 2);
    assert.equal(r.log.some((l) => l.includes("iteration order")), moved, r.log.join("\n"));
    const tokenShape = perm.map((axis) => [2, 6, 4][axis]);
    assert.deepEqual(r.kernels[0].outputs[0].shape, moved ? [2, 6, 4] : tokenShape);
  }
});

Deno.test("a product read through the heads' merge stores its rows merged (attention's context)", async () => {
  // ctx [B, H, T, D] → Transpose(0, 2, 1, 3) → [B, T, H·D] → the output projection: the first
  // product writes [B, T, H, D] with D contiguous, so the second reads a plain matrix.
  const b = new GraphBuilder();
  const ctx = b.op("MatMul", [b.input("p", [2, 3, 4, 5]), b.input("v", [2, 3, 5, 6])]);
  const merged = b.op("Reshape", [b.op("Transpose", [ctx], { perm: [0, 2, 1, 3] })], {
    shape: [2, 4, 18],
  });
  b.output("y", b.op("MatMul", [merged, b.input("w", [18, 7])]));
  const r = await check(b.build(), {
    p: f32([2, 3, 4, 5], 1),
    v: f32([2, 3, 5, 6], 2),
    w: f32([18, 7], 3),
  }, 2);
  assert.deepEqual(r.kernels[0].outputs[0].shape, [2, 4, 18]);
  assert.ok(!r.log.some((l) => l.includes("iteration order")), r.log.join("\n"));
});

Deno.test("an elementwise DAG with shared values and several outputs is one kernel", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [3, 4]), y = b.input("y", [4]);
  const e = b.op("Exp", [b.op("Add", [x, y])]);
  b.output("a", b.op("Mul", [e, e]));
  b.output("b", b.op("Sub", [e, x]));
  b.output("c", b.op("Neg", [e]));
  const r = await check(b.build(), { x: f32([3, 4], 1), y: f32([4], 2) }, 1);
  assert.equal(r.kernels[0].outputs.length, 3);
});

Deno.test("a reduction absorbs its elementwise prologue and epilogue", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [5, 6]);
  const s = b.op("ReduceSum", [b.op("Exp", [b.op("Mul", [x, b.constant(0.5)])])], {
    axes: [0],
    keepdims: 0,
  });
  b.output("y", b.op("Log", [b.op("Add", [s, b.input("z", [6])])]));
  assert.equal(
    (await check(b.build(), { x: f32([5, 6], 1), z: f32([6], 2) }, 1)).kernels[0].pattern,
    "reduce",
  );
});

Deno.test("movement ops are index maps, not copies", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [4, 6]);
  const t = b.op("Transpose", [
    b.op("Slice", [x], { starts: [1, 0], ends: [4, 6], steps: [1, 2] }),
  ]);
  const r = b.op("Reshape", [b.op("Pad", [t], { pads: [1, 0, 0, 1], value: 2 })], { shape: [-1] });
  b.output(
    "y",
    b.op("Exp", [b.op("Expand", [b.op("Unsqueeze", [r], { axes: [0] })], { shape: [2, 16] })]),
  );
  await check(b.build(), { x: f32([4, 6], 1) }, 1);
});

Deno.test("gathers fuse as data-dependent index steps: lookup, producer and consumer in one kernel", async () => {
  const b = new GraphBuilder();
  const x = b.op("Exp", [b.input("x", [4, 3])]);
  const g = b.op("Gather", [x, b.input("i", [2, 2], "i32")], { axis: 0 });
  const e = b.op("GatherElements", [g, b.input("j", [2, 2, 3], "i32")], { axis: 2 });
  b.output("y", b.op("Neg", [e]));
  const graph = b.build();
  const r = fuse(graph);
  assert.equal(r.kernels.length, 1, r.log.join("\n"));
  assert.deepEqual(r.kernels[0].inputs.map((b) => String(b.shape)).sort(), ["2,2", "2,2,3", "4,3"]);
  const i: HostTensor = { data: new Int32Array([2, 0, -1, 1]), shape: [2, 2], dtype: "i32" };
  const j: HostTensor = {
    data: new Int32Array([2, 1, 0, 0, 0, 0, -1, 2, 1, 1, 1, 1]),
    shape: [2, 2, 3],
    dtype: "i32",
  };
  await check(graph, { x: f32([4, 3], 1), i, j }, 1);
});

Deno.test("Concat, Split and edge/reflect Pad fuse into their consumers", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [3, 4]);
  const [p, q] = b.opN("Split", [x], { axis: 1, split: [1, 3] }, 2);
  const c = b.op("Concat", [q, b.op("Exp", [p])], { axis: 1 });
  const e = b.op("Pad", [c], { pads: [1, 2, 2, 1], mode: "edge" });
  const r = b.op("Pad", [c], { pads: [2, 0, 0, 3], mode: "reflect" });
  b.output(
    "y",
    b.op("Add", [
      b.op("Slice", [e], { starts: [0, 0], ends: [3, 4] }),
      b.op("Slice", [r], { starts: [0, 0], ends: [3, 4] }),
    ]),
  );
  const graph = b.build();
  assert.ok(fuse(graph).kernels.every((k) => !k.opaque));
  await check(graph, { x: f32([3, 4], 2) }, fuse(graph).kernels.length);
});

Deno.test("a Concat of small expressions (rotary's halves) is one kernel with its consumer", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [2, 3, 8]), cos = b.input("cos", [3, 4]), sin = b.input("sin", [3, 4]);
  const [x1, x2] = b.opN("Split", [x], { axis: 2, split: [4, 4] }, 2);
  const mul = (u: Sym, v: Sym) => b.op("Mul", [u, v]);
  // Each part has a value of its own outside its range (a + 1, an Exp): the concat's select,
  // not the pad's fill, decides every point.
  const first = b.op("Add", [b.op("Sub", [mul(x1, cos), mul(x2, sin)]), b.constant(1)]);
  const second = b.op("Exp", [b.op("Add", [mul(x2, cos), mul(x1, sin)])]);
  const rotated = b.op("Concat", [first, second], { axis: 2 });
  b.output("y", b.op("Transpose", [rotated], { perm: [1, 0, 2] }));
  const graph = b.build();
  const feeds = { x: f32([2, 3, 8], 3), cos: f32([3, 4], 4), sin: f32([3, 4], 5) };
  await check(graph, feeds, 1);
  const plain = await (await compile(graph, { fuse: false })).run(feeds);
  const gpu = await (await compile(graph, { backend: "webgpu", cache: false })).run(feeds);
  assertClose(numbers(gpu.y.data), numbers(plain.y.data), { atol: 1e-5, rtol: 1e-5 });
});

Deno.test("a broadcast read of an expensive value is computed once, not per reuse", () => {
  const b = new GraphBuilder();
  const v = b.op("Exp", [b.op("Sin", [b.input("v", [64])])]);
  b.output("y", b.op("Mul", [b.input("x", [64, 64]), v]));
  const r = fuse(b.build());
  assert.equal(r.kernels.length, 2);
  assert.ok(r.log.some((l) => /broadcast \(recomputation\)/.test(l)));
});

Deno.test("attention MatMul(Q,Kᵀ)·scale + mask → Softmax → MatMul(·,V) is one group", async () => {
  const b = new GraphBuilder();
  const q = b.input("q", [2, 4, 8, 16]),
    k = b.input("k", [2, 4, 8, 16]),
    v = b.input("v", [2, 4, 8, 16]);
  const scores = b.op("Mul", [
    b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 1, 3, 2] })]),
    b.constant(0.25),
  ]);
  const masked = b.op("Add", [scores, b.input("mask", [8, 8])]);
  b.output("y", b.op("MatMul", [b.op("Softmax", [masked], { axis: -1 }), v]));
  const feeds = {
    q: f32([2, 4, 8, 16], 1),
    k: f32([2, 4, 8, 16], 2),
    v: f32([2, 4, 8, 16], 3),
    mask: f32([8, 8], 4),
  };
  const r = await check(b.build(), feeds, 3);
  assert.deepEqual(r.kernels.map((x) => x.group), ["attention_0", "attention_0", "attention_0"]);
});

Deno.test("kernels stay within a backend's binding limit", () => {
  const b = new GraphBuilder();
  const xs = [...Array(10).keys()].map((i) => b.op("Exp", [b.input(`x${i}`, [16])]));
  b.output("y", xs.reduce((acc, x) => b.op("Add", [acc, x])));
  const graph = b.build();
  const r = fuse(graph, { maxInputs: 4 });
  assert.ok(r.kernels.length > 1);
  for (const k of r.kernels) assert.ok(k.inputs.length <= 4, `${k.name} reads ${k.inputs.length}`);
  assert.ok(r.log.some((l) => /binding limit/.test(l)));
  assert.equal(fuse(graph).kernels.length, 1);
});

Deno.test("chains of ops that reuse an operand compile in linear time and size on every backend", async () => {
  // Relu is Where(x < 0, 0, x): x twice. As a tree, 64 of them would be 2^64 nodes.
  const depth = 64;
  const b = new GraphBuilder();
  let x = b.input("x", [2, 4]);
  const ops = ["Relu", "LeakyRelu", "HardSwish", "Gelu"];
  for (let i = 0; i < depth; i++) x = b.op(ops[i % ops.length], [x]);
  b.output("y", x);
  const graph = b.build();
  const [kernel] = fuse(graph).kernels;
  assert.ok(kernelText(kernel).length < depth * 2000, `text of ${kernelText(kernel).length} chars`);
  const feeds = {
    x: {
      data: new Float32Array([NaN, -1, 1, 2, -3, 0.5, 4, -0.25]),
      shape: [2, 4],
      dtype: "f32" as const,
    },
  };
  const want = await (await compile(graph, { backend: "reference", cache: false })).run(feeds);
  assert.ok(Number.isNaN(numbers(want.y.data)[0]));
  for (const backend of ["wasm", "webgpu"]) {
    const got = await (await compile(graph, { backend, cache: false })).run(feeds);
    assertClose(numbers(got.y.data), numbers(want.y.data), {
      rtol: 1e-5,
      message: backend,
    });
  }
});

Deno.test("merging independent elementwise kernels respects the binding limit, outputs included", () => {
  const b = new GraphBuilder();
  for (let i = 0; i < 10; i++) {
    b.output(`y${i}`, b.op("Exp", [b.input(`x${i}`, [4, 4])]));
  }
  const { kernels } = fuse(b.build(), { maxInputs: 4 });
  for (const k of kernels) {
    assert.ok(
      k.inputs.length + k.outputs.length <= 5,
      `${k.name}: ${k.inputs.length} in, ${k.outputs.length} out`,
    );
  }
  assert.ok(kernels.length >= 4);
});

Deno.test("a reduction whose epilogue stores many values is split within the binding limit", async () => {
  // As a decoder's attention mask: one ReduceSum, and each of 12 layers casting and offsetting
  // it in the reduction's epilogue, every result read by a kernel of its own.
  const b = new GraphBuilder();
  const mask = b.input("mask", [2, 16]);
  const sum = b.op("ReduceSum", [mask], { axes: [1], keepdims: 1 });
  const x = b.input("x", [2, 16]);
  for (let i = 0; i < 12; i++) {
    const offset = b.op("Add", [sum, b.constant(i)]);
    b.output(`y${i}`, b.op("Mul", [b.op("Softmax", [b.op("Mul", [x, offset])], { axis: 1 }), x]));
  }
  const graph = b.build();
  const { kernels, log } = fuse(graph, { maxInputs: 4 });
  for (const k of kernels) {
    assert.ok(
      k.inputs.length + k.outputs.length <= 5,
      `${k.name}: ${k.inputs.length} in, ${k.outputs.length} out`,
    );
  }
  assert.ok(log.some((l) => /split into/.test(l)), log.join("\n"));
  const feeds = { mask: f32([2, 16], 1), x: f32([2, 16], 2) };
  const want = await (await compile(graph, { backend: "reference", cache: false })).run(feeds);
  for (const backend of ["wasm", "webgpu"]) {
    const got = await (await compile(graph, { backend, cache: false })).run(feeds);
    for (let i = 0; i < 12; i++) {
      assertClose(numbers(got[`y${i}`].data), numbers(want[`y${i}`].data), {
        rtol: 1e-5,
        message: `${backend} y${i}`,
      });
    }
  }
});

Deno.test("sums of many stored values of one shape share kernels only within the binding limit", async () => {
  // Twelve products, each summed whole and the sums added: the sums of stored values of one
  // shape join one kernel, which bound 13 buffers where the device allowed 5.
  const b = new GraphBuilder();
  const x = b.input("x", [3, 4]);
  let total: Sym | undefined;
  for (let i = 0; i < 12; i++) {
    const y = b.op("MatMul", [x, b.constant(new Float32Array(8).fill(i + 1), [4, 2])]);
    const sum = b.op("ReduceSum", [y], { keepdims: 0 });
    total = total ? b.op("Add", [total, sum]) : sum;
  }
  b.output("y", total!);
  const graph = b.build();
  const { kernels } = fuse(graph, { maxInputs: 4 });
  for (const k of kernels) {
    assert.ok(k.inputs.length + k.outputs.length <= 5, `${k.name}: ${k.inputs.length} in`);
  }
  const sums = kernels.filter((k) => k.ops.some((o) => o.includes("ReduceSum")));
  assert.ok(sums.length > 1 && sums.length < 12, `${sums.length} kernels of sums`);
  const feeds = { x: f32([3, 4], 13) };
  const want = await (await compile(graph, { backend: "reference", cache: false })).run(feeds);
  for (const backend of ["wasm", "webgpu"]) {
    const got = await (await compile(graph, { backend, cache: false })).run(feeds);
    assertClose(numbers(got.y.data), numbers(want.y.data), { rtol: 1e-5, message: backend });
  }
});

Deno.test("independent elementwise kernels merge only while their stores stay small", () => {
  const build = (n: number) => {
    const b = new GraphBuilder();
    for (let i = 0; i < 4; i++) b.output(`y${i}`, b.op("Exp", [b.input(`x${i}`, [n])]));
    return fuse(b.build()).kernels.length;
  };
  assert.equal(build(1024), 1);
  // Four stores of 12 MiB: merged, all four would be live from the first kernel on.
  assert.equal(build(3 << 20), 4);
});

Deno.test("a value computed twice from the same buffers and equal constants is stored once", async () => {
  // Two nodes each add their own (equal) constant to x, and each sum feeds a product, which
  // stores its operand: one kernel stores both, and both products read that one buffer.
  const build = (second: number[]) => {
    const b = new GraphBuilder();
    const x = b.input("x", [4, 8]);
    const w = b.param("w", [8, 3], "f32", uniform(24, 5));
    const shift = (v: number[]) => b.constant(Float32Array.from(v), [8], "f32");
    const first = [0, 1, 2, 3, 4, 5, 6, 7];
    b.output("p", b.op("MatMul", [b.op("Add", [x, shift(first)]), w]));
    b.output("q", b.op("MatMul", [b.op("Add", [x, shift(second)]), w]));
    return b.build();
  };
  const stores = (g: Graph) =>
    fuse(g).kernels.filter((k) => k.pattern === "elementwise")
      .reduce((n, k) => n + k.outputs.length, 0);
  const feeds = { x: f32([4, 8], 3) };
  const same = build([0, 1, 2, 3, 4, 5, 6, 7]);
  assert.equal(stores(same), 1);
  await check(same, feeds, 3);
  // −0 is not +0 (x + −0 keeps a −0 of x): those constants, and so the sums, stay apart.
  assert.equal(stores(build([-0, 1, 2, 3, 4, 5, 6, 7])), 2);
  assert.equal(stores(build([0, 1, 2, 3, 4, 5, 6, 8])), 2);
  // Large constants are told apart by every byte, not only the ones their key samples.
  const wide = (second: (v: Float32Array) => void) => {
    const b = new GraphBuilder();
    const x = b.input("x", [2, 1000]);
    const w = b.param("w", [1000, 3], "f32", uniform(3000, 5));
    const first = uniform(1000, 9), other = first.slice();
    second(other);
    for (const [name, v] of [["p", first], ["q", other]] as const) {
      b.output(name, b.op("MatMul", [b.op("Add", [x, b.constant(v, [1000], "f32")]), w]));
    }
    return b.build();
  };
  assert.equal(stores(wide(() => {})), 1);
  assert.equal(stores(wide((v) => (v[1] += 1))), 2);
});

Deno.test("a graph output read reshaped under a broadcast is stored once, where it is read", async () => {
  // A decode step's cache update: the present is an output, and the attention reads it
  // unsqueezed under its query heads' broadcast.
  const b = new GraphBuilder();
  const present = b.op("Add", [b.input("past", [1, 2, 8, 4]), b.input("x", [1, 2, 8, 4])]);
  b.output("present", present);
  const keys = b.op("Expand", [b.op("Unsqueeze", [present], { axes: [2] })], {
    shape: [1, 2, 3, 8, 4],
  });
  b.output("y", b.op("Mul", [keys, b.input("q", [1, 2, 3, 8, 4])]));
  const feeds = {
    past: f32([1, 2, 8, 4], 1),
    x: f32([1, 2, 8, 4], 2),
    q: f32([1, 2, 3, 8, 4], 3),
  };
  const r = await check(b.build(), feeds, 2);
  assert.ok(
    r.log.some((l) => l.includes(", read reshaped)")),
    r.log.join("\n"),
  );
});

Deno.test("a 1×1 conv of an input sliced by 2 reads it as rows of patches, not pixels in place", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [1, 16, 8, 8]);
  const w = b.param("w", [24, 16, 1, 1], "f32", uniform(24 * 16, 5));
  const sliced = b.op("Slice", [x], { starts: [0, 0], ends: [8, 8], axes: [2, 3], steps: [2, 2] });
  b.output("y", b.op("Conv", [sliced, w]));
  const graph = b.build();
  const feeds = { x: { data: uniform(16 * 64, 6), shape: [1, 16, 8, 8], dtype: "f32" as const } };
  const want = await (await compile(graph, { backend: "reference" })).run(feeds);
  using exe = await compile(graph, { backend: "wasm", cache: false });
  // [N, G, pixels, filters, K]: the pixels are the product's rows (16 of them, then 24 filters).
  assert.deepEqual(exe.plan!.kernels.map((k) => k.space.join("x")), ["1x1x16x24x16"]);
  assertClose(numbers((await exe.run(feeds)).y.data), numbers(want.y.data), { rtol: 1e-5 });
});
