/**
 * `deno task bench:report`: runs `bench/cpu_bench.ts` once per library, each in its own process
 * (`deno bench --json --filter`), and writes `bench/REPORT.md` (a table of mean times with kiln's
 * ratio to the best peer) and `bench/report.svg` (a log-scale bar chart). Progress goes to stderr.
 *
 * `deno run -A bench/report.ts --gpu FILE.json` turns the JSON of a `deno task bench:gpu` run on the
 * GPU machine into `bench/REPORT-gpu.md` and `bench/report-gpu.svg` the same way.
 *
 * @module
 */
import { parseArgs } from "node:util";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: { gpu: { type: "string" }, note: { type: "string", multiple: true } },
});
const GPU = flags.gpu !== undefined;
const LIBRARIES = GPU
  ? ["kiln webgpu", "tfjs webgpu", "onnxruntime-web webgpu", "jax-js webgpu"]
  : ["kiln wasm", "kiln reference", "tfjs cpu", "tfjs wasm", "onnxruntime-web wasm", "jax-js wasm"];
const KILN = LIBRARIES[0];
const BENCH = new URL("./cpu_bench.ts", import.meta.url).pathname;

interface Row {
  group: string;
  library: string;
  avgMs: number;
  minMs: number;
  maxMs: number;
}

async function runLibrary(library: string): Promise<Row[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["bench", "-A", "--json", "--filter", library, BENCH],
    stdout: "piped",
    stderr: "null",
    env: { NO_COLOR: "1", KILN_BENCH_ONLY: library },
  }).output();
  return rowsOf(new TextDecoder().decode(out.stdout), library);
}

function rowsOf(text: string, library: string): Row[] {
  const report = JSON.parse(text.slice(text.indexOf("{")));
  return report.benches.flatMap((
    b: {
      group: string;
      name: string;
      results: { ok?: { avg: number; min: number; max: number } }[];
    },
  ) =>
    b.results[0]?.ok && b.name.endsWith(library)
      ? [{
        group: b.group,
        library,
        avgMs: b.results[0].ok.avg / 1e6,
        minMs: b.results[0].ok.min / 1e6,
        maxMs: b.results[0].ok.max / 1e6,
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

const rows: Row[] = [];
if (GPU) {
  const text = await Deno.readTextFile(flags.gpu!);
  for (const library of LIBRARIES) rows.push(...rowsOf(text, library));
} else {
  for (const [i, library] of LIBRARIES.entries()) {
    Deno.stderr.writeSync(
      new TextEncoder().encode(`[${i + 1}/${LIBRARIES.length}] benchmarking ${library}…\n`),
    );
    rows.push(...await runLibrary(library));
  }
}
const groups = [...new Set(rows.map((r) => r.group))];
const cpu = Deno.build.os + "/" + Deno.build.arch;
const lines = [
  GPU ? "# kiln GPU benchmarks" : "# kiln CPU benchmarks",
  "",
  GPU
    ? `Produced on the GPU machine by \`deno task bench:gpu\` (its JSON converted with \`deno run -A bench/report.ts --gpu FILE\`). All libraries ran in one process on Deno's WebGPU; times are end to end (host inputs in, result back on the host), \`deno bench\` means, and every result was checked against float64 before it was timed. Workloads: \`bench/workloads.ts\`, \`bench/gpu_bench.ts\`.`
    : `Produced by \`deno task bench:report\` on ${
      new Date().toISOString().slice(0, 10)
    } (Deno ${Deno.version.deno}, ${cpu}, ${navigator.hardwareConcurrency} cores). Each library ran in its own process; times are \`deno bench\` means from the call until the result is a host typed array, and every library's result was checked against float64 before it was timed. Workloads are defined in \`bench/workloads.ts\`.`,
  "",
  `| workload | ${LIBRARIES.join(" | ")} | ${KILN} ÷ best peer |`,
  `| --- | ${LIBRARIES.map(() => "---:").join(" | ")} | ---: |`,
  ...groups.map((g) => {
    const cell = (lib: string) => rows.find((r) => r.group === g && r.library === lib);
    const peers = rows.filter((r) => r.group === g && !r.library.startsWith("kiln"));
    const best = Math.min(...peers.map((r) => r.avgMs));
    const kiln = cell(KILN);
    return `| ${g} | ${LIBRARIES.map((l) => (cell(l) ? fmt(cell(l)!.avgMs) : "—")).join(" | ")} | ${
      kiln && peers.length ? (kiln.avgMs / best).toFixed(2) : "—"
    } |`;
  }),
  "",
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
