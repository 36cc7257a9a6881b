/**
 * Legalization: the first compile stage. It makes a graph runnable on one backend by rewriting
 * every op the backend lacks into its decomposition; what still cannot run there (a primitive or
 * custom op without a kernel) fails the compile with one error listing every such node, the
 * backend, and which other backends could run it. There is never a silent slow fallback.
 *
 * @module
 */
import { type Backend, type BackendSet, nodeInfo } from "../runtime/backend.ts";
import { decompose } from "./decompose.ts";
import { KilnError, shown } from "../support/errors.ts";
import { checkGraph, type Graph } from "../ir/graph.ts";

/** Rewrites `graph` for `backend`; `registry` (optional) lets the error suggest other backends. */
export function legalize(graph: Graph, backend: Backend, registry?: BackendSet): Graph {
  checkGraph(graph, "legalize()");
  if (typeof backend?.supports !== "function") {
    throw new KilnError(`legalize() takes a backend second, got ${shown(backend)}`, {
      code: "bad-input",
      fix: 'pass a backend, e.g. legalize(graph, new WasmBackend()) or registry.get("wasm")',
    });
  }
  const legal = decompose(graph, (info) => !backend.supports(info));
  const bad = legal.nodes.map((n) => nodeInfo(legal, n.id)).filter((info) =>
    !backend.supports(info)
  );
  if (bad.length === 0) return legal;
  const others = (registry?.list() ?? []).filter((b) =>
    b.id !== backend.id && bad.every((info) => b.supports(info))
  );
  const ops = [...new Set(bad.map((b) => b.op))];
  throw new KilnError(
    `Backend "${backend.id}" cannot run ${bad.length} node(s): ${
      bad.map((b) => b.label).join(", ")
    }`,
    {
      code: "unsupported",
      fix: others.length
        ? `compile for ${others.map((b) => `"${b.id}"`).join(" or ")}, which support ${
          ops.join(", ")
        }`
        : `register a kernel for ${
          ops.join(", ")
        } on "${backend.id}" (registerOp kernels) or use the reference backend`,
    },
  );
}
