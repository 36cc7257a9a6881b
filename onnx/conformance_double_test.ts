import assert from "node:assert/strict";
import "../mod.ts";
import { asDouble, doubleInput } from "./conformance_double.ts";
import { OnnxModel } from "./model.ts";
import { encodeModel, type ModelProto, type NodeProto, protoOf } from "./proto.ts";

const FLOAT = 1, DOUBLE = 11;
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
  const wide = asDouble(floatCase())!;
  assert.equal(wide.graph.input[0].type?.tensorType?.elemType, DOUBLE);
  assert.equal(wide.graph.initializer[0].dataType, DOUBLE);
  const model = OnnxModel.fromBytes(encodeModel(wide));
  assert.equal(model.inputs[0].dtype, "f64");
  const data = new Float32Array([0.1, -0.2, 0.3, 0.01, 0.02, -0.03]);
  for (const backend of ["reference", "wasm"]) {
    const { y } = await model.run(
      { x: doubleInput({ data, shape: [2, 3], dtype: "f32" }) },
      { backend, cache: false },
    );
    assert.equal(y.dtype, "f64");
    const want = Array.from(data, (v, i) => Math.acos(v * (1 + (i % 3))) + 0.5);
    // Acos is a decomposition (atan series): f64 accuracy, far past f32's 1e-7.
    (y.data as Float64Array).forEach((v, i) => assert.ok(Math.abs(v - want[i]) < 1e-12, `${i}`));
  }
});

Deno.test("cases without a double form: no float tensor, or a float-only op", () => {
  const ints = floatCase();
  ints.graph.input[0] = tensor("x", 6, [2, 3]);
  ints.graph.output[0] = tensor("y", 6, [2, 3]);
  assert.equal(asDouble(ints), undefined);
  const quantized = floatCase();
  quantized.graph.node.push(node("QuantizeLinear", ["y", "h"], "q"));
  assert.equal(asDouble(quantized), undefined);
});
