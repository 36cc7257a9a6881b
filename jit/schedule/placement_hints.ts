/**
 * The caller's hints to placement, checked: which inputs runs give as device tensors
 * (`CompileOptions.inputsOn`) and how many runs an executable will make
 * (`CompileOptions.workload`). A hint of the wrong form was ignored without a word.
 *
 * @module
 */
import type { Graph } from "../ir/graph.ts";
import { KilnError } from "../support/errors.ts";

/**
 * Refuses an `inputsOn` that is not a map of the graph's input names to backend ids: a name that
 * is no input was ignored, and the runs then met the device tensors unplanned for.
 */
export function checkInputsOn(given: unknown, graph: Graph): void {
  if (given === undefined) return;
  const names = graph.inputs.map((i) => i.name);
  const fix = `give inputsOn as { input: "backend id" } for inputs among: ${names.join(", ")}`;
  if (typeof given !== "object" || given === null) {
    throw new KilnError(
      `inputsOn must map input names to backend ids, got ${JSON.stringify(given)}`,
      { code: "bad-input", fix },
    );
  }
  for (const [name, id] of Object.entries(given)) {
    if (names.includes(name) && typeof id === "string") continue;
    throw new KilnError(
      `inputsOn names ${JSON.stringify(name)} → ${JSON.stringify(id)}: not an input of the ` +
        "graph and a backend id",
      { code: "bad-input", fix },
    );
  }
}

/** The runs a workload hint expects, checked (`undefined`: none said). */
export function expectedRuns(workload: unknown): number | undefined {
  if (workload !== undefined && (typeof workload !== "object" || workload === null)) {
    throw new KilnError(`workload must be an object, got ${JSON.stringify(workload)}`, {
      code: "bad-input",
      fix: "pass workload: { runs: N } with N ≥ 1, or leave the hint out",
    });
  }
  const runs = (workload as { runs?: number } | undefined)?.runs;
  if (runs === undefined) return undefined;
  if (!Number.isInteger(runs) || runs < 1) {
    throw new KilnError(`workload.runs must be a whole number of at least 1, got ${runs}`, {
      code: "bad-input",
      fix: "pass workload: { runs: N } with N ≥ 1, or leave the hint out",
    });
  }
  return runs;
}
