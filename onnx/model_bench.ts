/**
 * The shared reference models (`../shared/models/`) on kiln's wasm backend, and with
 * `KILN_BENCH_WEBGPU=1` on webgpu too where the adapter is hardware: `deno bench -A` at the root.
 * WebGPU is opt-in because `deno bench` runs each module in an isolate of its own, and on Mesa's
 * EGL (CI's llvmpipe) a process that acquired an adapter in more than one isolate can abort at
 * exit after every benchmark passed (see `tools/test_runner.ts`); a software adapter would
 * measure the emulator anyway. Each model is loaded and compiled once; a bench run is
 * one inference with the model's recorded input.
 *
 * @module
 */
import { OnnxModel, WasmBackend, WebGpuBackend } from "../mod.ts";
import { MODEL_NAMES, referenceModel } from "./testdata.ts";

const wasm = new WasmBackend({ threads: 1 });
const gpu = new WebGpuBackend();
const hardwareGpu = Deno.env.get("KILN_BENCH_WEBGPU") === "1" &&
  await gpu.prepare().then(() => !gpu.capabilities().software, () => false);

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
