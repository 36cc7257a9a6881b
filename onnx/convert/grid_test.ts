import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { failingCases } from "../../tools/conformance/conformance.ts";
import { OnnxModel } from "../model.ts";
import { encodeModel } from "../wire/proto.ts";
import "../../mod.ts";

/**
 * MaxRoiPool over regions inside, across and past the image, scaled, in bins of one pixel and of
 * several, against ONNX Runtime Web 1.30 (`bench/export_ms_cases.ts`).
 */
const CASES = new URL("../testdata/onnx_max_roi_pool/", import.meta.url).pathname;

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: MaxRoiPool matches ONNX Runtime Web`, async () => {
    assert.deepEqual(await failingCases(CASES, backend, 3), []);
  });
}

Deno.test("MaxRoiPool refuses a region of a batch the input lacks, with a Fix", async () => {
  const model = OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "g",
      node: [{
        opType: "MaxRoiPool",
        input: ["x", "rois"],
        output: ["y"],
        attribute: [{ name: "pooled_shape", type: 7, ints: [2, 2] }],
      }],
      initializer: [{ name: "rois", dims: [1, 5], dataType: 1, floatData: [3, 0, 0, 2, 2] }],
      input: [{
        name: "x",
        type: {
          tensorType: {
            elemType: 1,
            shape: { dim: [1, 1, 4, 4].map((d) => ({ dimValue: d })) },
          },
        },
      }],
      output: [{ name: "y", type: { tensorType: { elemType: 1 } } }],
    },
  }));
  await assert.rejects(
    () => model.run({ x: { data: new Float32Array(16), shape: [1, 1, 4, 4], dtype: "f32" } }),
    (e) => e instanceof KilnError && /batch 3 outside \[0, 1\)/.test(e.message),
  );
  model.dispose();
});
