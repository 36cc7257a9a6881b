/**
 * Finishes the tarball `deno pack` wrote (`deno task build:npm`): package.json gains the `kiln`
 * executable (`bin`, so `npx kiln` works), `engines` (Node 20 or later, what the package tests
 * run on) and `@webgpu/types`; the executable gets its mode bit. deno pack has no options for
 * these.
 *
 * Inline source maps are dropped (see {@linkcode dropSourceMaps}).
 *
 * The entry points' declarations reference WebGPU's types and `kiln-globals.d.ts`, which
 * declares `Symbol.dispose` and `Disposable` the way newer libs do, so that a TypeScript consumer
 * type-checks with `lib: ["es2022", "dom"]` and nothing else set (the declarations use `using`'s
 * protocol and WebGPU's types).
 *
 * Browsers get binaryen through the package's `browser` field: a copy of binaryen 116's module
 * (`vendor/binaryen.js`) that bundlers can take whole. The published module cannot be bundled for
 * a browser: it ends in a top-level await (which esbuild's default iife format refuses) and its
 * Node branch imports the builtin `module` by a literal specifier (which no browser resolver
 * finds). The copy exports the initialisation promise instead (kiln awaits `default` either way)
 * and computes that specifier, so bundlers leave it to the Node branch that never runs there.
 *
 *   deno run -A npm/finish_pack.ts npm/dist/kiln.tgz
 *
 * @module
 */
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

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
const dir = mkdtempSync(join(tmpdir(), "kiln-pack-"));
try {
  execFileSync("tar", ["xzf", tarball, "-C", dir]);
  const path = join(dir, "package", "package.json");
  const pkg = JSON.parse(readFileSync(path, "utf8"));
  pkg.bin = { kiln: "./cli_node.js" };
  pkg.engines = { node: ">=20" };
  // The declarations name WebGPU's types (GPU, GPUDevice): they come with the package.
  pkg.dependencies = { ...pkg.dependencies, "@webgpu/types": "^0.1.74" };
  pkg.browser = { binaryen: "./vendor/binaryen.js" };
  writeFileSync(path, JSON.stringify(pkg, null, 2) + "\n");
  vendorBinaryen(join(dir, "package", "vendor"));
  typeEntries(join(dir, "package"));
  chmodSync(join(dir, "package", "cli_node.js"), 0o755);
  dropSourceMaps(join(dir, "package"));
  execFileSync("tar", ["czf", tarball, "-C", dir, "package"]);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

/** Writes the bundlable copy of binaryen (see the module doc) and its licence into `dir`. */
function vendorBinaryen(dir: string): void {
  const info = JSON.parse(execFileSync(Deno.execPath(), ["info", "--json"], { encoding: "utf8" }));
  const from = join(info.npmCache, "registry.npmjs.org", "binaryen", "116.0.0");
  let code = readFileSync(join(from, "index.js"), "utf8");
  const edits: [string, string][] = [
    ['await import("module")', 'await import(["module"][0])'],
    ["var YQ=await pI(),iQ=YQ;export{iQ as default};", "var iQ=pI();export{iQ as default};"],
  ];
  for (const [was, is] of edits) {
    if (code.split(was).length !== 2) {
      throw new Error(`binaryen 116's index.js no longer contains ${was} once; update the edits`);
    }
    code = code.replace(was, is);
  }
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "binaryen.js"), code);
  copyFileSync(join(from, "LICENSE"), join(dir, "BINARYEN-LICENSE"));
}

/** Writes `kiln-globals.d.ts` and points the entry declarations at it and at WebGPU's types. */
function typeEntries(dir: string): void {
  writeFileSync(join(dir, "kiln-globals.d.ts"), GLOBALS);
  const head =
    '/// <reference types="@webgpu/types" />\n/// <reference path="./kiln-globals.d.ts" />\n';
  for (const entry of ["mod.d.ts", "cli.d.ts", "cli_node.d.ts"]) {
    const path = join(dir, entry);
    writeFileSync(path, head + readFileSync(path, "utf8"));
  }
}

/**
 * Removes the inline source maps deno pack appends to every module: they were most of the
 * package's JavaScript (1.37 of 1.88 MB), and the TypeScript they map to is not in the tarball.
 */
function dropSourceMaps(dir: string): void {
  const inline = /\n\/\/# sourceMappingURL=data:application\/json;base64,[A-Za-z0-9+/=]*\s*$/;
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith(".js")) continue;
    const path = join(entry.parentPath, entry.name);
    const code = readFileSync(path, "utf8");
    if (inline.test(code)) writeFileSync(path, code.replace(inline, "\n"));
  }
}
