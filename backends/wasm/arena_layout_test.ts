import assert from "node:assert/strict";
import { compile, GraphBuilder, WasmBackend } from "../../mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { PACKS_SECTION } from "../../shaders/wasm/matmul_plan.ts";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { uniform } from "../../jit/support/random.ts";
import { arenaLayout } from "./arena_layout.ts";

/** x · w1 · w2, both weights params (and a constant third, read also by an add). */
function twoProducts(n: number) {
  const b = new GraphBuilder();
  const x = b.input("x", [n, n]);
  const w1 = b.param("w1", [n, n], "f32", uniform(n * n, 1));
  const w2 = b.param("w2", [n, n], "f32", uniform(n * n, 2));
  const w3 = b.constant(uniform(n * n, 3), [n, n]);
  const y = b.op("MatMul", [b.op("MatMul", [b.op("MatMul", [x, w1]), w2]), w3]);
  b.output("y", b.op("Add", [y, w3]));
  return b.build();
}

/** A module of no code whose `PACKS_SECTION` says it packs `bytes` of panels. */
function packingModule(bytes: number): WebAssembly.Module {
  const name = new TextEncoder().encode(PACKS_SECTION);
  const payload = new Uint8Array(8);
  new DataView(payload.buffer).setUint32(0, bytes, true);
  const body = [name.length, ...name, ...payload];
  return new WebAssembly.Module(
    Uint8Array.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 0, body.length, ...body]),
  );
}

Deno.test("weights only packed take turns at one place of the arena; one also added keeps its own", () => {
  const graph = twoProducts(16);
  const { kernels, constants } = fuse(graph);
  const plain = new WebAssembly.Module(Uint8Array.of(0, 0x61, 0x73, 0x6d, 1, 0, 0, 0));
  const layout = arenaLayout({
    bindings: [
      ...graph.inputs.map((i) => ({ value: i.value, resident: false })),
      ...graph.params.map((p) => ({ value: p.value, resident: true })),
    ],
    outputs: graph.outputs.map((o) => o.value),
    kernels,
    modules: kernels.map((k) => (k.pattern === "matmul" ? packingModule(1024) : plain)),
    constants,
  });
  const [w1, w2] = graph.params.map((p) => p.value);
  assert.deepEqual([...layout.sources].sort(), [w1, w2].sort());
  assert.equal(layout.offsets.get(w1), layout.offsets.get(w2));
  assert.notEqual(layout.offsets.get(graph.inputs[0].value), layout.offsets.get(w1));
  // The constant is the last product's B and its epilogue's addend: its words stay.
  const [w3] = constants.keys();
  assert.ok(kernels.at(-1)!.inputs.some((b) => b.value === w3));
  assert.ok(!layout.sources.has(w3));
});

Deno.test("packed weights sharing a place give the reference's values, and again after one changes", async () => {
  const n = 48;
  const graph = twoProducts(n);
  const x = { x: { data: uniform(n * n, 4), shape: [n, n], dtype: "f32" as const } };
  const wasm = await compile(graph, { backend: new WasmBackend({ threads: 1 }), cache: false });
  const reference = await compile(graph, { backend: "reference" });
  const check = async (label: string) => {
    const [got, want] = [await wasm.run(x), await reference.run(x)];
    assertClose(numbers(got.y.data), numbers(want.y.data), {
      rtol: 1e-4,
      atol: 1e-4,
      message: label,
    });
  };
  await check("first run");
  await check("second run");
  for (const exe of [wasm, reference]) exe.setParam("w1", uniform(n * n, 5));
  await check("after w1 changed");
  wasm.dispose();
  reference.dispose();
});
