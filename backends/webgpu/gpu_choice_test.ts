import assert from "node:assert/strict";
import { fastestGpu } from "./gpu_choice.ts";

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
