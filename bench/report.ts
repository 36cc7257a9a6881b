/**
 * `deno task bench:report`: runs `bench/cpu_bench.ts` for one library per process (`deno bench
 * --filter`), `--processes N` times each (default 3), and writes `bench/REPORT.md` — per cell the
 * median of the processes' medians per call (`bench/timed.ts`) and their spread, kiln's ratio to
 * the best peer,
 * and a table of first runs (setup + compile + run; kiln's kernel cache off, and once more from
 * a cache directory another process filled) — and `bench/results/report.svg` (a log-scale bar chart).
 * Progress goes to stderr.
 *
 * `--gpu` does the same with `bench/gpu_bench.ts` (`deno task bench:gpu`, on the GPU machine) and
 * adds kiln's device time from timestamp queries, writing `bench/REPORT-gpu.md` and
 * `bench/results/report-gpu.svg`. A GPU run has a time limit per command, so the measurements can be
 * split: `--libraries a,b` measures some libraries, `--raw FILE` saves what was measured, and
 * `--from FILE` (repeatable) renders the report from saved files instead of measuring. `KILN_BENCH_FLAGS`
 * adds flags to each `deno bench` (`--no-lock --cached-only` on the offline GPU machine).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { median } from "./timed.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    gpu: { type: "boolean", default: false },
    note: { type: "string", multiple: true },
    processes: { type: "string", default: "3" },
    libraries: { type: "string" },
    raw: { type: "string" },
    from: { type: "string", multiple: true },
  },
});
const PROCESSES = Number(flags.processes);
if (!Number.isInteger(PROCESSES) || PROCESSES < 1) {
  throw new Error(`--processes must be a positive integer, got ${flags.processes}`);
}
const GPU = flags.gpu;
const LIBRARIES = GPU
  ? ["kiln webgpu", "tfjs webgpu", "onnxruntime-web webgpu", "jax-js webgpu"]
  : ["kiln wasm", "kiln reference", "tfjs cpu", "tfjs wasm", "onnxruntime-web wasm", "jax-js wasm"];
const KILN = LIBRARIES[0];
const BENCH = new URL(GPU ? "./gpu_bench.ts" : "./cpu_bench.ts", import.meta.url).pathname;
// The root config excludes bench/ (its peers stay out of kiln's own dependencies): each process
// takes this folder's config, as the bench tasks do.
const CONFIG = new URL("./deno.json", import.meta.url).pathname;
const BENCH_FLAGS = (Deno.env.get("KILN_BENCH_FLAGS") ?? "").split(/\s+/).filter(Boolean);

/** One process's figure (a first run, or kiln's device time) of one library on one workload. */
interface Figure {
  group: string;
  library: string;
  ms: number;
}

/** What the processes measured (the `--raw` file); `runs` are per-call medians. */
interface Measured {
  runs: Figure[];
  firsts: Figure[];
  devices: Figure[];
}

/** kiln's first runs in a process whose kernel cache on disk is warm (a column of its own). */
const WARM = `${KILN}, warm cache`;

/**
 * Runs `library`'s benchmarks in a process of its own; kiln's kernel cache is off unless
 * `cacheDir` is given, and `firstOnly` skips the timed runs.
 */
async function runLibrary(
  library: string,
  { cacheDir = "off", firstOnly = false }: { cacheDir?: string; firstOnly?: boolean } = {},
): Promise<Measured> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["bench", "-A", "--config", CONFIG, ...BENCH_FLAGS, "--filter", library, BENCH],
    stdout: "piped",
    stderr: "piped",
    env: {
      NO_COLOR: "1",
      KILN_BENCH_ONLY: library,
      KILN_CACHE_DIR: cacheDir,
      ...(firstOnly ? { KILN_BENCH_FIRST_ONLY: "1" } : {}),
    },
  }).output();
  const lines = new TextDecoder().decode(out.stderr).split("\n").map((l) => l.split("\t"));
  const tagged = (name: string) =>
    lines.flatMap(([tag, group, lib, ms]) =>
      tag === name && lib === library ? [{ group, library, ms: Number(ms) }] : []
    );
  return {
    // `median <workload> <library> <ms> <calls>` (bench/timed.ts), `first-run <workload>
    // <library> <ms>` and `device-time <workload> <ms>` (kiln's only).
    runs: tagged("median"),
    firsts: tagged("first-run"),
    devices: lines.flatMap(([tag, group, ms]) =>
      tag === "device-time" ? [{ group, library, ms: Number(ms) }] : []
    ),
  };
}

const fmt = (
  ms: number,
) => (ms < 0.01
  ? `${(ms * 1000).toFixed(1)} µs`
  : ms < 10
  ? `${ms.toFixed(2)} ms`
  : `${ms.toFixed(1)} ms`);

function svg(rows: Figure[], groups: string[]): string {
  const colors = ["#d9480f", "#f59f00", "#1971c2", "#4dabf7", "#2f9e44", "#9c36b5"];
  const barH = 9, gap = 14, left = 120, width = 560;
  const maxLog = Math.log10(Math.max(...rows.map((r) => r.ms)) * 2),
    minLog = Math.log10(Math.min(...rows.map((r) => r.ms)) / 2);
  const x = (ms: number) => ((Math.log10(ms) - minLog) / (maxLog - minLog)) * width;
  const parts: string[] = [];
  let y = 30;
  for (const g of groups) {
    parts.push(`<text x="4" y="${y + 12}" font-size="11">${g}</text>`);
    LIBRARIES.forEach((lib, i) => {
      const r = rows.find((q) => q.group === g && q.library === lib);
      if (!r) return;
      parts.push(
        `<rect x="${left}" y="${y}" width="${x(r.ms).toFixed(1)}" height="${barH - 1}" fill="${
          colors[i]
        }"/>`,
      );
      parts.push(
        `<text x="${left + x(r.ms) + 3}" y="${y + 7}" font-size="8">${fmt(r.ms)}</text>`,
      );
      y += barH;
    });
    y += gap;
  }
  const legend = LIBRARIES.map((l, i) =>
    `<rect x="${left + i * 95}" y="6" width="8" height="8" fill="${colors[i]}"/><text x="${
      left + 11 + i * 95
    }" y="13" font-size="9">${l}</text>`
  );
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${left + width + 80}" height="${
    y + 10
  }" font-family="sans-serif">${legend.join("")}${parts.join("")}</svg>\n`;
}

const measured: Measured = { runs: [], firsts: [], devices: [] };
const add = (m: Measured) => {
  measured.runs.push(...m.runs);
  measured.firsts.push(...m.firsts);
  measured.devices.push(...m.devices);
};
if (flags.from?.length) {
  for (const file of flags.from) add(JSON.parse(await Deno.readTextFile(file)));
} else {
  const wanted = flags.libraries?.split(",").map((l) => l.trim()) ?? LIBRARIES;
  const unknown = wanted.filter((l) => !LIBRARIES.includes(l));
  if (unknown.length) {
    throw new Error(
      `--libraries: unknown ${unknown.join(", ")}; choose from ${LIBRARIES.join(", ")}`,
    );
  }
  const total = wanted.length * PROCESSES;
  let done = 0;
  for (let p = 0; p < PROCESSES; p++) {
    for (const library of wanted) {
      Deno.stderr.writeSync(
        new TextEncoder().encode(
          `[${++done}/${total}] ${library}, process ${p + 1} of ${PROCESSES}…\n`,
        ),
      );
      add(await runLibrary(library));
    }
  }
  if (!GPU && wanted.includes(KILN)) {
    Deno.stderr.writeSync(new TextEncoder().encode(`${WARM}: filling a cache, then measuring…\n`));
    measured.firsts.push(...await warmFirsts());
  }
  if (flags.raw) await Deno.writeTextFile(flags.raw, JSON.stringify(measured));
}
/** kiln's first runs after another process filled a fresh kernel cache directory. */
async function warmFirsts(): Promise<Figure[]> {
  const dir = await Deno.makeTempDir();
  try {
    await runLibrary(KILN, { cacheDir: dir, firstOnly: true });
    const { firsts } = await runLibrary(KILN, { cacheDir: dir, firstOnly: true });
    return firsts.map((f) => ({ ...f, library: WARM }));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const { runs, firsts, devices } = measured;
/** Per cell: the median over processes, and the spread (max − min) as a fraction of it. */
const cells = (xs: { group: string; library: string; ms: number }[]) => {
  const by = new Map<string, number[]>();
  for (const x of xs) {
    by.set(`${x.group}\t${x.library}`, [...by.get(`${x.group}\t${x.library}`) ?? [], x.ms]);
  }
  return [...by].map(([key, ms]) => {
    const [group, library] = key.split("\t");
    return {
      group,
      library,
      ms: median(ms),
      spread: (Math.max(...ms) - Math.min(...ms)) / median(ms),
      n: ms.length,
    };
  });
};
const rows = cells(runs);
const firstRows = cells(firsts);
const groups = [...new Set(rows.map((r) => r.group))];
type Cell = (typeof rows)[number];

/**
 * kiln's device time per workload (timestamp queries) beside its end-to-end time, with what it
 * means: bandwidth against the plain copy kernel of the same run, TFLOP/s for the matmuls.
 */
function deviceTable(times: Cell[]): string[] {
  const device = new Map(times.map((c) => [c.group, c.ms]));
  const derived = (g: string, ms: number) => {
    const n = Number(g.match(/^W2-(\d+)$/)?.[1]);
    if (n) return `${(2 * n ** 3 / ms / 1e9).toFixed(1)} TFLOP/s`;
    // Elementwise over f32: one read and one write per element; W1 against the copy of its size.
    const [, kind, mega] = g.match(/^(W1|copy)-(\d+)M$/) ?? [];
    if (!kind) return "";
    const rate = `${(2 * 4 * Number(mega) * 2 ** 20 / ms / 1e6).toFixed(0)} GB/s`;
    const copy = device.get(`copy-${mega}M`);
    return kind === "W1" && copy ? `${rate}, ${Math.round(copy / ms * 100)}% of the copy's` : rate;
  };
  return [
    "kiln's device time (timestamp queries around each kernel's pass, summed over the run's kernels; the last of 10 back-to-back repetitions in one submission, so the GPU runs at its working clock; median of 5 such runs in each process, then over the processes) beside its end-to-end time, with the bandwidth or FLOP rate it implies:",
    "",
    "| workload | device time | end to end | |",
    "| --- | ---: | ---: | --- |",
    ...[...device].map(([g, ms]) => {
      const e2e = rows.find((r) => r.group === g && r.library === KILN);
      return `| ${g} | ${fmt(ms)} | ${e2e ? fmt(e2e.ms) : "—"} | ${derived(g, ms)} |`;
    }),
    "",
  ];
}

/**
 * A markdown table of `cells`: one row per workload, a column per library (and `extra`, a kiln
 * variant), then each kiln column's ratio to the best peer.
 */
function table(cells: Cell[], spread: boolean, extra: string[] = []): string[] {
  const columns = [...LIBRARIES, ...extra], kilns = [KILN, ...extra];
  return [
    `| workload | ${columns.join(" | ")} | ${kilns.map((k) => `${k} ÷ best peer`).join(" | ")} |`,
    `| --- | ${[...columns, ...kilns].map(() => "---:").join(" | ")} |`,
    ...groups.map((g) => {
      const cell = (lib: string) => cells.find((r) => r.group === g && r.library === lib);
      const peers = cells.filter((r) => r.group === g && !r.library.startsWith("kiln"));
      const best = Math.min(...peers.map((r) => r.ms));
      const show = (c: Cell | undefined) =>
        !c ? "—" : spread && c.n > 1 ? `${fmt(c.ms)} ±${Math.round(c.spread * 50)}%` : fmt(c.ms);
      const ratio = (k: string) => {
        const kiln = cell(k);
        return kiln && peers.length ? (kiln.ms / best).toFixed(2) : "—";
      };
      return `| ${g} | ${columns.map((l) => show(cell(l))).join(" | ")} | ${
        kilns.map(ratio).join(" | ")
      } |`;
    }),
  ];
}
const cpu = Deno.build.os + "/" + Deno.build.arch;
const lines = [
  GPU ? "# kiln GPU benchmarks" : "# kiln CPU benchmarks",
  "",
  GPU
    ? `Produced on the GPU machine by \`deno task bench:gpu\` (\`bench/report.ts --gpu\`). Each library ran in its own processes on Deno's WebGPU; a cell is the median over the processes of each one's median time per call (after \`deno bench\`'s warm-up) and ±half their spread. Times are end to end (host inputs in, result back on the host), and every result was checked against float64 before it was timed. Workloads: \`bench/workloads.ts\`, \`bench/gpu_bench.ts\`.`
    : `Produced by \`deno task bench:report\` on ${
      new Date().toISOString().slice(0, 10)
    } (Deno ${Deno.version.deno}, ${cpu}, ${navigator.hardwareConcurrency} cores). Each library ran in its own process, ${PROCESSES} processes per library; a cell is the median over the processes of each one's median time per call (from the call until the result is a host typed array; W1–W6 run at least 17 times each after \`deno bench\`'s warm-up) and ±half their spread. kiln wasm and ONNX Runtime use ${navigator.hardwareConcurrency} threads, tfjs-wasm one (it sees Node). Every library's result was checked (float64, or ONNX Runtime's recorded outputs for the models) before it was timed. Workloads are defined in \`bench/workloads.ts\`.`,
  "",
  ...table(rows, true),
  "",
  ...(firstRows.length
    ? [
      `First runs — from creating the library's runner (model or session, compile) through the first result on the host; medians over the processes. kiln's kernel cache is off except in "${WARM}", a process after another one filled a fresh cache directory (what a program meets from its second start on: the disk cache is on by default):`,
      "",
      ...table(firstRows, false, firstRows.some((c) => c.library === WARM) ? [WARM] : []),
      "",
    ]
    : []),
  ...(devices.length ? deviceTable(cells(devices)) : []),
  ...(flags.note ?? []).map((n) => `- ${n}`),
  "",
  `![kiln vs peers](${GPU ? "results/report-gpu.svg" : "results/report.svg"})`,
  "",
];
await Deno.writeTextFile(
  new URL(GPU ? "./REPORT-gpu.md" : "./REPORT.md", import.meta.url),
  lines.join("\n"),
);
await Deno.writeTextFile(
  new URL(GPU ? "./results/report-gpu.svg" : "./results/report.svg", import.meta.url),
  svg(rows, groups),
);
console.log(lines.join("\n"));
