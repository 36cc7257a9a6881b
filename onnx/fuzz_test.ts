import assert from "node:assert/strict";
import { fuzzCase, type FuzzOutcome } from "./fuzz.ts";
import { fuzzCorpus } from "./fuzz_cli.ts";

/** Runs `cases` cases of campaign `seed`; fails listing every bug with its reproduction command. */
async function campaign(
  seed: number,
  cases: number,
  backends: string[],
  budgetMs?: number,
): Promise<Record<string, number>> {
  const corpus = fuzzCorpus();
  const counts: Record<string, number> = { ok: 0, typed: 0, bug: 0 };
  const bugs: FuzzOutcome[] = [];
  const warn = console.warn;
  console.warn = () => {}; // declared-shape warnings of mutants are expected
  try {
    for (let id = 0; id < cases; id++) {
      const o = await fuzzCase(seed, id, { corpus, backends, budgetMs });
      counts[o.status]++;
      if (o.status === "bug") bugs.push(o);
    }
  } finally {
    console.warn = warn;
  }
  assert.equal(
    bugs.length,
    0,
    bugs.map((b) =>
      `case ${b.id}: ${
        b.detail.slice(0, 400)
      }\n  reproduce: deno task fuzz --seed ${seed} --case ${b.id} --backends ${backends}`
    ).join("\n"),
  );
  return counts;
}

Deno.test("fuzz: 2000 mutated models and edge-shape graphs end in a right answer or a typed error (wasm)", async () => {
  const counts = await campaign(2026, 2000, ["wasm"]);
  // A campaign that only ever hits the first check in the importer would prove little.
  assert.ok(counts.ok >= 400, `only ${counts.ok} cases ran to completion`);
  assert.ok(counts.typed >= 400, `only ${counts.typed} cases were refused`);
});

Deno.test("fuzz: 300 cases on webgpu (the software adapter)", async () => {
  // llvmpipe compiles each shader with LLVM: on a loaded 2-core VM a corpus model's first
  // compile there took 12–20 s (2026-11-25), past the 10 s that tells a hang on wasm.
  await campaign(2027, 300, ["webgpu"], 40_000);
});
