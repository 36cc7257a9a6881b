import assert from "node:assert/strict";

const RUNNER = new URL("./test_runner.ts", import.meta.url).pathname;

Deno.test("the test runner sums modules' counts and fails a module that aborts after its tests twice", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kiln-runner-" });
  try {
    // Named off the test pattern: they run only where passed, as here.
    await Deno.writeTextFile(
      `${dir}/passes.ts`,
      'Deno.test("one", () => {});\nDeno.test("two", () => {});\n',
    );
    await Deno.writeTextFile(
      `${dir}/fails.ts`,
      'Deno.test("good", () => {});\nDeno.test("bad", () => { throw new Error("no"); });\n',
    );
    // Passes its test, then the process aborts as the EGL teardown does.
    await Deno.writeTextFile(
      `${dir}/aborts.ts`,
      'Deno.test("fine", () => {});\naddEventListener("unload", () => Deno.kill(Deno.pid, "SIGABRT"));\n',
    );
    // Aborts at exit on its first run only, as the teardown now and then does.
    await Deno.writeTextFile(
      `${dir}/flaky.ts`,
      `Deno.test("fine", () => {});\naddEventListener("unload", () => {\n  try { Deno.statSync("${dir}/mark"); } catch {\n    Deno.writeTextFileSync("${dir}/mark", "");\n    Deno.kill(Deno.pid, "SIGABRT");\n  }\n});\n`,
    );
    const run = async (...files: string[]) => {
      const { code, stdout } = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", RUNNER, ...files.map((f) => `${dir}/${f}`)],
        stdout: "piped",
        stderr: "null",
        env: { NO_COLOR: "1", KILN_TEST_MINUTES: "0.05" },
      }).output();
      const lines = new TextDecoder().decode(stdout).trim().split("\n");
      return { code, last: lines[lines.length - 1], text: lines.join("\n") };
    };
    const ok = await run("passes.ts");
    assert.equal(ok.code, 0);
    assert.match(ok.last, /^ok \| 2 passed \| 0 failed \(\d+s, 1 modules\)$/);
    const bad = await run("passes.ts", "fails.ts", "aborts.ts");
    assert.equal(bad.code, 1);
    assert.match(bad.last, /^FAILED \| 3 passed \| 2 failed \(\d+s, 3 modules\)$/);
    assert.match(bad.text, /aborts\.ts exited with SIGABRT after its tests/);
    assert.match(bad.text, /failed modules:\n {2}.*fails\.ts\n {2}.*aborts\.ts/);
    assert.match(
      bad.text,
      /aborts\.ts exited with SIGABRT after its tests, and again on a second run/,
    );
    // Runs past a limit of 0.05 minutes (3 s).
    await Deno.writeTextFile(
      `${dir}/hangs.ts`,
      'Deno.test("waits", () => new Promise(() => setInterval(() => {}, 1000)));\n',
    );
    const hung = await run("passes.ts", "hangs.ts");
    assert.equal(hung.code, 1);
    assert.match(hung.text, /hangs\.ts ran past 0\.05 min and was stopped/);
    assert.match(hung.last, /^FAILED \| 2 passed \| 1 failed/);
    const flaky = await run("passes.ts", "flaky.ts");
    assert.equal(flaky.code, 0, flaky.text);
    assert.match(flaky.last, /^ok \| 3 passed \| 0 failed \(\d+s, 2 modules\)$/);
    assert.match(flaky.text, /flaky\.ts exited with SIGABRT after its tests; a second run passed/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
