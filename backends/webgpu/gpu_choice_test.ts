import assert from "node:assert/strict";
import { fastestGpu } from "./gpu_choice.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";
import { KilnError } from "../../jit/support/errors.ts";

/** A `navigator.gpu` whose adapter says `description` (or none at all). */
function fakeNavigator(description: string | null): GPU {
  const adapter = description === null ? null : {
    info: { vendor: "", architecture: "", device: "", description, isFallbackAdapter: false },
  };
  return { requestAdapter: () => Promise.resolve(adapter) } as unknown as GPU;
}

const dawn = { dawn: true } as unknown as GPU;

Deno.test("auto takes Dawn on a hardware adapter, Deno's WebGPU on a software one", async () => {
  let loads = 0;
  const loadDawn = () => (loads++, Promise.resolve(dawn));
  const hardware = fakeNavigator("NVIDIA H200");
  assert.deepEqual(await fastestGpu({ navigator: hardware, loadDawn }), { gpu: dawn, dawn: true });
  const llvmpipe = fakeNavigator("llvmpipe (LLVM 15.0.7, 256 bits)");
  const soft = await fastestGpu({ navigator: llvmpipe, loadDawn });
  assert.equal(soft.gpu, llvmpipe);
  assert.equal(soft.dawn, false);
  // The adapter asked for is handed on, so the backend does not ask for a second one.
  assert.ok(soft.adapter);
  assert.equal(soft.adapter, await llvmpipe.requestAdapter());
  const none = fakeNavigator(null);
  assert.equal((await fastestGpu({ navigator: none, loadDawn })).gpu, none);
  assert.equal(loads, 1, "nothing is fetched for a software adapter or none");
});

Deno.test("auto keeps Deno's WebGPU where Dawn cannot load, and says when it fetched Dawn", async () => {
  const hardware = fakeNavigator("NVIDIA H200");
  const failing = () => Promise.reject(new Error("offline"));
  const kept = await fastestGpu({ navigator: hardware, loadDawn: failing });
  assert.equal(kept.gpu, hardware);
  assert.equal(kept.dawn, false);
  // Without navigator.gpu (Node) there is nothing to fall back to: the load's error stands.
  await assert.rejects(fastestGpu({ loadDawn: failing }), /offline/);
  const lines: string[] = [];
  const slow = () => new Promise<GPU>((resolve) => setTimeout(() => resolve(dawn), 2100));
  await fastestGpu({ navigator: hardware, loadDawn: slow, log: (l) => lines.push(l) });
  assert.equal(lines.length, 1);
  assert.match(lines[0], /fetched Dawn .* --gpu navigator/);
});

Deno.test("a backend under the automatic choice asks Deno's WebGPU for one adapter", async () => {
  const gpu = (globalThis.navigator as { gpu?: GPU }).gpu;
  if (!gpu || Deno.env.get("KILN_GPU")) return;
  const { WebGpuBackend } = await import("./webgpu_backend.ts");
  const original = gpu.requestAdapter.bind(gpu);
  let asked = 0;
  gpu.requestAdapter = (options) => (asked++, original(options));
  try {
    const backend = new WebGpuBackend({ gpu: "auto", allowSoftware: true });
    await backend.prepare();
    // The choice's probe is the only request: where it kept Deno's WebGPU (a software adapter,
    // as in CI) the backend takes that adapter; where it took Dawn, Dawn gives the adapter.
    assert.equal(asked, 1);
    backend.dispose();
  } finally {
    gpu.requestAdapter = original;
  }
});

Deno.test("a gpu option that names no implementation is a KilnError at construction", () => {
  for (const gpu of ["metal", "Dawn", "", null]) {
    assert.throws(
      () => new WebGpuBackend({ gpu: gpu as never }),
      (e: unknown) => e instanceof KilnError && /names no WebGPU implementation/.test(e.message),
      String(gpu),
    );
  }
  // The names, and a GPU entry point, construct (nothing is acquired before prepare()).
  for (const gpu of ["dawn", "navigator", "auto"] as const) new WebGpuBackend({ gpu }).dispose();
  new WebGpuBackend({ gpu: {} as GPU }).dispose();
  // A misspelt option, and sizes that are not ones, had been taken without a word.
  const bad = [{ flash: true }, { maxStorageBufferBytes: -1 }, { poolCapBytes: "1GB" }, "dawn"];
  for (const options of bad) {
    assert.throws(
      () => new WebGpuBackend(options as never),
      (e: unknown) => e instanceof KilnError && /WebGpuBackend/.test(e.message),
      JSON.stringify(options),
    );
  }
});
