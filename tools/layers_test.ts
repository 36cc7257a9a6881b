/**
 * The layering rules, checked on the source. Layers point one way, transitively: the core
 * (`jit/`) reaches no code generator, backend, ONNX frontend, CLI or `mod.ts`; the code
 * generators (`shaders/`) only the core; backends neither the ONNX frontend nor the CLI; and the
 * library never reaches a test, a benchmark or a tool. No import circle among the library's
 * files (type-only imports included: a type lives with the module that defines its concept), and
 * no file grows past 600 lines (one past that has earned a split).
 */
import assert from "node:assert/strict";
import { ROOT, sources } from "./source_files.ts";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";

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

const files = sources();
const graph = new Map(files.map((f) => [f, importsOf(f)]));

Deno.test("the import parser sees value, type-only and dynamic imports", () => {
  const compile = graph.get("jit/compile.ts")!;
  assert.ok(compile.some((i) => i.target === "jit/passes/fuse.ts" && i.value));
  assert.ok(compile.some((i) => i.target === "jit/runtime/backend.ts" && !i.value));
  assert.ok(files.length > 100, `only ${files.length} sources found`);
});

/** Tests, benchmarks and what only they and the tools use: free to import anything. */
const NOT_LIBRARY = /(_(test|bench)\.ts$)|^(bench|tools|npm|jit\/testing)\/|^onnx\/testdata\.ts$/;
const library = files.filter((f) => !NOT_LIBRARY.test(f));

/** Every library file `file` reaches through imports of any kind (type-only and dynamic too). */
function reachable(file: string): Set<string> {
  const seen = new Set<string>();
  const todo = [file];
  while (todo.length) {
    for (const { target } of graph.get(todo.pop()!) ?? []) {
      if (!seen.has(target)) {
        seen.add(target);
        todo.push(target);
      }
    }
  }
  return seen;
}

/** Layers point one way: what each part of the library must never reach, however indirectly. */
const FORBIDDEN: readonly [from: RegExp, to: RegExp][] = [
  [/^jit\//, /^(backends|onnx|shaders|cli)\/|^mod\.ts$/],
  [/^shaders\//, /^(backends|onnx|cli)\/|^mod\.ts$/],
  [/^backends\//, /^(onnx|cli)\/|^mod\.ts$/],
  [/^onnx\//, /^cli\/|^mod\.ts$/],
  [/./, NOT_LIBRARY],
];

Deno.test("layers point one way: no library file reaches a layer above it, a test or a tool", () => {
  const bad = library.flatMap((file) => {
    const reached = [...reachable(file)];
    return FORBIDDEN.flatMap(([from, to]) =>
      from.test(file) ? reached.filter((t) => to.test(t)).map((t) => `${file} ⇝ ${t}`) : []
    );
  });
  assert.deepEqual(bad, []);
});

Deno.test("the reachability check sees through a chain of imports", () => {
  // mod.ts reaches a backend only through backends/registry.ts's own imports, among others.
  const fromMod = reachable("mod.ts");
  assert.ok(fromMod.has("backends/wasm/worker_crew.ts"));
  assert.ok(fromMod.has("jit/ir/graph.ts"));
});

Deno.test("no source file is over 600 lines", () => {
  const long = files.flatMap((f) => {
    const lines = readFileSync(join(ROOT, f), "utf8").split("\n").length - 1;
    return lines > 600 ? [`${f}: ${lines} lines`] : [];
  });
  assert.deepEqual(long, []);
});

Deno.test("no import circle among the library's files, type-only imports included", () => {
  const cycles = importCycles(library).map((c) => c.join(" ↔ "));
  assert.deepEqual(cycles, [], `import circles:\n${cycles.join("\n")}`);
});

Deno.test("no cycle of value imports, tests and tools included", () => {
  const cycles = importCycles(files, (i) => i.value);
  assert.deepEqual(
    cycles,
    [],
    `value-import cycles:\n${cycles.map((c) => c.join(" ↔ ")).join("\n")}`,
  );
});

/** The import circles among `among` (Tarjan's strongly connected components) over `edges`. */
function importCycles(among: readonly string[], edges = (_: Import) => true): string[][] {
  const inside = new Set(among);
  const index = new Map<string, number>(), low = new Map<string, number>();
  const stack: string[] = [], on = new Set<string>(), cycles: string[][] = [];
  let next = 0;
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    on.add(v);
    for (const i of graph.get(v) ?? []) {
      if (!edges(i) || !inside.has(i.target)) continue;
      if (!index.has(i.target)) {
        visit(i.target);
        low.set(v, Math.min(low.get(v)!, low.get(i.target)!));
      } else if (on.has(i.target)) low.set(v, Math.min(low.get(v)!, index.get(i.target)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        component.push(w);
      } while (w !== v);
      const self = graph.get(v)!.some((i) => edges(i) && i.target === v);
      if (component.length > 1 || self) cycles.push(component.sort());
    }
  };
  for (const f of among) if (!index.has(f)) visit(f);
  return cycles;
}

Deno.test("the CLI's module graph holds kiln's own dependencies and no benchmark library", () => {
  // The benchmark's peers (ONNX Runtime Web, TensorFlow.js, jax-js) live in bench/'s own config
  // and lockfile: a user's first `deno task kiln run` must not download them (360 MB before).
  const out = new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", "cli/mod.ts"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "null",
  }).outputSync();
  assert.ok(out.success, "deno info --json cli/mod.ts failed");
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
