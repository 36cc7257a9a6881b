/**
 * WebGPU compile time and device time of whole models: for each ONNX file given, the time
 * `compile` takes (WGSL generation, Deno's shader modules, the driver's pipelines; the driver
 * caches its compiles on disk, so a second process pays less) and the median, over 20 runs after
 * 5 warm-ups on inputs of 0.5 (token ids of 0, symbolic dimensions 1), of the summed kernel times of a run (timestamp queries:
 * `WebGpuBackend({ profile: true })`, `Executable.deviceTimes()`), which leave out the upload and
 * the readback that bound small models end to end.
 *
 *   deno run -A --config bench/deno.json bench/gpu_model_time.ts MODEL.onnx [MODEL.onnx ...]
 *
 * @module
 */
import { OnnxModel, WebGpuBackend } from "../mod.ts";
import { madeInputs } from "./model_inputs.ts";

const backend = new WebGpuBackend({ profile: true });
await backend.prepare();
for (const path of Deno.args) {
  const model = await OnnxModel.load(path);
  // 0.5 everywhere, token ids of 0 where the model takes integers, symbolic dimensions 1.
  const inputs = await madeInputs(model.inputs, { float: () => 0.5 });
  const shapes = Object.fromEntries(Object.entries(inputs).map(([k, t]) => [k, t.shape]));
  const t0 = performance.now();
  using exe = await model.compile(shapes, { backend, cache: false });
  const compileMs = performance.now() - t0;
  const sums: number[] = [];
  for (let r = 0; r < 25; r++) {
    await exe.run(inputs);
    if (r >= 5) sums.push(exe.deviceTimes().reduce((a, k) => a + k.ms, 0));
  }
  sums.sort((a, b) => a - b);
  console.log(
    `${path.split("/").pop()}: compile ${compileMs.toFixed(0)} ms, device time ${
      sums[sums.length >> 1].toFixed(3)
    } ms a run (fastest ${sums[0].toFixed(3)})`,
  );
}
backend.dispose();
