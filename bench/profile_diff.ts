/**
 * Two or more saved outputs of `bench/profile_model.ts` side by side by kernel class: each class
 * (a kernel's pattern and space, the same in every tree that plans it alike) with its count and
 * summed device time in each file, largest difference from the first file first. The A/B behind
 * the GPU report's per-kernel rows: profiles of two trees (or an uncommitted switch) saved in one
 * call, compared here. Each file's times are scaled to its header's total where `--scale TOTAL`
 * is given for it (`FILE=TOTAL`), so that a profile taken at the H200's low clock still gives its
 * shares.
 *
 *   deno run -A --config deno.json bench/profile_diff.ts BEFORE.txt AFTER.txt [MORE.txt ...] [--top N]
 *
 * Only the kernels a profile listed count (its `--top`): list them all (`--top 400`) to compare
 * whole runs.
 *
 * @module
 */
import { parseArgs } from "node:util";

/** A profile's kernel classes: `pattern [space]` → count and summed milliseconds. */
export interface ProfileClasses {
  /** The header's device total, in ms. */
  readonly total: number;
  /** Each class's kernels and their summed time. */
  readonly classes: ReadonlyMap<string, { count: number; ms: number }>;
}

/** The classes of one `profile_model.ts` output (its header line, then a line a kernel). */
export function profileClasses(text: string): ProfileClasses {
  const total = Number(/device ([\d.]+) ms/.exec(text)?.[1] ?? NaN);
  const classes = new Map<string, { count: number; ms: number }>();
  for (const line of text.split("\n")) {
    const m = /^\s+([\d.]+) ms\s+\S+\s+(\S+)\s+space (\[[^\]]*\])/.exec(line);
    if (!m) continue;
    const key = `${m[2]} ${m[3]}`;
    const c = classes.get(key) ?? { count: 0, ms: 0 };
    classes.set(key, { count: c.count + 1, ms: c.ms + Number(m[1]) });
  }
  return { total, classes };
}

/**
 * Rows comparing `profiles` (the first the baseline): a class a row, its count and time in each,
 * the time scaled by `scales[i] / total` where a scale is given, largest change first.
 */
export function compareProfiles(
  profiles: readonly ProfileClasses[],
  scales: readonly (number | undefined)[] = [],
): { key: string; count: number; ms: number[] }[] {
  const keys = new Set(profiles.flatMap((p) => [...p.classes.keys()]));
  const factor = profiles.map((p, i) => (scales[i] ? scales[i]! / p.total : 1));
  const rows = [...keys].map((key) => ({
    key,
    count: Math.max(...profiles.map((p) => p.classes.get(key)?.count ?? 0)),
    ms: profiles.map((p, i) => (p.classes.get(key)?.ms ?? 0) * factor[i]),
  }));
  const change = (r: { ms: number[] }) => Math.max(...r.ms.map((v) => Math.abs(v - r.ms[0])));
  return rows.sort((a, b) => change(b) - change(a));
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    allowPositionals: true,
    options: { top: { type: "string", default: "20" } },
  });
  // FILE or FILE=TOTAL: a total to scale the file's times to.
  const given = positionals.map((p) => p.split("="));
  const profiles = given.map(([file]) => profileClasses(Deno.readTextFileSync(file)));
  const scales = given.map(([, total]) => (total ? Number(total) : undefined));
  console.log(
    `totals: ${profiles.map((p, i) => `${given[i][0]} ${p.total.toFixed(3)} ms`).join(", ")}`,
  );
  for (const r of compareProfiles(profiles, scales).slice(0, Number(values.top))) {
    const ms = r.ms.map((v) => v.toFixed(4).padStart(8)).join(" ");
    const delta = (r.ms.at(-1)! - r.ms[0]).toFixed(4);
    console.log(`${ms}  ${delta.padStart(8)}  x${r.count}  ${r.key}`);
  }
}
