/**
 * Integer products sum exactly in i32 on every backend, as ONNX Runtime's int32 accumulation
 * does: contractions long enough that one f32 sum rounds (K · 255² past 2^24) are split.
 */
import assert from "node:assert/strict";
import { numbers } from "../../jit/testing/testing.ts";
import { testModel, valueInfo } from "../testdata.ts";
import type { TensorProto } from "../wire/proto.ts";
import { magnitude } from "../../jit/ops/integer_products.ts";
import { importModel } from "../import/import.ts";
import { modelProto } from "../model.ts";
import "../../mod.ts";

const BACKENDS = ["reference", "wasm", "webgpu"];

/** Deterministic values in [lo, hi], spread so that sums land on odd integers past 2^24. */
const values = (n: number, lo: number, hi: number, seed: number) =>
  Array.from(
    { length: n },
    (_, i) => lo + (Math.imul(i + 7919 * seed, 2654435761) >>> 0) % (hi - lo + 1),
  );

const tensor = (name: string, dataType: number, dims: number[], v: number[]): TensorProto => ({
  name,
  dims,
  dataType,
  rawData: dataType === 2 ? Uint8Array.from(v) : new Uint8Array(Int8Array.from(v).buffer),
});

Deno.test("the magnitude of a shifted 8-bit operand is 255, of an unshifted int8 128", () => {
  assert.equal(magnitude("u8", true), 255);
  assert.equal(magnitude("i8", true), 255);
  assert.equal(magnitude("i8", false), 128);
  assert.equal(magnitude("u16", true), 65535);
});

Deno.test("MatMulInteger past 258 products sums exactly in i32 on every backend", async () => {
  // Extremes stress the bound: a = 255 and b = −128 with zero points 0 and 127 (b − bz = −255).
  const [m, k, n] = [3, 1000, 5];
  const a = values(m * k, 200, 255, 1), b = values(k * n, -128, -100, 2);
  const model = testModel({
    node: [{
      opType: "MatMulInteger",
      input: ["a", "b", "az", "bz"],
      output: ["y"],
      attribute: [],
    }],
    initializer: [
      tensor("b", 3, [k, n], b),
      tensor("az", 2, [], [0]),
      tensor("bz", 3, [], [127]),
    ],
    input: [valueInfo("a", 2, [m, k])],
    output: [valueInfo("y", 6)],
  });
  const want: number[] = [];
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let p = 0; p < k; p++) s += a[i * k + p] * (b[p * n + j] - 127);
      want.push(s);
    }
  }
  // The sums pass 2^24 and are odd: one f32 sum could not hold them.
  assert.ok(want.some((s) => Math.abs(s) > 2 ** 24 && s % 2 !== 0), String(want));
  const x = { data: Uint8Array.from(a), shape: [m, k], dtype: "u8" as const };
  for (const backend of BACKENDS) {
    const { y } = await model.run({ a: x }, { backend, cache: false });
    assert.deepEqual(numbers(y.data), want, backend);
  }
  model.dispose();
});

Deno.test("ConvInteger over 512 channels of 3×3 sums exactly on every backend", async () => {
  const [c, mOut, hw] = [512, 2, 3];
  const x = values(c * hw * hw, 250, 255, 3), w = values(mOut * c * 9, 120, 127, 4);
  const conv = testModel({
    node: [{
      opType: "ConvInteger",
      input: ["x", "w", "xz"],
      output: ["y"],
      attribute: [{ name: "kernel_shape", type: 7, ints: [3, 3] }],
    }],
    initializer: [tensor("w", 3, [mOut, c, 3, 3], w), tensor("xz", 2, [], [0])],
    input: [valueInfo("x", 2, [1, c, hw, hw])],
    output: [valueInfo("y", 6)],
  });
  const want = [0, 1].map((o) => {
    let s = 0;
    for (let i = 0; i < c * 9; i++) s += x[i] * w[o * c * 9 + i];
    return s;
  });
  assert.ok(want.some((s) => s > 2 ** 24 && s % 4 !== 0), String(want));
  const input = { data: Uint8Array.from(x), shape: [1, c, hw, hw], dtype: "u8" as const };
  for (const backend of BACKENDS) {
    const { y } = await conv.run({ x: input }, { backend, cache: false });
    assert.deepEqual(numbers(y.data), want, backend);
  }
  conv.dispose();
});

Deno.test("QLinearMatMul requantizes the exact i32 sum", async () => {
  const [k, n] = [600, 2];
  const a = values(k, 240, 255, 5), b = values(k * n, 100, 127, 6);
  // y = round(acc · (1 · 1 / 2^20)) + 10, saturated: acc's low bits decide the rounding.
  const f32 = (name: string, v: number): TensorProto => ({
    name,
    dims: [],
    dataType: 1,
    floatData: [v],
  });
  const model = testModel({
    node: [{
      opType: "QLinearMatMul",
      input: ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
      output: ["y"],
      attribute: [],
    }],
    initializer: [
      f32("as", 1),
      tensor("az", 2, [], [0]),
      tensor("b", 3, [k, n], b),
      f32("bs", 1),
      tensor("bz", 3, [], [0]),
      f32("ys", 2 ** 20),
      tensor("yz", 2, [], [10]),
    ],
    input: [valueInfo("a", 2, [1, k])],
    output: [valueInfo("y", 2)],
  });
  const want = [0, 1].map((j) => {
    let s = 0;
    for (let p = 0; p < k; p++) s += a[p] * b[p * n + j];
    return Math.min(255, Math.round(s / 2 ** 20) + 10);
  });
  const input = { data: Uint8Array.from(a), shape: [1, k], dtype: "u8" as const };
  for (const backend of BACKENDS) {
    const { y } = await model.run({ a: input }, { backend, cache: false });
    assert.deepEqual(numbers(y.data), want, backend);
  }
  model.dispose();
});

Deno.test("batched MatMulInteger with a dequantizing epilogue, odd and even K, every tile shape", async () => {
  for (const k of [64, 63]) {
    const [batch, m, n] = [2, 7, 9];
    const a = values(batch * m * k, 0, 255, 7), b = values(k * n, -128, 127, 8);
    const model = testModel({
      node: [
        { opType: "MatMulInteger", input: ["a", "b", "az"], output: ["i"], attribute: [] },
        { opType: "Cast", input: ["i"], output: ["f"], attribute: [{ name: "to", type: 2, i: 1 }] },
        { opType: "Mul", input: ["f", "s"], output: ["y"], attribute: [] },
      ],
      initializer: [
        tensor("b", 3, [k, n], b),
        tensor("az", 2, [], [3]),
        { name: "s", dims: [], dataType: 1, floatData: [0.5] },
      ],
      input: [valueInfo("a", 2, [batch, m, k])],
      output: [valueInfo("y", 1)],
    });
    const want: number[] = [];
    for (let r = 0; r < batch * m; r++) {
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let p = 0; p < k; p++) s += (a[r * k + p] - 3) * b[p * n + j];
        want.push(s * 0.5);
      }
    }
    const x = { data: Uint8Array.from(a), shape: [batch, m, k], dtype: "u8" as const };
    for (const backend of BACKENDS) {
      const { y } = await model.run({ a: x }, { backend, cache: false });
      assert.deepEqual(numbers(y.data), want, `${backend}, K = ${k}`);
    }
    model.dispose();
  }
});

Deno.test("constant weights far below their type's bound sum in fewer exact chunks", async () => {
  // |b| ≤ 9 over K = 1000: every sum stays under 255 · 9000 < 2^24, so one float product is
  // exact, where the type bound (255² a product) asks for four chunks.
  const [k, n] = [1000, 3];
  const a = values(k, 0, 255, 9), b = values(k * n, -9, 9, 10);
  const model = testModel({
    node: [{ opType: "MatMulInteger", input: ["a", "b"], output: ["y"], attribute: [] }],
    initializer: [tensor("b", 3, [k, n], b)],
    input: [valueInfo("a", 2, [1, k])],
    output: [valueInfo("y", 6)],
  });
  const graph = importModel(modelProto(model));
  // The importer gives the bound on |a|; a backend that decomposes the product into float chunks
  // counts them from the weight then (jit/ops/integer_products_test.ts checks their shapes).
  const node = graph.nodes.find((x) => x.op === "IntegerMatMul")!;
  assert.deepEqual([node.attrs.max_a, node.attrs.parts], [255, undefined]);
  const want = [0, 1, 2].map((j) => a.reduce((s, v, p) => s + v * b[p * n + j], 0));
  const x = { data: Uint8Array.from(a), shape: [1, k], dtype: "u8" as const };
  for (const backend of BACKENDS) {
    const { y } = await model.run({ a: x }, { backend, cache: false });
    assert.deepEqual(numbers(y.data), want, backend);
  }
  model.dispose();
});
