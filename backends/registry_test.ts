import assert from "node:assert/strict";
import { compile } from "../mod.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { BackendRegistry } from "./registry.ts";
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
