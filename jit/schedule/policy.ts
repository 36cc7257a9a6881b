/**
 * Placement policies as the caller names them (checked, with a `Fix:` for a bad one), and the
 * place of graph-level backends among them: such a backend takes no single kernels, so it
 * competes with the kernel plan as one more plan, the whole graph there.
 *
 * @module
 */
import type { Backend } from "../runtime/backend.ts";
import type { BackendRates } from "./cost_model.ts";
import { KilnError, shown } from "../support/errors.ts";
import type { Graph } from "../ir/graph.ts";
import { legalize } from "../passes/legalize.ts";
import { memorySpace, type Policy, type Schedule, workMs } from "./schedule.ts";
import { estimateWork } from "./workload.ts";

const POLICIES = ["auto", "min-cost", "local-first", "prefer", "named"];

/** `policy`, if it is one (a JavaScript caller can pass anything); else a KilnError. */
export function checkedPolicy(policy: Policy): Policy {
  const ok = typeof policy === "object" && policy !== null && POLICIES.includes(policy.kind) &&
    (policy.kind !== "prefer" || typeof policy.backendKind === "string") &&
    (policy.kind !== "named" || typeof policy.backend === "string");
  if (ok) return policy;
  throw new KilnError(`Unknown placement policy ${shown(policy)}`, {
    code: "bad-input",
    fix: `pass one of ${
      POLICIES.slice(0, 3).map((p) => `"${p}"`).join(", ")
    }, { kind: "prefer", backendKind }, or { backend: "id" }`,
  });
}

/** The policy a caller names by its kind (`"minimize-cost"` is `"min-cost"`). */
export function policyOf(kind: Policy["kind"] | "minimize-cost"): Policy {
  // The seed contract's name for min-cost.
  if (kind === "minimize-cost") return { kind: "min-cost" };
  if (!POLICIES.includes(kind)) return checkedPolicy({ kind } as Policy);
  if (kind === "named" || kind === "prefer") {
    throw new KilnError(`Policy "${kind}" needs a target`, {
      code: "bad-input",
      fix: kind === "named"
        ? 'pass { backend: "id" } instead'
        : 'pass { policy: { kind: "prefer", backendKind: "gpu" } }',
    });
  }
  return { kind };
}

/** Per backend, the rates a policy estimates its work with (the compiler calibrates them). */
export type RatesOf = (backends: readonly Backend[], policy: Policy) => Promise<BackendRates[]>;

/**
 * A graph-level backend (a registered custom backend with `compile(graph)` and no kernel codegen)
 * cannot take single kernels, so it takes part in placement as one more plan: the whole graph
 * there. It is chosen when it can run every node and the policy prefers it: under `auto`,
 * `min-cost` and `local-first` (a host backend only: the inputs live on the host) when its
 * estimate, its own {@linkcode Backend.estimateCost} or else its calibrated rates, beats the
 * kernel plan's; under `prefer` when it is of the preferred kind and no kernel backend of that
 * kind took part in the plan.
 */
export async function graphLevelChoice(
  graph: Graph,
  candidates: readonly Backend[],
  plan: Schedule,
  policy: Policy,
  ratesOf: RatesOf,
): Promise<{ backend: Backend; legal: Graph; reason: string } | undefined> {
  const fit = candidates.flatMap((b) => {
    if (b.codegen || !b.compile || b.deviceLost || b.capabilities().software) return [];
    if (policy.kind === "local-first" && memorySpace(b) !== "host") return [];
    if (policy.kind === "prefer" && b.kind !== policy.backendKind) return [];
    try {
      return [{ backend: b, legal: legalize(graph, b) }];
    } catch {
      return []; // it lacks some op: the kernel plan runs instead
    }
  });
  if (!fit.length) return undefined;
  if (policy.kind === "prefer") {
    const kindOf = (id: string) => candidates.find((b) => b.id === id)?.kind;
    if (plan.placement.some((id) => kindOf(id) === policy.backendKind)) return undefined;
    const [first] = fit;
    return {
      ...first,
      reason: `prefer ${policy.backendKind}: ${first.backend.id} runs the whole graph`,
    };
  }
  const costed = await Promise.all(fit.map(async (f) => ({
    ...f,
    ms: await graphCost(f.backend, f.legal, policy, ratesOf),
  })));
  const best = costed.filter((c) => c.ms < plan.totalMs).sort((a, b) => a.ms - b.ms)[0];
  return best && {
    backend: best.backend,
    legal: best.legal,
    reason: `${policy.kind}: ${best.backend.id} runs the whole graph (est. ${
      best.ms.toPrecision(3)
    } ms against ${plan.totalMs.toPrecision(3)} ms for the kernel plan)`,
  };
}

/** Estimated milliseconds of the whole of `graph` on graph-level backend `b`. */
async function graphCost(
  b: Backend,
  graph: Graph,
  policy: Policy,
  ratesOf: RatesOf,
): Promise<number> {
  const work = estimateWork(graph);
  const own = b.estimateCost?.(graph, work);
  if (own) return own.compute + own.transfer;
  const [r] = await ratesOf([b], policy);
  return r.dispatchMs * graph.nodes.length + r.syncMs + workMs(work, r) +
    work.hostBytes / r.transferBytesPerMs;
}
