import assert from "node:assert/strict";
import { compile } from "../jit/compile.ts";
import { registerOp } from "../jit/runtime/custom_op.ts";
import { KilnError } from "../jit/support/errors.ts";
import { explain } from "../jit/runtime/explain.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { uniform } from "../jit/support/random.ts";
import { assertClose, f32, numbers } from "../jit/testing/testing.ts";
import { ReferenceBackend } from "./reference/reference_backend.ts";
import { WasmBackend } from "./wasm/wasm_backend.ts";
import { wasm } from "../shaders/wasm/encoder.ts";
import { WebGpuBackend } from "./webgpu/webgpu_backend.ts";

/** `y = 2x + 1` as WGSL, by the `CustomKernel` conventions. */
const WGSL = (n: number) => `
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x + id.y * 4194240u;
  if (i >= ${n}u) { return; }
  y[i] = 2.0 * x[i] + 1.0;
}`;

/** `y = 2x + 1` as a WebAssembly module: `run(x, y)` over `n` floats of the imported memory. */
function wasmModule(n: number, shared: boolean): Uint8Array {
  const m = new wasm.Module();
  m.setMemory(1, 65536, shared);
  m.addMemoryImport("env", "memory");
  const i32 = wasm.i32, x = 0, y = 1, i = 2;
  const get = (l: number) => m.local.get(l, i32);
  const at = (base: number) => m.i32.add(get(base), m.i32.shl(get(i), m.i32.const(2)));
  const body = m.block(null, [
    m.local.set(i, m.i32.const(0)),
    m.if(
      m.i32.lt_u(get(i), m.i32.const(n)),
      m.loop(
        "l",
        m.block(null, [
          m.f32.store(
            0,
            4,
            at(y),
            m.f32.add(m.f32.mul(m.f32.load(0, 4, at(x)), m.f32.const(2)), m.f32.const(1)),
          ),
          m.local.set(i, m.i32.add(get(i), m.i32.const(1))),
          m.br("l", m.i32.lt_u(get(i), m.i32.const(n))),
        ]),
      ),
    ),
  ]);
  m.addFunction("run", wasm.createType([i32, i32]), wasm.none, [i32], body);
  m.addFunctionExport("run", "run");
  if (!m.validate()) throw new Error("invalid test module");
  return m.emitBinary();
}

registerOp({
  name: "test.Affine",
  inferShape: ([x]) => x,
  reference: ([x]) => (x.data as Float32Array).map((v) => 2 * v + 1),
  kernels: {
    webgpu: ({ outputs }) => WGSL(outputs[0].shape.reduce((a, b) => a * b, 1)),
    wasm: ({ outputs, shared }) =>
      wasmModule(outputs[0].shape.reduce((a, b) => a * b, 1), !!shared),
  },
});

Deno.test("registered WGSL and wasm kernels of a custom op run on webgpu and wasm, alone and fused around", async () => {
  const x = f32(uniform(300, 70, -2, 2), [3, 100]);
  const alone = new GraphBuilder();
  alone.output("y", alone.op("test.Affine", [alone.input("x", [3, 100])]));
  const around = new GraphBuilder();
  const e = around.op("Exp", [around.input("x", [3, 100])]);
  around.output("y", around.op("Neg", [around.op("test.Affine", [e])]));
  const backends = [
    new WebGpuBackend(),
    new WasmBackend({ threads: 1 }),
    new WasmBackend({ threads: 2 }),
  ];
  for (const graph of [alone.build(), around.build()]) {
    const want = await (await compile(graph, { backend: new ReferenceBackend(), cache: false }))
      .run({ x });
    for (const backend of backends) {
      using exe = await compile(graph, { backend, cache: false });
      assert.ok((await explain(exe)).kernels.every((k) => k.backend === backend.id));
      const got = await exe.run({ x });
      assertClose(numbers(got.y.data), numbers(want.y.data), { rtol: 1e-6, message: backend.id });
    }
  }
});

Deno.test("a custom kernel generator that fails or returns the wrong kind is a typed error", async () => {
  registerOp({
    name: "test.BadKernels",
    inferShape: ([x]) => x,
    reference: ([x]) => x.data,
    kernels: {
      webgpu: () => new Uint8Array(4),
      wasm: () => {
        throw new Error("no module");
      },
    },
  });
  const b = new GraphBuilder();
  b.output("y", b.op("test.BadKernels", [b.input("x", [4])]));
  const graph = b.build();
  await assert.rejects(
    () => compile(graph, { backend: new WebGpuBackend(), cache: false }),
    (e: unknown) => e instanceof KilnError && /must return a string/.test(e.message),
  );
  await assert.rejects(
    () => compile(graph, { backend: new WasmBackend({ threads: 1 }), cache: false }),
    (e: unknown) => e instanceof KilnError && /failed: no module/.test(e.message),
  );
});
