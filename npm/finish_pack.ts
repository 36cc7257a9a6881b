/**
 * Finishes the tarball `deno pack` wrote (`deno task build:npm`): package.json gains the `kiln`
 * executable (`bin`, so `npx kiln` works), `engines` (Node 20 or later, what the package tests
 * run on), and `@webgpu/types` as an optional peer for TypeScript consumers; the executable gets
 * its mode bit. deno pack has no options for these.
 *
 *   deno run -A npm/finish_pack.ts npm/dist/kiln.tgz
 *
 * @module
 */
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const tarball = resolve(Deno.args[0] ?? "npm/dist/kiln.tgz");
const dir = mkdtempSync(join(tmpdir(), "kiln-pack-"));
try {
  execFileSync("tar", ["xzf", tarball, "-C", dir]);
  const path = join(dir, "package", "package.json");
  const pkg = JSON.parse(readFileSync(path, "utf8"));
  pkg.bin = { kiln: "./cli_node.js" };
  pkg.engines = { node: ">=20" };
  pkg.peerDependencies = { ...pkg.peerDependencies, "@webgpu/types": ">=0.1.40" };
  pkg.peerDependenciesMeta = { "@webgpu/types": { optional: true } };
  writeFileSync(path, JSON.stringify(pkg, null, 2) + "\n");
  chmodSync(join(dir, "package", "cli_node.js"), 0o755);
  execFileSync("tar", ["czf", tarball, "-C", dir, "package"]);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
