import assert from "node:assert/strict";
import {
  BackendRegistry,
  compile,
  DeviceTensor,
  stats,
  WasmBackend,
  WebGpuBackend,
} from "../../mod.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { assertClose, f32, numbers } from "../testing/testing.ts";

// The local-first policy follows a run's inputs: given on a device, the work goes there.

Deno.test("local-first runs device inputs on a variant placed on their device, compiled once", async () => {
  const gpu = new WebGpuBackend(), wasm = new WasmBackend({ threads: 1, warmUpMs: 0 });
  const registry = new BackendRegistry().register(wasm).register(gpu);
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.input("x", [4096])]));
  const exe = await compile(b.build(), { registry, policy: "local-first", cache: false });
  assert.deepEqual([...new Set(exe.plan!.schedule.placement)], ["wasm"]);
  const data = Float32Array.from({ length: 4096 }, (_, i) => i / 4096 - 0.5);
  const want = numbers((await exe.run({ x: f32(data, [4096]) })).y.data);
  const x = await DeviceTensor.allocate(gpu, [4096], "f32");
  x.write(data);
  // Placed on the host, x would have been read back (a download) and y could not stay.
  const downloaded = stats().kiln_bytes_downloaded_total;
  const out = await exe.runOnDevice({ x });
  assert.ok(out.y instanceof DeviceTensor);
  assert.equal(out.y.backend, "webgpu");
  assert.equal(stats().kiln_bytes_downloaded_total, downloaded);
  assertClose(numbers((await out.y.read()).data), want, { rtol: 1e-6, atol: 1e-6 });
  // The variant is kept: a host-output run from the same place compiles nothing.
  const compiles = stats().kiln_compiles_total;
  assertClose(numbers((await exe.run({ x })).y.data), want, { rtol: 1e-6, atol: 1e-6 });
  assert.equal(stats().kiln_compiles_total, compiles);
  out.y.dispose();
  x.dispose();
  exe.dispose();
  gpu.dispose();
  wasm.dispose();
});
