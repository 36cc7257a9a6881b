/**
 * The differential harness every backend reuses: run a graph through a backend (fused or not)
 * and through the unfused reference, and compare every output. A failure message carries the
 * seed and the graph so it can be replayed.
 *
 * @module
 */
import type { Backend } from "../runtime/backend.ts";
import { BackendRegistry, compile } from "../../mod.ts";
import { fuse } from "../passes/fuse.ts";
import { type RandomCase, randomGraph } from "./random_graph.ts";
import type { Policy } from "../schedule/schedule.ts";
import { assertClose, numbers } from "./testing.ts";

/** Options of {@linkcode checkAgainstReference}. */
export interface DifferentialOptions {
  /** Backend under test (default the reference, fused); ignored when `policy` is given. */
  readonly backend?: string | Backend;
  /** Place the graph by this policy over `registry` instead of on one backend. */
  readonly policy?: Policy;
  /** Backends the policy chooses from (default: the built-in ones). */
  readonly registry?: BackendRegistry;
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
    ...(options.policy
      ? { policy: options.policy, registry: options.registry }
      : { backend: options.backend ?? "reference" }),
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

/**
 * Checks seeds `0 … count-1` of {@linkcode randomGraph} on `backend`: wholly on it when every
 * fused kernel is generated code, otherwise placed by a policy preferring its kind, beside
 * whole-op kernels on the reference. Returns how many graphs ran wholly on `backend`.
 */
export async function differentialOn(backend: Backend, count: number): Promise<number> {
  const registry = new BackendRegistry().register(backend);
  let whole = 0;
  for (let seed = 0; seed < count; seed++) {
    const c = randomGraph(seed);
    const all = fuse(c.graph).kernels.every((k) => !k.opaque);
    if (all) whole++;
    await checkAgainstReference(
      c,
      all ? { backend } : { registry, policy: { kind: "prefer", backendKind: backend.kind } },
    );
  }
  return whole;
}
