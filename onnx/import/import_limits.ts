/**
 * The bound on an import's work: a few hundred bytes of ONNX can ask for millions of nodes (loops
 * unrolled inside loops), and the importer must refuse such a model quickly, with a typed error,
 * instead of running out of time or memory.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";

/**
 * Most nodes an import converts and emits, subgraphs unrolled (Loop, Scan, If) counted each time:
 * a 448-byte model of two nested Loops of 4000 would otherwise unroll 16 million bodies. The
 * largest real exports convert a few tens of thousands; this bound is reached in well under a
 * second. At 300,000 a model under it could still take 10 s to import and compile on a busy
 * 16-core machine (fuzz seed 37037: nested loops of 7 × 2 × 4000 trips); at 100,000 it compiles
 * in about 2 s on two cores.
 */
export const MAX_IMPORT_WORK = 100_000;

/** A counter of import work that throws a typed `limit` error past {@linkcode MAX_IMPORT_WORK}. */
export function workCounter(): (label: string) => void {
  let work = 0;
  return (label) => {
    if (++work <= MAX_IMPORT_WORK) return;
    throw new KilnError(
      `${label}: importing this model takes more than ${MAX_IMPORT_WORK} node conversions (loops and scans unrolled)`,
      {
        code: "limit",
        fix:
          "give loops and scans smaller trip counts (kiln unrolls them), or split the model into smaller ones",
      },
    );
  };
}
