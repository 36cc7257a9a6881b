/**
 * `deno task fuzz`: runs a fuzzing campaign ({@linkcode fuzzCase}) over worker processes, so a
 * case that hangs or kills its process is caught and reported instead of stopping the campaign.
 *
 *   deno task fuzz [--cases 2000] [--seed 1] [--jobs N] [--backends wasm,webgpu] [--json FILE]
 *   deno task fuzz --seed S --case ID     # reproduce one case: what was done, the graph, outcome
 *
 * Exits 1 when any case is a bug (an untyped error, a result that differs from the reference, a
 * case over its time budget, a hang or a crash), printing each with the command that reproduces it.
 *
 * @module
 */
import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import { fuzzCase, fuzzInstance, type FuzzOptions, type FuzzOutcome, grammarOf } from "./fuzz.ts";
import { EXPORT_NAMES, EXPORTS_DIR } from "../../onnx/testdata.ts";
import { devMain } from "../dev_cli.ts";

const USAGE =
  `deno task fuzz [--cases 2000] [--seed 1] [--jobs N] [--backends wasm,webgpu] [--json FILE]
deno task fuzz --seed S --case ID     (reproduce one case)`;

/** The mutation corpus: the repository's PyTorch exports (random graphs are made per case). */
export function fuzzCorpus(): Uint8Array[] {
  return EXPORT_NAMES.map((n) => Deno.readFileSync(`${EXPORTS_DIR}${n}.onnx`));
}

/** A case that does not report within this is a hang. */
const HANG_MS = 60_000;

async function worker(seed: number, from: number, to: number, options: FuzzOptions) {
  console.warn = () => {}; // declared-shape warnings of mutants are expected noise
  for (let id = from; id < to; id++) {
    console.log(JSON.stringify(await fuzzCase(seed, id, options)));
  }
}

/** Runs ids `[from, to)` in one worker process; a silent or dead worker is restarted past its case. */
async function runRange(
  seed: number,
  from: number,
  to: number,
  backends: string,
  report: (o: FuzzOutcome) => void,
): Promise<void> {
  let next = from;
  while (next < to) {
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL(import.meta.url).pathname,
        "--worker",
        `--seed=${seed}`,
        `--from=${next}`,
        `--to=${to}`,
        `--backends=${backends}`,
      ],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let timer: ReturnType<typeof setTimeout> | undefined;
    const silent = () =>
      new Promise<"hang">((resolve) => {
        timer = setTimeout(() => resolve("hang"), HANG_MS);
      });
    while (true) {
      const read = await Promise.race([lines.read(), silent()]);
      clearTimeout(timer);
      if (read === "hang") {
        report({
          id: next,
          status: "bug",
          detail: `hang: no result within ${HANG_MS} ms`,
          ms: HANG_MS,
        });
        child.kill("SIGKILL");
        next++;
        break;
      }
      if (read.done) {
        const status = await child.status;
        if (next < to) {
          report({
            id: next,
            status: "bug",
            detail: `the worker died (exit ${status.code}, signal ${status.signal})`,
            ms: 0,
          });
          next++;
        }
        break;
      }
      buffer += read.value;
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (!line.startsWith("{")) continue;
        const o = JSON.parse(line) as FuzzOutcome;
        report(o);
        next = o.id + 1;
      }
    }
    await child.stderr.cancel().catch(() => {});
    await child.status.catch(() => {});
  }
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      cases: { type: "string", default: "2000" },
      seed: { type: "string", default: "1" },
      jobs: { type: "string" },
      backends: { type: "string", default: "wasm" },
      case: { type: "string" },
      json: { type: "string" },
      worker: { type: "boolean", default: false },
      from: { type: "string" },
      to: { type: "string" },
    },
  });
  const seed = Number(values.seed);
  const backends = values.backends.split(",").filter(Boolean);
  const options: FuzzOptions = { corpus: fuzzCorpus(), backends };
  if (values.worker) {
    await worker(seed, Number(values.from), Number(values.to), options);
    return 0;
  }
  if (values.case !== undefined) {
    const steps: string[] = [];
    const generated = grammarOf(seed, Number(values.case));
    if (generated) console.log(`generated: ${generated.what}`);
    else {
      try {
        const { graph } = fuzzInstance(seed, Number(values.case), options, steps);
        console.log(`${steps.join("; ")}\n${graph.toString()}`);
      } catch (e) {
        console.log(`${steps.join("; ")}\nimport: ${(e as Error).message}`);
      }
    }
    const o = await fuzzCase(seed, Number(values.case), options);
    console.log(`${o.status} (${o.ms.toFixed(0)} ms): ${o.detail}`);
    return o.status === "bug" ? 1 : 0;
  }
  const cases = Number(values.cases);
  const jobs = Number(values.jobs ?? Math.max(1, availableParallelism()));
  const counts = { ok: 0, typed: 0, bug: 0 };
  const bugs: FuzzOutcome[] = [];
  let slowest = 0;
  const t0 = performance.now();
  const chunk = Math.ceil(cases / jobs);
  await Promise.all(
    [...Array(jobs).keys()].map((j) =>
      runRange(seed, j * chunk, Math.min(cases, (j + 1) * chunk), values.backends, (o) => {
        counts[o.status]++;
        slowest = Math.max(slowest, o.ms);
        if (o.status === "bug") bugs.push(o);
      })
    ),
  );
  const seconds = (performance.now() - t0) / 1000;
  const summary = {
    seed,
    cases,
    backends,
    jobs,
    ...counts,
    seconds: Math.round(seconds),
    slowestCaseMs: Math.round(slowest),
  };
  for (const b of bugs.sort((x, y) => x.id - y.id)) {
    console.log(`BUG case ${b.id}: ${b.detail.split("\n").slice(0, 6).join("\n  ")}`);
    console.log(
      `  reproduce: deno task fuzz --seed ${seed} --case ${b.id} --backends ${values.backends}`,
    );
  }
  console.log(JSON.stringify(summary));
  if (values.json) {
    Deno.writeTextFileSync(values.json, JSON.stringify({ ...summary, bugs }, null, 2));
  }
  return bugs.length ? 1 : 0;
}

if (import.meta.main) Deno.exit(await devMain(USAGE, Deno.args, main));
