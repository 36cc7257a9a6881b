/**
 * Pow by the constants 2 and 3 on wasm: a product in the module (`vsquare`, `vcube`) instead of
 * the host's pow per value, with the reference's bits (its pow in float64, rounded to f32).
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { f32 } from "../../jit/testing/testing.ts";
import { HOST_FUNCTIONS, WasmBackend } from "../../backends/wasm/wasm_backend.ts";
import { fuse } from "../../jit/passes/fuse.ts";

Deno.test("x² and x³ by constant powers are the reference's bits, specials and subnormals included", async () => {
  // Random bit patterns (every magnitude), then specials; 4099 values: vector body and scalar tail.
  const bits = new Uint32Array(4099);
  for (let i = 0, s = 7; i < bits.length; i++) {
    bits[i] = s = (Math.imul(s, 1103515245) + 12345) >>> 0;
  }
  const values = new Float32Array(bits.buffer);
  values.set([NaN, Infinity, -Infinity, 0, -0, 1e-45, -3e-39, 3.4e38, -1.2e13, 2.5, -0.5], 0);
  const b = new GraphBuilder();
  const x = b.input("x", [values.length]);
  b.output("square", b.op("Pow", [x, b.constant(2)]));
  b.output("cube", b.op("Pow", [x, b.constant(3)]));
  const graph = b.build();
  const wasm = new WasmBackend({ threads: 1 });
  const feeds = { x: f32(values, [values.length]) };
  using reference = await compile(graph, { backend: "reference", fuse: false });
  const want = await reference.run(feeds);
  using exe = await compile(graph, { backend: wasm, cache: false });
  const got = await exe.run(feeds);
  for (const name of ["square", "cube"]) {
    const g = got[name].data as Float32Array, w = want[name].data as Float32Array;
    for (let i = 0; i < w.length; i++) {
      assert.ok(
        Object.is(g[i], w[i]) || (Number.isNaN(g[i]) && Number.isNaN(w[i])),
        `${name}(${values[i]}): ${g[i]} vs ${w[i]}`,
      );
    }
  }
  wasm.dispose();
});

Deno.test("a kernel raising to a constant 2 or 3 never calls the host's pow", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [37]);
  b.output("y", b.op("Add", [b.op("Pow", [x, b.constant(3)]), b.op("Pow", [x, b.constant(2)])]));
  const [kernel] = fuse(b.build()).kernels;
  const wasm = new WasmBackend({ threads: 1, warmUpMs: 0 });
  const bytes = await wasm.codegen!.generate(kernel) as Uint8Array<ArrayBuffer>;
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 65536 });
  const pow = () => {
    throw new Error("the host's pow was called");
  };
  const env = { memory, ...HOST_FUNCTIONS, pow };
  const run = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env }).exports.run as (
    ...args: number[]
  ) => void;
  const xs = Float32Array.from({ length: 37 }, (_, i) => i / 4 - 3);
  new Float32Array(memory.buffer, 1024, 37).set(xs);
  // x, y, the scratch, then the rows [0, 37).
  run(1024, 2048, 4096, 0, 37);
  const y = new Float32Array(memory.buffer, 2048, 37);
  xs.forEach((v, i) => assert.equal(y[i], Math.fround(Math.fround(v ** 3) + Math.fround(v * v))));
  wasm.dispose();
});
