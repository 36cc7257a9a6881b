/**
 * Models quantized by ONNX Runtime's own tools (`bench/export_quant_models.py --small` on the GPU
 * machine), against ONNX Runtime CPU's recorded outputs on every backend:
 *
 * - `quant_bert_tiny_int8`: a one-layer BERT (hidden 320, intermediate 640) through
 *   `quantize_dynamic`: DynamicQuantizeLinear and MatMulInteger with K past 258, where one f32
 *   sum of the products rounds and ONNX Runtime's int32 sums do not.
 * - `quant_cnn_qdq`: convolutions (one depthwise), a pool and a two-layer head through
 *   `quantize_static` in the QDQ format, weights per channel: ONNX Runtime fuses each
 *   DequantizeLinear → Conv/Gemm → QuantizeLinear into one integer product, and so does kiln.
 */
import assert from "node:assert/strict";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { exportedModel } from "../testdata.ts";
import { OnnxModel } from "../model.ts";
import { importOnnx } from "./import.ts";
import { decodeModel } from "../wire/proto.ts";
import "../../mod.ts";

const BACKENDS = ["reference", "wasm", "webgpu"];

Deno.test("a dynamically quantized BERT layer matches ONNX Runtime on every backend", async () => {
  const m = await exportedModel("quant_bert_tiny_int8");
  const model = OnnxModel.fromBytes(m.bytes);
  for (const backend of BACKENDS) {
    const { y } = await model.run(m.inputs, { backend, cache: false });
    assertClose(numbers(y.data), m.y, { atol: 1e-5, rtol: 0, message: backend });
  }
  model.dispose();
});

Deno.test("a QDQ-quantized CNN gives ONNX Runtime's quantized values on every backend", async () => {
  const m = await exportedModel("quant_cnn_qdq");
  const model = OnnxModel.fromBytes(m.bytes);
  // The output is dequantized from u8: one step of its scale apart is one rounding apart.
  const step = scaleOf(m.bytes, "y_scale");
  for (const backend of BACKENDS) {
    const got = numbers((await model.run(m.inputs, { backend, cache: false })).y.data);
    if (backend === "reference") {
      // Its average pool sums in f64, not in f32 as the kernels and ONNX Runtime do: a mean
      // that lands exactly halfway between two steps rounds the other way now and then.
      assertClose(got, m.y, { atol: 1.01 * step, rtol: 0 });
    } else assert.deepEqual(got, [...m.y], backend);
  }
  model.dispose();
  // Each Conv and Gemm between DequantizeLinear and QuantizeLinear ran as an integer product:
  // its sums are converted to i32 (three Convs, two Gemms; the float form has no i32 at all).
  const sums = importOnnx(m.bytes).nodes.filter((n) => n.op === "Cast" && n.attrs.to === "i32");
  assert.equal(sums.length, 5);
});

/** The f32 value of the model's scalar initializer `name`. */
function scaleOf(bytes: Uint8Array, name: string): number {
  const t = decodeModel(bytes).graph.initializer.find((i) => i.name === name)!;
  return t.floatData?.[0] ??
    new DataView(t.rawData!.buffer, t.rawData!.byteOffset).getFloat32(0, true);
}
