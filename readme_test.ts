/**
 * Every TypeScript block of the README and of `docs/` runs, from the repository root, and prints
 * what its comments say it prints. A block without an entry in {@linkcode EXPECTED} fails, so a
 * new example comes with its check.
 */
import assert from "node:assert/strict";

const ROOT = new URL("./", import.meta.url);

/** What each block prints, by `file#index` (blocks counted from 0 within their file). */
const EXPECTED: Readonly<Record<string, readonly RegExp[]>> = {
  "README.md#0": [
    /\[ 2, 2 \] Float32Array\(4\) \[ 4, 1, 0, 0 \]/,
    // The exact precision: wasm's softmax of exp to the reference's bits.
    /^true$/m,
    /Float32Array\(1\) \[ 1\.015625 \]/,
    // int64 past 32 bits: a product computed in 64.
    /BigInt64Array\(1\) \[ 10000000000n \]/,
    /shape-mismatch/,
  ],
  "README.md#1": [/\[ 2, 10 \] true/],
  "README.md#2": [/\[ 59, 17, 64, 47, 111 \]/],
  "docs/onnx.md#0": [/\[ "x: f32\[2,4\]" \]/, /\[ 2, 4 \] 0\.25/],
  // The f64 example: f64 digits on wasm, webgpu's refusal, then its narrowed f32 values.
  "docs/onnx.md#1": [/\[ 1e\+300, 1\.000000000001 \]\nunsupported\n\[ Infinity, 1 \]/],
  // Registered ONNX op, progress and a caller-owned output buffer.
  "docs/onnx.md#2": [/Float32Array\(3\) \[ 2, 4, 6 \]/],
  // A generation: ONNX Runtime's greedy ids, one prefill and one decode executable.
  "docs/onnx.md#3": [/^59\n17\n64\n47\n111\n2$/m],
  // Local-first following GPU inputs, and a workload hint.
  "docs/compiling.md#0": [/\[ "wasm" \]/, /^webgpu 2\.718\d*$/m, /^2\.718\d*$/m],
  "docs/backends.md#0": [/0\.03125/, /\[ "matmul_0", "softmax_1" \]/, /\[ 4 \] webgpu/],
  // The precision example: f16 results on wasm and on webgpu (native or as 16-bit words).
  "docs/backends.md#1": [
    /^Float32Array\(2\) \[ 0\.69970703125, 7 \]\nFloat32Array\(2\) \[ 0\.69970703125, 7 \]$/m,
  ],
  // Timing, capabilities and ops, device memory on wasm and refused on the reference backend.
  "docs/backends.md#2": [
    /\[ "hostMs", "waitMs", "outputMs", "wallMs" \]/,
    /^false true$/m,
    /^wasm\nunsupported$/m,
  ],
};

/** The markdown files whose examples run: the README and every page of `docs/`. */
function pages(): string[] {
  const docs = [...Deno.readDirSync(new URL("docs/", ROOT))]
    .filter((e) => e.isFile && e.name.endsWith(".md")).map((e) => `docs/${e.name}`);
  return ["README.md", ...docs.sort()];
}

/** Runs `code` as a module from the repository root; its standard output. */
async function runBlock(dir: string, name: string, code: string): Promise<string> {
  const mod = new URL("mod.ts", ROOT).href;
  const file = `${dir}/${name.replace(/\W/g, "_")}.ts`;
  await Deno.writeTextFile(
    file,
    code.replaceAll('"./mod.ts"', JSON.stringify(mod)).replaceAll(
      '"../mod.ts"',
      JSON.stringify(mod),
    ),
  );
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-config", "--no-lock", "-A", file],
    cwd: ROOT.pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, `${name}: ${new TextDecoder().decode(out.stderr)}`);
  return new TextDecoder().decode(out.stdout);
}

Deno.test("the TypeScript examples of the README and docs/ run and print what they say", async () => {
  const dir = await Deno.makeTempDir();
  const seen: string[] = [];
  try {
    for (const page of pages()) {
      const text = await Deno.readTextFile(new URL(page, ROOT));
      const blocks = [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
      for (const [i, code] of blocks.entries()) {
        const name = `${page}#${i}`;
        seen.push(name);
        const expected = EXPECTED[name];
        assert.ok(expected, `${name} has no expected output in readme_test.ts`);
        const stdout = await runBlock(dir, name, code);
        for (const pattern of expected) assert.match(stdout, pattern, name);
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  assert.deepEqual(seen.sort(), Object.keys(EXPECTED).sort(), "every expected block exists");
});

Deno.test("the README stays a guide: at most 220 lines, and every docs/ page linked", async () => {
  const readme = await Deno.readTextFile(new URL("README.md", ROOT));
  assert.ok(readme.split("\n").length <= 220, "README.md is over 220 lines");
  for (const page of pages().slice(1)) assert.ok(readme.includes(`](${page})`), `${page} unlinked`);
});

Deno.test("links between the README, docs/ and bench/ point at files that exist", async () => {
  for (const page of [...pages(), "bench/README.md"]) {
    const text = await Deno.readTextFile(new URL(page, ROOT));
    for (const [, target] of text.matchAll(/\]\(([^)#]+)(?:#[^)]*)?\)/g)) {
      if (/^https?:/.test(target)) continue;
      const path = new URL(target, new URL(page, ROOT));
      assert.ok(await Deno.stat(path).catch(() => undefined), `${page} → ${target} is missing`);
    }
  }
});
