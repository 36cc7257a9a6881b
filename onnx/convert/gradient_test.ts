import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { assertClose } from "../../jit/testing/testing.ts";
import { OnnxModel } from "../model.ts";
import { encodeModel, type NodeProto } from "../wire/proto.ts";
import "../../mod.ts";

const bytes = (s: string) => new TextEncoder().encode(s);
const node = (opType: string, input: string[], output: string[], domain = ""): NodeProto => ({
  opType,
  input,
  output,
  domain,
  attribute: [],
});
const tensor = (name: string, dims: number[]) => ({
  name,
  type: { tensorType: { elemType: 1, shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
});

/** y = tanh(relu(x·w + b)) and Gradient(xs = [x, w, b], y) over `forward`'s nodes. */
function model(forward: NodeProto[], y: string): OnnxModel {
  const grad: NodeProto = {
    ...node("Gradient", ["x", "w", "b"], ["dx", "dw", "db"], "ai.onnx.preview.training"),
    attribute: [
      { name: "xs", type: 8, strings: ["x", "w", "b"].map(bytes) },
      { name: "y", type: 3, s: bytes(y) },
    ],
  };
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }, { domain: "ai.onnx.preview.training", version: 1 }],
    graph: {
      name: "grad",
      node: [...forward, grad],
      initializer: [],
      input: [tensor("x", [2, 3]), tensor("w", [3, 4]), tensor("b", [4])],
      output: [tensor(y, [2, 4]), tensor("dx", [2, 3]), tensor("dw", [3, 4]), tensor("db", [4])],
    },
  }));
}

const X = [0.5, -1, 2, 1.5, 0.25, -0.75];
const W = [0.3, -0.2, 0.5, 0.1, -0.4, 0.6, 0.2, -0.3, 0.7, 0.05, -0.1, 0.2];
const B = [0.1, -0.2, 0.05, 0];

/** The same derivatives by hand: dz = (1 − y²)·[z > 0], dx = dz·wᵀ, dw = xᵀ·dz, db = Σ dz. */
function expected() {
  const z = [...Array(8)].map((_, i) => {
    const r = Math.floor(i / 4), c = i % 4;
    return B[c] + [0, 1, 2].reduce((s, k) => s + X[r * 3 + k] * W[k * 4 + c], 0);
  });
  const y = z.map((v) => Math.tanh(Math.max(v, 0)));
  const dz = z.map((v, i) => (v > 0 ? 1 - y[i] ** 2 : 0));
  const dx = [...Array(6)].map((_, i) => {
    const r = Math.floor(i / 3), k = i % 3;
    return [0, 1, 2, 3].reduce((s, c) => s + dz[r * 4 + c] * W[k * 4 + c], 0);
  });
  const dw = [...Array(12)].map((_, i) => {
    const k = Math.floor(i / 4), c = i % 4;
    return [0, 1].reduce((s, r) => s + X[r * 3 + k] * dz[r * 4 + c], 0);
  });
  const db = [0, 1, 2, 3].map((c) => dz[c] + dz[4 + c]);
  return { y, dx, dw, db };
}

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: Gradient differentiates a dense layer (broadcast bias, MatMul, Relu, Tanh)`, async () => {
    const m = model([
      node("MatMul", ["x", "w"], ["xw"]),
      node("Add", ["xw", "b"], ["z"]),
      node("Relu", ["z"], ["h"]),
      node("Tanh", ["h"], ["y"]),
    ], "y");
    try {
      const f32 = (data: number[], shape: number[]) => ({
        data: Float32Array.from(data),
        shape,
        dtype: "f32" as const,
      });
      const out = await m.run({ x: f32(X, [2, 3]), w: f32(W, [3, 4]), b: f32(B, [4]) }, {
        backend,
        cache: false,
      });
      const want = expected();
      for (const name of ["y", "dx", "dw", "db"] as const) {
        assertClose(Array.from(out[name].data as Float32Array), want[name], {
          atol: 1e-6,
          rtol: 1e-5,
          message: name,
        });
      }
    } finally {
      m.dispose();
    }
  });
}

Deno.test("Gradient through an op it cannot differentiate is a typed error naming the op", () => {
  assert.throws(
    () =>
      model([
        node("MatMul", ["x", "w"], ["xw"]),
        node("Add", ["xw", "b"], ["z"]),
        node("Softmax", ["z"], ["y"]),
      ], "y").graph(),
    (e) => e instanceof KilnError && /cannot differentiate Softmax/.test(e.message),
  );
});
