/**
 * The differential harness every backend reuses: run a graph through a backend (fused or not)
 * and through the unfused reference, and compare every output. A failure message carries the
 * seed and the graph so it can be replayed.
 *
 * @module
 */
import type { Backend } from "../backends/backend.ts";
import { compile } from "./compile.ts";
import type { RandomCase } from "./random_graph.ts";
import { assertClose, numbers } from "./testing.ts";

/** Options of {@linkcode checkAgainstReference}. */
export interface DifferentialOptions {
  /** Backend under test (default the reference, fused). */
  readonly backend?: string | Backend;
  /** Fuse (default true). */
  readonly fuse?: boolean;
  /** Absolute tolerance (default 1e-4). */
  readonly atol?: number;
  /** Relative tolerance (default 1e-4). */
  readonly rtol?: number;
}

/** Throws (with the seed and graph) when `c` differs between the backend and the oracle. */
export async function checkAgainstReference(
  c: RandomCase,
  options: DifferentialOptions = {},
): Promise<void> {
  const oracle = await compile(c.graph, { fuse: false });
  const subject = await compile(c.graph, {
    backend: options.backend ?? "reference",
    fuse: options.fuse,
    cache: false,
  });
  try {
    const want = await oracle.run(c.inputs);
    const got = await subject.run(c.inputs);
    for (const name of Object.keys(want)) {
      if (got[name].shape.join() !== want[name].shape.join()) {
        throw new Error(`${name}: shape ${got[name].shape} ≠ ${want[name].shape}`);
      }
      assertClose(numbers(got[name].data), numbers(want[name].data), {
        atol: options.atol ?? 1e-4,
        rtol: options.rtol ?? 1e-4,
        message: name,
      });
    }
  } catch (e) {
    const kernels = subject.plan
      ? `\nkernels: ${
        subject.plan.kernels.map((k) => `${k.name}[${k.ops.join(" | ")}]`).join("; ")
      }`
      : "";
    throw new Error(
      `differential mismatch for seed ${c.seed}: ${
        (e as Error).message
      }\n${c.graph.toString()}${kernels}`,
      { cause: e },
    );
  } finally {
    oracle.dispose();
    subject.dispose();
  }
}
