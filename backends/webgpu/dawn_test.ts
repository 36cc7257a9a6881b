// Dawn (the webgpu npm package) as kiln's WebGPU implementation under Deno. CI has no Vulkan: it
// runs on Dawn's GL backend over llvmpipe, headless through EGL (KILN_DAWN_FLAGS overrides, as
// on the GPU machine: backend=vulkan).
import assert from "node:assert/strict";
import { compile, generate, OnnxModel } from "../../mod.ts";
import { differentialOn } from "../../jit/testing/differential.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { explain } from "../../jit/runtime/explain.ts";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { assertClose, assertRecoversFromLoss, f32, numbers } from "../../jit/testing/testing.ts";
import { importOnnx } from "../../onnx/import/import.ts";
import { MODEL_NAMES, referenceModel } from "../../onnx/testdata.ts";
import { BackendRegistry } from "../registry.ts";
import { WebGpuBackend } from "./webgpu_backend.ts";
import { gpuChoice } from "./gpu_choice.ts";
import { dawnGpu, withToggles } from "./dawn.ts";

// EGL reads it when Dawn opens its display, so setting it here, before, is in time.
if (!Deno.env.get("EGL_PLATFORM")) Deno.env.set("EGL_PLATFORM", "surfaceless");
const flags = Deno.env.get("KILN_DAWN_FLAGS")?.split(/\s+/) ?? ["backend=opengles"];
const dawn = new WebGpuBackend({ gpu: "dawn", dawnFlags: flags, allowSoftware: true });
await dawn.prepare();

Deno.test("Dawn gives an adapter and a device with real limits", () => {
  const c = dawn.capabilities();
  assert.ok(c.maxWorkgroupSize >= 64 && c.maxStorageBufferBytes > 0 && c.maxBindings >= 8, c.name);
  // Verdicts and calibrations are keyed by the profile: each implementation has its own.
  assert.match(c.name, / \(Dawn\)$/);
});

Deno.test("a GPU passed in is Dawn unless it is navigator.gpu (Node passes the package's create())", async () => {
  const given = new WebGpuBackend({
    gpu: await dawnGpu({ flags }),
    allowSoftware: true,
  });
  await given.prepare();
  assert.match(given.capabilities().name, / \(Dawn\)$/);
  const b = new GraphBuilder();
  b.output("y", b.op("Relu", [b.input("x", [2])]));
  const exe = await compile(b.build(), { backend: given, cache: false });
  assert.deepEqual(numbers((await exe.run({ x: f32([-1, 2], [2]) })).y.data), [0, 2]);
  exe.dispose();
  given.dispose();
  const deno = new WebGpuBackend({ gpu: navigator.gpu, allowSoftware: true });
  await deno.prepare();
  assert.doesNotMatch(deno.capabilities().name, /Dawn/);
  deno.dispose();
});

Deno.test("kiln's Dawn toggles join the caller's flags without replacing them", () => {
  const f16 = "vulkan_enable_f16_on_nvidia";
  assert.deepEqual(withToggles([]), [`enable-dawn-features=${f16}`]);
  assert.deepEqual(withToggles(["backend=vulkan", "enable-dawn-features=allow_unsafe_apis"]), [
    "backend=vulkan",
    `enable-dawn-features=allow_unsafe_apis,${f16}`,
  ]);
  assert.deepEqual(withToggles([`enable-dawn-features=${f16}`]), [`enable-dawn-features=${f16}`]);
  // The matrix units' feature needs Dawn's unsafe APIs: asked for only where wanted.
  assert.deepEqual(withToggles(["backend=vulkan"], ["allow_unsafe_apis"]), [
    "backend=vulkan",
    `enable-dawn-features=${f16},allow_unsafe_apis`,
  ]);
});

for (const name of MODEL_NAMES) {
  Deno.test(`${name} on Dawn matches ONNX Runtime within 1e-4`, async () => {
    const m = await referenceModel(name);
    const exe = await compile(importOnnx(m.bytes), { backend: dawn, cache: false });
    assert.ok((await explain(exe)).kernels.every((k) => k.backend === "webgpu"));
    for (let i = 0; i < 2; i++) {
      const out = await exe.run({ x: m.x });
      assertClose(numbers(out.y.data), m.y, { atol: 1e-4, rtol: 0, message: name });
    }
  });
}

Deno.test("differential: 100 random graphs on Dawn (Tint compiles what naga does)", async () => {
  const onGpu = await differentialOn(dawn, 100);
  assert.ok(onGpu > 50, `${onGpu} graphs wholly on the GPU`);
});

Deno.test("a run on Dawn leaves its inputs as they were; a resident output feeds the next run", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [4, 8]);
  b.output("y", b.op("Softmax", [b.op("Mul", [x, x])], { axis: 1 }));
  const exe = await compile(b.build(), { backend: dawn, cache: false });
  const data = Float32Array.from({ length: 32 }, (_, i) => i / 8 - 2);
  const copy = data.slice();
  const first = await exe.run({ x: f32(data, [4, 8]) });
  assert.deepEqual(data, copy);
  const { y } = await exe.runOnDevice({ x: f32(data, [4, 8]) });
  const chained = await exe.run({ x: y });
  assert.deepEqual(numbers((await exe.run({ x: first.y })).y.data), numbers(chained.y.data));
});

Deno.test("outputs read back through Dawn keep their values when later reads reuse the staging buffer", async () => {
  // Dawn's mapped range is the staging buffer's memory: kept as it was, a token read in a
  // generation became the zeros of the read that next mapped that buffer.
  const b = new GraphBuilder();
  b.output("y", b.op("Add", [b.input("x", [4]), b.constant(1)]));
  const exe = await compile(b.build(), { backend: dawn, cache: false });
  const first = await exe.run({ x: f32([1, 2, 3, 4]) });
  const device = await exe.runOnDevice({ x: f32([5, 6, 7, 8]) });
  const read = await device.y.read();
  for (let i = 0; i < 4; i++) await exe.run({ x: f32([0, 0, 0, 0]) });
  await device.y.read();
  assert.deepEqual(numbers(first.y.data), [2, 3, 4, 5]);
  assert.deepEqual(numbers(read.data), [6, 7, 8, 9]);
  device.y.dispose();
  // The same for a large output, read through a staging buffer of its own size.
  const n = 1 << 19;
  const big = new GraphBuilder();
  big.output("y", big.op("Add", [big.input("x", [n]), big.constant(1)]));
  const large = await compile(big.build(), { backend: dawn, cache: false });
  const ramp = Float32Array.from({ length: n }, (_, i) => i % 1000);
  const kept = await large.run({ x: f32(ramp, [n]) });
  const held = await large.runOnDevice({ x: f32(ramp, [n]) });
  const keptRead = await held.y.read();
  for (let i = 0; i < 3; i++) await large.run({ x: f32(new Float32Array(n), [n]) });
  for (const out of [kept.y.data, keptRead.data] as Float32Array[]) {
    assert.ok(out.every((v, i) => v === (i % 1000) + 1));
  }
  held.y.dispose();
});

Deno.test("greedy generation through Dawn gives ONNX Runtime's ids, steps ahead of their reads", async () => {
  const dir = new URL("../../onnx/testdata/decoders/", import.meta.url);
  const recorded = JSON.parse(await Deno.readTextFile(new URL("decoders.json", dir)));
  const { prompt, greedy } = recorded.genai_tiny as { prompt: number[]; greedy: number[] };
  const model = await OnnxModel.load(new URL("genai_tiny.onnx", dir));
  const n = Math.min(8, greedy.length);
  const ids = await generate(model, prompt, { maxNewTokens: n, backend: dawn }).collect();
  assert.deepEqual(ids, greedy.slice(0, n));
});

Deno.test("device loss on Dawn: pending runs reject, auto falls back, recover() restores", async () => {
  const local = new WebGpuBackend({ gpu: "dawn", dawnFlags: flags, allowSoftware: true });
  await local.prepare();
  await assertRecoversFromLoss(local, () => local.device!.destroy());
  local.dispose();
});

Deno.test("KILN_GPU names Dawn, navigator.gpu or auto (the default), and refuses anything else", () => {
  const was = Deno.env.get("KILN_GPU");
  try {
    Deno.env.set("KILN_GPU", "dawn");
    assert.equal(gpuChoice(), "dawn");
    Deno.env.set("KILN_GPU", "navigator");
    assert.equal(gpuChoice(), "navigator");
    Deno.env.set("KILN_GPU", "auto");
    assert.equal(gpuChoice(), "auto");
    Deno.env.delete("KILN_GPU");
    assert.equal(gpuChoice(), "auto");
    Deno.env.set("KILN_GPU", "dwan");
    assert.throws(gpuChoice, (e) => e instanceof KilnError && /dwan/.test(e.message));
    assert.throws(() => BackendRegistry.withDefaults(), KilnError);
  } finally {
    if (was === undefined) Deno.env.delete("KILN_GPU");
    else Deno.env.set("KILN_GPU", was);
  }
});

Deno.test("Dawn flags it does not know are a KilnError that names them", async () => {
  const bad = new WebGpuBackend({ gpu: "dawn", dawnFlags: ["backend=nonesuch"] });
  await assert.rejects(
    bad.prepare(),
    (e) => e instanceof KilnError && /nonesuch/.test(e.message) && /Fix:/.test(e.message),
  );
});

Deno.test("WGSL that Dawn's compiler refuses is a KilnError naming the kernel and the fault", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Relu", [b.input("x", [4])]));
  const [kernel] = fuse(b.build()).kernels;
  // Valid to every check before the compiler: the type error is the compiler's to find.
  const wgsl = `@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { y[id.x] = y[id.x] + 1u; }`;
  await assert.rejects(
    async () => await dawn.codegen.load(kernel, wgsl),
    (e: unknown) =>
      e instanceof KilnError &&
      new RegExp(`WGSL for kernel ${kernel.name} .* failed: .*operator \\+ \\(f32, u32\\)`)
        .test(e.message),
  );
});
