import assert from "node:assert/strict";
import { compile } from "../mod.ts";
import type { Graph } from "../jit/ir/graph.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { BackendRegistry } from "./registry.ts";
import { KilnError } from "../jit/support/errors.ts";
import {
  randomGraph,
  SPECIAL_VALUES as SPECIAL,
  withSpecials,
} from "../jit/testing/random_graph.ts";
import { importOnnx } from "../onnx/import/import.ts";
import { WasmBackend } from "./wasm/wasm_backend.ts";
import { WebGpuBackend } from "./webgpu/webgpu_backend.ts";

/**
 * `precision: "exact"`: every backend's outputs are the reference's to the bit (a NaN is the one
 * quiet NaN everywhere), on the shared models, on random graphs with special values in their
 * inputs, and under a placement policy. CI's WebGPU is llvmpipe, which keeps subnormals; the
 * GPU machine's run is `bench/exact_check.ts` (bench/REPORT-gpu.md).
 */
const BACKENDS = () => [new WasmBackend({ threads: 1 }), new WebGpuBackend()];

/** The outputs of `graph` on `backend` under the exact precision, as their bits. */
async function bits(
  graph: Graph,
  inputs: Record<string, HostTensor>,
  how: Parameters<typeof compile>[1],
): Promise<Map<string, Uint32Array>> {
  await using exe = await compile(graph, { ...how, precision: "exact", cache: false });
  const out = await exe.run(inputs);
  return new Map(
    Object.entries(out).map(([name, t]) => {
      const data = t.data as Float32Array;
      return [name, new Uint32Array(Float32Array.from(data).buffer)];
    }),
  );
}

/** Asserts that `graph` gives the reference's bits on wasm and WebGPU; `what` names the case. */
async function sameBits(graph: Graph, inputs: Record<string, HostTensor>, what: string) {
  const want = await bits(graph, inputs, { backend: "reference" });
  for (const backend of BACKENDS()) {
    const got = await bits(graph, inputs, { backend });
    for (const [name, w] of want) {
      const g = got.get(name)!;
      const at = w.findIndex((v, i) => v !== g[i]);
      assert.equal(at, -1, `${what}, ${backend.id}, ${name}[${at}]: ${w[at]} vs ${g[at]}`);
    }
  }
}

Deno.test("exact: the shared models give the reference's bits on wasm and WebGPU", async () => {
  const dir = new URL("../../shared/models/", import.meta.url);
  for (const name of ["lenet", "mlp", "transformer_block", "vit_tiny", "shufflenet_v2_x0_5"]) {
    const graph = importOnnx(await Deno.readFile(new URL(`${name}.onnx`, dir)));
    const input = graph.inputs[0];
    const data = new Float32Array(
      (await Deno.readFile(new URL(`${name}.in.x.float32.bin`, dir))).buffer,
    );
    const shape = graph.values[input.value].shape;
    await sameBits(graph, { [input.name]: { data, shape, dtype: "f32" } }, name);
  }
});

Deno.test("exact: random graphs, special values among their inputs, give the same bits", async () => {
  for (let seed = 0; seed < 120; seed++) {
    const c = randomGraph(seed + 1000);
    await sameBits(c.graph, seed % 2 ? withSpecials(c.inputs) : c.inputs, `seed ${seed + 1000}`);
  }
});

Deno.test("exact: transcendentals at their special values and subnormals", async () => {
  const values = [...SPECIAL, -1e-40, 1.17549435e-38, -103.9, 1, -1, 0.5, 2, 3, -Math.PI / 2, 1e6];
  const n = values.length;
  const x = { data: new Float32Array(values), shape: [n], dtype: "f32" as const };
  const y = {
    data: new Float32Array(values.map((_, i) => values[(i * 7 + 3) % n])),
    shape: [n],
    dtype: "f32" as const,
  };
  for (const op of ["Exp", "Log", "Erf", "Sin", "Cos", "Sqrt", "Tanh", "Sigmoid", "Pow", "Div"]) {
    for (const power of op === "Pow" ? [undefined, 2, -3, 0.5, 0] : [undefined]) {
      const b = new GraphBuilder();
      const [xi, yi] = [b.input("x", [n]), b.input("y", [n])];
      const right = power === undefined ? yi : b.constant(power);
      b.output("z", op === "Pow" || op === "Div" ? b.op(op, [xi, right]) : b.op(op, [xi]));
      b.output("w", b.op("Add", [yi, yi]));
      await sameBits(b.build(), { x, y }, `${op}${power ?? ""}`);
    }
  }
});

Deno.test("exact: padded convolutions and pools, special values in inputs and weights", async () => {
  // The padding's zeros meet an infinite weight: 0 · inf is NaN on every backend, none skips it.
  const b = new GraphBuilder();
  const x = b.input("x", [2, 8, 9, 9]);
  const w = b.input("w", [8, 8, 3, 3]), dw = b.input("dw", [8, 1, 3, 3]);
  b.output("conv", b.op("Conv", [x, w], { pads: [1, 1, 1, 1] }));
  b.output("depthwise", b.op("Conv", [x, dw], { pads: [2, 1, 0, 1], group: 8 }));
  b.output("avg", b.op("AveragePool", [x], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] }));
  b.output("max", b.op("MaxPool", [x], { kernel_shape: [2, 3], pads: [1, 0, 1, 2] }));
  const tensor = (shape: number[], salt: number) => {
    const n = shape.reduce((p, d) => p * d, 1);
    const data = Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898 + salt) * 3);
    return withSpecials({ t: { data, shape, dtype: "f32" } }).t;
  };
  const inputs = {
    x: tensor([2, 8, 9, 9], 1),
    w: tensor([8, 8, 3, 3], 2),
    dw: tensor([8, 1, 3, 3], 3),
  };
  await sameBits(b.build(), inputs, "convolutions");
});

Deno.test("exact: a placement policy over all three backends gives the same bits", async () => {
  const c = randomGraph(77);
  const registry = new BackendRegistry()
    .register(new WasmBackend({ threads: 1 }))
    .register(new WebGpuBackend({ allowSoftware: true }));
  const want = await bits(c.graph, c.inputs, { backend: "reference" });
  for (const kind of ["auto", "local-first"] as const) {
    const got = await bits(c.graph, c.inputs, { policy: { kind }, registry });
    assert.deepEqual(got, want, kind);
  }
});

Deno.test("exact: an f16 graph is refused with a Fix", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Exp", [b.input("x", [4], "f16")]));
  await assert.rejects(
    compile(b.build(), { backend: "wasm", precision: "exact" }),
    (e) =>
      e instanceof KilnError && e.code === "unsupported" && /"x" is f16.*Fix: /.test(e.message),
  );
});

Deno.test("exact: a float remainder is refused on WebGPU with a Fix, computed on the CPU", async () => {
  const b = new GraphBuilder();
  b.output("z", b.op("Mod", [b.input("x", [3]), b.input("y", [3])], { fmod: 1 }));
  const graph = b.build();
  const data = { x: [5.5, -7.25, 1e10], y: [2, 3, 3.3] };
  const inputs = Object.fromEntries(
    Object.entries(data).map((
      [k, v],
    ) => [k, { data: new Float32Array(v), shape: [3], dtype: "f32" as const }]),
  );
  const want = await bits(graph, inputs, { backend: "reference" });
  assert.deepEqual(await bits(graph, inputs, { backend: new WasmBackend({ threads: 1 }) }), want);
  await assert.rejects(
    bits(graph, inputs, { backend: new WebGpuBackend() }),
    (e) => e instanceof KilnError && /float remainder/.test(e.message) && /Fix: /.test(e.message),
  );
});
