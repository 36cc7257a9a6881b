/**
 * `kiln info`: the backends, their device profiles and the kernel cache; with a model, that
 * model's summary (producer, opsets, inputs and outputs, parameters, op histogram, unsupported
 * ops), as onnxruntime's and Netron's model views give it.
 *
 * @module
 */
import { readdir, stat } from "node:fs/promises";
import { parseArgs } from "node:util";
import { defaultBackends } from "../mod.ts";
import { KilnError } from "../jit/support/errors.ts";
import { defaultKernelCache } from "../jit/runtime/kernel_cache.ts";
import { opNames } from "../jit/ops/mod.ts";
import { VERSION } from "../jit/support/version.ts";
import { OnnxModel } from "../onnx/model.ts";

/** Bytes as text (KiB, MiB). */
function bytesText(n: number): string {
  return n >= 2 ** 20
    ? `${(n / 2 ** 20).toFixed(1)} MiB`
    : n >= 1024
    ? `${(n / 1024).toFixed(1)} KiB`
    : `${n} B`;
}

/** `kiln info MODEL`. */
async function modelInfo(path: string, json: boolean): Promise<number> {
  const s = (await OnnxModel.load(path)).summary();
  if (json) {
    console.log(JSON.stringify({ model: path, ...s }));
    return 0;
  }
  const opsets = Object.entries(s.opsets).map(([d, v]) => `${d || "ai.onnx"} ${v}`).join(", ");
  console.log(
    `model    ${path}${s.producer ? ` (${s.producer})` : ""}, IR ${s.irVersion}, opset ${opsets}`,
  );
  for (const i of s.inputs) console.log(`input    ${i.name}: ${i.type}`);
  for (const o of s.outputs) console.log(`output   ${o.name}: ${o.type}`);
  const p = s.parameters;
  console.log(
    `params   ${p.elements.toLocaleString("en-US")} in ${p.tensors} tensor(s), ${
      bytesText(p.bytes)
    }`,
  );
  console.log(
    `ops      ${s.nodes} node(s): ${s.ops.map((o) => `${o.op} ${o.count}`).join(", ")}`,
  );
  console.log(
    s.unsupported.length
      ? `support  not importable: ${s.unsupported.join(", ")}`
      : "support  every op imports",
  );
  return 0;
}

export async function info(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: { json: { type: "boolean", default: false } },
    allowPositionals: true,
  });
  if (positionals.length > 1) {
    throw new KilnError(`kiln info takes one model, got ${positionals.length}`, {
      code: "bad-input",
      fix: "pass one MODEL.onnx (or none for the backends and the cache)",
    });
  }
  if (positionals[0]) return modelInfo(positionals[0], values.json);
  // Profiles are only honest once each device is acquired; one that cannot be is reported as such.
  await Promise.allSettled(defaultBackends().list().map((b) => b.prepare()));
  const backends = defaultBackends().list().map((b) => ({
    id: b.id,
    kind: b.kind,
    version: b.version,
    capabilities: b.capabilities(),
  }));
  const dir = defaultKernelCache().dir;
  let files = 0, bytes = 0;
  if (dir) {
    try {
      for (const e of await readdir(dir, { withFileTypes: true })) {
        if (!e.isFile()) continue;
        files++;
        bytes += (await stat(`${dir}/${e.name}`)).size;
      }
    } catch { /* no cache directory yet */ }
  }
  const report = {
    kiln: VERSION,
    runtime: runtimeName(),
    ops: opNames().length,
    backends,
    cache: { dir, files, bytes },
  };
  if (values.json) {
    console.log(JSON.stringify(report));
    return 0;
  }
  console.log(`kiln ${report.kiln} on ${report.runtime}, ${report.ops} ops`);
  for (const b of backends) {
    const c = b.capabilities;
    console.log(
      `backend  ${b.id} (${b.kind}, v${b.version}): ${c.name}; threads ${c.threads}, simd ${c.simd}, f16 ${c.f16}${
        c.software
          ? "; software adapter: used only when named (KILN_ALLOW_SOFTWARE_GPU=1 lets auto use it)"
          : ""
      }`,
    );
  }
  console.log(
    `cache    ${dir === false ? "memory only" : `${dir}: ${files} kernel(s), ${bytes} bytes`}`,
  );
  return 0;
}

function runtimeName(): string {
  const g = globalThis as { Deno?: { version: { deno: string } }; process?: { version: string } };
  return g.Deno
    ? `Deno ${g.Deno.version.deno}`
    : g.process
    ? `Node ${g.process.version}`
    : "unknown runtime";
}
