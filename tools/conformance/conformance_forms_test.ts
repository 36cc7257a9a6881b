import assert from "node:assert/strict";
import "../../mod.ts";
import { AS_DOUBLE, AS_HALF, asForm, formInput } from "./conformance_forms.ts";
import { fromF16Bits, toF16Bits } from "../../jit/ir/dtype.ts";
import { OnnxModel } from "../../onnx/model.ts";
import { encodeModel, type ModelProto, type NodeProto, protoOf } from "../../onnx/wire/proto.ts";

const FLOAT = 1, DOUBLE = 11, HALF = 10;
const tensor = (name: string, elemType: number, dims: number[]) => ({
  name,
  type: { tensorType: { elemType, shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
});
const node = (
  opType: string,
  input: string[],
  output: string,
  attribute = [] as NodeProto["attribute"],
) => ({
  opType,
  input,
  output: [output],
  attribute,
});

/** x·w → Acos → Cast to float → + 0.5 (a Constant): every place a float type can hide. */
function floatCase(): ModelProto {
  const half = protoOf("", { data: new Float32Array([0.5]), shape: [], dtype: "f32" });
  return {
    irVersion: 8,
    opsetImport: [{ version: 17 }],
    graph: {
      node: [
        node("Mul", ["x", "w"], "p"),
        node("Acos", ["p"], "a"),
        node("Cast", ["a"], "c", [{ name: "to", type: 2, i: FLOAT }]),
        node("Constant", [], "h", [{ name: "value", type: 4, t: half }]),
        node("Add", ["c", "h"], "y"),
      ],
      initializer: [protoOf("w", { data: new Float32Array([1, 2, 3]), shape: [3], dtype: "f32" })],
      input: [tensor("x", FLOAT, [2, 3])],
      output: [tensor("y", FLOAT, [2, 3])],
    },
  };
}

Deno.test("a float case's double form: every float tensor and dtype attribute made double", async () => {
  const wide = asForm(floatCase(), AS_DOUBLE)!;
  assert.equal(wide.graph.input[0].type?.tensorType?.elemType, DOUBLE);
  assert.equal(wide.graph.initializer[0].dataType, DOUBLE);
  const model = OnnxModel.fromBytes(encodeModel(wide));
  assert.equal(model.inputs[0].dtype, "f64");
  const data = new Float32Array([0.1, -0.2, 0.3, 0.01, 0.02, -0.03]);
  for (const backend of ["reference", "wasm"]) {
    const { y } = await model.run(
      { x: formInput({ data, shape: [2, 3], dtype: "f32" }, AS_DOUBLE) },
      { backend, cache: false },
    );
    assert.equal(y.dtype, "f64");
    const want = Array.from(data, (v, i) => Math.acos(v * (1 + (i % 3))) + 0.5);
    // Acos is a decomposition (atan series): f64 accuracy, far past f32's 1e-7.
    (y.data as Float64Array).forEach((v, i) => assert.ok(Math.abs(v - want[i]) < 1e-12, `${i}`));
  }
});

Deno.test("a float case's float16 form runs on every backend within f16's precision", async () => {
  const half = asForm(floatCase(), AS_HALF)!;
  assert.equal(half.graph.initializer[0].dataType, HALF);
  const model = OnnxModel.fromBytes(encodeModel(half));
  const data = new Float32Array([0.1, -0.2, 0.3, 0.01, 0.02, -0.03]);
  for (const backend of ["reference", "wasm", "webgpu"]) {
    const { y } = await model.run(
      { x: formInput({ data, shape: [2, 3], dtype: "f32" }, AS_HALF) },
      { backend, cache: false },
    );
    assert.equal(y.dtype, "f16");
    const got = Array.from(y.data as Uint16Array, fromF16Bits);
    const want = Array.from(data, (v, i) => Math.acos(v * (1 + (i % 3))) + 0.5);
    got.forEach((v, i) => assert.ok(Math.abs(v - want[i]) < 4e-3, `${backend} ${i}: ${v}`));
  }
});

Deno.test("cases without a derived form: no float tensor, or an op that takes float only", () => {
  for (const form of [AS_DOUBLE, AS_HALF]) {
    const ints = floatCase();
    ints.graph.input[0] = tensor("x", 6, [2, 3]);
    ints.graph.output[0] = tensor("y", 6, [2, 3]);
    assert.equal(asForm(ints, form), undefined);
    const quantized = floatCase();
    quantized.graph.node.push(node("QuantizeLinear", ["y", "h"], "q"));
    assert.equal(asForm(quantized, form), undefined);
  }
  const optimizer = floatCase();
  optimizer.graph.node.push(node("Adam", ["y", "h"], "q"));
  assert.equal(asForm(optimizer, AS_HALF), undefined);
});

Deno.test("f16 constants that decide attributes are read as values, not as their bits", async () => {
  const h = (name: string, v: number[]) =>
    protoOf(name, { data: Uint16Array.from(v, toF16Bits), shape: [v.length], dtype: "f16" });
  const scalarOf = (name: string, v: number) => ({ ...h(name, [v]), dims: [] });
  const model = OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ version: 17 }],
    graph: {
      node: [
        node("Clip", ["x", "lo", "hi"], "c"),
        node("Pad", ["c", "pads", "fill"], "y", [{
          name: "mode",
          type: 3,
          s: new TextEncoder().encode("constant"),
        }]),
        node("ConstantOfShape", ["shape"], "z", [{ name: "value", type: 4, t: h("", [0.75]) }]),
      ],
      initializer: [
        scalarOf("lo", -1),
        scalarOf("hi", 1.5),
        scalarOf("fill", 2.5),
        protoOf("pads", { data: new Int32Array([1, 1]), shape: [2], dtype: "i32" }, true),
        protoOf("shape", { data: new Int32Array([2]), shape: [1], dtype: "i32" }, true),
      ],
      input: [tensor("x", HALF, [3])],
      output: [tensor("y", HALF, [5]), tensor("z", HALF, [2])],
    },
  }));
  const x = { data: Uint16Array.from([-3, 0.5, 7], toF16Bits), shape: [3], dtype: "f16" as const };
  for (const backend of ["reference", "wasm"]) {
    const { y, z } = await model.run({ x }, { backend, cache: false });
    assert.deepEqual(Array.from(y.data as Uint16Array, fromF16Bits), [2.5, -1, 0.5, 1.5, 2.5]);
    assert.deepEqual(Array.from(z.data as Uint16Array, fromF16Bits), [0.75, 0.75]);
  }
});
