/**
 * `deno task test`: type-checks every test module once, then runs each in a `deno test` process
 * of its own and sums their counts into one `ok | N passed | N failed` line.
 *
 * Why not one `deno test` process: Deno gives every test module its own isolate, and each isolate
 * that touches `navigator.gpu` creates and drops a wgpu instance. On an EGL adapter (Mesa's
 * llvmpipe, CI's only WebGPU) one process doing that for many isolates corrupts the C heap, and
 * the process aborts at exit in libEGL's destructor ("corrupted size vs. prev_size in fastbins",
 * core dumped) after every test passed. Measured on the 2-core VM with Deno 2.9.6, 30 modules
 * each requesting an adapter, running one shader and destroying the device, no kiln code at all:
 * 2 of 24 processes aborted; kiln's own suite 1 in 3 to 10. One GPU isolate a process: 0 of 40.
 * One isolate still aborts now and then: `onnx/export/export_test.ts`, whose auto compiles request the
 * adapter, aborted 2-5 of 100 processes at exit (2026-11-27), 0 of 100 with `navigator.gpu`
 * hidden and 0 of 100 with its compiles on wasm, and still 5 of 100 where auto requested the
 * adapter alone, no device. So a module whose process ends abnormally with no test failed runs
 * once more, and counts as failed unless that run passes and ends cleanly: a crash of kiln's
 * would repeat, the teardown's has not.
 *
 * A module that runs past its time limit (`KILN_TEST_MINUTES`, default 15: the slowest takes
 * about one on the 2-core VM) is stopped and counts as failed, not run again: a hang would
 * otherwise hold CI until its own limit, and name nothing.
 *
 * Arguments: paths (files or folders) choose the modules (default: every `*_test.ts` outside
 * `npm/`); anything else is passed to each `deno test` (e.g. `--filter name`).
 *
 * @module
 */

const ROOT = new URL("..", import.meta.url).pathname;
/** Folders that hold no tests of this task (npm's run under Node and Chromium, see `.ci/run`). */
const SKIP = new Set(["npm", "node_modules", ".git", ".device", ".device_in", "bench"]);
/** Deno's summary line of a run: `ok | 5 passed (2 steps) | 0 failed (3s)`. */
const SUMMARY = /(\d+) passed(?: \([^)]*\))? \| (\d+) failed/;

/** Passed and failed tests in a run's output (none where it printed no summary). */
function counts(out: string): [passed: number, failed: number] | undefined {
  // deno-lint-ignore no-control-regex
  const summary = SUMMARY.exec(out.replace(/\x1b\[[0-9;]*m/g, ""));
  return summary ? [Number(summary[1]), Number(summary[2])] : undefined;
}

/** Every test module under `dir` (absolute or from the repository root), sorted. */
function testModules(dir: string): string[] {
  const found: string[] = [];
  for (const e of Deno.readDirSync(dir.startsWith("/") ? dir : `${ROOT}${dir}`)) {
    const path = dir ? `${dir}/${e.name}` : e.name;
    if (e.isDirectory && !SKIP.has(e.name)) found.push(...testModules(path));
    else if (e.isFile && /(^|_|\.)test\.ts$/.test(e.name)) found.push(path);
  }
  return found.sort();
}

/** The modules and pass-through flags of `args`. */
function parseArgs(args: readonly string[]): { modules: string[]; flags: string[] } {
  const modules: string[] = [], flags: string[] = [];
  for (const a of args) {
    let info: Deno.FileInfo | undefined;
    try {
      info = a.startsWith("-") ? undefined : Deno.statSync(a.startsWith("/") ? a : `${ROOT}${a}`);
    } catch { /* not a path: a flag's value */ }
    if (!info) flags.push(a);
    else modules.push(...(info.isDirectory ? testModules(a.replace(/\/$/, "")) : [a]));
  }
  return { modules: modules.length ? modules : testModules(""), flags };
}

/** A test module's time limit in milliseconds. */
const LIMIT_MS = Number(Deno.env.get("KILN_TEST_MINUTES") ?? 15) * 60_000;

/**
 * Runs `deno` with `args` in the repository root; its exit code and output, and whether it was
 * stopped at `limit` milliseconds.
 */
async function deno(
  args: string[],
  limit = Infinity,
): Promise<{ code: number; signal: string | null; out: string; stopped: boolean }> {
  const stop = new AbortController();
  const timer = Number.isFinite(limit) ? setTimeout(() => stop.abort(), limit) : undefined;
  const { code, signal, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: stop.signal,
  }).output();
  clearTimeout(timer);
  const text = new TextDecoder();
  const out = text.decode(stdout) + text.decode(stderr);
  return { code, signal, out, stopped: stop.signal.aborted };
}

const start = performance.now();
const { modules, flags } = parseArgs(Deno.args);
const checked = await deno(["test", "-A", "--no-run", ...modules]);
if (checked.code !== 0) {
  console.log(checked.out);
  Deno.exit(checked.code);
}
let passed = 0, failed = 0;
const broken: string[] = [];
const runModule = (m: string) => deno(["test", "-A", "--no-check", ...flags, m], LIMIT_MS);
for (const m of modules) {
  const { code, signal, out, stopped } = await runModule(m);
  Deno.stdout.writeSync(new TextEncoder().encode(out));
  const [p, f] = counts(out) ?? [0, 0];
  passed += p;
  failed += f;
  if (stopped) {
    failed++;
    broken.push(m);
    console.log(`test_runner: ${m} ran past ${LIMIT_MS / 60_000} min and was stopped`);
    continue;
  }
  // A process that fails without a failed test (a crash, an abort at exit) counts as one, unless
  // a second run passes and ends cleanly (see the module documentation).
  if (code !== 0 && f === 0) {
    const again = await runModule(m);
    const how = `${m} exited with ${signal ?? code} after its tests`;
    if (again.code === 0) {
      // Its counts are the second run's (the first may have died before printing them).
      passed += (counts(again.out)?.[0] ?? 0) - p;
      console.log(`test_runner: ${how}; a second run passed and ended cleanly`);
      continue;
    }
    failed++;
    broken.push(m);
    console.log(`test_runner: ${how}, and again on a second run`);
  } else if (f > 0) broken.push(m);
}
if (broken.length) console.log(`\nfailed modules:\n${broken.map((m) => `  ${m}`).join("\n")}`);
const seconds = Math.round((performance.now() - start) / 1000);
console.log(
  `\n${
    failed ? "FAILED" : "ok"
  } | ${passed} passed | ${failed} failed (${seconds}s, ${modules.length} modules)`,
);
Deno.exit(failed ? 1 : 0);
