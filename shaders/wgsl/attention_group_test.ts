/**
 * The attention forms exporters write (scale after QKᵀ or on Q, division by √d, additive and
 * selecting masks of several shapes, K given transposed, Softmax as one op or decomposed) each
 * reach one attention group (one dispatch on WebGPU), with the reference's values.
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder, type Sym } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { uniform } from "../../jit/support/random.ts";
import { assertClose, f32, numbers } from "../../jit/testing/testing.ts";
import { WebGpuBackend } from "../../backends/webgpu/webgpu_backend.ts";
import { attentionGroup } from "./attention_group.ts";

const [B, H, T, D] = [2, 2, 16, 8];
const profiled = new WebGpuBackend({ profile: true });
/** An attention form of queries `q` and keys `k`, `t` of each. */
type Form = (b: GraphBuilder, q: Sym, k: Sym, t: number) => Sym;
const kt = (b: GraphBuilder, k: Sym) => b.op("Transpose", [k], { perm: [0, 1, 3, 2] });
const softmax = (b: GraphBuilder, s: Sym) => b.op("Softmax", [s], { axis: -1 });
const scores = (b: GraphBuilder, q: Sym, k: Sym) =>
  b.op("Mul", [b.op("MatMul", [q, kt(b, k)]), b.constant(0.125)]);

const FORMS: Record<string, Form> = {
  "softmax((Q·Kᵀ)·s)": (b, q, k) => softmax(b, scores(b, q, k)),
  "softmax((Q·s)·Kᵀ)": (b, q, k) =>
    softmax(b, b.op("MatMul", [b.op("Mul", [q, b.constant(0.125)]), kt(b, k)])),
  "softmax(Q·Kᵀ / √d)": (b, q, k) =>
    softmax(b, b.op("Div", [b.op("MatMul", [q, kt(b, k)]), b.constant(Math.sqrt(D))])),
  "softmax((Q·√s)·(K·√s)ᵀ)": (b, q, k) => {
    const half = (x: Sym) => b.op("Mul", [x, b.constant(Math.sqrt(0.125))]);
    return softmax(b, b.op("MatMul", [half(q), kt(b, half(k))]));
  },
  "additive mask [B, 1, 1, T]": (b, q, k, t) =>
    softmax(b, b.op("Add", [scores(b, q, k), b.input("mask", [B, 1, 1, t])])),
  "additive mask [1, 1, T, T]": (b, q, k, t) =>
    softmax(b, b.op("Add", [scores(b, q, k), b.input("mask", [1, 1, t, t])])),
  "selecting mask [T, T]": (b, q, k, t) =>
    softmax(b, b.op("Where", [b.input("keep", [t, t], "bool"), scores(b, q, k), b.constant(-1e9)])),
  "K given transposed": (b, q, _k, t) =>
    softmax(b, b.op("Mul", [b.op("MatMul", [q, b.input("kt", [B, H, D, t])]), b.constant(0.125)])),
  "Softmax decomposed": (b, q, k) => {
    const s = scores(b, q, k);
    const max = b.op("ReduceMax", [s], { axes: [-1], keepdims: 1 });
    const e = b.op("Exp", [b.op("Sub", [s, max])]);
    return b.op("Div", [e, b.op("ReduceSum", [e], { axes: [-1], keepdims: 1 })]);
  },
};

/** Inputs for the graph's declared inputs, masks keeping most keys. */
function feedsOf(names: readonly { name: string; shape: readonly number[]; dtype: string }[]) {
  const feeds: Record<string, HostTensor> = {};
  names.forEach(({ name, shape, dtype }, i) => {
    const n = shape.reduce((p, d) => p * d, 1), values = uniform(n, 60 + i, -1, 1);
    feeds[name] = dtype === "bool"
      ? { data: Uint8Array.from(values, (v) => +(v > -0.8)), shape, dtype: "bool" }
      : name === "mask"
      ? f32(values.map((v) => (v > 0.8 ? -Infinity : 0)), [...shape])
      : f32(values, [...shape]);
  });
  return feeds;
}

for (const [name, form] of Object.entries(FORMS)) {
  Deno.test(`attention as ${name} is one group, with the reference's values on WebGPU`, async () => {
    const b = new GraphBuilder();
    const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, [B, H, T, D]));
    b.output("y", b.op("MatMul", [form(b, q, k, T), v]));
    const graph = b.build();
    const group = fuse(graph).kernels.filter((kernel) => kernel.group === "attention_0");
    assert.equal(group.length, 3, name);
    assert.ok(attentionGroup(group, new Set()), `${name}: the three kernels run as one`);
    const feeds = feedsOf(graph.inputs.map((i) => ({ ...i, dtype: i.dtype })));
    using gpu = await compile(graph, { backend: profiled, cache: false });
    using reference = await compile(graph, { backend: "reference" });
    const [got, want] = [await gpu.run(feeds), await reference.run(feeds)];
    assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-5, rtol: 1e-4 });
    // One dispatch ran the group (the profiled run names each dispatch).
    assert.ok(gpu.deviceTimes().some((t) => t.kernel === "attention_0"), name);
  });
}

// Through the flash kernel (which runs by default on long sequences): 48 keys make two key tiles,
// so masks that can hide tiles skip them, and workgroups of 16 rows (llvmpipe compiles those in
// seconds, 64 rows in most of a minute). Each form is one flash kernel; only a mask that varies
// along the queries brings its tile summary.
const FLASH = { T: 48, summary: new Set(["additive mask [1, 1, T, T]"]) };
const flashGpu = new WebGpuBackend({ profile: true, flashAttention: true });
for (const [name, form] of Object.entries(FORMS)) {
  Deno.test(`attention as ${name} runs as one flash kernel, with the reference's values`, async () => {
    const b = new GraphBuilder();
    const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, [B, H, FLASH.T, D]));
    b.output("y", b.op("MatMul", [form(b, q, k, FLASH.T), v]));
    const graph = b.build();
    const feeds = feedsOf(graph.inputs.map((i) => ({ ...i, dtype: i.dtype })));
    using gpu = await compile(graph, { backend: flashGpu, cache: false });
    using reference = await compile(graph, { backend: "reference" });
    const [got, want] = [await gpu.run(feeds), await reference.run(feeds)];
    assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-5, rtol: 1e-4 });
    const ran = gpu.deviceTimes().map((t) => t.kernel).filter((n) => n.startsWith("attention_0"));
    const summary = FLASH.summary.has(name) ? ["attention_0_tiles"] : [];
    assert.deepEqual(ran, [...summary, "attention_0"], name);
  });
}
