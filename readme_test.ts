import assert from "node:assert/strict";

Deno.test("the README's TypeScript examples run", async () => {
  const readme = await Deno.readTextFile(new URL("./README.md", import.meta.url));
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
  assert.ok(blocks.length > 0, "README has a ts example");
  const dir = await Deno.makeTempDir();
  try {
    for (const [i, code] of blocks.entries()) {
      const file = `${dir}/example_${i}.ts`;
      await Deno.writeTextFile(
        file,
        code.replaceAll('"./mod.ts"', JSON.stringify(new URL("./mod.ts", import.meta.url).href)),
      );
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "--no-config", "--no-lock", "-A", file],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      const stdout = new TextDecoder().decode(out.stdout);
      if (i === 0) {
        assert.match(stdout, /\[ 2, 2 \] Float32Array\(4\) \[ 4, 1, 0, 0 \]/);
        assert.match(stdout, /shape-mismatch/);
      } else if (i === 1) {
        assert.match(stdout, /\[ "x: f32\[2,4\]" \]/);
        assert.match(stdout, /\[ 2, 4 \] 0\.25/);
      } else if (i === 2) {
        assert.match(stdout, /0\.03125/);
        assert.match(stdout, /\[ "matmul_0", "softmax_1" \]/);
        assert.match(stdout, /\[ 4 \] webgpu/);
      } else if (i === 3) {
        // The precision example: f16 results where the GPU has shader-f16, else the refusal.
        assert.match(stdout, /^(Float32Array\(2\) \[ 0\.69970703125, 7 \]|unsupported)$/m);
      } else if (i === 5) {
        // Registered ONNX op, progress and a caller-owned output buffer.
        assert.match(stdout, /Float32Array\(3\) \[ 2, 4, 6 \]/);
      } else {
        // The f64 example: f64 digits on wasm, webgpu's refusal, then its narrowed f32 values.
        assert.match(stdout, /\[ 1e\+300, 1\.000000000001 \]\nunsupported\n\[ Infinity, 1 \]/);
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
