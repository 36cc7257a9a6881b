/**
 * The layering rules, checked on the source: the core (`jit/`) and the shader generators
 * (`shaders/`) never import a backend or the ONNX frontend, and no module imports itself back
 * through a chain of value imports (type-only imports vanish at run time and may point anywhere),
 * and no file grows past 600 lines (one past that has earned a split).
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";

const ROOT = dirname(new URL(import.meta.url).pathname);
const SKIP = new Set(["node_modules", ".git", ".device", "dist"]);

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (SKIP.has(e.name)) return [];
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith(".ts") ? [relative(ROOT, path)] : [];
  });
}

interface Import {
  readonly target: string;
  /** Evaluated when the importer loads (not `import type`, not a dynamic `import()`). */
  readonly value: boolean;
}

/** The relative imports of `file`, resolved to paths from the repository root. */
function importsOf(file: string): Import[] {
  const text = readFileSync(join(ROOT, file), "utf8");
  const out: Import[] = [];
  const resolve = (spec: string) => normalize(join(dirname(file), spec));
  const declaration = /^(?:import|export)\s+(type\s+)?([^;]*?)\s*from\s*"(\.[^"]+)";/gms;
  for (const m of text.matchAll(declaration)) {
    const clause = m[2];
    const named = clause.match(/^\{([^}]*)\}$/s);
    const allTypes = named !== null &&
      named[1].split(",").map((s) => s.trim()).filter(Boolean).every((s) => s.startsWith("type "));
    out.push({ target: resolve(m[3]), value: !m[1] && !allTypes });
  }
  for (const m of text.matchAll(/^import\s+"(\.[^"]+)";/gm)) {
    out.push({ target: resolve(m[1]), value: true });
  }
  for (const m of text.matchAll(/\bimport\(\s*"(\.[^"]+)"\s*\)/g)) {
    out.push({ target: resolve(m[1]), value: false });
  }
  return out;
}

const files = sources(ROOT);
const graph = new Map(files.map((f) => [f, importsOf(f)]));

Deno.test("the import parser sees value, type-only and dynamic imports", () => {
  const compile = graph.get("jit/compile.ts")!;
  assert.ok(compile.some((i) => i.target === "jit/fuse.ts" && i.value));
  assert.ok(compile.some((i) => i.target === "jit/backend.ts" && !i.value));
  assert.ok(files.length > 100, `only ${files.length} sources found`);
});

Deno.test("jit/ and shaders/ import neither backends/ nor onnx/", () => {
  const bad = [...graph].flatMap(([file, imports]) =>
    /^(jit|shaders)\//.test(file)
      ? imports.filter((i) => /^(backends|onnx)\//.test(i.target)).map((i) =>
        `${file} → ${i.target}`
      )
      : []
  );
  assert.deepEqual(bad, []);
});

Deno.test("no source file is over 600 lines", () => {
  const long = files.flatMap((f) => {
    const lines = readFileSync(join(ROOT, f), "utf8").split("\n").length - 1;
    return lines > 600 ? [`${f}: ${lines} lines`] : [];
  });
  assert.deepEqual(long, []);
});

Deno.test("no cycle of value imports", () => {
  // Tarjan's strongly connected components over value imports.
  const index = new Map<string, number>(), low = new Map<string, number>();
  const stack: string[] = [], on = new Set<string>(), cycles: string[][] = [];
  let next = 0;
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    on.add(v);
    for (const { target, value } of graph.get(v) ?? []) {
      if (!value || !graph.has(target)) continue;
      if (!index.has(target)) {
        visit(target);
        low.set(v, Math.min(low.get(v)!, low.get(target)!));
      } else if (on.has(target)) low.set(v, Math.min(low.get(v)!, index.get(target)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        component.push(w);
      } while (w !== v);
      const self = graph.get(v)!.some((i) => i.value && i.target === v);
      if (component.length > 1 || self) cycles.push(component.sort());
    }
  };
  for (const f of files) if (!index.has(f)) visit(f);
  assert.deepEqual(
    cycles,
    [],
    `value-import cycles:\n${cycles.map((c) => c.join(" ↔ ")).join("\n")}`,
  );
});

Deno.test("the CLI's module graph holds kiln's own dependencies and no benchmark library", () => {
  // The benchmark's peers (ONNX Runtime Web, TensorFlow.js, jax-js) live in bench/'s own config
  // and lockfile: a user's first `deno task kiln run` must not download them (360 MB before).
  const out = new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", "cli.ts"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "null",
  }).outputSync();
  assert.ok(out.success, "deno info --json cli.ts failed");
  const info = JSON.parse(new TextDecoder().decode(out.stdout));
  // Dawn (`--gpu dawn`, the webgpu package and its dependencies) is a computed dynamic import,
  // fetched only when a caller asks for it, at the version dawn.ts pins. The root keeps no
  // lockfile: `deno task` installs whatever one lists, and Dawn there cost a first
  // `deno task kiln run` 132 MB and a warning box (2026-11-28: 143 MB in DENO_DIR, now 12 MB).
  const dawn = ["webgpu", "@webgpu/types", "debug", "ms"];
  const name = (p: string) => p.replace(/@[^@]+$/, "");
  const packages = Object.keys(info.npmPackages ?? {}).map(name);
  assert.deepEqual(packages.filter((p) => !dawn.includes(p)), []);
  const config = JSON.parse(readFileSync(join(ROOT, "deno.json"), "utf8"));
  assert.equal(config.lock, false, "the root deno.json keeps no lockfile");
  assert.ok(!existsSync(join(ROOT, "deno.lock")), "no root deno.lock");
});
