import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { runCase } from "../../tools/conformance/conformance.ts";
import { OnnxModel } from "../model.ts";
import { testModel, valueInfo } from "../testdata.ts";
import { decodeTensor, tensorOf } from "../wire/proto.ts";
import "../../mod.ts";

/**
 * One-node models of ONNX Runtime's fused contrib ops (`testdata/export_ms_fused.py`), the
 * expected outputs ONNX Runtime 1.30's CPU provider's, run as ONNX's node cases are.
 */
const CASES = new URL("../testdata/onnx_ms_fused/", import.meta.url).pathname;
const cases = [...Deno.readDirSync(CASES)].map((e) => e.name).sort();

/**
 * ORT's FastGelu evaluates tanh with its own approximation: deep in the negative tail (outputs
 * near -1e-5) it differs from the formula by some 3e-7, past ONNX's default atol of 1e-7.
 */
const APPROXIMATE = "ms_fast_gelu";

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: ONNX Runtime's fused contrib ops match ONNX Runtime`, async () => {
    assert.equal(cases.length, 11);
    for (const name of cases.filter((n) => n !== APPROXIMATE)) {
      const r = await runCase(`${CASES}${name}`, backend);
      assert.equal(r.status, "pass", `${name}: ${r.reason}`);
    }
    // FastGelu: within 1e-6 of ORT's values and of the formula in f64 (where 1 + tanh(u) rounds
    // to 0 in f32, the output is 0 against some -2e-7).
    const dir = `${CASES}${APPROXIMATE}`;
    const read = async (f: string) =>
      tensorOf(decodeTensor(await Deno.readFile(`${dir}/test_data_set_0/${f}`), f), f);
    const [x, b, want] = await Promise.all([
      read("input_0.pb"),
      read("input_1.pb"),
      read("output_0.pb"),
    ]);
    const model = await OnnxModel.load(`${dir}/model.onnx`);
    const { y } = await model.run({ x, b }, { backend, cache: false });
    assertClose(numbers(y.data), numbers(want.data), { atol: 1e-6, rtol: 1e-5 });
    const formula = numbers(x.data).map((v, i) => {
      const z = v + numbers(b.data)[i % 8];
      return 0.5 * z * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (z + 0.044715 * z ** 3)));
    });
    assertClose(numbers(y.data), formula, { atol: 1e-6, rtol: 1e-5 });
    model.dispose();
  });
}

Deno.test("BiasAdd adds its bias and skip; a simplified skip norm refuses to give a mean", async () => {
  const model = (op: string, inputs: string[], outputs: string[], shapes: number[][]) =>
    testModel({
      node: [{
        opType: op,
        domain: "com.microsoft",
        input: inputs,
        output: outputs,
        attribute: [],
      }],
      initializer: [],
      input: inputs.map((n, i) => valueInfo(n, 1, shapes[i])),
      output: outputs.filter((o) => o).map((o) => valueInfo(o, 1)),
    }, { microsoft: true });
  const t = (data: number[], shape: number[]) => ({
    data: Float32Array.from(data),
    shape,
    dtype: "f32" as const,
  });
  const add = model("BiasAdd", ["x", "bias", "skip"], ["y"], [[1, 2, 2], [2], [1, 2, 2]]);
  const { y } = await add.run({
    x: t([1, 2, 3, 4], [1, 2, 2]),
    bias: t([10, 20], [2]),
    skip: t([0.5, 0.5, 1, 1], [1, 2, 2]),
  });
  assert.deepEqual(numbers(y.data), [11.5, 22.5, 14, 25]);
  add.dispose();
  const norm = model("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y", "mean"], [
    [1, 2],
    [1, 2],
    [2],
  ]);
  await assert.rejects(
    () => norm.run({ x: t([1, 2], [1, 2]), skip: t([1, 2], [1, 2]), gamma: t([1, 1], [2]) }),
    (e) => e instanceof KilnError && /mean output/.test(e.message) && /Fix:/.test(String(e)),
  );
  norm.dispose();
});
