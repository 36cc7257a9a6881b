import assert from "node:assert/strict";

async function kiln(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return await kilnWith({}, ...args);
}

async function kilnWith(
  env: Record<string, string>,
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  const cmd = new Deno.Command(Deno.execPath(), {
    env,
    args: ["run", "-A", new URL("./cli.ts", import.meta.url).pathname, ...args],
    stdout: "piped",
    stderr: "piped",
  });
  const out = await cmd.output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test("kiln run --json prints the demo's outputs, backend and timings", async () => {
  const { code, stdout } = await kiln("run", "--json");
  assert.equal(code, 0);
  const report = JSON.parse(stdout);
  assert.equal(report.backend, "reference");
  assert.deepEqual(report.outputs.y.shape, [8, 10]);
  assert.equal(report.outputs.y.dtype, "f32");
  assert.ok(Math.abs(report.outputs.y.mean - 0.1) < 1e-6, "softmax rows sum to one");
  assert.equal(typeof report.timings.compileMs, "number");
  assert.equal(typeof report.timings.runMs, "number");
});

Deno.test("kiln run prints a readable summary; kiln info lists backends", async () => {
  const run = await kiln("run", "--runs", "2");
  assert.equal(run.code, 0);
  assert.match(run.stdout, /output {3}y: f32\[8, 10\]/);
  const info = await kiln("info", "--json");
  assert.equal(info.code, 0);
  assert.ok(JSON.parse(info.stdout).backends.some((b: { id: string }) => b.id === "reference"));
});

Deno.test("CLI errors say what was wrong and how to fix it", async () => {
  const bad = await kiln("run", "--backend", "nope");
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /No backend "nope".*Fix: use one of: reference/);
  const runs = await kiln("run", "--runs", "0");
  assert.equal(runs.code, 1);
  assert.match(runs.stderr, /--runs must be a positive integer/);
  const cmd = await kiln("explode");
  assert.equal(cmd.code, 2);
  assert.match(cmd.stderr, /unknown command "explode"/);
});

Deno.test("kiln explain --json lists each kernel with its backend and fused ops", async () => {
  const { code, stdout } = await kiln("explain", "--json");
  assert.equal(code, 0);
  const plan = JSON.parse(stdout);
  assert.ok(plan.kernels.length >= 1 && plan.kernels.length <= 3, `${plan.kernels.length} kernels`);
  for (const k of plan.kernels) {
    assert.equal(k.backend, "reference");
    assert.ok(Array.isArray(k.ops) && k.ops.length > 0);
  }
  assert.deepEqual(plan.kernels.map((k: { ops: string[] }) => k.ops), [["MatMul", "Add", "Relu"], [
    "MatMul",
    "Add",
  ], ["Softmax"]]);
});

Deno.test("a second kiln process takes every kernel from the disk cache (no codegen)", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const first = JSON.parse((await kilnWith({ KILN_CACHE_DIR: dir }, "run", "--json")).stdout);
    assert.equal(first.cache.misses, first.kernels);
    assert.equal(first.cache.diskHits, 0);
    const second = JSON.parse((await kilnWith({ KILN_CACHE_DIR: dir }, "run", "--json")).stdout);
    assert.equal(second.cache.diskHits, second.kernels);
    assert.equal(second.cache.misses, 0);
    assert.equal(second.cache.compileMs, 0);
    assert.deepEqual(second.outputs, first.outputs);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
