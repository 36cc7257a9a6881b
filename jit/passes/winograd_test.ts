import assert from "node:assert/strict";
import { compile } from "../compile.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import type { Graph } from "../ir/graph.ts";
import type { Attrs } from "../ops/mod.ts";
import type { Precision } from "./precision.ts";
import { assertClose, f32, hashed, numbers } from "../testing/testing.ts";
import { winogradConvs } from "./winograd.ts";
import type { Backend, DeviceProfile } from "../runtime/backend.ts";
import { BackendRegistry } from "../../backends/registry.ts";
import { setBackendRates } from "../schedule/cost_model.ts";
import { ReferenceBackend } from "../../backends/reference/reference_backend.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";

/** A 3×3 conv of `c` → `m` channels over [n, c, h, w] with `pads`, a bias and a Relu after. */
function conv(
  [n, c, h, w]: number[],
  m: number,
  attrs: Attrs = { pads: [1, 1, 1, 1] },
): Graph {
  const b = new GraphBuilder();
  const x = b.input("x", [n, c, h, w]);
  const k = c / Number(attrs.group ?? 1);
  const weights = b.param("w", [m, k, 3, 3], "f32", new Float32Array(hashed(m * k * 9, 3)));
  const bias = b.param("b", [m], "f32", new Float32Array(hashed(m, 5)));
  b.output("y", b.op("Relu", [b.op("Conv", [x, weights, bias], attrs)]));
  return b.build();
}

Deno.test("3x3 convolutions of stride 1 compute as F(2x2, 3x3) and F(4x4, 3x3) within f32's rounding", async () => {
  const cases: [number[], number, Attrs][] = [
    [[1, 8, 6, 6], 8, { pads: [1, 1, 1, 1] }],
    // Odd outputs (the last tiles cropped), no pads, uneven pads, two images.
    [[1, 8, 9, 11], 12, { pads: [0, 0, 0, 0] }],
    [[2, 8, 5, 6], 8, { pads: [1, 0, 2, 1] }],
  ];
  for (const tile of [2, 4] as const) {
    for (const [shape, m, attrs] of cases) await winogradCase(shape, m, attrs, tile);
  }
});

/** Conv `shape` → `m` channels as F(tile×tile, 3×3) on the reference and wasm, against direct. */
async function winogradCase(shape: number[], m: number, attrs: Attrs, tile: 2 | 4) {
  const graph = conv(shape, m, attrs);
  const rewritten = winogradConvs(graph, { minChannels: 8, tile });
  const ops = rewritten.nodes.map((n) => n.op);
  // The one Conv left is the input's transform: each channel alone by α×α picks (α = tile + 2).
  const alpha = tile + 2;
  const convs = rewritten.nodes.filter((n) => n.op === "Conv");
  const picks = convs.map((n) => rewritten.values[n.inputs[1]].shape);
  assert.deepEqual(picks, [[alpha * alpha * shape[1], 1, alpha, alpha]]);
  assert.equal(ops.filter((op) => op === "MatMul").length, 2, ops.join());
  const x = f32(hashed(shape.reduce((a, b) => a * b), 9), shape);
  const want = await (await compile(graph, { backend: "reference" })).run({ x });
  for (const backend of ["reference", "wasm"]) {
    const got = await (await compile(rewritten, { backend })).run({ x });
    assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-5, rtol: 1e-5 });
  }
}

Deno.test("other convolutions stay as they are", () => {
  const others: [number[], number, Attrs][] = [
    [[1, 8, 6, 6], 8, { pads: [1, 1, 1, 1], strides: [2, 2] }],
    [[1, 8, 6, 6], 8, { pads: [2, 2, 2, 2], dilations: [2, 2] }],
    [[1, 16, 6, 6], 8, { pads: [1, 1, 1, 1], group: 2 }],
    [[1, 8, 6, 6], 8, { auto_pad: "SAME_UPPER" }],
    // Fewer channels than asked for.
    [[1, 4, 6, 6], 8, { pads: [1, 1, 1, 1] }],
    // A 2×2 output: one tile of 4×4 takes as many products as the direct convolution.
    [[1, 8, 2, 2], 8, { pads: [1, 1, 1, 1] }],
  ];
  for (const [shape, m, attrs] of others) {
    const graph = conv(shape, m, attrs);
    assert.equal(winogradConvs(graph, { minChannels: 8, tile: 4 }), graph, JSON.stringify(attrs));
  }
});

Deno.test("wasm computes its 3x3 convolutions of 128 channels as F(4x4, 3x3); exact and f16 keep them", async () => {
  const graph = conv([1, 128, 6, 6], 128);
  const x = f32(hashed(128 * 36, 9), [1, 128, 6, 6]);
  const want = await (await compile(graph, { backend: "reference" })).run({ x });
  const spaces = async (precision: Precision, backend: Backend | string = "wasm") => {
    using exe = await compile(graph, { backend, cache: false, precision });
    const got = await exe.run({ x });
    const tolerance = precision === "f32" || precision === "exact" ? 1e-4 : 1e-2;
    assertClose(numbers(got.y.data), numbers(want.y.data), { atol: tolerance, rtol: tolerance });
    return exe.plan!.kernels.filter((k) => k.pattern === "matmul").map((k) => k.space.join("x"));
  };
  // The channels' product by position (36 of them, 4 tiles by 128 outputs), then the output's
  // transform (16 outputs a tile).
  assert.deepEqual(await spaces("f32"), ["1x36x4x128x128", "1x16x512x36"]);
  assert.deepEqual(
    await spaces("f32", new WasmBackend({ winogradTile: 2 })),
    ["1x16x9x128x128", "1x4x1152x16"],
  );
  // Neither the exact precision nor f16 (whose 16-bit tiles would round Winograd's larger
  // transformed values) rewrites them.
  assert.deepEqual(await spaces("exact"), []);
  assert.deepEqual(await spaces("f16"), []);
  // A backend asked for none keeps them direct; a count of 0 is refused.
  assert.deepEqual(await spaces("f32", new WasmBackend({ winogradChannels: Infinity })), []);
  assert.throws(() => new WasmBackend({ winogradChannels: 0 }), /winogradChannels.*Fix:/s);
  assert.throws(() => new WasmBackend({ winogradTile: 3 as 2 }), /winogradTile.*Fix:/s);
});

/** A GPU with a hardware device that does not ask for Winograd (the reference's kernels). */
class HardwareGpu extends ReferenceBackend {
  override readonly id = "hardware-gpu";
  override readonly kind = "gpu";
  override capabilities(): DeviceProfile {
    return { ...super.capabilities(), interpreter: false, maxStorageBufferBytes: 2 ** 30 };
  }
}

Deno.test("auto rewrites where every hardware backend asks (wasm alone), not beside a GPU", async () => {
  const graph = conv([1, 64, 4, 4], 64);
  const products = async (registry: BackendRegistry) => {
    using exe = await compile(graph, { registry, cache: false });
    return exe.plan!.kernels.filter((k) => k.pattern === "matmul").length;
  };
  // Known rates: no calibration runs (what auto then places does not matter here).
  const rates = { bytesPerMs: 1e6, flopsPerMs: 1e7, dispatchMs: 0.01, syncMs: 0 };
  for (const id of ["wasm", "hardware-gpu"]) {
    setBackendRates(id, { ...rates, transferBytesPerMs: Infinity });
  }
  assert.equal(await products(new BackendRegistry().register(new WasmBackend())), 2);
  const beside = new BackendRegistry().register(new WasmBackend()).register(new HardwareGpu());
  assert.equal(await products(beside), 0);
  for (const id of ["wasm", "hardware-gpu"]) setBackendRates(id, undefined);
});
