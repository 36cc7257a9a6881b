/**
 * The clock's window after a device is made: which GPUs lower their clock, when a compile has
 * outlasted the window, and the second device that raises it (made and released; a failure is
 * no error). The raise itself is the H200's: `bench/REPORT-quant.md`, session 64.
 *
 * @module
 */
import assert from "node:assert/strict";
import { CLOCK_WINDOW_MS, ClockWindow, lowersClock, raiseClock } from "./clock_wake.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { compile } from "../../mod.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";
import { dawnGpu, headlessEgl } from "./dawn.ts";

Deno.test("NVIDIA GPUs lower their clock; others are left alone", () => {
  assert.ok(lowersClock({ vendor: "nvidia", description: "NVIDIA H200" }));
  assert.ok(lowersClock({ vendor: "", description: "NVIDIA GeForce RTX 4090" }));
  for (const vendor of ["amd", "intel", "apple", "mesa"]) assert.ok(!lowersClock({ vendor }));
  assert.ok(!lowersClock({}));
});

Deno.test("the window passes 3 s after the device, and again 3 s after each raise", () => {
  const window = new ClockWindow(1000);
  assert.ok(!window.passed(1000 + CLOCK_WINDOW_MS));
  assert.ok(window.passed(1001 + CLOCK_WINDOW_MS));
  window.raised(5000);
  assert.ok(!window.passed(5000 + CLOCK_WINDOW_MS));
  assert.ok(window.passed(5001 + CLOCK_WINDOW_MS));
});

Deno.test("raising the clock makes a second device and releases it; a refusal is no error", async () => {
  const asked: GPURequestAdapterOptions[] = [];
  let destroyed = 0;
  const device = { destroy: () => destroyed++ };
  const adapter = { requestDevice: () => Promise.resolve(device) };
  const gpu = {
    requestAdapter: (o: GPURequestAdapterOptions) => (asked.push(o), Promise.resolve(adapter)),
  } as unknown as GPU;
  await raiseClock(gpu, { powerPreference: "high-performance" });
  assert.deepEqual(asked, [{ powerPreference: "high-performance" }]);
  assert.equal(destroyed, 1);
  const none = { requestAdapter: () => Promise.resolve(null) } as unknown as GPU;
  await raiseClock(none, {});
  const refusing = { requestAdapter: () => Promise.reject(new Error("lost")) } as unknown as GPU;
  await raiseClock(refusing, {});
});

Deno.test("a compile past the window asks for a second adapter on an NVIDIA GPU, not elsewhere or when off", async () => {
  headlessEgl();
  const gl = await dawnGpu({ flags: ["backend=opengles"] });
  const options = { featureLevel: "compatibility" } as GPURequestAdapterOptions;
  assert.ok(await gl.requestAdapter(options), "CI's software adapter (llvmpipe through GL)");
  // Software adapters dressed as an H200 (its kernels here are plain either way).
  const nvidia = { vendor: "nvidia", architecture: "", device: "", description: "NVIDIA H200" };
  const dressed = (real: GPUAdapter, info?: object) =>
    new Proxy(real, {
      get(target, key) {
        if (key === "info" && info) return info;
        const value = Reflect.get(target, key, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  const cases = [
    { info: nvidia, clockWake: true, asks: 2 },
    { info: nvidia, clockWake: false, asks: 1 },
    { info: undefined, clockWake: true, asks: 1 },
  ];
  const runs = cases.map(({ info, clockWake }) => {
    const counted = { asked: 0 };
    const gpu = {
      requestAdapter:
        async () => (counted.asked++, dressed((await gl.requestAdapter(options))!, info)),
    } as unknown as GPU;
    return { counted, backend: new WebGpuBackend({ gpu, allowSoftware: true, clockWake }) };
  });
  try {
    for (const { backend } of runs) await backend.prepare();
    await new Promise((r) => setTimeout(r, CLOCK_WINDOW_MS + 100));
    const b = new GraphBuilder();
    b.output("y", b.op("Relu", [b.input("x", [4])]));
    for (const [i, { counted, backend }] of runs.entries()) {
      using exe = await compile(b.build(), { backend, cache: false });
      const x = { data: new Float32Array([-1, 2, -3, 4]), shape: [4], dtype: "f32" as const };
      assert.deepEqual([...(await exe.run({ x })).y.data as Float32Array], [0, 2, 0, 4]);
      assert.equal(counted.asked, cases[i].asks, `case ${i}`);
    }
  } finally {
    for (const { backend } of runs) backend.dispose();
  }
});
