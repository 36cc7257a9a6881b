import assert from "node:assert/strict";
import { compile } from "../mod.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { BackendRegistry } from "./registry.ts";
import { ReferenceBackend } from "./reference/reference_backend.ts";
import { WasmBackend } from "./wasm/wasm_backend.ts";
import { WebGpuBackend } from "./webgpu/webgpu_backend.ts";

Deno.test("auto fuses the same kernels in every compile, and for the backends it may use", async () => {
  // One sum of 24 inputs: one kernel unless a binding limit splits it.
  const b = new GraphBuilder();
  const xs = Array.from({ length: 24 }, (_, i) => b.input(`x${i}`, [4]));
  b.output("y", xs.slice(1).reduce((sum, x) => b.op("Add", [sum, x]), xs[0]));
  const graph = b.build();
  const fresh = new WebGpuBackend(), wasm = new WasmBackend({ threads: 1, warmUpMs: 0 });
  const registry = new BackendRegistry().register(fresh).register(wasm);
  const kernels = async (options: { backend?: string }) => {
    using exe = await compile(graph, { ...options, registry, cache: false });
    return exe.plan!.kernels.length;
  };
  // The first compile prepares the GPU: the second reads its limits before fusing.
  const first = await kernels({}), again = await kernels({});
  assert.equal(again, first, "a compile after the GPU was prepared fuses as the first did");
  if (fresh.capabilities().software) {
    // Auto runs nothing on a software adapter where wasm runs every kernel.
    assert.equal(first, await kernels({ backend: "wasm" }));
    assert.equal(first, 1);
  }
  fresh.dispose();
  wasm.dispose();
});

Deno.test("capabilities say what each backend stores and reaches, and ops() what it runs as it is", async () => {
  for (const backend of [new ReferenceBackend(), new WasmBackend({ threads: 1 })]) {
    await backend.prepare();
    const caps = backend.capabilities();
    assert.equal(caps.bf16, false, `${backend.id}: bf16 is widened to f32, not stored`);
    assert.equal(caps.matrixUnits, false);
    const ops = backend.ops!();
    assert.ok(ops.includes("MatMul") && ops.includes("Exp"), backend.id);
    assert.deepEqual([...ops].sort(), ops, "sorted");
  }
  const gpu = new WebGpuBackend({ allowSoftware: true });
  try {
    await gpu.prepare();
  } catch {
    return; // no WebGPU adapter here
  }
  const caps = gpu.capabilities();
  assert.equal(caps.bf16, false);
  assert.equal(typeof caps.matrixUnits, "boolean");
  assert.equal(typeof caps.deviceId, "string");
  if (caps.subgroupSizes) assert.ok(caps.subgroupSizes[0] <= caps.subgroupSizes[1]);
  assert.ok(gpu.ops().includes("MatMul"));
  gpu.dispose();
});
