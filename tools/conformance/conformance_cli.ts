/**
 * The ONNX conformance runner (`deno task test:onnx`): every case of the ONNX backend test suite
 * on each backend, each backend's cases spread over worker processes so that a case that hangs or
 * crashes its process costs that case only (the worker is killed and replaced). It writes
 * `tools/conformance/CONFORMANCE.md` (pass counts per backend and suite, every failing case with its reason)
 * and, with `--check`, fails when a case listed in `tools/conformance/conformance_expected.json` as passing no
 * longer passes; `--update` rewrites that list.
 *
 *   deno run -A tools/conformance/conformance_cli.ts [--data DIR] [--backends reference,wasm,webgpu]
 *     [--jobs N] [--timeout S] [--check] [--update] [--filter REGEXP]
 *
 * The data comes from `../shared/onnx-conformance/fetch.sh` (Debian's libonnx-testdata).
 *
 * @module
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { type CaseResult, runCase } from "./conformance.ts";
import { asForm, FORMS } from "./conformance_forms.ts";
import { decodeModel } from "../../onnx/wire/proto.ts";
import { devMain } from "../dev_cli.ts";

const USAGE =
  `deno run -A tools/conformance/conformance_cli.ts [--data DIR] [--backends reference,wasm,webgpu]
  [--jobs N] [--timeout S] [--check] [--update] [--filter REGEXP]`;

const HERE = dirname(new URL(import.meta.url).pathname);
const SUITES = ["node", "pytorch-operator", "pytorch-converted", "simple"] as const;
/** The derived suites (`conformance_forms.ts`): not counted in **all**. */
const DERIVED = new Set(FORMS.map((f) => f.suite));
const EXPECTED = join(HERE, "conformance_expected.json");
const REPORT = join(HERE, "CONFORMANCE.md");

/** Worker mode: case folders on stdin, one JSON result per line on stdout. */
async function worker(backend: string): Promise<void> {
  for await (const line of createInterface({ input: process.stdin })) {
    if (!line) continue;
    const result = await runCase(line, backend);
    process.stdout.write(JSON.stringify(result) + "\n");
  }
}

/** Runs `cases` on `backend` over `jobs` worker processes, `timeout` seconds per case. */
function runAll(
  cases: readonly string[],
  backend: string,
  jobs: number,
  timeout: number,
): Promise<Map<string, CaseResult>> {
  const results = new Map<string, CaseResult>();
  const queue = [...cases];
  let finished = 0;
  return new Promise((resolve) => {
    const start = () => {
      const child: ChildProcess = spawn(
        Deno.execPath(),
        ["run", "-A", new URL(import.meta.url).pathname, "--worker", "--backend", backend],
        { stdio: ["pipe", "pipe", "ignore"], env: { ...process.env, KILN_CACHE_DIR: "off" } },
      );
      let current: string | undefined;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const next = () => {
        clearTimeout(timer);
        current = queue.shift();
        if (current === undefined) {
          child.stdin!.end();
          return;
        }
        const mine = current;
        timer = setTimeout(() => {
          record({ name: name(mine), status: "timeout", reason: `over ${timeout} s` });
          current = undefined;
          child.kill("SIGKILL");
        }, timeout * 1000);
        child.stdin!.write(mine + "\n");
      };
      const record = (r: CaseResult) => {
        results.set(r.name, r);
        finished++;
        if (finished % 100 === 0) console.error(`  ${backend}: ${finished}/${cases.length}`);
        if (finished === cases.length) resolve(results);
      };
      createInterface({ input: child.stdout! }).on("line", (line) => {
        if (!current) return;
        record(JSON.parse(line) as CaseResult);
        next();
      });
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        // A case that killed its process is recorded, and a fresh worker takes the rest.
        if (current !== undefined) {
          record({
            name: name(current),
            status: "crash",
            reason: `worker process died (${signal ?? `exit ${code}`})`,
          });
        }
        if (queue.length) start();
      });
      next();
    };
    if (cases.length === 0) resolve(results);
    for (let i = 0; i < Math.min(jobs, cases.length); i++) start();
  });
}

const name = (dir: string) => dir.split("/").at(-1)!;

/**
 * {@linkcode runAll}, then each case that timed out run again alone with three times the time: on
 * a busy 2-core machine llvmpipe compiling a convolution beside other workers took test_operator_conv
 * past 60 s, where alone it takes a few. A case slow on its own still times out.
 */
async function runRetryingTimeouts(
  cases: readonly string[],
  backend: string,
  jobs: number,
  timeout: number,
): Promise<Map<string, CaseResult>> {
  const results = await runAll(cases, backend, jobs, timeout);
  const slow = cases.filter((c) => results.get(name(c))?.status === "timeout");
  if (slow.length === 0) return results;
  console.error(`  ${backend}: ${slow.length} case(s) timed out; running them alone`);
  for (const [n, r] of await runAll(slow, backend, 1, timeout * 3)) results.set(n, r);
  return results;
}

/**
 * The case folders of every suite under `data`, as `suite/case`, then the node cases' derived
 * forms (`conformance_forms.ts`: ids with the form's suffix).
 */
function listCases(data: string, filter?: string): { dir: string; suite: string }[] {
  const cases = SUITES.flatMap((suite) => {
    const root = join(data, suite);
    if (!existsSync(root)) return [];
    return readdirSync(root).filter((c) =>
      existsSync(join(root, c, "model.onnx")) && (!filter || new RegExp(filter).test(c))
    ).sort().map((c) => ({ dir: join(root, c), suite }));
  });
  // Each form rewrites a model of its own (asForm works in place), from one read of the file.
  const node = cases.filter((c) => c.suite === "node").map((c) => ({
    dir: c.dir,
    bytes: readFileSync(join(c.dir, "model.onnx")),
  }));
  const derived = FORMS.flatMap((form) =>
    node.filter((c) => asForm(decodeModel(c.bytes), form))
      .map((c) => ({ dir: c.dir + form.suffix, suite: form.suite }))
  );
  return [...cases, ...derived];
}

type Outcomes = Record<string, Map<string, CaseResult>>;

/** Outcomes besides a pass, as the report counts them. */
const OTHER = ["random", "fail", "error", "crash", "timeout"] as const;

/** The Markdown report: counts per backend and suite, then every case that fails somewhere. */
function report(
  cases: { dir: string; suite: string }[],
  backends: readonly string[],
  outcomes: Outcomes,
): string {
  const bySuite = (suite: string) => cases.filter((c) => c.suite === suite).map((c) => name(c.dir));
  const passes = (b: string, names: string[]) =>
    names.filter((n) => outcomes[b].get(n)?.status === "pass").length;
  const all = cases.filter((c) => !DERIVED.has(c.suite)).map((c) => name(c.dir));
  const lines = [
    "# ONNX conformance",
    "",
    "The ONNX backend test suite (Debian `libonnx-testdata`, ONNX 1.12) run by `deno task test:onnx`",
    "(`tools/conformance/conformance_cli.ts`): each case's `test_data_set_0`, ONNX's tolerances (rtol 1e-3,",
    "atol 1e-7), kernel cache off. WebGPU is the machine's adapter (llvmpipe in CI). Reference and",
    "wasm compute double in f64; WGSL has none, so WebGPU runs the double cases narrowed to f32",
    "(`narrowF64`), as a caller who allows it would.",
    "",
    "The last rows are kiln's own derived suites (`tools/conformance/conformance_forms.ts`), not counted in",
    "**all**: every node case with float inputs or outputs, its float tensors made double or",
    "float16, against the float case's expected values (float16 within atol 1e-3, rtol 1e-2),",
    "where ONNX allows the type (not quantization, TfIdfVectorizer, bfloat16 or string casts; the",
    "optimizers not in float16).",
    "",
    `| suite | cases | ${backends.join(" | ")} |`,
    `| --- | ---: | ${backends.map(() => "---:").join(" | ")} |`,
    ...SUITES.map((s) =>
      `| ${s} | ${bySuite(s).length} | ${backends.map((b) => passes(b, bySuite(s))).join(" | ")} |`
    ),
    `| **all** | ${all.length} | ${
      backends.map((b) =>
        `**${passes(b, all)}** (${(100 * passes(b, all) / all.length).toFixed(1)}%)`
      )
        .join(" | ")
    } |`,
    ...FORMS.map((f) =>
      `| ${f.suite} | ${bySuite(f.suite).length} | ${
        backends.map((b) => passes(b, bySuite(f.suite))).join(" | ")
      } |`
    ),
    "",
    "Outcomes other than a pass, per backend: `random` (a case of random ops that ran with",
    "ONNX's shapes and types; its expected values are numpy's draws, which another generator",
    "cannot reproduce, so they are not compared and it does not count as a pass), `fail` (ran,",
    "wrong values), `error` (a typed KilnError: refused or unsupported), `crash` (anything else:",
    "a defect), `timeout`.",
    "",
    `| backend | ${OTHER.join(" | ")} |`,
    `| --- | ${OTHER.map(() => "---:").join(" | ")} |`,
    ...backends.map((b) =>
      `| ${b} | ${
        OTHER.map((s) => [...outcomes[b].values()].filter((r) => r.status === s).length).join(" | ")
      } |`
    ),
    "",
    "## Cases that do not pass everywhere",
    "",
    `| case | ${backends.join(" | ")} |`,
    `| --- | ${backends.map(() => "---").join(" | ")} |`,
  ];
  for (const c of cases) {
    const n = name(c.dir);
    const rs = backends.map((b) => outcomes[b].get(n));
    if (rs.every((r) => r?.status === "pass")) continue;
    const cell = (r: CaseResult | undefined) =>
      !r ? "—" : r.status === "pass" ? "pass" : `${r.status}: ${r.reason.replaceAll("|", "\\|")}`;
    lines.push(`| ${c.suite}/${n} | ${rs.map(cell).join(" | ")} |`);
  }
  return lines.join("\n") + "\n";
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      data: { type: "string" },
      backends: { type: "string", default: "reference,wasm,webgpu" },
      jobs: { type: "string" },
      timeout: { type: "string", default: "60" },
      check: { type: "boolean", default: false },
      update: { type: "boolean", default: false },
      filter: { type: "string" },
      worker: { type: "boolean", default: false },
      backend: { type: "string" },
    },
  });
  if (values.worker) {
    await worker(values.backend ?? "reference");
    return 0;
  }
  const data = values.data ??
    execFileSync("bash", [join(HERE, "../../../shared/onnx-conformance/fetch.sh")], {
      encoding: "utf8",
    }).trim();
  const cases = listCases(data, values.filter);
  const backends = values.backends.split(",").filter(Boolean);
  const jobs = Number(values.jobs ?? Math.max(1, availableParallelism()));
  const outcomes: Outcomes = {};
  for (const b of backends) {
    const t0 = performance.now();
    outcomes[b] = await runRetryingTimeouts(
      cases.map((c) => c.dir),
      b,
      jobs,
      Number(values.timeout),
    );
    const passed = [...outcomes[b].values()].filter((r) => r.status === "pass").length;
    console.log(
      `${b}: ${passed} of ${cases.length} passed (${
        ((performance.now() - t0) / 1000).toFixed(0)
      } s)`,
    );
  }
  if (values.filter) {
    // A filtered run is for iterating on a few cases: say why each one fails, write nothing.
    for (const b of backends) {
      for (const r of outcomes[b].values()) {
        if (r.status !== "pass") console.log(`  ${b} ${r.name}: ${r.status} ${r.reason}`);
      }
    }
    return 0;
  }
  writeFileSync(REPORT, report(cases, backends, outcomes));
  const passing = Object.fromEntries(
    backends.map((
      b,
    ) => [
      b,
      [...outcomes[b].values()].filter((r) => r.status === "pass").map((r) => r.name).sort(),
    ]),
  );
  const expected: Record<string, string[]> = existsSync(EXPECTED)
    ? JSON.parse(readFileSync(EXPECTED, "utf8"))
    : {};
  let status = 0;
  for (const b of backends) {
    const before = new Set(expected[b] ?? []), now = new Set(passing[b]);
    const lost = [...before].filter((n) => !now.has(n));
    const gained = [...now].filter((n) => !before.has(n));
    if (gained.length) {
      console.log(
        `${b}: ${gained.length} case(s) pass that the expected list lacks: ${gained.join(", ")}`,
      );
    }
    if (lost.length) {
      console.log(`${b}: ${lost.length} case(s) no longer pass:`);
      for (const n of lost) {
        console.log(`  ${n}: ${outcomes[b].get(n)?.status} ${outcomes[b].get(n)?.reason}`);
      }
      if (values.check) status = 1;
    }
  }
  const crashes = backends.flatMap((b) =>
    [...outcomes[b].values()].filter((r) => r.status === "crash").map((r) =>
      `${b} ${r.name}: ${r.reason}`
    )
  );
  if (crashes.length) console.log(`untyped failures (defects):\n  ${crashes.join("\n  ")}`);
  if (values.update) {
    writeFileSync(EXPECTED, JSON.stringify({ ...expected, ...passing }, null, 2) + "\n");
  }
  // The summary line the CI script counts.
  const total = backends.reduce((s, b) => s + passing[b].length, 0);
  console.log(`ok | ${total} passed | ${status} failed`);
  return status;
}

if (import.meta.main) Deno.exit(await devMain(USAGE, Deno.args, main));
