/**
 * `deno task bench:report`: runs `bench/cpu_bench.ts` for one library per process (`deno bench
 * --json --filter`), `--processes N` times each (default 3), and writes `bench/REPORT.md` — per
 * cell the median of the processes' mean times and their spread, kiln's ratio to the best peer,
 * and a table of first runs (setup + compile + run) — and `bench/report.svg` (a log-scale bar
 * chart). Progress goes to stderr.
 *
 * `deno run -A bench/report.ts --gpu FILE.json [--device FILE.err]` turns the JSON of a `deno task
 * bench:gpu` run on the GPU machine (and the `device-time` lines of its stderr: kiln's device time
 * from timestamp queries) into `bench/REPORT-gpu.md` and `bench/report-gpu.svg` the same way.
 *
 * @module
 */
import { parseArgs } from "node:util";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    gpu: { type: "string" },
    device: { type: "string" },
    note: { type: "string", multiple: true },
    processes: { type: "string", default: "3" },
  },
});
const PROCESSES = Number(flags.processes);
if (!Number.isInteger(PROCESSES) || PROCESSES < 1) {
  throw new Error(`--processes must be a positive integer, got ${flags.processes}`);
}
const GPU = flags.gpu !== undefined;
const LIBRARIES = GPU
  ? ["kiln webgpu", "tfjs webgpu", "onnxruntime-web webgpu", "jax-js webgpu"]
  : ["kiln wasm", "kiln reference", "tfjs cpu", "tfjs wasm", "onnxruntime-web wasm", "jax-js wasm"];
const KILN = LIBRARIES[0];
const BENCH = new URL("./cpu_bench.ts", import.meta.url).pathname;

/** One process's mean time of one library on one workload. */
interface Row {
  group: string;
  library: string;
  avgMs: number;
}

/** One process's first run (setup, compile and run) of one library on one workload. */
interface FirstRun {
  group: string;
  library: string;
  ms: number;
}

async function runLibrary(library: string): Promise<{ rows: Row[]; first: FirstRun[] }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["bench", "-A", "--json", "--filter", library, BENCH],
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1", KILN_BENCH_ONLY: library },
  }).output();
  const first = new TextDecoder().decode(out.stderr).split("\n").flatMap((line) => {
    const [tag, group, lib, ms] = line.split("\t");
    return tag === "first-run" && lib === library ? [{ group, library, ms: Number(ms) }] : [];
  });
  return { rows: rowsOf(new TextDecoder().decode(out.stdout), library), first };
}

function rowsOf(text: string, library: string): Row[] {
  const report = JSON.parse(text.slice(text.indexOf("{")));
  return report.benches.flatMap((
    b: {
      group: string;
      name: string;
      results: { ok?: { avg: number } }[];
    },
  ) =>
    b.results[0]?.ok && b.name.endsWith(library)
      ? [{
        group: b.group,
        library,
        avgMs: b.results[0].ok.avg / 1e6,
      }]
      : []
  );
}

const fmt = (
  ms: number,
) => (ms < 0.01
  ? `${(ms * 1000).toFixed(1)} µs`
  : ms < 10
  ? `${ms.toFixed(2)} ms`
  : `${ms.toFixed(1)} ms`);

function svg(rows: Row[], groups: string[]): string {
  const colors = ["#d9480f", "#f59f00", "#1971c2", "#4dabf7", "#2f9e44", "#9c36b5"];
  const barH = 9, gap = 14, left = 120, width = 560;
  const maxLog = Math.log10(Math.max(...rows.map((r) => r.avgMs)) * 2),
    minLog = Math.log10(Math.min(...rows.map((r) => r.avgMs)) / 2);
  const x = (ms: number) => ((Math.log10(ms) - minLog) / (maxLog - minLog)) * width;
  const parts: string[] = [];
  let y = 30;
  for (const g of groups) {
    parts.push(`<text x="4" y="${y + 12}" font-size="11">${g}</text>`);
    LIBRARIES.forEach((lib, i) => {
      const r = rows.find((q) => q.group === g && q.library === lib);
      if (!r) return;
      parts.push(
        `<rect x="${left}" y="${y}" width="${x(r.avgMs).toFixed(1)}" height="${barH - 1}" fill="${
          colors[i]
        }"/>`,
      );
      parts.push(
        `<text x="${left + x(r.avgMs) + 3}" y="${y + 7}" font-size="8">${fmt(r.avgMs)}</text>`,
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

const runs: Row[] = [], firsts: FirstRun[] = [];
if (GPU) {
  const text = await Deno.readTextFile(flags.gpu!);
  for (const library of LIBRARIES) runs.push(...rowsOf(text, library));
} else {
  const total = LIBRARIES.length * PROCESSES;
  let done = 0;
  for (let p = 0; p < PROCESSES; p++) {
    for (const library of LIBRARIES) {
      Deno.stderr.writeSync(
        new TextEncoder().encode(
          `[${++done}/${total}] ${library}, process ${p + 1} of ${PROCESSES}…\n`,
        ),
      );
      const { rows, first } = await runLibrary(library);
      runs.push(...rows);
      firsts.push(...first);
    }
  }
}
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b), h = s.length >> 1;
  return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
};
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
      avgMs: median(ms),
      spread: (Math.max(...ms) - Math.min(...ms)) / median(ms),
      n: ms.length,
    };
  });
};
const rows = cells(runs.map((r) => ({ ...r, ms: r.avgMs })));
const firstRows = cells(firsts);
const groups = [...new Set(rows.map((r) => r.group))];
type Cell = (typeof rows)[number];

/**
 * kiln's device time per workload (timestamp queries) beside its end-to-end time, with what it
 * means: bandwidth against the plain copy kernel of the same run, TFLOP/s for the matmuls.
 */
function deviceTable(text: string): string[] {
  const device = new Map(
    text.split("\n").flatMap((line) => {
      const [tag, group, ms] = line.split("\t");
      return tag === "device-time" ? [[group, Number(ms)] as const] : [];
    }),
  );
  const derived = (g: string, ms: number) => {
    const n = Number(g.match(/^W2-(\d+)$/)?.[1]);
    if (n) return `${(2 * n ** 3 / ms / 1e9).toFixed(1)} TFLOP/s`;
    // Elementwise over 16M f32: one read and one write per element.
    return /^(W1|copy)-16M$/.test(g) ? `${(2 * 4 * 2 ** 24 / ms / 1e6).toFixed(0)} GB/s` : "";
  };
  return [
    "kiln's device time (timestamp queries around each kernel's pass, summed over the run's kernels; median of 5 profiled runs) beside its end-to-end time, with the bandwidth or FLOP rate it implies:",
    "",
    "| workload | device time | end to end | |",
    "| --- | ---: | ---: | --- |",
    ...[...device].map(([g, ms]) => {
      const e2e = rows.find((r) => r.group === g && r.library === KILN);
      return `| ${g} | ${fmt(ms)} | ${e2e ? fmt(e2e.avgMs) : "—"} | ${derived(g, ms)} |`;
    }),
    "",
  ];
}

/** A markdown table of `cells`: one row per workload, kiln's ratio to the best peer last. */
function table(cells: Cell[], spread: boolean): string[] {
  return [
    `| workload | ${LIBRARIES.join(" | ")} | ${KILN} ÷ best peer |`,
    `| --- | ${LIBRARIES.map(() => "---:").join(" | ")} | ---: |`,
    ...groups.map((g) => {
      const cell = (lib: string) => cells.find((r) => r.group === g && r.library === lib);
      const peers = cells.filter((r) => r.group === g && !r.library.startsWith("kiln"));
      const best = Math.min(...peers.map((r) => r.avgMs));
      const kiln = cell(KILN);
      const show = (c: Cell | undefined) =>
        !c
          ? "—"
          : spread && c.n > 1
          ? `${fmt(c.avgMs)} ±${Math.round(c.spread * 50)}%`
          : fmt(c.avgMs);
      return `| ${g} | ${LIBRARIES.map((l) => show(cell(l))).join(" | ")} | ${
        kiln && peers.length ? (kiln.avgMs / best).toFixed(2) : "—"
      } |`;
    }),
  ];
}
const cpu = Deno.build.os + "/" + Deno.build.arch;
const lines = [
  GPU ? "# kiln GPU benchmarks" : "# kiln CPU benchmarks",
  "",
  GPU
    ? `Produced on the GPU machine by \`deno task bench:gpu\` (its JSON converted with \`deno run -A bench/report.ts --gpu FILE\`). All libraries ran in one process on Deno's WebGPU; times are end to end (host inputs in, result back on the host), \`deno bench\` means, and every result was checked against float64 before it was timed. Workloads: \`bench/workloads.ts\`, \`bench/gpu_bench.ts\`.`
    : `Produced by \`deno task bench:report\` on ${
      new Date().toISOString().slice(0, 10)
    } (Deno ${Deno.version.deno}, ${cpu}, ${navigator.hardwareConcurrency} cores). Each library ran in its own process, ${PROCESSES} processes per library; a cell is the median of the processes' \`deno bench\` means (from the call until the result is a host typed array) and ±half their spread. kiln wasm and ONNX Runtime use ${navigator.hardwareConcurrency} threads, tfjs-wasm one (it sees Node). Every library's result was checked (float64, or ONNX Runtime's recorded outputs for the models) before it was timed. Workloads are defined in \`bench/workloads.ts\`.`,
  "",
  ...table(rows, true),
  "",
  ...(firstRows.length
    ? [
      "First runs — from creating the library's runner (model or session, compile) through the first result on the host; medians over the processes:",
      "",
      ...table(firstRows, false),
      "",
    ]
    : []),
  ...(flags.device ? deviceTable(await Deno.readTextFile(flags.device)) : []),
  ...(flags.note ?? []).map((n) => `- ${n}`),
  "",
  `![kiln vs peers](${GPU ? "report-gpu.svg" : "report.svg"})`,
  "",
];
await Deno.writeTextFile(
  new URL(GPU ? "./REPORT-gpu.md" : "./REPORT.md", import.meta.url),
  lines.join("\n"),
);
await Deno.writeTextFile(
  new URL(GPU ? "./report-gpu.svg" : "./report.svg", import.meta.url),
  svg(rows, groups),
);
console.log(lines.join("\n"));
