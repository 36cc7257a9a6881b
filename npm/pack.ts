/**
 * Builds the npm tarball (`deno task build:npm`): `deno pack` (without source maps: they were most
 * of the package's JavaScript, 1.37 of 1.88 MB, and map to TypeScript the tarball does not hold),
 * then what deno pack has no options for: package.json gains the `kiln` executable (`bin`, so
 * `npx kiln` works), `engines` (Node 20 or later, what the package tests run on) and
 * `@webgpu/types`; the executable gets its mode bit.
 *
 * deno pack 2.9 warns "Could not generate types" for every module no public declaration needs
 * (denoland/deno#36829: a private module, fully typed, whose types nothing imports). Each such
 * line is checked against the declarations packed (see {@linkcode privateOnly}): where some
 * declaration imports the module, its types really are missing and the build fails; otherwise
 * the line says nothing about the package and is left out, so the build's output is clean.
 *
 * The entry points' declarations reference WebGPU's types and `kiln-globals.d.ts`, which
 * declares `Symbol.dispose` and `Disposable` the way newer libs do, so that a TypeScript consumer
 * type-checks with `lib: ["es2022", "dom"]` and nothing else set (the declarations use `using`'s
 * protocol and WebGPU's types).
 *
 *   deno run -A npm/pack.ts npm/dist/kiln.tgz
 *
 * @module
 */
import { execFileSync, spawnSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath as fromFileUrl } from "node:url";

/** What the entry declarations need from newer libs, declared compatibly with them. */
const GLOBALS =
  `// Declarations kiln's types need from lib.esnext.disposable, for consumers on older libs; they
// merge with the lib's own where it is present.
declare global {
  interface SymbolConstructor {
    readonly dispose: unique symbol;
    readonly asyncDispose: unique symbol;
  }
  interface Disposable {
    [Symbol.dispose](): void;
  }
}
export {};
`;

const tarball = resolve(Deno.args[0] ?? "npm/dist/kiln.tgz");
mkdirSync(dirname(tarball), { recursive: true });
const packed = spawnSync(
  Deno.execPath(),
  ["pack", "--allow-dirty", "--no-source-maps", "--output", tarball],
  { encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } },
);
const untyped = /^Could not generate types for '(file:\/\/[^']+)'\. Types will not be included/;
const log = `${packed.stdout}${packed.stderr}`.split("\n");
const warned = log.flatMap((line) => untyped.exec(line)?.[1] ?? []);
console.log(log.filter((line) => !untyped.test(line)).join("\n").trimEnd());
if (packed.status !== 0) Deno.exit(packed.status ?? 1);
const dir = mkdtempSync(join(tmpdir(), "kiln-pack-"));
try {
  execFileSync("tar", ["xzf", tarball, "-C", dir]);
  privateOnly(join(dir, "package"), warned.map((url) => relative(Deno.cwd(), fromFileUrl(url))));
  const path = join(dir, "package", "package.json");
  const pkg = JSON.parse(readFileSync(path, "utf8"));
  pkg.description =
    "A JIT codegen runtime for tensor compute graphs: ONNX models and a lazy Tensor API, compiled to WebGPU (WGSL) and WebAssembly SIMD kernels";
  pkg.keywords = ["onnx", "webgpu", "wgsl", "webassembly", "simd", "jit", "tensor", "inference"];
  pkg.bin = { kiln: "./cli/node.js" };
  pkg.engines = { node: ">=20" };
  // The declarations name WebGPU's types (GPU, GPUDevice): they come with the package.
  pkg.dependencies = { ...pkg.dependencies, "@webgpu/types": "^0.1.74" };
  writeFileSync(path, JSON.stringify(pkg, null, 2) + "\n");
  typeEntries(join(dir, "package"));
  shipExtras(join(dir, "package"), pkg, path);
  chmodSync(join(dir, "package", "cli", "node.js"), 0o755);
  execFileSync("tar", ["czf", tarball, "-C", dir, "package"]);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * What the package carries besides the modules: the license, and the browser bundle
 * (`deno task build:web`, one ES module) as `web/`, exported as `@kiln/kiln/web`. Whatever else
 * sits in the tree (a user's `--save out/`) is not the package's.
 */
function shipExtras(dir: string, pkg: Record<string, unknown>, manifest: string): void {
  cpSync(join(Deno.cwd(), "LICENSE"), join(dir, "LICENSE"));
  const web = join(Deno.cwd(), "npm/dist/web");
  if (!existsSync(join(web, "mod.js"))) {
    throw new Error("npm/dist/web/mod.js is missing. Fix: run deno task build:web first");
  }
  cpSync(web, join(dir, "web"), { recursive: true });
  const exports = pkg.exports as Record<string, unknown>;
  pkg.exports = { ...exports, "./web": { default: "./web/mod.js" } };
  writeFileSync(manifest, JSON.stringify(pkg, null, 2) + "\n");
}

/** Writes `kiln-globals.d.ts` and points the entry declarations at it and at WebGPU's types. */
function typeEntries(dir: string): void {
  writeFileSync(join(dir, "kiln-globals.d.ts"), GLOBALS);
  const head =
    '/// <reference types="@webgpu/types" />\n/// <reference path="./kiln-globals.d.ts" />\n';
  for (const entry of ["mod.d.ts", "cli/mod.d.ts", "cli/node.d.ts"]) {
    const path = join(dir, entry);
    writeFileSync(path, head + readFileSync(path, "utf8"));
  }
}

/**
 * Fails unless every module of `sources` (paths of TypeScript files, relative to the package
 * root) is private: no declaration in package folder `dir` imports it (generated declarations
 * import modules by their `.js` paths). deno pack left those modules without types; a consumer
 * only misses them where a declaration refers to them.
 */
function privateOnly(dir: string, sources: readonly string[]): void {
  const untyped = new Set(sources.map((s) => s.replace(/\.ts$/, ".js")));
  const specifier = /(?:from|import\()\s*"(\.{1,2}\/[^"]+\.js)"/g;
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith(".d.ts")) continue;
    const path = join(entry.parentPath, entry.name);
    for (const [, spec] of readFileSync(path, "utf8").matchAll(specifier)) {
      const target = relative(dir, resolve(entry.parentPath, spec));
      if (untyped.has(target)) {
        throw new Error(
          `${relative(dir, path)} imports ${target}, whose types deno pack could not generate. ` +
            `Fix: give ${target.replace(/\.js$/, ".ts")}'s exports explicit types (deno publish ` +
            `--dry-run lists what fast check refuses)`,
        );
      }
    }
  }
}
