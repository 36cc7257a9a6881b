import assert from "node:assert/strict";

async function kiln(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const cmd = new Deno.Command(Deno.execPath(), {
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
