/**
 * The digest of every kernel kiln generates for a set of models: each model is compiled once per
 * backend through the CLI (`kiln explain`: compiled, not run, so no run-time tuning note varies
 * with the machine's load) with a fresh disk kernel cache, and the cache's files (keyed by the
 * canonical text, holding the WGSL or wasm artifact) are hashed. A refactor that must not change
 * code generation compares the digests before and after it:
 *
 *   deno run -A --config bench/deno.json bench/kernel_digest.ts [--backends wasm,webgpu] MODEL...
 *
 * Prints one line per model and backend and the digest over all of them.
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

function cacheDigest(dir: string): string {
  const files: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else files.push(p);
    }
  };
  walk(dir);
  // By kernel text and code alone: an entry's key (its name, and a field of it) holds the
  // backend's device profile, which may gain fields without any kernel changing.
  const contents = files.map((f) => {
    const raw = readFileSync(f);
    let entry: Record<string, unknown> | undefined;
    try {
      entry = JSON.parse(new TextDecoder().decode(raw));
    } catch { /* a note or an artifact file of its own: hashed whole */ }
    const part = entry ? JSON.stringify([entry.text, entry.artifact, entry.format]) : raw;
    return createHash("sha256").update(part).digest("hex");
  });
  const hash = createHash("sha256");
  for (const c of contents.sort()) hash.update(c);
  return `${files.length} files ${hash.digest("hex").slice(0, 16)}`;
}

async function digestOf(model: string, backend: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "kiln-digest-" });
  const cli = new URL("../cli/mod.ts", import.meta.url).pathname;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", cli, "explain", model, "--backend", backend, "--json"],
    env: { KILN_CACHE_DIR: dir, KILN_ALLOW_SOFTWARE_GPU: "1" },
    stdout: "null",
    stderr: "piped",
  }).output();
  const line = out.success ? cacheDigest(dir) : `failed: ${new TextDecoder().decode(out.stderr)}`;
  await Deno.remove(dir, { recursive: true });
  return line;
}

const args = [...Deno.args];
const at = args.indexOf("--backends");
const backends = at >= 0 ? args.splice(at, 2)[1].split(",") : ["wasm", "webgpu"];
const total = createHash("sha256");
for (const model of args) {
  for (const backend of backends) {
    const line = `${model.split("/").pop()} ${backend}: ${await digestOf(model, backend)}`;
    total.update(line);
    console.log(line);
  }
}
console.log(`all: ${total.digest("hex").slice(0, 16)}`);
