/**
 * How long WebGPU takes to create a model's compute pipelines, each way it offers: awaited one by
 * one (`createComputePipelineAsync`), all at once, synchronously (`createComputePipeline`), and
 * started all at once, then each created synchronously (what kiln does on Dawn). Each way runs
 * in a process of its own with empty driver shader caches (NVIDIA's and Mesa's), so that each
 * compiles every pipeline. The WebGPU implementation is `KILN_GPU`'s (`KILN_DAWN_FLAGS` too):
 *
 *   KILN_GPU=dawn deno run -A --config bench/deno.json bench/pipeline_creation.ts MODEL [MODEL ...]
 *
 * On the H200 (2026-11-27, Deno 2.9.6, webgpu 0.6.2), 13 pipelines through Dawn took 5.6–6.4 s
 * awaited one by one and 1.3–1.7 s created synchronously: its asynchronous creation resolves at
 * the binding's next event tick, often a second after the driver is done. 56 pipelines of four
 * models took 1.5–2.0 s started all at once and then created synchronously, 2.8–3.0 s created
 * synchronously alone. The models report (`bench/REPORT-models.md`) cites these.
 *
 * @module
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fuse, legalize, OnnxModel, WebGpuBackend } from "../mod.ts";
import { namedModel } from "../onnx/testdata.ts";

/** The ways of creating pipelines this times. */
const WAYS = ["awaited", "all-at-once", "sync", "started-then-sync"] as const;
type Way = typeof WAYS[number];

/** The WGSL of every kernel of `names`, as the backend generates it for this device. */
async function kernelsOf(backend: WebGpuBackend, names: string[]): Promise<string[]> {
  const code: string[] = [];
  for (const name of names) {
    const m = await namedModel(name);
    const shapes = Object.fromEntries(
      Object.entries(m.inputs).map(([k, t]) => [k, t.shape]),
    );
    const graph = legalize(OnnxModel.fromBytes(m.bytes).graph(shapes), backend);
    // As compile fuses for this backend: one binding is kept for the output.
    const maxInputs = backend.capabilities().maxBindings - 1;
    for (const k of fuse(graph, { maxInputs }).kernels) {
      const wgsl = backend.codegen.generate(k);
      if (typeof wgsl === "string" && wgsl) code.push(wgsl);
    }
  }
  return [...new Set(code)];
}

/** Creates every pipeline of `code` on `device` the way `way` says; milliseconds in all. */
async function create(device: GPUDevice, code: string[], way: Way): Promise<number> {
  const desc = (wgsl: string): GPUComputePipelineDescriptor => ({
    layout: "auto",
    compute: { module: device.createShaderModule({ code: wgsl }), entryPoint: "main" },
  });
  const t0 = performance.now();
  if (way === "awaited") { for (const c of code) await device.createComputePipelineAsync(desc(c)); }
  if (way === "all-at-once") {
    await Promise.all(code.map((c) => device.createComputePipelineAsync(desc(c))));
  }
  if (way === "sync") { for (const c of code) device.createComputePipeline(desc(c)); }
  if (way === "started-then-sync") {
    const descs = code.map(desc);
    for (const d of descs) device.createComputePipelineAsync(d).catch(() => undefined);
    for (const d of descs) device.createComputePipeline(d);
  }
  return performance.now() - t0;
}

if (import.meta.main) {
  const [first, ...rest] = Deno.args;
  if (first === "--way") {
    // A child: one way, on a device of its own.
    const [way, ...names] = rest;
    const backend = new WebGpuBackend({ allowSoftware: true });
    await backend.prepare();
    const code = await kernelsOf(backend, names);
    const ms = await create(backend.device!, code, way as Way);
    console.log(JSON.stringify({ way, pipelines: code.length, ms: Math.round(ms) }));
    Deno.exit(0);
  }
  const names = first ? [first, ...rest] : ["quant_dynamic", "gru_bi"];
  for (const way of WAYS) {
    const cache = mkdtempSync(join(tmpdir(), "kiln-shader-cache-"));
    const child = spawnSync(
      Deno.execPath(),
      ["run", "-A", new URL(import.meta.url).pathname, "--way", way, ...names],
      {
        encoding: "utf8",
        env: {
          ...Deno.env.toObject(),
          __GL_SHADER_DISK_CACHE_PATH: cache,
          MESA_SHADER_CACHE_DISABLE: "true",
        },
      },
    );
    rmSync(cache, { recursive: true, force: true });
    const line = child.stdout.split("\n").find((l) => l.startsWith("{"));
    console.log(line ?? `${way}: no result (${child.stderr.trim().split("\n").pop()})`);
  }
}
