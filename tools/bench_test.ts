/**
 * `deno bench -A` at the root runs kiln's own benchmarks (`*_bench.ts` beside the code) to the
 * end: every bench module type-checks and every benchmark completes. Nothing about their times
 * is asserted (a test may run on a busy machine); the numbers are for people.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url).pathname;

Deno.test("deno bench -A at the root runs every kiln benchmark, no peer library", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["bench", "-A"],
    cwd: ROOT,
    env: { NO_COLOR: "1", KILN_CACHE_DIR: "off" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text);
  for (const name of ["wasm matmul", "wasm softmax", "vit_tiny on wasm", "lenet on wasm"]) {
    assert.match(text, new RegExp(name), `${name} did not run`);
  }
  // Peer libraries live behind `deno task bench:peers` and bench/'s own config.
  assert.doesNotMatch(text, /onnxruntime|tensorflow|jax-js/i);
});
