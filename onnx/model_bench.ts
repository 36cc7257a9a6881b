/**
 * The shared reference models (`../shared/models/`) on kiln's wasm backend, and on webgpu where
 * the machine has a hardware adapter (a software one, as in CI, is left out: it measures the
 * emulator): `deno bench -A` at the root. Each model is loaded and compiled once; a bench run is
 * one inference with the model's recorded input.
 *
 * @module
 */
import { OnnxModel, WasmBackend, WebGpuBackend } from "../mod.ts";
import { MODEL_NAMES, referenceModel } from "./testdata.ts";

const wasm = new WasmBackend({ threads: 1 });
const gpu = new WebGpuBackend();
const hardwareGpu = await gpu.prepare().then(() => !gpu.capabilities().software, () => false);

for (const name of MODEL_NAMES) {
  const loaded = (async () => {
    const m = await referenceModel(name);
    return { model: OnnxModel.fromBytes(m.bytes), inputs: { x: m.x } };
  })();
  const bench = (backend: WasmBackend | WebGpuBackend, id: string) =>
    Deno.bench({
      name: `${name} on ${id}`,
      group: name,
      n: 20,
      warmup: 3,
      async fn() {
        const { model, inputs } = await loaded;
        await model.run(inputs, { backend, cache: false });
      },
    });
  bench(wasm, "wasm");
  if (hardwareGpu) bench(gpu, "webgpu");
}
